"""Redelivery with real ShareConsumers: acquisition locks that expire, records released by
close(), a poison record archived at the delivery limit, and members that die or go silent
(consumers in subprocesses, SIGKILLed or SIGSTOPped)."""

from __future__ import annotations

import signal
import time

import pytest
from confluent_kafka import AcknowledgeType, KafkaError

from tests.test_e2e_share_support import (
    LOCK_S,
    SESSION_S,
    SHORT_LOCKS,
    SHORT_SESSIONS,
    TIMEOUT,
    ChildConsumer,
    create_topic,
    describe,
    earliest_group,
    has_values,
    keys,
    offsets,
    poll_until,
    private_consumers,
    produce,
    shared_consumers,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]


@pytest.fixture
def consumers(broker):
    yield from shared_consumers(broker)


@pytest.fixture
def private(broker_factory):
    yield from private_consumers(broker_factory)


DEFAULT_LOCK_S = 30.0  # group.share.record.lock.duration.ms default
DELIVERY_LIMIT = 5  # group.share.delivery.count.limit default


def test_lock_expiry_redelivers_to_another_consumer(private, topic_name):
    """A polls and never acknowledges; once the 1 s locks expire B receives the same records
    with delivery count 2 (and not before the lock duration has passed)."""
    cs = private(SHORT_LOCKS)
    bootstrap = cs.broker.bootstrap
    create_topic(bootstrap, topic_name)
    group = earliest_group(bootstrap)
    produce(bootstrap, topic_name, [f"v{i}".encode() for i in range(5)])
    a = cs.new(group, topic_name, explicit=True)
    got_a = poll_until(a, lambda got: len(got) >= 5)
    acquired_at = time.monotonic()
    assert [(m.offset(), m.delivery_count()) for m in got_a] == [(o, 1) for o in range(5)]

    b = cs.new(group, topic_name, explicit=True)
    got_b = poll_until(b, lambda got: len(got) >= 5)
    waited = time.monotonic() - acquired_at
    assert [(m.offset(), m.value(), m.delivery_count()) for m in got_b] == [
        (m.offset(), m.value(), 2) for m in got_a]
    assert waited >= LOCK_S * 0.9, f"redelivered after {waited:.2f}s, before the lock expired"

    # A's acknowledgements come too late: B holds the records now. commit_sync reports the
    # partition's INVALID_RECORD_STATE; B's own acknowledgements succeed.
    for m in got_a:
        a.acknowledge(m)
    result = a.commit_sync(TIMEOUT)
    assert list((tp.topic, tp.partition) for tp in result) == [(topic_name, 0)], result
    (err,) = result.values()
    assert err is not None and err.args[0].code() == KafkaError.INVALID_RECORD_STATE, err
    for m in got_b:
        b.acknowledge(m)
    result = b.commit_sync(TIMEOUT)
    assert {(tp.topic, tp.partition): e for tp, e in result.items()} == {(topic_name, 0): None}


def test_close_releases_acquired_records(broker, consumers, topic_name):
    """close() gives back what the consumer still holds: another consumer gets those records at
    once (delivery count 2), long before their 30 s locks would expire."""
    create_topic(broker.bootstrap, topic_name)
    group = earliest_group(broker.bootstrap)
    produce(broker.bootstrap, topic_name, [f"v{i}".encode() for i in range(6)])
    a = consumers.new(group, topic_name, explicit=True)
    got_a = poll_until(a, lambda got: len(got) >= 6)
    assert {m.delivery_count() for m in got_a} == {1}
    closed_at = time.monotonic()
    consumers.close(a)

    b = consumers.new(group, topic_name, explicit=True)
    got_b = poll_until(b, lambda got: len(got) >= 6, timeout=DEFAULT_LOCK_S / 3, on_message=lambda m: b.acknowledge(m))
    assert [(m.offset(), m.delivery_count()) for m in got_b] == [(o, 2) for o in range(6)]
    assert time.monotonic() - closed_at < DEFAULT_LOCK_S / 3


def test_acknowledgements_committed_by_close_are_not_lost(broker, consumers, topic_name):
    """Explicit mode, acknowledge then close() without commit: close commits the ACCEPTs (the
    commit callback reports no error) and the next consumer never sees those records again.
    Repeated, because the failure depends on which of two connections the broker serves first."""
    create_topic(broker.bootstrap, topic_name)
    group = earliest_group(broker.bootstrap)
    deadline = time.monotonic() + 10
    for rnd in range(150):
        if time.monotonic() > deadline:
            break
        values = {f"r{rnd}-{i}".encode() for i in range(3)}
        produce(broker.bootstrap, topic_name, sorted(values))
        c = consumers.new(group, topic_name, explicit=True)
        results = []
        c.set_acknowledgement_commit_callback(lambda offsets_by_tp, exc: results.append(exc))
        got = poll_until(c, has_values(values), on_message=lambda m: c.acknowledge(m))
        assert [m.delivery_count() for m in got] == [1] * len(got), f"round {rnd}: redelivered {describe(got)}"
        consumers.close(c)
        assert results and results == [None] * len(results), f"round {rnd}: close's acknowledgements failed: {results}"


def test_released_records_of_big_batches_are_redelivered_intact(broker, consumers, topic_name):
    """Every 10th record of ~220 KB of batches is released on first delivery. The broker sends
    them back in cut copies of their batches (only the released records); the consumer gets
    each with delivery count 2 and its own key, value, headers and timestamp, and every record
    is accepted exactly once."""
    create_topic(broker.bootstrap, topic_name)
    group = earliest_group(broker.bootstrap)
    n = 2000
    t0 = int(time.time() * 1000) - 3_600_000  # within retention: older segments may go at any pass
    sent = {o: (b"k%d" % o, b"%05d" % o + b"." * 100, [("h", b"%d" % o)], t0 + o)
            for o in range(n)}
    produce(broker.bootstrap, topic_name, sent.values(), one_per_batch=False)
    c = consumers.new(group, topic_name, explicit=True)
    accepted, redelivered = [], []

    def on_message(m):
        if m.offset() % 10 == 0 and m.delivery_count() == 1:
            c.acknowledge(m, AcknowledgeType.RELEASE)
            return
        if m.delivery_count() > 1:
            redelivered.append(m)
        c.acknowledge(m, AcknowledgeType.ACCEPT)
        accepted.append(m.offset())

    deadline = time.monotonic() + TIMEOUT
    while len(accepted) < n:
        assert time.monotonic() < deadline, f"{len(accepted)} of {n} accepted"
        for m in c.poll(0.2):
            assert m.error() is None, m.error()
            on_message(m)
        c.commit_sync(TIMEOUT)
    assert sorted(accepted) == list(range(n))
    assert [(m.offset(), m.delivery_count()) for m in redelivered] == [(o, 2) for o in range(0, n, 10)]
    for m in redelivered:
        assert (m.key(), m.value(), m.headers(), m.timestamp()[1]) == sent[m.offset()]


def test_poison_record_archived_after_delivery_limit(broker, consumers, topic_name):
    """A record released on every delivery is delivered 5 times (counts 1..5), then archived:
    never delivered again, while the records after it keep flowing."""
    create_topic(broker.bootstrap, topic_name)
    group = earliest_group(broker.bootstrap)
    produce(broker.bootstrap, topic_name, [b"poison", b"good-0"])
    c = consumers.new(group, topic_name, explicit=True)
    poison_counts: list[int] = []
    good: list = []

    def handle(m) -> None:
        if m.value() == b"poison":
            poison_counts.append(m.delivery_count())
            c.acknowledge(m, AcknowledgeType.RELEASE)
        else:
            good.append(m)
            c.acknowledge(m, AcknowledgeType.ACCEPT)

    poll_until(c, lambda _: len(poison_counts) >= DELIVERY_LIMIT, on_message=handle)
    assert poison_counts == list(range(1, DELIVERY_LIMIT + 1))

    later = [f"good-{i}".encode() for i in range(1, 6)]
    produce(broker.bootstrap, topic_name, later)
    poll_until(c, lambda _: {m.value() for m in good} >= {b"good-0", *later}, on_message=handle)
    assert poison_counts == list(range(1, DELIVERY_LIMIT + 1)), "the archived record came back"
    assert sorted(offsets(good)) == list(range(1, 7))
    assert all(err is None for err in c.commit_sync(TIMEOUT).values())
    consumers.close(c)

    # A new member of the group does not get it either.
    d = consumers.new(group, topic_name, explicit=True)
    produce(broker.bootstrap, topic_name, [b"marker"])
    seen = poll_until(d, has_values({b"marker"}), on_message=lambda m: d.acknowledge(m))
    assert [m.value() for m in seen] == [b"marker"], describe(seen)


def _records_come_back(cs, group: str, topic: str, n: int, child_got, since: float) -> None:
    """A fresh consumer receives all ``n`` records exactly once; those the child had are on
    their second delivery; all well before the 30 s locks expire."""
    b = cs.new(group, topic, explicit=True)
    got = poll_until(b, lambda got: len(got) >= n, timeout=DEFAULT_LOCK_S / 2, on_message=lambda m: b.acknowledge(m))
    assert sorted(keys(got)) == [(0, o) for o in range(n)], describe(got)
    counts = {m.offset(): m.delivery_count() for m in got}
    for _, offset, _ in child_got:
        assert counts[offset] == 2, describe(got)
    assert time.monotonic() - since < DEFAULT_LOCK_S / 2


def test_killed_member_records_come_back(private, topic_name):
    """A consumer process killed with SIGKILL (no leave, no close) holds records; they come back
    to another consumer with delivery count 2, long before their 30 s locks expire."""
    cs = private(SHORT_SESSIONS)
    bootstrap = cs.broker.bootstrap
    create_topic(bootstrap, topic_name)
    group = earliest_group(bootstrap)
    n = 8
    produce(bootstrap, topic_name, [f"v{i}".encode() for i in range(n)])
    child = ChildConsumer(bootstrap, group, topic_name)
    try:
        child_got = child.received()
        assert child_got and all(count == 1 for _, _, count in child_got), child_got
        child.proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        child.proc.wait(TIMEOUT)
        _records_come_back(cs, group, topic_name, n, child_got, killed_at)
    finally:
        child.kill()


def test_silent_member_is_removed_and_its_records_come_back(private, topic_name):
    """A consumer process frozen with SIGSTOP keeps its connection open but stops heartbeating.
    After the 1.5 s session timeout it is removed: the partition it was assigned goes to the
    other member, which then receives everything, including the records the frozen member held
    (delivery count 2; back at the latest when their 2 s locks expire), each exactly once."""
    cs = private({**SHORT_SESSIONS, "group.share.record.lock.duration.ms": "2000",
                  "group.share.min.record.lock.duration.ms": "1000"})
    bootstrap = cs.broker.bootstrap
    create_topic(bootstrap, topic_name, partitions=2)
    group = earliest_group(bootstrap)
    for p in range(2):
        produce(bootstrap, topic_name, [f"before-{p}-{i}".encode() for i in range(4)], partition=p)
    child = ChildConsumer(bootstrap, group, topic_name)  # alone in the group: both partitions
    try:
        child_got = child.received()
        assert child_got and all(count == 1 for _, _, count in child_got), child_got
        child.proc.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()

        # While the frozen member counts, the assignor gives each member one partition; the
        # records produced now on the frozen member's partition reach b only once it is removed.
        b = cs.new(group, topic_name, explicit=True)
        for p in range(2):
            produce(bootstrap, topic_name, [f"after-{p}-{i}".encode() for i in range(4)], partition=p)
        got = poll_until(b, lambda got: len(got) >= 16, on_message=lambda m: b.acknowledge(m))
        assert sorted(keys(got)) == [(p, o) for p in range(2) for o in range(8)], describe(got)
        counts = {(m.partition(), m.offset()): m.delivery_count() for m in got}
        for p, o, _ in child_got:
            assert counts[(p, o)] == 2, describe(got)
        assert time.monotonic() - stopped_at >= SESSION_S * 0.9, "the frozen member's partition moved too early"
        assert all(err is None for err in b.commit_sync(TIMEOUT).values())
    finally:
        child.kill()
