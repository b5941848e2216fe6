"""Share groups end to end with real confluent-kafka ShareConsumers (librdkafka 2.16) on the
shared broker: record contents, implicit and explicit acknowledgement, commit_sync / commit_async
results, share.auto.offset.reset and independent groups.

Absence ("never redelivered") is checked by producing a later marker record and polling until it
arrives: a record still available below the marker would be acquired no later than the marker.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    AcknowledgeType,
    Consumer,
    IllegalStateException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tests.raw_client import RawClient
from tests.test_e2e_share_support import (
    LOCK_S,
    SHORT_LOCKS,
    SHORT_SESSIONS,
    TIMEOUT,
    create_topic,
    describe,
    earliest_group,
    has_values,
    keys,
    members_of,
    offsets,
    poll_for,
    poll_until,
    private_consumers,
    produce,
    set_group_configs,
    shared_consumers,
    unique_group,
)
from tests.test_share_admin_rpcs import offsets as group_offsets
from tests.test_share_admin_rpcs import rows

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]


@pytest.fixture
def consumers(broker):
    yield from shared_consumers(broker)


@pytest.fixture
def private(broker_factory):
    yield from private_consumers(broker_factory)


T0 = int(time.time() * 1000) - 3_600_000


def only_marker(consumer, bootstrap: str, topic: str, marker: bytes, *, ack: bool = False) -> list:
    """Produce ``marker`` and poll until it arrives; returns everything polled on the way."""
    produce(bootstrap, topic, [marker])
    on_message = (lambda m: consumer.acknowledge(m)) if ack else None
    return poll_until(consumer, has_values({marker}), on_message=on_message)


def test_records_arrive_intact(broker, consumers, topic_name):
    """Keys, values, headers (empty and null values, repeated names) and create timestamps come
    through unchanged, every message is a record (error() is None) on its first delivery."""
    create_topic(broker.bootstrap, topic_name)
    sent = []
    for i in range(30):
        key = None if i % 7 == 0 else b"" if i % 7 == 1 else f"k{i}".encode()
        value = None if i % 11 == 5 else b"" if i % 11 == 6 else (f"v{i}-".encode() * (i % 4 + 1))
        headers = [("h", f"{i}".encode()), ("empty", b""), ("null", None), ("h", b"again")] if i % 3 == 0 else []
        sent.append((key, value, headers, T0 + i * 1000))
    produce(broker.bootstrap, topic_name, sent[:10])  # one record per batch
    produce(broker.bootstrap, topic_name, sent[10:], one_per_batch=False)  # larger batches
    c = consumers.new(earliest_group(broker.bootstrap), topic_name)
    got = poll_until(c, lambda got: len(got) >= len(sent))
    assert offsets(got) == list(range(len(sent)))
    for m, (key, value, headers, ts) in zip(got, sent):
        assert m.error() is None
        assert (m.topic(), m.partition()) == (topic_name, 0)
        assert m.key() == key and m.value() == value, m.offset()
        assert (m.headers() or []) == headers, m.offset()
        assert m.timestamp() == (TIMESTAMP_CREATE_TIME, ts), m.offset()
        assert m.delivery_count() == 1


def test_implicit_mode_accepts_on_next_poll(private, topic_name):
    """Implicit mode: the next poll accepts what the previous one returned, so nothing comes back
    when the (1 s) locks would have expired, and a new consumer in the group after close() sees
    only what is produced afterwards. commit_sync() accepts the last poll's records too.

    (librdkafka 2.16's close() alone does not accept the last poll's records: its closing
    ShareAcknowledge carries no acknowledgements, so they are released and redelivered; that
    is client behaviour, hence the poll / commit_sync before close here.)"""
    cs = private(SHORT_LOCKS)
    bootstrap = cs.broker.bootstrap
    create_topic(bootstrap, topic_name)
    group = earliest_group(bootstrap)
    produce(bootstrap, topic_name, [f"a{i}".encode() for i in range(10)])
    fast = {"fetch.wait.max.ms": 100}  # acknowledgements ride on the next ShareFetch
    a = cs.new(group, topic_name, extra=fast)
    first = poll_until(a, lambda got: len(got) >= 10)
    assert offsets(first) == list(range(10))
    again = poll_for(a, 2.5 * LOCK_S)  # would hold lock-expiry redeliveries
    assert again == [], describe(again)

    produce(bootstrap, topic_name, [f"b{i}".encode() for i in range(5)])
    second = poll_until(a, lambda got: len(got) >= 5)
    assert offsets(second) == list(range(10, 15))
    result = a.commit_sync(TIMEOUT)  # accepts the last poll's records
    assert {(tp.topic, tp.partition): err for tp, err in result.items()} == {(topic_name, 0): None}
    cs.close(a)
    b = cs.new(group, topic_name, extra=fast)
    seen = only_marker(b, bootstrap, topic_name, b"marker")
    assert offsets(seen) == [15], describe(seen)
    assert poll_for(b, 2.5 * LOCK_S) == []
    cs.close(b)  # b's last poll was accepted by the polls that followed it

    c = cs.new(group, topic_name, extra=fast)
    seen = only_marker(c, bootstrap, topic_name, b"marker2")
    assert offsets(seen) == [16], describe(seen)


def test_explicit_accept_release_reject(broker, consumers, topic_name):
    """Explicit mode: RELEASE redelivers (delivery count 2), ACCEPT and REJECT never come back,
    neither to this consumer nor to a later one; commit_sync reports the partition without error."""
    create_topic(broker.bootstrap, topic_name)
    group = earliest_group(broker.bootstrap)
    produce(broker.bootstrap, topic_name, [b"accept", b"release", b"reject"])
    a = consumers.new(group, topic_name, explicit=True)
    got = poll_until(a, lambda got: len(got) >= 3)
    assert [(m.offset(), m.value(), m.delivery_count()) for m in got] == [
        (0, b"accept", 1), (1, b"release", 1), (2, b"reject", 1)]
    a.acknowledge(got[0], AcknowledgeType.ACCEPT)
    a.acknowledge(got[1], AcknowledgeType.RELEASE)
    a.acknowledge_offset(topic_name, 0, 2, AcknowledgeType.REJECT)
    result = a.commit_sync(TIMEOUT)
    assert {(tp.topic, tp.partition): err for tp, err in result.items()} == {(topic_name, 0): None}

    back = poll_until(a, lambda got: len(got) >= 1, on_message=lambda m: a.acknowledge(m))
    assert [(m.offset(), m.delivery_count()) for m in back] == [(1, 2)]
    assert all(err is None for err in a.commit_sync(TIMEOUT).values())
    seen = only_marker(a, broker.bootstrap, topic_name, b"m1", ack=True)
    assert offsets(seen) == [3], describe(seen)
    assert all(err is None for err in a.commit_sync(TIMEOUT).values())
    consumers.close(a)

    b = consumers.new(group, topic_name, explicit=True)
    seen = only_marker(b, broker.bootstrap, topic_name, b"m2", ack=True)
    assert offsets(seen) == [4], describe(seen)


def test_explicit_poll_requires_acknowledging_first(broker, consumers, topic_name):
    """librdkafka's own rule, here as a guard that the explicit tests really run in explicit mode."""
    create_topic(broker.bootstrap, topic_name)
    produce(broker.bootstrap, topic_name, [b"x"])
    c = consumers.new(earliest_group(broker.bootstrap), topic_name, explicit=True)
    poll_until(c, lambda got: len(got) >= 1)
    with pytest.raises(IllegalStateException):
        c.poll(0.1)


def test_commit_sync_reports_each_partition(broker, consumers, topic_name):
    """commit_sync after each poll returns one entry per partition that poll's records came from,
    each without error, and the accepted records are not delivered again."""
    create_topic(broker.bootstrap, topic_name, partitions=3)
    group = earliest_group(broker.bootstrap)
    for p in range(3):
        produce(broker.bootstrap, topic_name, [f"p{p}-{i}".encode() for i in range(4)], partition=p)
    c = consumers.new(group, topic_name, explicit=True)
    got: list = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < 12:
        assert time.monotonic() < deadline, describe(got)
        batch = list(c.poll(0.2))
        if not batch:
            continue
        for m in batch:
            assert m.error() is None, m.error()
            c.acknowledge(m)
        result = c.commit_sync(TIMEOUT)
        assert {(tp.topic, tp.partition): err for tp, err in result.items()} == {
            (topic_name, m.partition()): None for m in batch}
        got += batch
    assert sorted(keys(got)) == [(p, o) for p in range(3) for o in range(4)]

    consumers.close(c)
    b = consumers.new(group, topic_name, explicit=True)
    markers = {f"marker-{p}".encode() for p in range(3)}
    for p in range(3):
        produce(broker.bootstrap, topic_name, [f"marker-{p}".encode()], partition=p)
    seen = poll_until(b, has_values(markers), on_message=lambda m: b.acknowledge(m))
    assert sorted(m.value() for m in seen) == sorted(markers), describe(seen)


def test_commit_async_calls_back_with_offsets(broker, consumers, topic_name):
    """commit_async returns at once; the callback (run from a later poll) reports, per partition,
    exactly the acknowledged offsets, without an exception."""
    create_topic(broker.bootstrap, topic_name, partitions=2)
    group = earliest_group(broker.bootstrap)
    for p in range(2):
        produce(broker.bootstrap, topic_name, [f"p{p}-{i}".encode() for i in range(3)], partition=p)
    c = consumers.new(group, topic_name, explicit=True)
    calls = []
    c.set_acknowledgement_commit_callback(lambda offsets, exc: calls.append((offsets, exc)))
    got = poll_until(c, lambda got: len(got) >= 6)
    for m in got:
        c.acknowledge(m, AcknowledgeType.ACCEPT)
    assert c.commit_async() is None

    def reported() -> dict:
        out: dict = {}
        for offsets_by_tp, _ in calls:
            for tp, offs in offsets_by_tp.items():
                out.setdefault((tp.topic, tp.partition), set()).update(offs)
        return out

    deadline = time.monotonic() + TIMEOUT
    while reported() != {(topic_name, 0): {0, 1, 2}, (topic_name, 1): {0, 1, 2}}:
        assert time.monotonic() < deadline, f"callback reported {reported()} ({calls})"
        assert len(c.poll(0.2)) == 0  # serves the callback; nothing new was produced
    assert [exc for _, exc in calls] == [None] * len(calls)
    assert all(isinstance(tp, TopicPartition) for offsets_by_tp, _ in calls for tp in offsets_by_tp)


def test_two_groups_each_receive_everything(broker, consumers, topic_name):
    """Share groups are independent: each group gets every record exactly once."""
    create_topic(broker.bootstrap, topic_name, partitions=2)
    values = [f"v{i}".encode() for i in range(40)]
    for p in range(2):
        produce(broker.bootstrap, topic_name, values[p::2], partition=p)
    per_group = []
    for _ in range(2):
        c = consumers.new(earliest_group(broker.bootstrap), topic_name)
        per_group.append(poll_until(c, has_values(set(values))))
    for got in per_group:
        assert sorted(m.value() for m in got) == sorted(values), describe(got)
        assert len(set(keys(got))) == len(got) == len(values)
        assert {m.delivery_count() for m in got} == {1}


def test_auto_offset_reset_earliest_and_latest(broker, consumers, topic_name):
    """Records produced before a group's first fetch reach it only with share.auto.offset.reset
    =earliest; with the default (latest) it starts at the end of the log."""
    create_topic(broker.bootstrap, topic_name)
    before = [f"before-{i}".encode() for i in range(10)]
    produce(broker.bootstrap, topic_name, before)

    latest = consumers.new(unique_group(), topic_name)  # no group config: latest
    # The group starts at the log end when it first fetches; keep producing until it sees one.
    after, got_latest = [], []
    deadline = time.monotonic() + TIMEOUT
    while not got_latest:
        assert time.monotonic() < deadline, "the latest group never received a record"
        after.append(f"after-{len(after)}".encode())
        produce(broker.bootstrap, topic_name, after[-1:])
        got_latest += poll_for(latest, 0.3)
    got_latest += poll_until(latest, lambda got: after[-1] in {m.value() for m in got_latest + got})
    assert not {m.value() for m in got_latest} & set(before), describe(got_latest)
    assert all(m.offset() >= len(before) for m in got_latest)

    earliest = consumers.new(earliest_group(broker.bootstrap), topic_name)
    got = poll_until(earliest, has_values(set(before) | set(after)))
    assert sorted(offsets(got)) == list(range(len(before) + len(after)))


def test_auto_offset_reset_by_duration(broker, consumers, topic_name):
    """share.auto.offset.reset=by_duration:PT1H starts at the first record at most an hour old;
    a group whose window holds no record gets nothing, and starts at the next record produced."""
    now = int(time.time() * 1000)
    old = [(None, f"old-{i}".encode(), None, now - 7_200_000) for i in range(3)]
    create_topic(broker.bootstrap, topic_name)
    produce(broker.bootstrap, topic_name, old + [(None, f"new-{i}".encode(), None, now - 60_000) for i in range(3)])
    group = unique_group()
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "by_duration:PT1H"})
    c = consumers.new(group, topic_name)
    got = poll_until(c, has_values({b"new-0", b"new-1", b"new-2"}))
    assert sorted(offsets(got)) == [3, 4, 5]

    other = f"{topic_name}-old"
    create_topic(broker.bootstrap, other)
    produce(broker.bootstrap, other, old)
    group = unique_group()
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "by_duration:PT1H"})
    c = consumers.new(group, other)
    got = only_marker(c, broker.bootstrap, other, b"marker")
    assert [(m.offset(), m.value()) for m in got] == [(3, b"marker")]


def test_per_record_acknowledgements_inside_compressed_batches(broker, consumers, topic_name):
    """One lz4 batch of 20 records: accepting the even offsets and releasing the odd ones
    redelivers exactly the odd ones (the broker sends whole batches, the acquired ranges say which
    records count); rejecting some of those and accepting the rest leaves nothing to deliver."""
    create_topic(broker.bootstrap, topic_name)
    group = earliest_group(broker.bootstrap)
    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "lz4", "linger.ms": 100, "log_level": 3})
    for i in range(20):
        p.produce(topic_name, value=f"v{i}".encode(), key=f"k{i}".encode())
    assert p.flush(TIMEOUT) == 0
    c = consumers.new(group, topic_name, explicit=True)

    def accept_even(m) -> None:
        c.acknowledge(m, AcknowledgeType.ACCEPT if m.offset() % 2 == 0 else AcknowledgeType.RELEASE)

    first = poll_until(c, lambda got: len(got) >= 20, on_message=accept_even)
    assert [(m.offset(), m.value(), m.delivery_count()) for m in first] == [(i, f"v{i}".encode(), 1) for i in range(20)]

    def reject_some(m) -> None:
        c.acknowledge(m, AcknowledgeType.ACCEPT if m.offset() % 4 == 1 else AcknowledgeType.REJECT)

    second = poll_until(c, lambda got: len(got) >= 10, on_message=reject_some)
    assert [(m.offset(), m.key(), m.delivery_count()) for m in second] == [
        (i, f"k{i}".encode(), 2) for i in range(1, 20, 2)]
    assert all(err is None for err in c.commit_sync(TIMEOUT).values())
    seen = only_marker(c, broker.bootstrap, topic_name, b"marker", ack=True)
    assert offsets(seen) == [20], describe(seen)


def test_subscription_to_a_topic_created_later(broker, consumers, topic_name):
    """A consumer subscribed before its topic exists starts receiving once it is created."""
    c = consumers.new(earliest_group(broker.bootstrap), topic_name)
    assert len(c.poll(0.5)) == 0
    create_topic(broker.bootstrap, topic_name, partitions=2)
    produce(broker.bootstrap, topic_name, [b"p0"], partition=0)
    produce(broker.bootstrap, topic_name, [b"p1"], partition=1)
    got = poll_until(c, has_values({b"p0", b"p1"}))
    assert sorted(keys(got)) == [(0, 0), (1, 0)]


def assignments(bootstrap: str, group: str) -> list[dict[str, list[int]]]:
    return [{t.topic_name: sorted(t.partitions) for t in m.assignment.topic_partitions}
            for m in members_of(bootstrap, group)]


def test_resubscribing_moves_the_assignment_and_unsubscribing_leaves(broker, consumers, topic_name):
    """subscribe() to another topic moves the member's assignment there: records produced to the
    old topic afterwards stay for the group. unsubscribe() leaves the group, and subscribing
    again rejoins it and gets those records on their first delivery."""
    bootstrap = broker.bootstrap
    other = f"{topic_name}-other"
    create_topic(bootstrap, topic_name)
    create_topic(bootstrap, other)
    group = earliest_group(bootstrap)
    produce(bootstrap, topic_name, [b"a0"])
    c = consumers.new(group, topic_name)
    poll_until(c, has_values({b"a0"}))

    c.subscribe([other])
    produce(bootstrap, other, [b"b0"])
    poll_until(c, has_values({b"b0"}))
    assert assignments(bootstrap, group) == [{other: [0]}]
    produce(bootstrap, topic_name, [b"a1"])
    got = only_marker(c, bootstrap, other, b"b1")
    assert [m.value() for m in got] == [b"b1"]

    c.unsubscribe()
    deadline = time.monotonic() + TIMEOUT
    while members_of(bootstrap, group):  # the leave heartbeat goes out in the background
        assert time.monotonic() < deadline, assignments(bootstrap, group)
        time.sleep(0.05)
    c.subscribe([topic_name])
    got = poll_until(c, has_values({b"a1"}))
    assert [(m.value(), m.delivery_count()) for m in got] == [(b"a1", 1)]


def test_share_state_survives_a_broker_restart(private, topic_name):
    """After a graceful restart the group resumes where it was: accepted records stay done,
    released ones come back (delivery count 2), and the group's earliest reset still holds."""
    cs = private({})
    bootstrap = cs.broker.bootstrap
    create_topic(bootstrap, topic_name)
    group = earliest_group(bootstrap)
    produce(bootstrap, topic_name, [f"v{i}".encode() for i in range(10)])
    a = cs.new(group, topic_name, explicit=True)
    poll_until(a, lambda got: len(got) >= 10,
               on_message=lambda m: a.acknowledge(m, AcknowledgeType.ACCEPT if m.offset() < 6 else AcknowledgeType.RELEASE))
    assert all(err is None for err in a.commit_sync(TIMEOUT).values())
    cs.close_all()

    cs.broker.restart()
    b = cs.new(group, topic_name, explicit=True)
    seen = only_marker(b, bootstrap, topic_name, b"marker", ack=True)
    assert [(m.offset(), m.delivery_count()) for m in seen] == [(6, 2), (7, 2), (8, 2), (9, 2), (10, 1)], describe(seen)


def test_partitions_added_and_topics_deleted_while_consuming(private, topic_name):
    """Partitions added to a subscribed topic bump the group epoch (again once their share
    state is initialised), so a running consumer is assigned them at a later heartbeat;
    deleting one of its topics leaves it consuming the other without errors."""
    cs = private(SHORT_SESSIONS)  # 200 ms heartbeats: the new assignment arrives quickly
    bootstrap = cs.broker.bootstrap
    other = f"{topic_name}-other"
    create_topic(bootstrap, topic_name)
    create_topic(bootstrap, other)
    group = earliest_group(bootstrap)
    produce(bootstrap, topic_name, [b"a0"], partition=0)
    produce(bootstrap, other, [b"o0"])
    c = cs.new(group, [topic_name, other])
    poll_until(c, has_values({b"a0", b"o0"}))

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_partitions([NewPartitions(topic_name, 3)])[topic_name].result(TIMEOUT)
    produce(bootstrap, topic_name, [b"a1"], partition=1)
    produce(bootstrap, topic_name, [b"a2"], partition=2)
    got = poll_until(c, has_values({b"a1", b"a2"}))
    assert sorted(keys(got)) == [(1, 0), (2, 0)]

    admin.delete_topics([other])[other].result(TIMEOUT)
    produce(bootstrap, topic_name, [b"a3"], partition=0)
    got = poll_until(c, has_values({b"a3"}))  # fails on any error message the deletion causes
    assert [(m.topic(), m.partition(), m.offset()) for m in got] == [(topic_name, 0, 1)]


def test_retention_deletes_records_a_group_has_in_flight(private, topic_name):
    """Retention moves the log start past records a consumer holds and one it released: the held
    record's acceptance still commits cleanly (Kafka skips acknowledgements below the start
    offset), the released one is archived rather than redelivered, and the group goes on from
    the new log start with no lag left."""
    cs = private({"log.retention.check.interval.ms": "100", "log.initial.task.delay.ms": "100"})
    bootstrap = cs.broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    # segment.ms=1: the next append rolls the segment, which then expires at once (old timestamps)
    admin.create_topics([NewTopic(topic_name, 1, 1, config={"segment.ms": "1", "retention.ms": "60000"})]
                        )[topic_name].result(TIMEOUT)
    produce(bootstrap, topic_name, [(None, f"a{i}".encode(), None, T0) for i in range(4)], one_per_batch=False)
    group = earliest_group(bootstrap)
    c = cs.new(group, topic_name, explicit=True)
    held = poll_until(c, lambda got: len(got) >= 4)
    for m in held[:2]:
        c.acknowledge(m, AcknowledgeType.ACCEPT)
    c.acknowledge(held[2], AcknowledgeType.RELEASE)
    assert all(tp.error is None for tp in c.commit_sync(TIMEOUT))

    produce(bootstrap, topic_name, [f"b{i}".encode() for i in range(3)], one_per_batch=False)
    watermarks = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks", "log_level": 3})
    try:
        deadline = time.monotonic() + TIMEOUT
        while watermarks.get_watermark_offsets(TopicPartition(topic_name, 0), TIMEOUT)[0] != 4:
            assert time.monotonic() < deadline, "retention never deleted the first segment"
            time.sleep(0.05)
    finally:
        watermarks.close()

    c.acknowledge(held[3], AcknowledgeType.ACCEPT)
    assert all(tp.error is None for tp in c.commit_sync(TIMEOUT))
    got = poll_until(c, lambda got: len(got) >= 3, on_message=lambda m: c.acknowledge(m, AcknowledgeType.ACCEPT))
    assert [(m.offset(), m.value(), m.delivery_count()) for m in got] == [
        (4, b"b0", 1), (5, b"b1", 1), (6, b"b2", 1)]
    assert all(tp.error is None for tp in c.commit_sync(TIMEOUT))
    with RawClient(bootstrap) as client:
        ((_start, _epoch, lag, error),) = rows(group_offsets(client, group, {topic_name: [0]})).values()
    assert (lag, error) == (0, 0)
