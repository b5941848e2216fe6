"""Helpers for the end-to-end share-group tests with real confluent-kafka ShareConsumers
(nothing here is collected).

Every wait is a polling loop with a deadline: ``poll_until`` polls a consumer until a condition
on what it received holds, ``ConsumerThread`` polls in a thread until told to stop, and
``ChildConsumer`` runs a consumer in a subprocess (so it can be SIGKILLed or SIGSTOPped) that
reports what it received as JSON lines.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable

from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from protocol.messages.share_group_describe_request import ShareGroupDescribeRequest
from tests.raw_client import RawClient

TIMEOUT = 20.0  # seconds for any single wait; tests finish far sooner when the broker behaves

# Lock-expiry tests run their own broker with the shortest lock Kafka allows.
SHORT_LOCKS = {
    "group.share.record.lock.duration.ms": "1000",
    "group.share.min.record.lock.duration.ms": "1000",
}
LOCK_S = 1.0

# Member-expiry tests: a member silent for 1.5 s is removed (bounds lowered together, as the
# broker checks group.* bounds at start-up).
SHORT_SESSIONS = {
    "group.share.min.session.timeout.ms": "1000", "group.share.session.timeout.ms": "1500",
    "group.share.min.heartbeat.interval.ms": "100", "group.share.heartbeat.interval.ms": "200",
}
SESSION_S = 1.5


def unique_group() -> str:
    return f"sg-{uuid.uuid4().hex[:12]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT)


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """Group-level configs (share.auto.offset.reset, ...) via IncrementalAlterConfigs."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    (future,) = admin.incremental_alter_configs(
        [ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)]
    ).values()
    future.result(TIMEOUT)


def earliest_group(bootstrap: str) -> str:
    """A new group that starts at the log start (records produced before it joined count)."""
    group = unique_group()
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    return group


def produce(bootstrap: str, topic: str, values: Iterable, *, partition: int | None = None,
            one_per_batch: bool = True) -> None:
    """Produce and wait for every delivery. ``values`` are bytes, or (key, value, headers,
    timestamp) tuples. One record per batch by default, so the broker (which acquires whole
    log batches) can hand records to different consumers."""
    p = Producer({
        "bootstrap.servers": bootstrap, "log_level": 3, "linger.ms": 0 if one_per_batch else 20,
        "batch.num.messages": 1 if one_per_batch else 10000, "message.timeout.ms": int(TIMEOUT * 1000),
    })
    errors = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(err)

    for v in values:
        key, value, headers, ts = v if isinstance(v, tuple) else (None, v, None, 0)
        kwargs = {"partition": partition} if partition is not None else {}
        p.produce(topic, value=value, key=key, headers=headers or None, timestamp=ts, on_delivery=delivered, **kwargs)
        p.poll(0)
    assert p.flush(TIMEOUT) == 0, "produce did not finish"
    assert errors == [], errors


def members_of(bootstrap: str, group: str) -> list:
    """The group's members as ShareGroupDescribe reports them (confluent-kafka 2.16's
    AdminClient cannot describe share groups); none for an unknown group."""
    with RawClient(bootstrap) as c:
        (g,) = c.request(77, 1, ShareGroupDescribeRequest(group_ids=[group])).groups
    return g.members if g.error_code == 0 else []


def consumer_config(bootstrap: str, group: str, *, explicit: bool = False, extra: dict | None = None) -> dict:
    cfg = {"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3, "socket.timeout.ms": 10000,
           "share.acknowledgement.mode": "explicit" if explicit else "implicit"}
    cfg.update(extra or {})
    return cfg


class Consumers:
    """Makes subscribed ShareConsumers and closes whichever are still open at teardown."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._open: list[ShareConsumer] = []

    def new(self, group: str, topics: str | list[str], *, explicit: bool = False,
            extra: dict | None = None) -> ShareConsumer:
        c = ShareConsumer(consumer_config(self.bootstrap, group, explicit=explicit, extra=extra))
        c.subscribe([topics] if isinstance(topics, str) else topics)
        self._open.append(c)
        return c

    def close(self, c: ShareConsumer) -> None:
        self._open.remove(c)
        c.close()

    def close_all(self) -> None:
        while self._open:
            self.close(self._open[-1])


def poll_until(consumer: ShareConsumer, done: Callable[[list], bool], *, timeout: float = TIMEOUT,
               on_message: Callable | None = None, poll_s: float = 0.2) -> list:
    """Poll until ``done(received so far)``; fails at the deadline. ``on_message`` is called for
    each record (explicit-mode tests acknowledge there). Every message must be a record."""
    got: list = []
    deadline = time.monotonic() + timeout
    while not done(got):
        assert time.monotonic() < deadline, f"gave up after {timeout}s with {len(got)} record(s): {describe(got)}"
        for m in consumer.poll(poll_s):
            assert m.error() is None, m.error()
            got.append(m)
            if on_message is not None:
                on_message(m)
    return got


def poll_for(consumer: ShareConsumer, seconds: float, *, on_message: Callable | None = None,
             poll_s: float = 0.2) -> list:
    """Everything polled during ``seconds`` (for "nothing more arrives" windows that are tied to a
    lock duration or to a later record having arrived)."""
    got: list = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for m in consumer.poll(poll_s):
            assert m.error() is None, m.error()
            got.append(m)
            if on_message is not None:
                on_message(m)
    return got


def offsets(messages) -> list[int]:
    return [m.offset() for m in messages]


def keys(messages) -> list[tuple[int, int]]:
    return [(m.partition(), m.offset()) for m in messages]


def describe(messages) -> list[tuple]:
    return [(m.partition(), m.offset(), m.delivery_count()) for m in messages[:50]]


def has_values(wanted: set[bytes]) -> Callable[[list], bool]:
    return lambda got: wanted <= {m.value() for m in got}


class ConsumerThread(threading.Thread):
    """Polls its own ShareConsumer (implicit acknowledgement) until ``stop`` is set, then closes it.
    ``received`` is (partition, offset, value) per record, appended as it arrives; subclasses
    handle each poll's records differently by overriding ``handle``."""

    def __init__(self, config: dict, topic: str) -> None:
        super().__init__(daemon=True)
        self.config = config
        self.topic = topic
        self.received: list[tuple[int, int, bytes]] = []
        self.errors: list = []
        self.stop = threading.Event()

    def run(self) -> None:
        c = ShareConsumer(self.config)
        try:
            c.subscribe([self.topic])
            while not self.stop.is_set():
                self.handle(c, c.poll(0.1))
        except Exception as e:  # noqa: BLE001  (surfaced by the test through ``errors``)
            self.errors.append(e)
        finally:
            c.close()

    def handle(self, consumer: ShareConsumer, messages: list) -> None:
        for m in messages:
            if m.error() is not None:
                self.errors.append(m.error())
            else:
                self.received.append((m.partition(), m.offset(), m.value()))


# A consumer in a subprocess: explicit acknowledgement, never acknowledges. It prints one JSON
# line per poll that returned records, then keeps its librdkafka threads (heartbeats) running
# until it is killed or stdin closes.
_CHILD = r"""
import json, sys
from confluent_kafka import ShareConsumer
bootstrap, group, topic = sys.argv[1:4]
c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3,
                   "share.acknowledgement.mode": "explicit"})
c.subscribe([topic])
while True:
    ms = c.poll(0.2)
    if ms:
        print(json.dumps([[m.partition(), m.offset(), m.delivery_count()] for m in ms]), flush=True)
        break
sys.stdin.read()
c.close()
"""


class ChildConsumer:
    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, bootstrap, group, topic],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        with self.proc.stdout:
            for line in self.proc.stdout:
                self._lines.put(json.loads(line))
        self._lines.put(None)

    def received(self, timeout: float = TIMEOUT) -> list[tuple[int, int, int]]:
        """(partition, offset, delivery count) of the records its first non-empty poll returned."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"child consumer received nothing within {timeout}s") from None
        assert line is not None, f"child consumer exited: {self.proc.stderr.read().decode(errors='replace')}"
        return [tuple(x) for x in line]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(TIMEOUT)
        for pipe in (self.proc.stdin, self.proc.stderr):
            pipe.close()


def shared_consumers(broker):
    """Body of a ``consumers`` fixture: ShareConsumers on the shared broker, closed at teardown."""
    made = Consumers(broker.bootstrap)
    yield made
    made.close_all()


def private_consumers(broker_factory):
    """Body of a ``private`` fixture: ``private(overrides) -> Consumers`` on a broker of its own
    (``.broker``); the consumers are closed before ``broker_factory`` kills the broker."""
    made: list[Consumers] = []

    def start(overrides: dict[str, str]) -> Consumers:
        b = broker_factory(overrides)
        c = Consumers(b.bootstrap)
        c.broker = b
        made.append(c)
        return c

    yield start
    for c in made:
        c.close_all()
