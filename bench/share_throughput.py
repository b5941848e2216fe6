"""Share-group consume+ack throughput: kshare with K confluent-kafka ShareConsumers against Redis Streams.

Every run starts its own server with a temporary data directory (a kshare broker subprocess; a
``redis-server`` on 127.0.0.1 with ``save ""`` and ``appendonly no``), prefills ``--records``
records of ``--size`` bytes, then starts K consumer processes (multiprocessing, spawn) that wait
on one start event. Runs go one after another (the box has 2 cores, and the K clients already
compete with the server for them), alternating between the systems: kshare run 1, Redis run 1,
kshare run 2, ... of one workload, so that each kshare run has a Redis run beside it in time.

kshare: one topic in one share group (``share.auto.offset.reset=earliest`` set beforehand with
IncrementalAlterConfigs on the GROUP resource). Prefill by one Producer (linger.ms 5, librdkafka
defaults otherwise, so log batches of ~7000 records; ``--batch-size`` changes that, and matters:
a share fetch hands out whole log batches and the in-flight limit counts them whole), record i
to partition i % P.
Each consumer runs ``share.acknowledgement.mode=explicit``: poll(), then per chunk of at most
500 records ``acknowledge()`` each and ``commit_sync()`` (one ShareAcknowledge round trip,
timed). Partitions: K=1 uses 1; K>1 uses 1 (the share-group case: K consumers share one
partition, like K Redis consumers share one stream) and also K (one partition each), because
``group.share.partition.max.record.locks`` (2000) bounds what one partition can have in flight
for all its consumers together (``--partitions one|k|both``).

Redis: one stream, entries with explicit ids ``0-(i+1)`` added by pipelined XADD (1000 per round
trip), one consumer group from id 0. Each consumer loops XREADGROUP ``>`` COUNT 500, then one
pipelined round trip (timed) holding XACK for the batch.

Variants: ``baseline`` accepts everything. ``release`` rejects nothing but gives back record i
(i % 10 == 0) on its first delivery, then accepts it when redelivered. kshare:
``acknowledge(msg, RELEASE)`` in the same commit as the chunk's ACCEPTs; the broker redelivers
them on later fetches. Redis has no release: the entry is left pending (not XACKed) and, in the
same timed round trip as the XACK, marked reclaimable with ``XCLAIM ... IDLE 1e9 JUSTID`` (to
itself, so the delivery count is unchanged); once XREADGROUP ``>`` returns nothing, consumers
reclaim those entries with ``XAUTOCLAIM ... 60000`` (min idle 60 s: only marked entries qualify,
never another consumer's in-flight batch) COUNT 500 and XACK them. Either way 110% deliveries.

Reported per configuration, medians over ``--runs`` runs (each metric's own median):
consume+ack records/s (wall time from the first poll() / XREADGROUP of any consumer until the
last commit that completed the set), ack round-trip p50/p99 over every commit of the run, server
CPU seconds during that window (utime+stime of /proc/<pid>/stat), server peak RSS (VmHWM, prefill
included), the consumers' own CPU seconds, and "other load": busy CPU seconds of the whole machine
(/proc/stat) in the window minus server and consumers, per second of window, i.e. cores taken by
foreign work (kernel softirq time for the loopback traffic lands here too). The box may be
shared: each run first waits (bounded) for two quiet half seconds, and a run whose other load
exceeds ``--max-other-load`` is repeated up to ``--retries`` times (the last try is kept). Then kshare/Redis ratios of throughput and p99
(issue targets: throughput >= 1.5x at K=1 and K=4, >= 1.0x with redelivery; p99 <= Redis): the
median of the runs' paired ratios (run i of kshare over run i of Redis), which drift of the
box's speed during a workload's runs moves less than the ratio of the two medians.
Every run checks that each record was accepted exactly once.

Needs ``redis-server`` (tries ``apt-get install -y redis-server`` if missing, else skips Redis)
and the Python ``redis`` client with its ``hiredis`` parser (``redis[hiredis]`` is pip-installed
into this interpreter's environment if missing; the pure-Python parser would make the Redis
consumers client-bound).
``--py-spy DIR`` records the broker with py-spy (raw collapsed stacks) during every kshare
consume window, for profiling runs (py-spy takes CPU from the 2 cores: not for measured runs).

    .venv/bin/python bench/share_throughput.py [--records 200000 --records 1000000]
        [--consumers 1 --consumers 4] [--runs 3] [--variants baseline,release]
        [--partitions both] [--systems kshare,redis]
"""

from __future__ import annotations

import argparse
import importlib
import multiprocessing as mp
import os
import queue
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from bench._common import busy_cpu_seconds, cpu_seconds, peak_rss_mb, percentile  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402

ACK_CHUNK = 500  # records per commit_sync / XACK
RELEASE_EVERY = 10  # the release variant gives back record i when i % 10 == 0, once
READY_TIMEOUT_S = 60.0
PY_SPY = Path(sys.executable).parent / "py-spy"  # --py-spy: installed beside this interpreter
REDIS_MARK_IDLE_MS = 10**9  # "released": idle far beyond the reclaim threshold
REDIS_RECLAIM_MIN_IDLE_MS = 60_000  # in-flight batches never get this old within a run


def _value(size: int) -> bytes:
    return (os.urandom(size).hex().encode() * 2)[:size]


# --------------------------------------------------------------------------- consumer processes


@dataclass
class WorkerResult:
    idx: int
    t_first_poll: float = float("nan")  # time.monotonic(): one clock for every process
    t_first_record: float = float("nan")
    t_last_commit: float = float("nan")
    commit_latencies: list[float] = field(default_factory=list)
    delivered: int = 0
    released: int = 0
    accepted: int = 0
    cpu_s: float = 0.0
    accepted_counts: bytes = b""  # per record index: how often this consumer had it accepted
    errors: list[str] = field(default_factory=list)


def _kshare_worker(idx: int, bootstrap: str, topic: str, group: str, records: int, partitions: int,
                   release: bool, ready: mp.Queue, start: mp.Event, accepted_total, out: mp.Queue,
                   timeout_s: float) -> None:
    res = WorkerResult(idx)
    counts = bytearray(records)
    consumer = ShareConsumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "share.acknowledgement.mode": "explicit",
        "max.poll.records": ACK_CHUNK,
        "log_level": 3,  # hide the "share consumer is in Preview" warning; errors still show
    })
    try:
        consumer.subscribe([topic])
        ready.put(idx)
        if not start.wait(READY_TIMEOUT_S):
            raise RuntimeError("no start signal")
        accept, release_type = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE
        ack, commit, poll = consumer.acknowledge, consumer.commit_sync, consumer.poll
        cpu0 = time.process_time()
        res.t_first_poll = now = time.monotonic()
        deadline = now + timeout_s
        while accepted_total.value < records and time.monotonic() < deadline:
            msgs = poll(0.05)
            if not msgs:
                continue
            if res.t_first_record != res.t_first_record:  # NaN: first records
                res.t_first_record = time.monotonic()
            msgs = list(msgs)
            for lo in range(0, len(msgs), ACK_CHUNK):
                taken = []  # (partition, record index) accepted in this chunk
                for m in msgs[lo:lo + ACK_CHUNK]:
                    if m.error() is not None:
                        res.errors.append(str(m.error()))
                        continue
                    i = m.offset() * partitions + m.partition()
                    res.delivered += 1
                    if release and i % RELEASE_EVERY == 0 and m.delivery_count() == 1:
                        ack(m, release_type)
                        res.released += 1
                    else:
                        ack(m, accept)
                        taken.append((m.partition(), i))
                t = time.perf_counter()
                outcome = commit()
                res.commit_latencies.append(time.perf_counter() - t)
                failed = {tp.partition for tp, err in outcome.items() if err is not None}
                if failed:
                    res.errors.append(f"commit_sync: {outcome}")
                n = 0
                for p, i in taken:
                    if p not in failed:
                        counts[i] += 1
                        n += 1
                res.accepted += n
                with accepted_total.get_lock():
                    accepted_total.value += n
                res.t_last_commit = time.monotonic()
        res.cpu_s = time.process_time() - cpu0
    except Exception as e:  # reported by the parent, which fails the run
        res.errors.append(f"{type(e).__name__}: {e}")
    res.accepted_counts = bytes(counts)
    out.put(res)
    consumer.close()


def _redis_worker(idx: int, port: int, stream: str, group: str, records: int, partitions: int,
                  release: bool, ready: mp.Queue, start: mp.Event, accepted_total, out: mp.Queue,
                  timeout_s: float) -> None:
    import redis

    res = WorkerResult(idx)
    counts = bytearray(records)
    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=60, protocol=2)
    name = f"c{idx}"
    try:
        r.ping()
        ready.put(idx)
        if not start.wait(READY_TIMEOUT_S):
            raise RuntimeError("no start signal")
        streams = {stream: ">"}
        cursor = "0-0"
        pipe = r.pipeline(transaction=False)
        cpu0 = time.process_time()
        res.t_first_poll = now = time.monotonic()
        deadline = now + timeout_s
        while accepted_total.value < records and time.monotonic() < deadline:
            reply = r.xreadgroup(group, name, streams, count=ACK_CHUNK)
            entries = reply[0][1] if reply else []
            redelivered = False
            if not entries and release:
                cursor, entries, _deleted = r.xautoclaim(stream, group, name, REDIS_RECLAIM_MIN_IDLE_MS,
                                                         start_id=cursor, count=ACK_CHUNK)
                redelivered = True
            if not entries:
                time.sleep(0.001)  # others still hold their last batch: nothing to do yet
                continue
            if res.t_first_record != res.t_first_record:
                res.t_first_record = time.monotonic()
            acks, marks = [], []
            for entry_id, _fields in entries:
                i = int(entry_id[2:]) - 1  # ids are 0-(i+1)
                res.delivered += 1
                if release and not redelivered and i % RELEASE_EVERY == 0:
                    marks.append(entry_id)
                else:
                    acks.append(entry_id)
            if acks:
                pipe.xack(stream, group, *acks)
            if marks:
                pipe.xclaim(stream, group, name, 0, marks, idle=REDIS_MARK_IDLE_MS, justid=True)
                res.released += len(marks)
            t = time.perf_counter()
            replies = pipe.execute()
            res.commit_latencies.append(time.perf_counter() - t)
            n = replies[0] if acks else 0
            if n != len(acks):
                res.errors.append(f"XACK acknowledged {n} of {len(acks)}")
            for entry_id in acks:
                counts[int(entry_id[2:]) - 1] += 1
            res.accepted += n
            with accepted_total.get_lock():
                accepted_total.value += n
            res.t_last_commit = time.monotonic()
        res.cpu_s = time.process_time() - cpu0
    except Exception as e:
        res.errors.append(f"{type(e).__name__}: {e}")
    res.accepted_counts = bytes(counts)
    out.put(res)
    r.close()


# --------------------------------------------------------------------------- servers


class RedisServer:
    """A throw-away redis-server on 127.0.0.1: no RDB snapshots, no AOF, data dir in ``tmp``."""

    def __init__(self, binary: str, tmp: Path) -> None:
        self.binary, self.tmp = binary, tmp
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def start(self, timeout_s: float = 20.0) -> RedisServer:
        import redis

        with socket.socket() as s:  # a free port (tiny race with other programs; fine for a bench)
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        log = open(self.tmp / "redis.log", "ab")
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.tmp),
             "--save", "", "--appendonly", "no", "--daemonize", "no"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1).ping()
                return self
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server did not start: {(self.tmp / 'redis.log').read_text()}")
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def find_redis_server() -> str | None:
    """redis-server on PATH (or /usr/bin), installing the Debian package once if missing."""
    found = shutil.which("redis-server") or (os.path.exists("/usr/bin/redis-server") and "/usr/bin/redis-server")
    if found:
        return found
    print("redis-server missing: trying apt-get install -y redis-server", flush=True)
    try:
        subprocess.run(["apt-get", "install", "-y", "redis-server"], check=True, timeout=600,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as e:
        print(f"  failed ({e}); Redis is skipped", flush=True)
        return None
    return shutil.which("redis-server") or (os.path.exists("/usr/bin/redis-server") and "/usr/bin/redis-server") or None


def ensure_redis_client() -> bool:
    """The redis client with its hiredis reply parser, pip-installed here if missing.

    Without hiredis, redis-py parses replies in pure Python: ~15 us of client CPU per entry,
    five times the Redis consumers' whole cost with it, so the bench would measure the parser.
    """
    try:
        import redis.utils
        if redis.utils.HIREDIS_AVAILABLE:
            return True
    except ImportError:
        pass
    print("Python redis client or hiredis missing: pip-installing redis[hiredis] into this environment",
          flush=True)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "redis[hiredis]"], check=False, timeout=600)
    if done.returncode != 0:
        return False
    importlib.invalidate_caches()
    # Checked in a fresh interpreter: a failed import above may have cached a half-initialised module.
    check = subprocess.run([sys.executable, "-c", "import redis.utils as u; assert u.HIREDIS_AVAILABLE"], check=False)
    return check.returncode == 0


# --------------------------------------------------------------------------- one run


@dataclass(frozen=True)
class Config:
    system: str  # kshare | redis
    records: int
    consumers: int
    partitions: int  # kshare only (Redis: one stream)
    variant: str  # baseline | release

    def label(self) -> str:
        parts = f" P={self.partitions}" if self.system == "kshare" else ""
        return f"{self.system}{parts} N={self.records} K={self.consumers} {self.variant}"


@dataclass
class RunResult:
    records_per_s: float
    p50_ms: float
    p99_ms: float
    server_cpu_s: float
    server_rss_mb: float
    client_cpu_s: float
    other_cpu_s: float  # what the rest of the machine used during the window
    window_s: float  # start signal to the last consumer's result
    prefill_s: float
    first_record_s: float
    deliveries: int
    released: int


def prefill_kshare(bootstrap: str, topic: str, records: int, size: int, partitions: int, batch_size: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": batch_size,
                         "queue.buffering.max.messages": 1_000_000, "delivery.report.only.error": True})
    value = _value(size)
    produce, poll = producer.produce, producer.poll
    for i in range(records):
        try:
            produce(topic, value, partition=i % partitions)
        except BufferError:
            poll(0.01)
            produce(topic, value, partition=i % partitions)
    if producer.flush(300):
        raise RuntimeError("prefill not delivered")
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-check"})
    total = 0
    for p in range(partitions):
        low, high = check.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        total += high - low
    check.close()
    if total != records:
        raise RuntimeError(f"log holds {total} records, expected {records}")


def prefill_redis(port: int, stream: str, group: str, records: int, size: int) -> None:
    import redis

    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=60, protocol=2)
    value = _value(size)
    pipe = r.pipeline(transaction=False)
    for lo in range(0, records, 1000):
        for i in range(lo, min(lo + 1000, records)):
            pipe.xadd(stream, {b"v": value}, id=f"0-{i + 1}")
        pipe.execute()
    r.xgroup_create(stream, group, id="0")
    if r.xlen(stream) != records:
        raise RuntimeError(f"stream holds {r.xlen(stream)} entries, expected {records}")
    r.close()


def one_run(cfg: Config, args, tmp: Path, run: int, redis_binary: str | None) -> RunResult:
    ctx = mp.get_context("spawn")
    release = cfg.variant == "release"
    topic, group = f"bench-{run}", f"share-bench-{run}"
    broker = redis_server = spy = None
    workers: list = []
    try:
        if cfg.system == "kshare":
            overrides = dict(o.split("=", 1) for o in args.broker_override or [])
            broker = BrokerProcess(tmp / "data", overrides=overrides, log_level="WARNING").start()
            pid, target = broker.proc.pid, broker.bootstrap
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic(topic, cfg.partitions, 1)])[topic].result(30)
            (future,) = admin.incremental_alter_configs([ConfigResource(
                ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
                    "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values()
            future.result(30)
            del admin, future  # destroyed now, not noisily after the broker has gone
            t = time.perf_counter()
            prefill_kshare(broker.bootstrap, topic, cfg.records, args.size, cfg.partitions, args.batch_size)
            prefill_s = time.perf_counter() - t
            worker_fn = _kshare_worker
        else:
            redis_server = RedisServer(redis_binary, tmp).start()
            pid, target = redis_server.proc.pid, redis_server.port
            t = time.perf_counter()
            prefill_redis(redis_server.port, topic, group, cfg.records, args.size)
            prefill_s = time.perf_counter() - t
            worker_fn = _redis_worker

        ready, out, start = ctx.Queue(), ctx.Queue(), ctx.Event()
        accepted_total = ctx.Value("q", 0)
        parts = cfg.partitions if cfg.system == "kshare" else 1
        for k in range(cfg.consumers):
            w = ctx.Process(target=worker_fn, args=(k, target, topic, group, cfg.records, parts, release, ready,
                                                    start, accepted_total, out, args.timeout), daemon=True)
            w.start()
            workers.append(w)
        for _ in workers:
            ready.get(timeout=READY_TIMEOUT_S)
        if args.py_spy and cfg.system == "kshare":
            name = f"{cfg.label().replace(' ', '_').replace('=', '')}_run{run + 1}.txt"
            spy = subprocess.Popen([str(PY_SPY), "record", "--pid", str(pid),
                                    "--rate", "200", "--format", "raw",
                                    *(["--native"] if args.py_spy_native else ["--nonblocking"]),
                                    "-o", str(Path(args.py_spy) / name)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # let py-spy attach before the window opens (profiling runs only)
        cpu0, busy0, w0 = cpu_seconds(pid), busy_cpu_seconds(), time.monotonic()
        start.set()
        results: list[WorkerResult] = []
        deadline = time.monotonic() + args.timeout + 60
        while len(results) < len(workers):
            try:
                results.append(out.get(timeout=1.0))
            except queue.Empty:
                dead = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"consumers failed or timed out (exit codes {dead})")
        server_cpu = cpu_seconds(pid) - cpu0
        busy, window = busy_cpu_seconds() - busy0, time.monotonic() - w0
        rss = peak_rss_mb(pid)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(30)
        for w in workers:
            w.join(30)

        errors = [e for r in results for e in r.errors]
        if errors:
            raise RuntimeError(f"{len(errors)} consumer errors, first: {errors[:3]}")
        per_record = bytearray(cfg.records)
        for r in results:
            for i, c in enumerate(r.accepted_counts):
                if c:
                    per_record[i] += c
        if per_record.count(1) != cfg.records:
            missing, twice = per_record.count(0), cfg.records - per_record.count(0) - per_record.count(1)
            raise RuntimeError(f"{missing} records never accepted, {twice} accepted more than once")
        t0 = min(r.t_first_poll for r in results)
        t1 = max(r.t_last_commit for r in results if r.accepted)
        lat = sorted(x for r in results for x in r.commit_latencies)
        return RunResult(
            records_per_s=cfg.records / (t1 - t0),
            p50_ms=percentile(lat, 50) * 1e3,
            p99_ms=percentile(lat, 99) * 1e3,
            server_cpu_s=server_cpu,
            server_rss_mb=rss,
            client_cpu_s=sum(r.cpu_s for r in results),
            other_cpu_s=max(0.0, busy - server_cpu - sum(r.cpu_s for r in results)),
            window_s=window,
            prefill_s=prefill_s,
            first_record_s=min(r.t_first_record for r in results) - t0,
            deliveries=sum(r.delivered for r in results),
            released=sum(r.released for r in results),
        )
    finally:
        if spy is not None and spy.poll() is None:
            spy.kill()
            spy.wait()
        for w in workers:
            w.join(10)
            if w.is_alive():
                w.terminate()
                w.join(5)
            if w.is_alive():
                w.kill()
                w.join()
        if broker is not None:
            broker.stop()
        if redis_server is not None:
            redis_server.stop()


# --------------------------------------------------------------------------- driver


def wait_for_quiet(max_load: float, max_wait_s: float) -> None:
    """Wait (bounded) until the machine has been idle enough for two consecutive half seconds."""
    deadline = time.monotonic() + max_wait_s
    quiet = 0
    while quiet < 2 and time.monotonic() < deadline:
        b = busy_cpu_seconds()
        time.sleep(0.5)
        quiet = quiet + 1 if (busy_cpu_seconds() - b) / 0.5 <= max_load else 0


def workloads(args) -> list[list[Config]]:
    """The configurations of each (records, K, variant), whose runs alternate."""
    out = []
    for records in args.records or [200_000, 1_000_000]:
        for k in args.consumers or [1, 4]:
            for variant in args.variants:
                cell = []
                if "kshare" in args.systems:
                    counts = {"one": [1], "k": [k], "both": [1, k]}[args.partitions]
                    for p in sorted(set(counts)):
                        cell.append(Config("kshare", records, k, p, variant))
                if "redis" in args.systems:
                    cell.append(Config("redis", records, k, 1, variant))
                out.append(cell)
    return out


def summarize(cfg: Config, runs: list[RunResult], peer: list[RunResult] | None) -> dict:
    """Medians of ``runs``; with the Redis runs ``peer`` beside them, the medians of the
    paired ratios too."""
    med = {f: statistics.median(getattr(r, f) for r in runs) for f in RunResult.__dataclass_fields__}
    med["cfg"] = cfg
    if peer:
        pairs = list(zip(runs, peer))
        med["x_records_per_s"] = statistics.median(a.records_per_s / b.records_per_s for a, b in pairs)
        med["x_p99"] = statistics.median(a.p99_ms / b.p99_ms for a, b in pairs)
    return med


def print_table(rows: list[dict], n_runs: int, batch_size: int) -> None:
    head = ("| records | K | system | P | variant | consume+ack rec/s | ack p50 ms | ack p99 ms "
            "| server CPU s | server peak RSS MiB | clients CPU s | other load | x Redis rec/s | x Redis p99 |")
    print(f"\nMedians of {n_runs} run(s) per configuration (kshare prefill batch.size {batch_size}; "
          f"x Redis: the median of the paired runs' ratios):\n")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        c = r["cfg"]
        if "x_p99" in r:
            ratio_thr, ratio_p99 = f"{r['x_records_per_s']:.2f}", f"{r['x_p99']:.2f}"
        else:
            ratio_thr = ratio_p99 = ""
        parts = str(c.partitions) if c.system == "kshare" else "1 stream"
        print(f"| {c.records:,} | {c.consumers} | {c.system} | {parts} | {c.variant} | {r['records_per_s']:,.0f} "
              f"| {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['server_cpu_s']:.2f} | {r['server_rss_mb']:.0f} "
              f"| {r['client_cpu_s']:.2f} | {r['other_cpu_s'] / r['window_s']:.2f} | {ratio_thr} | {ratio_p99} |", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, action="append", help="repeatable; default 200000 and 1000000")
    ap.add_argument("--consumers", type=int, action="append", help="K, repeatable; default 1 and 4")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size", type=int, default=100, help="record value bytes")
    ap.add_argument("--variants", default="baseline,release", type=lambda s: s.split(","))
    ap.add_argument("--systems", default="kshare,redis", type=lambda s: s.split(","))
    ap.add_argument("--partitions", choices=["one", "k", "both"], default="both",
                    help="kshare topic partitions for K>1: 1, K or both (K=1 always uses 1)")
    ap.add_argument("--batch-size", type=int, default=1_000_000,
                    help="prefill producer batch.size in bytes (librdkafka's default 1000000; Java's is 16384)")
    ap.add_argument("--max-other-load", type=float, default=0.3,
                    help="cores other work may use during a run before it is discarded and repeated")
    ap.add_argument("--retries", type=int, default=3, help="repeats of a disturbed run (the last one is kept)")
    ap.add_argument("--quiet-wait", type=float, default=300.0,
                    help="seconds to wait, before each run, for the machine to be quiet")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a run's consumers may take")
    ap.add_argument("--broker-override", action="append", metavar="KEY=VALUE", help="passed to the broker")
    ap.add_argument("--py-spy", metavar="DIR", help="record the broker with py-spy during kshare consume windows")
    ap.add_argument("--py-spy-native", action="store_true", help="py-spy --native (C frames too; pauses the broker per sample)")
    args = ap.parse_args()
    bad = set(args.variants) - {"baseline", "release"} or set(args.systems) - {"kshare", "redis"}
    if bad:
        ap.error(f"unknown {bad}")
    if args.py_spy:
        if not PY_SPY.exists():
            ap.error("--py-spy needs py-spy in this venv: .venv/bin/pip install py-spy")
        Path(args.py_spy).mkdir(parents=True, exist_ok=True)
    redis_binary = None
    if "redis" in args.systems:
        redis_binary = find_redis_server() if ensure_redis_client() else None
        if redis_binary is None:
            print("Redis peer skipped", flush=True)
            args.systems = [s for s in args.systems if s != "redis"]

    rows = []
    for cell in workloads(args):
        runs: dict[Config, list[RunResult]] = {cfg: [] for cfg in cell}
        for run, cfg in ((run, cfg) for run in range(args.runs) for cfg in cell):
            for attempt in range(args.retries + 1):
                wait_for_quiet(args.max_other_load, args.quiet_wait)
                with tempfile.TemporaryDirectory(prefix="kshare-share-bench-") as tmp:
                    r = one_run(cfg, args, Path(tmp), run, redis_binary)
                load = r.other_cpu_s / r.window_s
                if load <= args.max_other_load or attempt == args.retries:
                    break
                print(f"  {cfg.label()} run {run + 1}: discarded ({r.records_per_s:,.0f} rec/s): other work used "
                      f"{load:.2f} cores meanwhile", flush=True)
            runs[cfg].append(r)
            print(f"  {cfg.label()} run {run + 1}: {r.records_per_s:,.0f} rec/s, ack p50 {r.p50_ms:.2f} ms "
                  f"p99 {r.p99_ms:.2f} ms, server CPU {r.server_cpu_s:.2f} s, RSS {r.server_rss_mb:.0f} MiB, "
                  f"clients CPU {r.client_cpu_s:.2f} s, other load {load:.2f} cores, first records after {r.first_record_s * 1e3:.0f} ms, "
                  f"{r.deliveries:,} deliveries ({r.released:,} released), prefill {r.prefill_s:.1f} s",
                  flush=True)
        peer = next((runs[cfg] for cfg in cell if cfg.system == "redis"), None)
        rows += [summarize(cfg, rs, peer if cfg.system == "kshare" else None) for cfg, rs in runs.items()]
    print_table(rows, args.runs, args.batch_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
