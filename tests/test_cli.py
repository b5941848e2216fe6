"""``kshare-broker`` / ``python -m broker``: configuration sources, errors, identity, logging."""

from __future__ import annotations

import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from broker.__main__ import GC_THRESHOLDS
from protocol.messages.api_versions_request import ApiVersionsRequest
from protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from tests.broker_process import ROOT, BrokerProcess
from tests.raw_client import RawClient
from tests.test_e2e_share_support import set_group_configs

pytestmark = [pytest.mark.e2e, pytest.mark.needs_private_broker]

_LISTENING = re.compile(r"kshare listening on (\S+):(\d+)")
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}


def cli(*args: str, cwd: Path = ROOT, timeout_s: float = 60) -> subprocess.CompletedProcess:
    """Run the CLI to completion (for invocations that must exit by themselves)."""
    return subprocess.run(
        [sys.executable, "-m", "broker", *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout_s
    )


class Running:
    """A broker started with exactly the given CLI arguments; SIGTERM on exit, must exit 0."""

    def __init__(self, *args: str, cwd: Path = ROOT, log_path: Path) -> None:
        self.args, self.cwd, self.log_path = args, cwd, log_path
        self.bootstrap = ""

    def __enter__(self) -> Running:
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "broker", *self.args],
            cwd=self.cwd, env=ENV, stdout=subprocess.PIPE, stderr=self._log,
        )
        found = threading.Event()

        def read_stdout() -> None:
            for raw in self.proc.stdout:
                m = _LISTENING.search(raw.decode(errors="replace"))
                if m and not found.is_set():
                    self.bootstrap = f"127.0.0.1:{m.group(2)}"
                    found.set()

        threading.Thread(target=read_stdout, daemon=True).start()
        if not found.wait(30):
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"broker did not start; log:\n{self.log()}")
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        else:
            code = self.proc.returncode
        self._log.close()
        if exc[0] is None:
            assert code == 0, self.log()
            assert "Traceback" not in self.log(), self.log()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def partitions_of_new_topic(bootstrap: str, name: str) -> tuple[int, int]:
    """Auto-create ``name`` through Metadata; returns (partition count, broker node id)."""
    with RawClient(bootstrap) as c:
        resp = c.request(3, 12, MetadataRequest(topics=[MetadataRequestTopic(name=name)], allow_auto_topic_creation=True))
    (topic,) = resp.topics
    assert topic.error_code == 0
    (b,) = resp.brokers
    return len(topic.partitions), b.node_id


# --- help ------------------------------------------------------------------------------------------


def test_help_lists_the_options():
    r = cli("--help")
    assert r.returncode == 0, r.stderr
    for opt in ("--config", "--override", "--host", "--port", "--data-dir", "--log-level"):
        assert opt in r.stdout


def test_console_script_is_installed():
    script = Path(sys.executable).with_name("kshare-broker")
    assert script.exists(), "pip install -e . creates the kshare-broker console script"
    r = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--override" in r.stdout


# --- configuration sources ---------------------------------------------------------------------------


def write_properties(path: Path, data_dir: Path) -> Path:
    path.write_text(
        "# a server.properties as Apache Kafka would take it\n"
        "! bang comments too\n"
        "\n"
        "node.id=7\n"
        "listeners=PLAINTEXT://127.0.0.1:0\n"
        f"log.dirs={data_dir}\n"
        "num.partitions = 3\n"
        "auto.create.topics.enable: true\n"
        "process.roles=broker,controller\n"  # KRaft settings kshare does not use: tolerated
        "controller.quorum.voters=7@localhost:9093\n"
        "some.plugin.setting=whatever\n"
        "log.retention.hours=\\\n"
        "  168\n"
    )
    return path


def test_config_file_is_read_and_override_wins(tmp_path):
    props = write_properties(tmp_path / "server.properties", tmp_path / "data")
    with Running("--config", str(props), log_path=tmp_path / "a.log") as b:
        assert partitions_of_new_topic(b.bootstrap, "from-config") == (3, 7)
    with Running("--config", str(props), "--override", "num.partitions=5", "--override", "num.partitions=4",
                 log_path=tmp_path / "b.log") as b:
        assert partitions_of_new_topic(b.bootstrap, "from-override") == (4, 7)  # the last override wins
    assert (tmp_path / "data" / "meta.properties").exists()  # log.dirs from the file


def test_host_port_and_data_dir_flags_win_over_the_file(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text(f"listeners=PLAINTEXT://127.0.0.1:1\nlog.dirs={tmp_path / 'from-file'}\n")
    with Running("--config", str(props), "--host", "127.0.0.1", "--port", "0", "--data-dir",
                 str(tmp_path / "from-flag"), log_path=tmp_path / "b.log") as b:
        assert not b.bootstrap.endswith(":1")
        cluster_identity(b.bootstrap)
    assert (tmp_path / "from-flag" / "meta.properties").exists()
    assert not (tmp_path / "from-file").exists()


def test_default_data_dir_is_dot_data(tmp_path):
    with Running("--port", "0", cwd=tmp_path, log_path=tmp_path / "b.log") as b:
        cluster_identity(b.bootstrap)
    assert (tmp_path / "data" / "meta.properties").exists()


# --- bad values --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,message",
    [
        # Kafka's ConfigDef.parseType messages (Python's int() would take "1_000")
        (["--override", "num.partitions=abc"],
         "Invalid value abc for configuration num.partitions: Not a number of type INT"),
        (["--override", "num.partitions=1_000"], "Invalid value 1_000 for configuration num.partitions: Not a number"),
        (["--override", "num.partitions=0"], "Value must be at least 1"),
        (["--override", "auto.create.topics.enable=maybe"],
         "configuration auto.create.topics.enable: Expected value to be either true or false"),
        (["--override", "compression.type=brotli"], "configuration compression.type"),
        # an internal config as Kafka's (defineInternal ... atLeast(1)): 0 would spin the expiry loop
        (["--override", "producer.id.expiration.check.interval.ms=0"], "Value must be at least 1"),
        (["--override", "no-equals-sign"], "--override expects KEY=VALUE"),
        (["--log-level", "LOUD"], "invalid choice"),
        (["--port", "ninety"], "invalid int value"),
        # Kafka refuses the meta-address there (also when it comes from listeners, e.g. --host
        # 0.0.0.0 alone; the test keeps the broker on loopback should the check go missing)
        (["--override", "advertised.listeners=PLAINTEXT://0.0.0.0:9092"],
         "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0"),
        pytest.param(["--config", "/nonexistent/server.properties"], "/nonexistent/server.properties"),
        # KafkaConfig.validateValues: Scala's require, whose message has its prefix
        (["--override", "log.retention.ms=0"],
         "requirement failed: log.retention.ms must be unlimited (-1) or, greater than or equal to 1"),
        (["--override", "log.retention.hours=0"], "requirement failed: log.retention.ms must be unlimited"),
        (["--override", "log.roll.ms=0"], "requirement failed: log.roll.ms must be greater than or equal to 1"),
        (["--override", "log.roll.jitter.ms=-1"],
         "requirement failed: log.roll.jitter.ms must be greater than or equal to 0"),
        (["--override", "connections.max.idle.ms=100"],
         "requirement failed: failed.authentication.delay.ms=100 should always be less than "
         "connections.max.idle.ms=100 to prevent failed authentication responses from timing out"),
        (["--override", "node.id=3", "--override", "broker.id=4"],
         "You must set `node.id` to the same value as `broker.id`."),
        # GroupCoordinatorConfig and ShareGroupConfig, in their order and words
        (["--override", "group.share.min.session.timeout.ms=50000", "--override",
          "group.share.max.session.timeout.ms=40000"],
         "group.share.max.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms"),
        (["--override", "group.share.record.lock.duration.ms=70000"],
         "group.share.max.record.lock.duration.ms must be greater than or equal to "
         "group.share.record.lock.duration.ms"),
        (["--override", "group.share.assignors=uniform"], "Class uniform cannot be found"),
        # ShareCoordinatorConfig's CompressionType.forId: the property has no range of its own
        (["--override", "share.coordinator.state.topic.compression.codec=5"], "Unknown compression type id: 5"),
    ],
)
def test_bad_values_exit_2_with_a_clear_message(tmp_path, args, message):
    r = cli("--port", "0", "--data-dir", str(tmp_path / "data"), *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    assert "kshare listening" not in r.stdout


def test_bad_listener_exits_2(tmp_path):
    r = cli("--data-dir", str(tmp_path / "data"), "--override", "listeners=nonsense")  # no --port: it would win
    assert r.returncode == 2
    assert "Invalid listener 'nonsense'" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("listeners,extra,message", [
    # Kafka would require SASL (or TLS) there, or not start without a JAAS/keystore config:
    # serving it in plain text without authentication is never what was asked for
    ("SASL_PLAINTEXT://127.0.0.1:0", [], "Listener SASL_PLAINTEXT uses security protocol SASL_PLAINTEXT"),
    ("ssl://127.0.0.1:0", [], "Listener SSL uses security protocol SSL"),
    ("CLIENT://127.0.0.1:0", ["--override", "listener.security.protocol.map=CLIENT:SASL_SSL"],
     "Listener CLIENT uses security protocol SASL_SSL"),
    ("CLIENT://127.0.0.1:0", [], "No security protocol defined for listener CLIENT"),
])
def test_a_listener_kafka_would_secure_or_not_know_exits_2(tmp_path, listeners, extra, message):
    r = cli("--data-dir", str(tmp_path / "data"), "--override", f"listeners={listeners}", *extra)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr
    assert "kshare listening" not in r.stdout


def test_a_named_plaintext_listener_is_served(tmp_path):
    # (Kafka requires the inter-broker listener among the advertised ones: PLAINTEXT unless named)
    with Running("--override", "listeners=CLIENT://127.0.0.1:0", "--override",
                 "listener.security.protocol.map=CLIENT:PLAINTEXT", "--override", "inter.broker.listener.name=CLIENT",
                 cwd=tmp_path, log_path=tmp_path / "b.log") as b:
        cluster_identity(b.bootstrap)


def test_port_in_use_fails_with_a_clear_message(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = cli("--port", str(port), "--data-dir", str(tmp_path / "data"))
    assert r.returncode != 0
    assert "already in use" in r.stderr.lower() and str(port) in r.stderr
    assert "Traceback" not in r.stderr


def test_unusable_data_dir_fails_with_a_clear_message(tmp_path):
    """A data directory that cannot be made (here: under a regular file; also a full disk or a
    read-only mount) stops the start with the path and the reason, not a traceback."""
    (tmp_path / "file").write_text("not a directory")
    data = tmp_path / "file" / "data"
    r = cli("--port", "0", "--data-dir", str(data))
    assert r.returncode == 1
    assert f"kshare-broker: cannot open the data directory {data}: [Errno 20] Not a directory" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_registry_the_start_cannot_write_fails_with_a_clear_message(tmp_path):
    """Creating the internal topics writes ``kshare-topics.json``; a disk that refuses it (here:
    its temporary file is a directory; also a full disk) stops the start with the reason, where
    it used to say it could not listen, or print a traceback."""
    (tmp_path / "data" / "kshare-topics.json.tmp").mkdir(parents=True)
    r = cli("--port", "0", "--data-dir", str(tmp_path / "data"))
    assert r.returncode == 1
    assert f"kshare-broker: cannot write to the data directory {tmp_path / 'data'}: Cannot write the topic " \
           "registry: [Errno 21] Is a directory" in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_value_in_config_file_names_it(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("socket.request.max.bytes=lots\n")
    r = cli("--port", "0", "--data-dir", str(tmp_path / "data"), "--config", str(props))
    assert r.returncode == 2
    assert "Invalid value lots for configuration socket.request.max.bytes" in r.stderr
    assert "Traceback" not in r.stderr


# --- identity ------------------------------------------------------------------------------------------


def cluster_identity(bootstrap: str) -> tuple[str, int]:
    with RawClient(bootstrap) as c:
        resp = c.request(3, 12, MetadataRequest(topics=[], allow_auto_topic_creation=False))
    return resp.cluster_id, resp.brokers[0].node_id


def test_node_and_cluster_id_are_stable_across_restarts(broker_factory):
    b = broker_factory()
    first = cluster_identity(b.bootstrap)
    meta = (b.data_dir / "meta.properties").read_text()
    assert f"cluster.id={first[0]}" in meta and "node.id=1" in meta
    b.restart()
    assert cluster_identity(b.bootstrap) == first
    assert (b.data_dir / "meta.properties").read_text() == meta


def test_fresh_data_dir_gets_a_new_cluster_id(broker_factory):
    a = broker_factory(name="a")
    b = broker_factory(name="b")
    assert cluster_identity(a.bootstrap)[0] != cluster_identity(b.bootstrap)[0]


def test_mismatching_node_id_refuses_to_start(broker_factory):
    b = broker_factory()
    assert cluster_identity(b.bootstrap)[1] == 1
    assert b.stop() == 0
    meta = (b.data_dir / "meta.properties").read_text()
    r = cli("--port", "0", "--data-dir", str(b.data_dir), "--override", "node.id=2")
    assert r.returncode == 2
    # MetaPropertiesEnsemble.verify's message, word for word
    assert (f"Stored node id 1 doesn't match previous node id 2 in {b.data_dir / 'meta.properties'}. If you moved "
            "your data, make sure your configured node id matches. If you intend to create a new node, you should "
            "remove all data in your data directories.") in r.stderr
    assert "Traceback" not in r.stderr
    assert (b.data_dir / "meta.properties").read_text() == meta  # untouched
    b.start()  # the right id still starts


def test_damaged_meta_properties_refuses_to_start(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "meta.properties").write_text("version=1\nnode.id=1\n")  # no cluster.id
    r = cli("--port", "0", "--data-dir", str(data))
    assert r.returncode == 2
    assert "meta.properties" in r.stderr and "damaged" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_data_dir_in_use_refuses_a_second_broker(broker_factory):
    """Like Kafka's LogManager, a broker locks its data directory (``.lock``): a second one on
    the same directory stops at once instead of writing the same logs."""
    b = broker_factory()
    r = cli("--port", "0", "--data-dir", str(b.data_dir))
    assert r.returncode == 1
    assert f"cannot open the data directory {b.data_dir}:" in r.stderr and "is locked" in r.stderr
    assert "Traceback" not in r.stderr
    assert cluster_identity(b.bootstrap)[1] == 1  # the first one still serves
    assert b.stop() == 0
    b.start()  # and the lock is free again once it stopped


def test_lost_meta_properties_refuses_to_start(broker_factory):
    """meta.properties is made at the first start; gone beside a broker's data, it is not made
    again (that data would get a new cluster id, and any node id could open it)."""
    b = broker_factory()
    assert b.stop() == 0
    (b.data_dir / "meta.properties").unlink()
    r = cli("--port", "0", "--data-dir", str(b.data_dir))
    assert r.returncode == 2
    assert "meta.properties is missing but" in r.stderr and "Traceback" not in r.stderr
    assert not (b.data_dir / "meta.properties").exists()


@pytest.mark.parametrize("damage", [b"{", b'{"version": 1}' + bytes(range(128, 256)) * 400],
                         ids=["cut", "binary-tail"])
@pytest.mark.parametrize("name", [
    "kshare-topics.json", "kshare-group-configs.json", "kshare-producer-ids.json", "kshare-dynamic-broker-configs.json",
])
def test_damaged_registry_files_refuse_to_start(broker_factory, name, damage):
    """kshare's own metadata files (Kafka keeps these in its metadata log) that do not parse stop
    the start with exit 2 and one short line naming the file (not the file's bytes), and are left
    for the operator to restore."""
    b = broker_factory()
    set_group_configs(b.bootstrap, "g", {"share.auto.offset.reset": "earliest"})
    assert b.stop() == 0
    (b.data_dir / name).write_bytes(damage)
    r = cli("--port", "0", "--data-dir", str(b.data_dir))
    assert r.returncode == 2
    assert f"{name} is damaged" in r.stderr and "restore it from a backup" in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.splitlines()) == 1 and len(r.stderr) < 500, r.stderr
    assert (b.data_dir / name).read_bytes() == damage


# --- logging ---------------------------------------------------------------------------------------------


def provoke_warning(bootstrap: str) -> None:
    """Send an unknown API key: the broker closes the connection and logs a warning."""
    with RawClient(bootstrap) as c:
        c.send_raw(b"\x00\x00\x00\x0a\x03\xe8\x00\x00\x00\x00\x00\x01\xff\xff")
        assert c.is_closed_by_broker()
        # A request on another connection is answered only after the warning was logged.
    with RawClient(bootstrap) as c:
        c.request(18, 0, ApiVersionsRequest())


@pytest.mark.parametrize(
    "level,info,warning",
    [("INFO", True, True), ("WARNING", False, True), ("ERROR", False, False)],
)
def test_log_level(tmp_path, level, info, warning):
    with Running("--port", "0", "--data-dir", str(tmp_path / "data"), "--log-level", level,
                 log_path=tmp_path / "b.log") as b:
        provoke_warning(b.bootstrap)
    log = b.log()
    assert ("INFO kshare.broker" in log) == info, log
    assert ("WARNING kshare.server" in log) == warning, log


# --- readiness and signals -------------------------------------------------------------------------

SIGTERM_WHEN_READY = """
import builtins, gc, os, resource, signal, sys
from broker import __main__ as cli
real_print = builtins.print
def print_then_sigterm(*args, **kwargs):
    real_print(*args, **kwargs)
    if args and str(args[0]).startswith("kshare listening"):
        real_print("gc thresholds", *gc.get_threshold(), flush=True)
        real_print("open files", *resource.getrlimit(resource.RLIMIT_NOFILE), flush=True)
        os.kill(os.getpid(), signal.SIGTERM)  # the earliest moment a supervisor could stop us
builtins.print = print_then_sigterm
sys.exit(cli.main(sys.argv[1:]))
"""


def stop_when_ready(tmp_path, preexec_fn=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SIGTERM_WHEN_READY, "--port", "0", "--data-dir", str(tmp_path / "data")],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60, preexec_fn=preexec_fn,
    )


def test_sigterm_as_soon_as_ready_is_graceful(tmp_path):
    """Once "kshare listening" is printed, SIGTERM must mean a clean shutdown, never a kill."""
    r = stop_when_ready(tmp_path)
    assert "kshare listening" in r.stdout
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()


def test_the_broker_runs_with_its_gc_thresholds(tmp_path):
    """A fresh interpreter has CPython's (700, 10, 10); the broker sets its own."""
    assert GC_THRESHOLDS[0] > 700
    r = stop_when_ready(tmp_path)
    assert f"gc thresholds {' '.join(map(str, GC_THRESHOLDS))}" in r.stdout, r.stdout


def test_a_warning_when_open_files_near_the_limit(tmp_path):
    """At the open-files limit new connections are closed at once without a word (uvloop accepts
    and drops them), so the broker warns once 90% of its descriptors are open."""
    limit = 200  # about 110 go to the internal topics' segments
    b = BrokerProcess(tmp_path / "data", {"connections.max.idle.ms": "6000"},  # checked every 1.5 s
                      preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
    b.start()
    sockets = []
    try:
        for _ in range(limit - 100):
            sockets.append(socket.create_connection(("127.0.0.1", b.port), timeout=10))
        deadline = time.monotonic() + 20
        while "file descriptors are open" not in b.log():
            assert time.monotonic() < deadline, b.log()
            time.sleep(0.1)
        assert f"of {limit} file descriptors are open" in b.log()
    finally:
        for s in sockets:
            s.close()
        b.kill()


def test_the_broker_takes_the_hard_limit_on_open_files(tmp_path):
    """Started with systemd's soft limit of 1024 open files (or lower), the broker raises it to
    the hard limit, as the JVM does for Kafka: descriptors for segments and sockets run out
    otherwise."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard limit here is {hard}: nothing to raise")
    r = stop_when_ready(tmp_path, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)))
    assert r.returncode == 0, r.stderr
    expected = hard if hard != resource.RLIM_INFINITY else 1 << 20
    assert f"open files {expected} {hard}" in r.stdout, r.stdout
    assert f"raised the open files limit from 256 to {expected}" in r.stderr


def test_a_bad_group_property_stops_the_start_before_the_data_directory_is_made(tmp_path):
    """Kafka checks its whole config (GroupCoordinatorConfig and ShareGroupConfig included) before
    it touches a log directory: no meta.properties with a fresh cluster id is left behind."""
    r = cli("--port", "0", "--data-dir", str(tmp_path / "data"),
            "--override", "group.share.record.lock.duration.ms=70000")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "group.share.max.record.lock.duration.ms must be greater than or equal to" in r.stderr
    assert not (tmp_path / "data").exists()
