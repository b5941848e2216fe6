"""Durable share state across restarts of a subprocess broker: graceful stops, kill -9 with
``log.flush.interval.messages=1``, a torn ``__share_group_state`` tail, pruning, and the whole
share flow (once through the network persister).

What Kafka 4.2 does and these tests hold kshare to: acknowledged records are never delivered
again; records a member released, or that were released when its session closed (its
connection dropped, as at a broker's graceful stop), were written with their delivery count
and come back with that count + 1. Acquiring records writes nothing (SharePartition.acquire
only changes memory), so after a crash records that were merely acquired come back with the
same delivery count as the lost delivery.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from coordinator.share.routing import partition_for
from protocol.coordinator_records.share_snapshot_key import ShareSnapshotKey
from tests.raw_client import RawClient
from tests.test_share_state_support import (
    ACCEPT,
    ACKNOWLEDGED,
    AVAILABLE,
    RELEASE,
    STATE_TOPIC,
    Member,
    acquired,
    batches_of,
    create_topic,
    delete_state,
    fetch_until,
    initialize,
    log_start,
    only,
    produce_values,
    read_state,
    state_partition,
    state_records,
    summary,
    unique,
    write_state,
)

pytestmark = pytest.mark.needs_private_broker

SYNC_EVERY_WRITE = {"log.flush.interval.messages": "1"}
PRUNING = {  # small segments, pruned often, a snapshot every 10 updates
    "share.coordinator.state.topic.segment.bytes": "2048",
    "share.coordinator.state.topic.prune.interval.ms": "100",
    "share.coordinator.snapshot.update.records.per.snapshot": "10",
    # pruning moves the log start; the segments below it go at the retention check, as in Kafka
    "log.retention.check.interval.ms": "100",
    "log.initial.task.delay.ms": "0",
}


def segment_files(data_dir: Path, sp: int) -> list[Path]:
    return sorted((data_dir / f"{STATE_TOPIC}-{sp}").glob("*.log"))


def write_history(c, group, topic_id, partition, n: int) -> list[tuple[int, int, int, int]]:
    """``n`` acknowledgements moving the start offset; returns the last state batches written."""
    initialize(c, group, topic_id, partition, state_epoch=1, start_offset=0)
    batches = []
    for i in range(n):
        batches = [(10 * i + 5, 10 * i + 7, AVAILABLE, 1 + i % 3), (10 * i + 8, 10 * i + 9, ACKNOWLEDGED, 1)]
        w = only(write_state(c, group, topic_id, partition, state_epoch=1, start_offset=10 * i,
                             delivery_complete_count=2, batches=batches))
        assert w.error_code == 0, w
    return batches


def assert_state(c, group, topic_id, partition, start: int, batches) -> None:
    p = only(read_state(c, group, topic_id, partition))
    assert (p.error_code, p.state_epoch, p.start_offset, batches_of(p)) == (0, 1, start, batches)


def test_a_graceful_stop_snapshots_every_key_and_the_next_start_reads_only_snapshots(broker_factory):
    b = broker_factory()
    with RawClient(b.bootstrap) as c:
        t = create_topic(c, "t", partitions=3)
        written = {p: write_history(c, "g", t, p, 7) for p in range(3)}
        before = summary(c, "g", [(t, p) for p in range(3)])
    b.restart()
    with RawClient(b.bootstrap) as c:
        for p in range(3):
            assert_state(c, "g", t, p, 60, written[p])
        assert summary(c, "g", [(t, p) for p in range(3)]) == before
        for sp in {state_partition("g", t, p) for p in range(3)}:
            records = state_records(c, sp)
            assert records and log_start(c, sp) == records[0][0] > 0
            assert all(isinstance(k, ShareSnapshotKey) and v is not None for _, k, v in records)
            keys = [(k.group_id, k.topic_id, k.partition) for _, k, _ in records]
            assert len(keys) == len(set(keys))  # one snapshot per key
    assert "loaded __share_group_state: 3 key(s) from 3 record(s)" in b.log()


def test_kill_9_keeps_every_answered_write_when_each_is_fsynced(broker_factory):
    b = broker_factory(SYNC_EVERY_WRITE)
    with RawClient(b.bootstrap) as c:
        t = create_topic(c, "t", partitions=2)
        written = {p: write_history(c, "g", t, p, 9) for p in range(2)}
    b.kill()
    b.start()
    with RawClient(b.bootstrap) as c:
        for p in range(2):
            assert_state(c, "g", t, p, 80, written[p])
        s = only(summary(c, "g", [(t, 0)]))
        assert (s.state_epoch, s.leader_epoch, s.start_offset, s.delivery_complete_count) == (1, 0, 80, 2)
        # Still writable, and the writes go on from the recovered state.
        assert only(write_state(c, "g", t, 0, state_epoch=1, start_offset=95)).error_code == 0
        assert only(read_state(c, "g", t, 0)).start_offset == 95


def test_keys_loaded_after_a_crash_are_replayed_in_the_background_and_snapshotted_at_the_next_stop(
        broker_factory):
    b = broker_factory(SYNC_EVERY_WRITE)
    with RawClient(b.bootstrap) as c:
        t = create_topic(c, "t", partitions=4)
        written = {p: write_history(c, "g", t, p, 6) for p in range(4)}
    b.kill()
    b.start()
    assert "loaded __share_group_state: 4 key(s) from 28 record(s)" in b.log()
    deadline = time.monotonic() + 20
    while "replayed 4 loaded key(s) in the background" not in b.log():  # untouched by any request
        assert time.monotonic() < deadline, b.log()
        time.sleep(0.05)
    b.restart()
    assert "loaded __share_group_state: 4 key(s) from 4 record(s)" in b.log()
    with RawClient(b.bootstrap) as c:
        for p in range(4):
            assert_state(c, "g", t, p, 50, written[p])


@pytest.mark.parametrize("damage", ["torn last batch", "garbage after the last batch"])
def test_a_damaged_tail_of_a_state_partition_is_cut_off_at_start_up(broker_factory, damage):
    b = broker_factory(SYNC_EVERY_WRITE)
    with RawClient(b.bootstrap) as c:
        t = create_topic(c, "t")
        sp = state_partition("g", t, 0)
        write_history(c, "g", t, 0, 4)
        last_batches = [(100, 104, AVAILABLE, 2)]
        assert only(write_state(c, "g", t, 0, state_epoch=1, start_offset=100, batches=last_batches)).error_code == 0
    b.kill()
    seg = segment_files(b.data_dir, sp)[-1]
    size = seg.stat().st_size
    with open(seg, "r+b") as f:
        if damage == "torn last batch":
            f.truncate(size - 7)
        else:
            f.seek(size)
            f.write(os.urandom(40) + b"\x00" * 30)
    b.start()
    recovered = seg.stat().st_size  # the log was cut back to its last whole batch
    assert recovered < size - 7 if damage == "torn last batch" else recovered == size
    with RawClient(b.bootstrap) as c:
        if damage == "torn last batch":  # the last write is gone, everything before it stands
            assert_state(c, "g", t, 0, 30, [(35, 37, AVAILABLE, 1), (38, 39, ACKNOWLEDGED, 1)])
        else:
            assert_state(c, "g", t, 0, 100, last_batches)
        assert only(write_state(c, "g", t, 0, state_epoch=1, start_offset=110)).error_code == 0
        assert only(read_state(c, "g", t, 0)).start_offset == 110


def test_pruning_deletes_superseded_segments_and_the_state_survives_it(broker_factory):
    b = broker_factory(PRUNING)
    with RawClient(b.bootstrap) as c:
        t = create_topic(c, "t")
        sp = state_partition("g", t, 0)
        written = write_history(c, "g", t, 0, 150)
        # Without pruning this history fills many 2 KiB segments; every key needs only its
        # latest snapshot and the updates after it, so the segments before that go.
        deadline = time.monotonic() + 20
        while len(records := state_records(c, sp)) > 11 or len(segment_files(b.data_dir, sp)) > 3:
            assert time.monotonic() < deadline, (log_start(c, sp), len(records), segment_files(b.data_dir, sp))
            time.sleep(0.05)
        # What is left: the latest snapshot (at the log start) and at most 10 updates after it.
        assert log_start(c, sp) == records[0][0] > 0 and isinstance(records[0][1], ShareSnapshotKey)
        assert_state(c, "g", t, 0, 1490, written)
    assert "pruned 1 __share_group_state partition(s)" in b.log()
    b.kill()  # no shutdown snapshot: the next start reads what pruning left
    b.start()
    with RawClient(b.bootstrap) as c:
        assert_state(c, "g", t, 0, 1490, written)


def test_pruning_a_partition_whose_keys_were_all_deleted_keeps_the_last_tombstone(broker_factory):
    """Kafka's ShareCoordinatorOffsetsManager.updateState counts a tombstone's offset before it
    forgets the key: once no key is left, the last redundant offset is that tombstone's, so
    the log start moves up to it and the tombstone stays readable."""
    b = broker_factory(PRUNING)
    with RawClient(b.bootstrap) as c:
        t = create_topic(c, "t")
        sp = state_partition("g", t, 0)
        assert only(initialize(c, "g", t, 0, state_epoch=1, start_offset=0)).error_code == 0
        for i in range(3):
            assert only(write_state(c, "g", t, 0, state_epoch=1, start_offset=i + 1)).error_code == 0
        assert only(delete_state(c, "g", t, 0)).error_code == 0
        tombstone_offset = state_records(c, sp)[-1][0]
        deadline = time.monotonic() + 20
        while log_start(c, sp) == 0:
            assert time.monotonic() < deadline, state_records(c, sp)
            time.sleep(0.05)
        time.sleep(0.3)  # a few more prune rounds: they do not move past the tombstone
        assert log_start(c, sp) == tombstone_offset
        [(offset, key, value)] = state_records(c, sp)
        assert (offset, isinstance(key, ShareSnapshotKey), value) == (tombstone_offset, True, None)


def test_an_idle_key_gets_cold_snapshots_and_does_not_hold_back_pruning(broker_factory):
    b = broker_factory({**PRUNING, "share.coordinator.cold.partition.snapshot.interval.ms": "300"})
    with RawClient(b.bootstrap) as c:
        t = create_topic(c, "t")
        sp = state_partition("g", t, 0)
        idle = next(h for h in (f"idle{i}" for i in range(1000)) if state_partition(h, t, 0) == sp)
        assert only(initialize(c, idle, t, 0, state_epoch=1, start_offset=7)).error_code == 0
        written = write_history(c, "g", t, 0, 150)
        # The idle key's only snapshot is the partition's first record: without a fresh one
        # the log could never be pruned past it.
        deadline = time.monotonic() + 20
        while log_start(c, sp) == 0:
            assert time.monotonic() < deadline, (len(state_records(c, sp)), segment_files(b.data_dir, sp))
            time.sleep(0.05)
        assert_state(c, "g", t, 0, 1490, written)
        assert_state(c, idle, t, 0, 7, [])
    b.kill()
    b.start()
    with RawClient(b.bootstrap) as c:
        assert_state(c, "g", t, 0, 1490, written)
        assert_state(c, idle, t, 0, 7, [])


def test_state_of_a_topic_deleted_just_before_a_crash_is_deleted_at_the_next_start(broker_factory):
    """The tombstones for a deleted topic's keys are written after DeleteTopics answers; a
    kill -9 in between (the soak hit it once in ten deletions) left those keys live for good,
    snapshotted again and again. The next load now deletes them."""
    b = broker_factory(SYNC_EVERY_WRITE)
    with RawClient(b.bootstrap) as c:
        gone, kept = create_topic(c, "gone"), create_topic(c, "kept")
        for t in (gone, kept):
            assert only(initialize(c, "g", t, 0, state_epoch=1, start_offset=3)).error_code == 0
    b.kill()
    # What that crash leaves: the topic out of the registry and its log, its state keys live.
    registry = b.data_dir / "kshare-topics.json"
    entries = json.loads(registry.read_text())
    del entries["topics"]["gone"]
    registry.write_text(json.dumps(entries))
    shutil.rmtree(b.data_dir / "gone-0")
    b.start()
    sp_gone, sp_kept = state_partition("g", gone, 0), state_partition("g", kept, 0)

    def last_value(client, sp, topic_id):
        values = [v for _, k, v in state_records(client, sp) if k.topic_id == topic_id]
        return values[-1] if values else "no record"

    with RawClient(b.bootstrap) as c:
        deadline = time.monotonic() + 10
        while last_value(c, sp_gone, gone) is not None:
            assert time.monotonic() < deadline, state_records(c, sp_gone)
            time.sleep(0.05)
        assert last_value(c, sp_kept, kept).start_offset == 3
        assert_state(c, "g", kept, 0, 3, [])


# --- the whole share flow --------------------------------------------------------------------------


def share_flow_until_restart(b, topic: str):
    """Ten records delivered once: 0-4 accepted, 5-6 released, 7-9 still acquired."""
    with RawClient(b.bootstrap) as c:
        t = create_topic(c, topic)
        tp = (t, 0)
        group = unique("g")
        m = Member(b.bootstrap, group)
        m.fetch([tp])  # loads the share partition at the log end (share.auto.offset.reset=latest)
        produce_values(c, topic, 10)
        got = fetch_until(m, tp, 10)
        assert got == [(o, 1) for o in range(10)]
        assert m.acknowledge({tp: [(0, 4, ACCEPT), (5, 6, RELEASE)]}) == {tp: 0}
        return m, group, tp


def redelivered(b, group, tp, want: int) -> list[tuple[int, int]]:
    with Member(b.bootstrap, group) as m:
        got = fetch_until(m, tp, want)
        assert acquired(m.fetch([tp], max_wait_ms=300), tp) == []  # and nothing else, 0-4 least of all
        m.acknowledge({tp: [(o, o, ACCEPT) for o, _ in got]})
    return sorted(got)


def test_share_flow_across_a_graceful_restart(broker_factory):
    b = broker_factory()
    m, group, tp = share_flow_until_restart(b, "t")
    # The member's connection closes with the broker: its acquired records are released and
    # written (delivery count 1, not decremented) before the broker stops.
    b.restart()
    m.close()
    assert redelivered(b, group, tp, 5) == [(o, 2) for o in range(5, 10)]


def test_share_flow_across_kill_9(broker_factory):
    b = broker_factory(SYNC_EVERY_WRITE)
    m, group, tp = share_flow_until_restart(b, "t")
    b.kill()
    m.close()
    b.start()
    # 5-6 were released and written with delivery count 1; 7-9 were only acquired, which
    # Kafka does not persist, so their next delivery is their first again as far as the
    # state knows.
    assert redelivered(b, group, tp, 5) == [(5, 2), (6, 2), (7, 1), (8, 1), (9, 1)]


def test_share_flow_through_the_network_persister(broker_factory):
    b = broker_factory({"kshare.share.persister": "network", **SYNC_EVERY_WRITE})
    m, group, tp = share_flow_until_restart(b, "t")
    with RawClient(b.bootstrap) as c:  # the leader wrote through the state RPCs
        p = only(read_state(c, group, *tp))
        # Like Kafka, the write carries the start offset from before the acknowledgement
        # (the leader moves it once the write succeeded); the delivery-complete count
        # covers 0-4.
        assert (p.start_offset, batches_of(p)) == (0, [(0, 4, ACKNOWLEDGED, 1), (5, 6, AVAILABLE, 1)])
        assert only(summary(c, group, [tp])).delivery_complete_count == 5
    m.close()
    with RawClient(b.bootstrap) as c:  # the closed session's release went the same way
        deadline = time.monotonic() + 10
        while (state := only(read_state(c, group, *tp))).start_offset != 5:
            assert time.monotonic() < deadline, (state.start_offset, batches_of(state))
            time.sleep(0.05)
        assert batches_of(state) == [(5, 9, AVAILABLE, 1)]
    b.restart()
    assert redelivered(b, group, tp, 5) == [(o, 2) for o in range(5, 10)]
    with RawClient(b.bootstrap) as c:  # 5-9 accepted at delivery count 2
        p = only(read_state(c, group, *tp))
        assert (p.start_offset, batches_of(p)) == (5, [(5, 9, ACKNOWLEDGED, 2)])
    assert "share persister connected to 127.0.0.1" in b.log()
    assert partition_for(group, tp[0], 0) == state_partition(group, *tp)
