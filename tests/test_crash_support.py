"""Helpers for the crash-safety tests (nothing here is collected).

``python -m tests.test_crash_support BOOTSTRAP GROUP TOPIC LOG RELEASE`` runs one explicit-mode
ShareConsumer until its stdin closes. It acknowledges every record it polls (ACCEPT, or RELEASE
for the first delivery of ~1 record in 10 when RELEASE is 1), commits every few records, and
writes one JSON line per event to LOG, line-buffered so that every line is whole:

- ``{"e": "d", "p", "o", "c"}``: poll returned partition ``p`` offset ``o``, delivery count ``c``;
- ``{"e": "ok", "p", "acks": [[o, kind, c], ...]}``: the broker confirmed these acknowledgements
  (``kind`` "a" accept or "r" release, of the delivery that had count ``c``);
- ``{"e": "err", "p", "acks": [...], "x"}``: acknowledgements refused, or lost with the connection;
- ``{"e": "idle"}``: a poll returned nothing: the client had no record left to hand out;
- ``{"e": "x", "x"}``: any other error the client surfaced.

Every line carries ``t = time.monotonic_ns()``, one clock for all processes on Linux.

``Run`` drives a broker and four such children; ``judge`` is the pure checker of a run's merged
history (its own tests feed it made-up histories, so every rule is seen failing).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zlib
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RELEASE_ONE_IN = 10
COMMIT_EVERY = 8  # acknowledgements per commit_sync
MAX_POLL_RECORDS = 20
PROCESS_S = 0.01  # "work" per record: ~400 records/s for four consumers, far inside the lock duration
LOST = "_TRANSPORT"  # librdkafka's code for a request whose connection went away: outcome unknown
WAIT_S = 20.0  # any single wait; runs finish far sooner when the broker behaves

Key = tuple[int, int]  # (partition, offset)


def releases(partition: int, offset: int, delivery_count: int) -> bool:
    """Deterministic: the first delivery of ~1 record in RELEASE_ONE_IN is released."""
    return delivery_count == 1 and zlib.crc32(b"%d:%d" % (partition, offset)) % RELEASE_ONE_IN == 0


# --- the consumer child -------------------------------------------------------------------------------


def run_consumer(bootstrap: str, group: str, topic: str, log_path: str, release: str) -> None:
    import select

    from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer

    out = open(log_path, "a", buffering=1)  # noqa: SIM115 (open for the child's whole life)

    def emit(**event) -> None:
        event["t"] = time.monotonic_ns()
        out.write(json.dumps(event, separators=(",", ":")) + "\n")

    sent: dict[Key, tuple[str, int]] = {}  # acknowledged, outcome not reported yet: kind, count

    def on_commit(offsets, exc) -> None:
        for tp, offs in offsets.items():
            acks = [[o, *sent.pop((tp.partition, o), ("?", 0))] for o in sorted(offs)]
            if exc is None:
                emit(e="ok", p=tp.partition, acks=acks)
            else:
                emit(e="err", p=tp.partition, acks=acks, x=str(exc))

    c = ShareConsumer({
        "bootstrap.servers": bootstrap, "group.id": group, "log_level": 0,
        "share.acknowledgement.mode": "explicit", "max.poll.records": MAX_POLL_RECORDS,
        "socket.timeout.ms": 5000, "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200,
    })
    c.set_acknowledgement_commit_callback(on_commit)
    c.subscribe([topic])

    def commit() -> None:
        try:
            c.commit_sync(10.0)
        except KafkaException as e:
            emit(e="x", x=f"commit_sync: {e}")

    while not select.select([sys.stdin], [], [], 0)[0]:  # stdin readable: closed by the parent
        try:
            messages = c.poll(0.1)
        except KafkaException as e:
            emit(e="x", x=f"poll: {e}")
            continue
        if not messages:
            emit(e="idle")
            continue
        pending = 0
        for m in messages:
            if m.error() is not None:
                emit(e="x", x=f"message: {m.error()}")
                continue
            p, o, n = m.partition(), m.offset(), m.delivery_count()
            emit(e="d", p=p, o=o, c=n)
            time.sleep(PROCESS_S)
            kind = "r" if release == "1" and releases(p, o, n) else "a"
            sent[(p, o)] = (kind, n)
            c.acknowledge(m, AcknowledgeType.RELEASE if kind == "r" else AcknowledgeType.ACCEPT)
            pending += 1
            if pending == COMMIT_EVERY:
                commit()
                pending = 0
        if pending:
            commit()
    c.close()
    out.close()


class LogTail:
    """The whole JSON lines appended to a file since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pos = 0
        self._partial = b""

    def read(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._pos)
                data = f.read()
        except FileNotFoundError:
            return []
        self._pos += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        return [json.loads(line) for line in lines if line]


class ConsumerChild:
    """One consumer subprocess; it closes its consumer and exits when its stdin closes."""

    def __init__(self, workdir: Path, name: str, bootstrap: str, group: str, topic: str, release: bool) -> None:
        self.name = name
        self.log_path = workdir / f"{name}.jsonl"
        self.err_path = workdir / f"{name}.stderr"
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-X", "faulthandler", "-m", "tests.test_crash_support", bootstrap, group, topic,
                 str(self.log_path), "1" if release else "0"],
                cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err,
            )
        self.tail = LogTail(self.log_path)

    def stop(self, timeout_s: float = WAIT_S) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if not self.proc.stdin.closed:
            self.proc.stdin.close()

    def stderr_tail(self, n: int = 2000) -> str:
        return self.err_path.read_bytes()[-n:].decode(errors="replace")


# --- the judge ----------------------------------------------------------------------------------------


@dataclass
class History:
    """A run as the parent saw it.

    ``events``: every consumer event, each with ``who`` (the consumer) added. ``restarts``: for
    each broker restart, a time taken after the broker was killed *and* every consumer then polled
    empty, just before the broker was started again: a record polled after it was acquired by a
    later broker incarnation than any record polled before it. ``records``: the (partition,
    offset) of every produced record. ``forgotten``: records whose confirmed acceptance the test
    destroyed on purpose (a torn state tail); the finality rules skip them.
    """

    events: list[dict]
    restarts: list[int]
    records: set[Key]
    forgotten: set[Key] = field(default_factory=set)

    def incarnation(self, t: int) -> int:
        return bisect_right(self.restarts, t)


@dataclass
class Judgement:
    problems: list[str] = field(default_factory=list)
    confirmed_accepts: set[Key] = field(default_factory=set)
    in_doubt_accepts: set[Key] = field(default_factory=set)  # only ACCEPTs whose answer was lost
    delivered_after_restart: set[Key] = field(default_factory=set)  # by the last incarnation
    deliveries: int = 0
    max_delivery_count: int = 0
    released_and_redelivered: int = 0
    redelivered_across_a_crash: int = 0
    redelivered_across_a_crash_with_same_count: int = 0

    def fail(self, message: str) -> None:
        if len(self.problems) < 30:
            self.problems.append(message)

    def summary(self) -> str:
        return (f"{self.deliveries} deliveries (max count {self.max_delivery_count}), "
                f"{len(self.confirmed_accepts)} confirmed and {len(self.in_doubt_accepts)} in-doubt accepts, "
                f"{self.released_and_redelivered} releases redelivered, {self.redelivered_across_a_crash} "
                f"redeliveries across a crash ({self.redelivered_across_a_crash_with_same_count} with the same count)")


def judge(h: History) -> Judgement:
    """Check a run against what Kafka 4.2 guarantees (the crash-safety test's docstring says why).

    Rules that relate events of different consumers rely only on what a slow process cannot
    reorder: delivery counts, and broker incarnations bounded by ``History.restarts`` (an answer
    logged in incarnation i came from incarnation <= i; a record polled in incarnation j was
    acquired by incarnation >= j).
    """
    j = Judgement()
    deliveries: dict[Key, list[tuple[int, int, str]]] = defaultdict(list)  # (t, count, who)
    confirmed: dict[Key, list[tuple[int, str, int]]] = defaultdict(list)  # (count, kind, t)
    lost_accepts: set[Key] = set()
    last = len(h.restarts)
    for e in sorted(h.events, key=lambda e: e["t"]):
        if e["e"] == "d":
            key = (e["p"], e["o"])
            deliveries[key].append((e["t"], e["c"], e["who"]))
            if h.incarnation(e["t"]) == last and last:
                j.delivered_after_restart.add(key)
        elif e["e"] in ("ok", "err"):
            for o, kind, count in e["acks"]:
                key = (e["p"], o)
                if kind == "?":
                    j.fail(f"{key}: {e['who']} was told about an acknowledgement it never sent")
                elif e["e"] == "ok":
                    confirmed[key].append((count, kind, e["t"]))
                elif kind == "a" and LOST in e["x"]:
                    lost_accepts.add(key)
    j.deliveries = sum(map(len, deliveries.values()))
    j.max_delivery_count = max((c for seen in deliveries.values() for _, c, _ in seen), default=0)

    for key in sorted(set(deliveries) - h.records):
        j.fail(f"{key}: delivered but never produced")
    for key in sorted(h.records):
        acks = sorted(confirmed.get(key, []))
        accepts = [a for a in acks if a[1] == "a"]
        seen = deliveries.get(key, [])
        # Every record is accepted: with confirmation, or by an ACCEPT whose answer was lost with
        # the broker (it may have been applied, and then the record never comes back; the test
        # checks the broker's own state says nothing is left).
        if accepts:
            j.confirmed_accepts.add(key)
        elif key in lost_accepts:
            j.in_doubt_accepts.add(key)
        else:
            j.fail(f"{key}: never accepted: deliveries (count, consumer) {[(c, w) for _, c, w in seen]}, "
                   f"confirmed acknowledgements {[(c, k) for c, k, _ in acks]}")
        # A released record comes back with a higher delivery count: the release and its count
        # were written before the broker confirmed it.
        for count, kind, _ in acks:
            if kind == "r":
                if any(c > count for _, c, _ in seen):
                    j.released_and_redelivered += 1
                else:
                    j.fail(f"{key}: released at delivery count {count} with confirmation, never delivered "
                           f"again with a higher count: {[(c, w) for _, c, w in seen]}")
        for (t0, c0, _), (t1, c1, _) in pairwise(seen):
            if h.incarnation(t1) > h.incarnation(t0):
                j.redelivered_across_a_crash += 1
                j.redelivered_across_a_crash_with_same_count += c1 == c0
        if key in h.forgotten:
            continue
        # Confirmed acknowledgements are of ever later deliveries, so of strictly increasing
        # counts; an ACCEPT is final: at most one, the last, nothing delivered after it.
        counts = [c for c, _, _ in acks]
        if len(set(counts)) != len(counts):
            j.fail(f"{key}: two confirmed acknowledgements of deliveries with the same count: "
                   f"{[(c, k) for c, k, _ in acks]}")
        if len(accepts) > 1:
            j.fail(f"{key}: accepted {len(accepts)} times with confirmation: {[(c, k) for c, k, _ in acks]}")
        if accepts:
            count_a, _, t_a = accepts[0]
            if acks[-1][1] != "a":
                j.fail(f"{key}: an acknowledgement confirmed after its acceptance: {[(c, k) for c, k, _ in acks]}")
            higher = [(c, w) for _, c, w in seen if c > count_a]
            if higher:
                j.fail(f"{key}: accepted at delivery count {count_a}, then delivered at (count, consumer) {higher}")
            answered_by = h.incarnation(t_a)
            again = [(h.incarnation(t), c, w) for t, c, w in seen if h.incarnation(t) > answered_by]
            if again:
                j.fail(f"{key}: acceptance confirmed in broker incarnation {answered_by}, delivered again after "
                       f"a crash: (incarnation, count, consumer) {again}")
    return j


# --- a run --------------------------------------------------------------------------------------------


class Run:
    """A broker, a share group of consumer children on one topic, and their merged events."""

    def __init__(self, broker, workdir: Path, topic: str, group: str, records: set[Key], *,
                 consumers: int = 4, release: bool = True) -> None:
        self.broker = broker
        self.workdir = workdir
        self.topic = topic
        self.group = group
        self.release = release
        self.records = records  # the test adds to it as it produces
        self.events: list[dict] = []
        self.restarts: list[int] = []
        self.kills: list[int] = []
        self.forgotten: set[Key] = set()
        self.supply = None  # called while waiting (broker up): the test tops up the topic there
        self._confirmed_at: dict[str, list[int]] = {}
        self._idle_at: dict[str, list[int]] = {}
        self.children: list[ConsumerChild] = []
        for _ in range(consumers):
            self.add_consumer()

    def add_consumer(self) -> ConsumerChild:
        child = ConsumerChild(self.workdir, f"c{len(self.children)}", self.broker.bootstrap, self.group,
                              self.topic, self.release)
        self.children.append(child)
        self._confirmed_at[child.name] = []
        self._idle_at[child.name] = []
        return child

    @property
    def live(self) -> list[ConsumerChild]:
        return [c for c in self.children if c.proc.returncode is None]

    def pump(self) -> None:
        for child in self.children:
            if child.proc.returncode is None:
                assert child.proc.poll() is None, \
                    f"{child.name} exited ({child.proc.returncode}): {child.stderr_tail()}"
            for e in child.tail.read():
                e["who"] = child.name
                self.events.append(e)
                if e["e"] == "ok":
                    self._confirmed_at[child.name] += [e["t"]] * len(e["acks"])
                elif e["e"] == "idle":
                    self._idle_at[child.name].append(e["t"])

    def wait_for(self, what: str, done, timeout_s: float = WAIT_S, pace_s: float = 0.005) -> None:
        """Pump events until ``done()``; fails with ``what`` at the deadline."""
        deadline = time.monotonic() + timeout_s
        self.pump()
        while not done():
            assert time.monotonic() < deadline, f"{what}: not within {timeout_s}s"
            if self.supply is not None and self.broker.alive():
                self.supply()
            time.sleep(pace_s)  # the children write as they go; this only paces reading their logs
            self.pump()

    def confirmed_since(self, t: int) -> dict[str, int]:
        return {c.name: len(self._confirmed_at[c.name]) - bisect_right(self._confirmed_at[c.name], t)
                for c in self.live}

    def confirmed_total(self) -> int:
        return sum(map(len, self._confirmed_at.values()))

    def wait_until_every_consumer_confirms(self, since: int) -> None:
        self.wait_for("every consumer got acknowledgements confirmed",
                      lambda: all(self.confirmed_since(since).values()))

    def wait_until_confirmed(self, since: int, n: int) -> None:
        self.wait_for(f"{n} acknowledgements confirmed", lambda: sum(self.confirmed_since(since).values()) >= n)

    def kill(self) -> int:
        """SIGKILL the broker, then wait until every live consumer polled empty twice: nothing it
        fetched from the dead broker is left to hand out."""
        killed = time.monotonic_ns()
        self.broker.kill()
        self.kills.append(killed)
        self.wait_for("every consumer polled empty after the kill",
                      lambda: all(len(self._idle_at[c.name]) - bisect_right(self._idle_at[c.name], killed) >= 2
                                  for c in self.live))
        return killed

    def restart(self) -> int:
        self.restarts.append(time.monotonic_ns())
        self.broker.start()
        return self.restarts[-1]

    def history(self) -> History:
        return History(self.events, self.restarts, self.records, self.forgotten)

    def stop(self) -> None:
        for c in self.children:
            c.stop()
        self.pump()

    def kill_consumers(self) -> None:
        for c in self.children:
            c.kill()

    def diagnostics(self) -> str:
        return "\n".join(f"--- {c.name} stderr ---\n{c.stderr_tail()}" for c in self.children) + \
            f"\n--- broker log (tail) ---\n{self.broker.log()[-6000:]}"


if __name__ == "__main__":
    run_consumer(*sys.argv[1:6])
