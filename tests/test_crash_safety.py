"""Crash safety of durable share groups: kill -9 of a subprocess broker (``log.flush.interval.messages=1``)
at seeded random points of a run of four ShareConsumer subprocesses, and a torn
``__share_group_state`` tail after a crash.

How the issue's sentences map to assertions (Kafka 4.2 semantics, which kshare copies):

* "After each restart every record is eventually accepted": at the end the broker's share state
  (ReadShareGroupStateSummary) has nothing left on either partition, no delivery came near the
  delivery-count limit (so nothing was archived rather than accepted), and every record has an
  ACCEPT confirmed to a consumer or an ACCEPT whose answer was lost when the broker died
  (``_TRANSPORT``: it may have been applied, and then the record rightly never comes back).
* "No record whose acknowledgement was confirmed to the client is delivered again": an accepted
  record is never polled in a broker incarnation after the one that confirmed the acceptance, no
  confirmed acknowledgement of it follows the acceptance, and none of its deliveries has a higher
  delivery count than the accepted one. Confirmed acknowledgements of one record are of ever later
  deliveries (strictly increasing counts). Within one incarnation a consumer may still poll a copy
  it fetched before its lock expired and another consumer accepted the record; the broker refuses
  that copy's acknowledgement, which is what is checked there.
* "Unacknowledged records come back with a higher delivery count": a record released with
  confirmation (the first delivery of about one record in ten) comes back with a higher count,
  because the release and its count are written before the broker answers. Kafka does not persist
  acquisitions: a record that was only acquired when the broker died comes back with the *same*
  count as the lost delivery (the last persisted count + 1). Such redeliveries are counted (every
  kill lands while consumers hold records, so there are many) but not required to be higher.
* "The group still exists and consumers rejoin": after every restart each of the four consumers
  gets acknowledgements confirmed again before the next kill, and ``__consumer_offsets`` holds the
  group, never deleted, with exactly four member ids ever (each consumer came back as the same
  member) and share-group epochs that never go backwards.
* "A torn tail in ``__share_group_state`` is truncated and state is rebuilt from what remains":
  after a kill -9, each state partition of the group is cut in the middle of its last
  acknowledgement write that covers a confirmed acceptance (dropping the writes after it). The
  broker cuts the partial batch off at start-up; the state read back has none of that write's
  acknowledgements but every acceptance confirmed before it; exactly the confirmed acceptances it
  lost are delivered again, and new consumers finish the topic.

Kill points come from a seeded ``random.Random`` (printed on failure; ``KSHARE_CRASH_SEED``
overrides it): a random number of confirmed acknowledgements after every consumer is back, so kills
land while records are held and acknowledgements are in flight. Before each restart every consumer
has polled empty after the kill, so anything polled after the restart was acquired by the new
broker (see ``History``).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from coordinator.group.offsets_topic import partition_for as offsets_partition_for
from coordinator.share.routing import partition_for as state_partition_for
from protocol import coordinator_serde as serde
from protocol.coordinator_records.share_update_key import ShareUpdateKey
from protocol.records import iter_records, walk_headers
from tests.raw_client import RawClient
from tests.test_crash_support import WAIT_S, History, Key, Run, judge
from tests.test_e2e_share_support import set_group_configs, unique_group
from tests.test_group_persistence_wire import read_partition
from tests.test_share_state_support import (
    ACKNOWLEDGED,
    STATE_TOPIC,
    by_partition,
    create_topic,
    read_state,
    summary,
)

SEED = int(os.environ.get("KSHARE_CRASH_SEED", "20251121"))
KILLS = 10
PARTITIONS = 2
CONSUMERS = 4
BACKLOG = 300  # the topic is topped up whenever fewer records than this wait (until the last kill)
DELIVERY_LIMIT = 10

BROKER = {
    "log.flush.interval.messages": "1",
    "group.share.record.lock.duration.ms": "2000", "group.share.min.record.lock.duration.ms": "1000",
    "group.share.delivery.count.limit": str(DELIVERY_LIMIT),
    "group.share.min.session.timeout.ms": "1000", "group.share.session.timeout.ms": "10000",
    "group.share.min.heartbeat.interval.ms": "100", "group.share.heartbeat.interval.ms": "300",
}


def produce(bootstrap: str, topic: str, first: int, n: int) -> set[Key]:
    """Records ``first .. first+n-1`` round-robin over the partitions in batches of about ten (the
    broker acquires whole batches: small ones spread records over consumers); their (partition,
    offset)."""
    p = Producer({"bootstrap.servers": bootstrap, "log_level": 3, "linger.ms": 5, "batch.num.messages": 10,
                  "message.timeout.ms": int(WAIT_S * 1000)})
    stored: set[Key] = set()
    errors = []

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            stored.add((msg.partition(), msg.offset()))

    for i in range(first, first + n):
        p.produce(topic, b"%d" % i, partition=i % PARTITIONS, on_delivery=delivered)
        p.poll(0)
    assert p.flush(WAIT_S) == 0 and errors == [], errors
    assert len(stored) == n
    return stored


def start_run(broker_factory, tmp_path: Path, records: int, *, release: bool) -> tuple[Run, object]:
    b = broker_factory(BROKER)
    with RawClient(b.bootstrap) as c:
        topic_id = create_topic(c, "crash", partitions=PARTITIONS)
    group = unique_group()
    set_group_configs(b.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    produced = produce(b.bootstrap, "crash", 0, records)
    return Run(b, tmp_path, "crash", group, produced, consumers=CONSUMERS, release=release), topic_id


def nothing_left(run: Run, topic_id) -> bool:
    """The share coordinator's own view: start offset + delivery-complete count reach the log end."""
    with RawClient(run.broker.bootstrap) as c:
        parts = by_partition(summary(c, run.group, [(topic_id, p) for p in range(PARTITIONS)]))
    for p in range(PARTITIONS):
        s = parts[(topic_id, p)]
        assert s.error_code == 0, (s.error_code, s.error_message)
        end = 1 + max(o for q, o in run.records if q == p)
        if s.start_offset + max(s.delivery_complete_count, 0) < end:
            return False
    return True


def finish(run: Run, topic_id, timeout_s: float = 60.0) -> None:
    """Wait until every record is accepted, as the consumers saw it and as the broker's state says."""
    def done() -> bool:
        j = judge(run.history())
        return len(j.confirmed_accepts | j.in_doubt_accepts) == len(run.records) and nothing_left(run, topic_id)

    run.wait_for("every record accepted", done, timeout_s=timeout_s, pace_s=0.2)


def assert_group_survived(broker, group: str, members: int) -> None:
    """``__consumer_offsets``: the group was never deleted, ``members`` member ids ever, epochs only grow."""
    records = [r for _, r in read_partition(broker.data_dir, offsets_partition_for(group, 50))
               if r.key.group_id == group]
    ids = {r.key.member_id for r in records if hasattr(r.key, "member_id")}
    assert len(ids) == members, ids
    metadata = [r for r in records if type(r.key).__name__ == "ShareGroupMetadataKey"]
    assert metadata and all(r.value is not None for r in metadata)  # no tombstone
    epochs = [r.value.epoch for r in metadata]
    assert epochs == sorted(epochs), epochs


@pytest.mark.needs_private_broker
@pytest.mark.slow
def test_kill_9_at_seeded_random_points_of_a_four_consumer_run(broker_factory, tmp_path):
    rng = random.Random(SEED)
    run, topic_id = start_run(broker_factory, tmp_path, 2 * BACKLOG, release=True)

    def top_up() -> None:  # records never run out before the last kill, however slow a rejoin is
        if len(run.records) - run.confirmed_total() < BACKLOG:
            run.records |= produce(run.broker.bootstrap, run.topic, len(run.records), BACKLOG)

    run.supply = top_up
    try:
        since = time.monotonic_ns()
        for _ in range(KILLS):
            run.wait_until_every_consumer_confirms(since)  # all four are (back) in the group
            run.wait_until_confirmed(since, sum(run.confirmed_since(since).values()) + rng.randint(0, 150))
            run.kill()
            since = run.restart()
        run.wait_until_every_consumer_confirms(since)
        run.supply = None
        finish(run, topic_id)
        run.stop()
        verdict = judge(run.history())
        report = f"seed {SEED}: {len(run.kills)} kills, {len(run.records)} records, {verdict.summary()}"
        print(report)
        assert verdict.problems == [], report + "\n" + "\n".join(verdict.problems)
        assert len(run.kills) >= 10
        assert verdict.released_and_redelivered > 0 and verdict.redelivered_across_a_crash > 0, report
        assert verdict.max_delivery_count < DELIVERY_LIMIT - 1, report  # nothing can have been archived
        assert run.broker.stop() == 0
        assert_group_survived(run.broker, run.group, CONSUMERS)
        assert "Traceback" not in run.broker.log()
    except BaseException:
        print(f"seed {SEED}\n{run.diagnostics()}")
        raise
    finally:
        run.kill_consumers()


# --- a torn __share_group_state tail ------------------------------------------------------------------


def acknowledged(value, partition: int) -> set[Key]:
    return {(partition, o) for b in value.state_batches if b.delivery_state == ACKNOWLEDGED
            for o in range(b.first_offset, b.last_offset + 1)}


def tear_state_tail(data_dir: Path, sp: int, group: str, confirmed: set[Key]) -> tuple[set[Key], set[Key]]:
    """Cut state partition ``sp`` in the middle of its last ShareUpdate for ``group`` that
    acknowledged a record whose acceptance was confirmed, as a crash mid-write leaves it (the writes
    after it go too). Returns (acknowledged by the cut write, acknowledged by any dropped write)."""
    segment = max((data_dir / f"{STATE_TOPIC}-{sp}").glob("*.log"))  # the active one
    data = segment.read_bytes()
    writes = []  # (position, size, acknowledged keys)
    for pos, header in walk_headers(data):
        acked: set[Key] = set()
        for r in iter_records(data, pos):
            key, value = serde.decode(r.key, r.value)
            if isinstance(key, ShareUpdateKey) and key.group_id == group and value is not None:
                acked |= acknowledged(value, key.partition)
        writes.append((pos, header.size, acked))
    cut = max(i for i, (_, _, acked) in enumerate(writes) if acked & confirmed)
    pos, size, cut_acked = writes[cut]
    with open(segment, "r+b") as f:
        f.truncate(pos + size // 2)
    return cut_acked, set().union(*(acked for _, _, acked in writes[cut:]))


def state_done(c: RawClient, group: str, topic_id) -> set[Key]:
    """Records the share state reads as done: below the start offset or ACKNOWLEDGED."""
    done: set[Key] = set()
    for (_, p), s in by_partition(read_state(c, group, topic_id, list(range(PARTITIONS)))).items():
        assert s.error_code == 0, (s.error_code, s.error_message)
        done |= {(p, o) for o in range(s.start_offset)} | acknowledged(s, p)
    return done


@pytest.mark.needs_private_broker
@pytest.mark.slow
def test_a_torn_share_state_tail_after_kill_9_is_cut_and_the_state_rebuilt_from_what_remains(
        broker_factory, tmp_path):
    run, topic_id = start_run(broker_factory, tmp_path, 800, release=False)
    b = run.broker
    try:
        run.wait_until_confirmed(0, 300)
        run.kill()
        run.kill_consumers()  # so that nothing touches the state between the restart and the read below
        run.pump()
        before = judge(run.history()).confirmed_accepts
        cut_acked, dropped_acked = set(), set()
        for sp in sorted({state_partition_for(run.group, topic_id, p) for p in range(PARTITIONS)}):
            a, d = tear_state_tail(b.data_dir, sp, run.group, before)
            cut_acked |= a
            dropped_acked |= d
        run.restart()
        for sp in {state_partition_for(run.group, topic_id, p) for p in range(PARTITIONS)}:
            assert any(f"{STATE_TOPIC}-{sp}" in line and "truncating" in line for line in b.log().splitlines())
        with RawClient(b.bootstrap) as c:
            survived = state_done(c, run.group, topic_id)
        assert cut_acked and not cut_acked & survived  # the torn write is gone, not half-applied
        assert before - survived <= dropped_acked  # and nothing written before it was lost
        lost = before - survived
        assert lost

        run.forgotten = dropped_acked
        for _ in range(CONSUMERS):
            run.add_consumer()
        finish(run, topic_id)
        run.stop()
        verdict = judge(run.history())
        report = f"{verdict.summary()}; {len(lost)} confirmed acceptances lost with the torn tail"
        print(report)
        assert verdict.problems == [], report + "\n" + "\n".join(verdict.problems)
        # Exactly the confirmed acceptances the torn tail took are delivered again.
        assert verdict.delivered_after_restart & before == lost, report
        assert b.stop() == 0
        assert "Traceback" not in b.log()
    except BaseException:
        print(run.diagnostics())
        raise
    finally:
        run.kill_consumers()


# --- the judge on made-up histories -------------------------------------------------------------------


def d(t, o, c, who="a"):
    return {"e": "d", "t": t, "p": 0, "o": o, "c": c, "who": who}


def ok(t, *acks, who="a"):
    return {"e": "ok", "t": t, "p": 0, "acks": [list(a) for a in acks], "who": who}


def err(t, *acks, x="KafkaError{code=_TRANSPORT}", who="a"):
    return {"e": "err", "t": t, "p": 0, "acks": [list(a) for a in acks], "x": x, "who": who}


# A crash at t=50 (restart mark 60): 0 accepted before it; 1 released, then acquired by b when
# the broker died, back with the same count after the restart; 2's ACCEPT lost with the broker;
# 3 acquired by a, its lock expired, accepted by b, a's stale copy polled later and refused.
GOOD = [
    d(1, 0, 1), ok(2, (0, "a", 1)),
    d(3, 1, 1), ok(4, (1, "r", 1)), d(5, 1, 2, "b"),
    d(6, 2, 1), err(51, (2, "a", 1)),
    d(7, 3, 1), d(8, 3, 2, "b"), ok(9, (3, "a", 2), who="b"), d(10, 3, 1), err(11, (3, "a", 1),
                                                                                  x="INVALID_RECORD_STATE"),
    d(61, 1, 2, "c"), ok(62, (1, "a", 2), who="c"),
]


def verdict_of(events, records=4, restarts=(60,), forgotten=()):
    return judge(History(events, list(restarts), {(0, o) for o in range(records)}, set(forgotten)))


def test_the_judge_passes_a_run_kafka_would_produce():
    v = verdict_of(GOOD)
    assert v.problems == []
    assert v.confirmed_accepts == {(0, 0), (0, 1), (0, 3)} and v.in_doubt_accepts == {(0, 2)}
    assert (v.released_and_redelivered, v.redelivered_across_a_crash, v.redelivered_across_a_crash_with_same_count) \
        == (1, 1, 1)
    assert v.delivered_after_restart == {(0, 1)}


@pytest.mark.parametrize("extra, records, complaint", [
    ([], 5, "(0, 4): never accepted"),
    ([err(70, (2, "a", 1), x="INVALID_RECORD_STATE")], 4, None),  # a refusal does not undo in-doubt
    ([d(70, 9, 1)], 4, "(0, 9): delivered but never produced"),
    ([d(70, 0, 1, "b")], 4, "(0, 0): acceptance confirmed in broker incarnation 0, delivered again after a crash"),
    ([d(12, 0, 2, "b")], 4, "(0, 0): accepted at delivery count 1, then delivered at"),
    ([ok(12, (0, "a", 2), who="b")], 4, "(0, 0): accepted 2 times with confirmation"),
    ([ok(12, (0, "r", 3), who="b")], 4, "(0, 0): an acknowledgement confirmed after its acceptance"),
    ([ok(12, (3, "r", 2))], 4, "(0, 3): two confirmed acknowledgements of deliveries with the same count"),
    ([ok(12, (7, "?", 0))], 4, "told about an acknowledgement it never sent"),
])
def test_the_judge_catches(extra, records, complaint):
    problems = verdict_of(GOOD + extra, records).problems
    if complaint is None:
        assert problems == []
    else:
        assert any(complaint in p for p in problems), problems


def test_the_judge_wants_a_released_record_back_with_a_higher_count():
    events = [d(1, 0, 1), ok(2, (0, "r", 1)), d(61, 0, 1, "b"), ok(62, (0, "a", 1), who="b")]
    problems = verdict_of(events, records=1).problems
    assert any("released at delivery count 1 with confirmation, never delivered again" in p for p in problems)
    assert any("two confirmed acknowledgements of deliveries with the same count" in p for p in problems)


def test_the_judge_forgives_forgotten_acceptances_only():
    events = GOOD + [d(70, 0, 1, "b"), ok(71, (0, "a", 1), who="b")]
    assert verdict_of(events).problems != []
    assert verdict_of(events, forgotten={(0, 0)}).problems == []
