"""ShareCoordinatorShard: Kafka 4.2's share-state rules, driven through a tiny fake runtime that
encodes every record to bytes, "appends" it and replays the decoded record, as the real
runtime does."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.share.combiner import ACKNOWLEDGED, ARCHIVED, AVAILABLE, StateBatch
from coordinator.share.shard import (
    FENCED_LEADER_EPOCH_MESSAGE,
    FENCED_STATE_EPOCH_MESSAGE,
    NEGATIVE_PARTITION_ID,
    READ_UNINITIALIZED_SHARE_PARTITION,
    SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_DEFAULT,
    WRITE_UNINITIALIZED_SHARE_PARTITION,
    ShareCoordinatorShard,
    SharePartitionKey,
    SharePartitionState,
)
from protocol.coordinator_records.share_snapshot_key import ShareSnapshotKey
from protocol.coordinator_records.share_snapshot_value import ShareSnapshotValue
from protocol.coordinator_records.share_update_key import ShareUpdateKey
from protocol.coordinator_serde import decode, encode_key, encode_value
from protocol.errors import ErrorCode
from protocol.messages import delete_share_group_state_request as dreq
from protocol.messages import initialize_share_group_state_request as ireq
from protocol.messages import read_share_group_state_request as rreq
from protocol.messages import read_share_group_state_summary_request as sreq
from protocol.messages import read_share_group_state_summary_response as srsp
from protocol.messages import write_share_group_state_request as wreq

T1 = uuid.UUID(int=0x1111)
T2 = uuid.UUID(int=0x2222)
G = "group1"
KEY = SharePartitionKey(G, T1, 0)


class FakeClock:
    def __init__(self, now: int = 1_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class Runtime:
    """Append-then-replay, with the records round-tripped through their on-disk bytes."""

    def __init__(self, shard: ShareCoordinatorShard) -> None:
        self.shard = shard
        self.log: list[tuple[int, bytes, bytes | None]] = []

    def append(self, records) -> None:
        for r in records:
            kb, vb = encode_key(r.key), encode_value(r.value)
            offset = len(self.log)
            self.log.append((offset, kb, vb))
            self.shard.replay(offset, *decode(kb, vb))

    def initialize(self, partition=0, state_epoch=0, start_offset=-1, topic=T1, group=G):
        records, rsp = self.shard.initialize_state(ireq.InitializeShareGroupStateRequest(
            group, [ireq.InitializeStateData(topic, [ireq.PartitionData(partition, state_epoch, start_offset)])]))
        self.append(records)
        return records, rsp.results[0].partitions[0] if rsp.results else None

    def write(self, start_offset=-1, batches=(), leader_epoch=0, state_epoch=0, dcc=-1, partition=0,
              topic=T1, version=1, group=G):
        req = wreq.WriteShareGroupStateRequest(group, [wreq.WriteStateData(topic, [wreq.PartitionData(
            partition, state_epoch, leader_epoch, start_offset, dcc,
            [wreq.StateBatch(*b) for b in batches])])])
        records, rsp = self.shard.write_state(req, version)
        self.append(records)
        return records, rsp.results[0].partitions[0] if rsp.results else None

    def read(self, leader_epoch=0, partition=0, topic=T1, group=G):
        records, rsp = self.shard.read_state(rreq.ReadShareGroupStateRequest(
            group, [rreq.ReadStateData(topic, [rreq.PartitionData(partition, leader_epoch)])]))
        self.append(records)
        return records, rsp.results[0].partitions[0] if rsp.results else None

    def summary(self, partition=0, topic=T1, version=1, leader_epoch=0, group=G):
        rsp = self.shard.read_state_summary(sreq.ReadShareGroupStateSummaryRequest(
            group, [sreq.ReadStateSummaryData(topic, [sreq.PartitionData(partition, leader_epoch)])]), version)
        return rsp.results[0].partitions[0] if rsp.results else None

    def delete(self, partition=0, topic=T1, group=G):
        records, rsp = self.shard.delete_state(dreq.DeleteShareGroupStateRequest(
            group, [dreq.DeleteStateData(topic, [dreq.PartitionData(partition)])]))
        self.append(records)
        return records, rsp.results[0].partitions[0] if rsp.results else None

    def replayed(self, from_offset: int = 0, **kwargs) -> ShareCoordinatorShard:
        fresh = ShareCoordinatorShard(self.shard.records_per_snapshot, **kwargs)
        for offset, kb, vb in self.log:
            if offset >= from_offset:
                fresh.replay(offset, *decode(kb, vb))
        return fresh


def runtime(records_per_snapshot=SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_DEFAULT, **kwargs) -> Runtime:
    kwargs.setdefault("clock_ms", FakeClock())
    return Runtime(ShareCoordinatorShard(records_per_snapshot, **kwargs))


def ok(row) -> None:
    assert (row.error_code, row.error_message) == (0, None)


# ---------------------------------------------------------------- the KIP-932 walk-through


def test_kip932_write_walkthrough():
    """WriteShareGroupState requests of the KIP-932 persistence example (records 100-121) and
    the persisted cumulative state after each one."""
    rt = runtime()
    ok(rt.initialize(start_offset=-1)[1])
    A, ACK = AVAILABLE, ACKNOWLEDGED

    def step(start_offset, batches, want_start, want_batches):
        records, row = rt.write(start_offset, batches)
        ok(row)
        assert [type(r.key) for r in records] == [ShareUpdateKey]
        st = rt.shard.state(KEY)
        assert (st.start_offset, list(st.state_batches)) == (want_start, [StateBatch(*b) for b in want_batches])

    step(100, [], 100, [])                                      # starting state, SPSO 100
    step(110, [], 110, [])                                      # acknowledge 100-109
    step(-1, [(110, 110, A, 1)], 110, [(110, 110, A, 1)])       # release 110
    step(-1, [(111, 118, A, 0), (119, 119, ACK, 1)], 110,       # acknowledge 119
         [(110, 110, A, 1), (111, 118, A, 0), (119, 119, ACK, 1)])
    step(-1, [(111, 112, A, 1)], 110,                           # lock timeout 111-112
         [(110, 112, A, 1), (113, 118, A, 0), (119, 119, ACK, 1)])
    step(-1, [(113, 118, ACK, 1)], 110,                         # acknowledge 113-118
         [(110, 112, A, 1), (113, 119, ACK, 1)])
    step(-1, [(110, 110, ACK, 2)], 110,                         # acknowledge 110
         [(110, 110, ACK, 2), (111, 112, A, 1), (113, 119, ACK, 1)])
    step(120, [], 120, [])                                      # acknowledge 111-112: SPSO 120

    assert rt.replayed().entries() == rt.shard.entries()
    # The same requests with a snapshot after every write persist the same state.
    snap = runtime(0)
    snap.initialize()
    for _, kb, vb in rt.log[1:]:
        _, value = decode(kb, vb)
        snap.write(value.start_offset, [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                        for b in value.state_batches])
    assert snap.shard.state(KEY).state_batches == rt.shard.state(KEY).state_batches == ()
    assert snap.shard.state(KEY).start_offset == 120
    assert all(isinstance(decode(kb, vb)[0], ShareSnapshotKey) for _, kb, vb in snap.log)


# ---------------------------------------------------------------- initialize


def test_initialize_writes_a_snapshot():
    clock = FakeClock(5_000)
    rt = runtime(clock_ms=clock)
    records, row = rt.initialize(state_epoch=3, start_offset=-1)
    ok(row)
    ((key, value),) = records
    assert key == ShareSnapshotKey(G, T1, 0)
    assert value == ShareSnapshotValue(snapshot_epoch=0, state_epoch=3, leader_epoch=0, start_offset=-1,
                                       delivery_complete_count=-1, create_timestamp=5_000,
                                       write_timestamp=5_000, state_batches=[])
    # A known start offset (e.g. alter offsets) makes the delivery-complete count 0.
    clock.now = 6_000
    records, row = rt.initialize(state_epoch=4, start_offset=42)
    ok(row)
    assert (records[0].value.snapshot_epoch, records[0].value.delivery_complete_count) == (1, 0)
    assert rt.shard.state(KEY) == SharePartitionState(1, 4, 0, 42, 0, (), 6_000, 6_000)


def test_initialize_fences_an_older_state_epoch():
    rt = runtime()
    rt.initialize(state_epoch=5)
    records, row = rt.initialize(state_epoch=4)
    assert records == []
    assert (row.error_code, row.error_message) == (ErrorCode.FENCED_STATE_EPOCH, FENCED_STATE_EPOCH_MESSAGE)
    ok(rt.initialize(state_epoch=5)[1])     # equal is fine


# ---------------------------------------------------------------- write


def test_write_produces_an_update_with_only_the_written_batches():
    rt = runtime()
    rt.initialize()
    rt.write(0, [(0, 10, AVAILABLE, 1)], dcc=0)
    records, row = rt.write(-1, [(11, 20, AVAILABLE, 1)], dcc=4)
    ok(row)
    ((key, value),) = records
    assert isinstance(key, ShareUpdateKey)
    assert (value.snapshot_epoch, value.start_offset, value.delivery_complete_count) == (0, -1, 4)
    assert [(b.first_offset, b.last_offset) for b in value.state_batches] == [(11, 20)]
    # Replay joined the equal neighbours.
    assert rt.shard.state(KEY).state_batches == (StateBatch(0, 20, AVAILABLE, 1),)


def test_snapshot_after_n_updates():
    clock = FakeClock(10)
    rt = runtime(3, clock_ms=clock)
    rt.initialize()
    clock.now = 20
    kinds = []
    for i in range(8):
        records, row = rt.write(i, [(i, i, ACKNOWLEDGED, 1)], dcc=1)
        ok(row)
        kinds.append("S" if isinstance(records[0].key, ShareSnapshotKey) else "U")
    assert "".join(kinds) == "UUUSUUUS"
    st = rt.shard.state(KEY)
    assert st.snapshot_epoch == 2
    assert (st.create_timestamp, st.write_timestamp) == (20, 20)  # a count-triggered snapshot: both now, as Kafka
    assert rt.shard.entry(KEY).updates_since_snapshot == 0
    assert st.state_batches == (StateBatch(7, 7, ACKNOWLEDGED, 1),)
    # A full snapshot carries the whole state.
    _, kb, vb = rt.log[-1]
    assert decode(kb, vb)[1].start_offset == 7


def test_zero_updates_per_snapshot_snapshots_every_write():
    rt = runtime(0)
    rt.initialize()
    for i in range(3):
        records, _ = rt.write(-1, [(i, i, AVAILABLE, 1)])
        assert isinstance(records[0].key, ShareSnapshotKey)
        assert records[0].value.snapshot_epoch == i + 1
    assert rt.shard.state(KEY).state_batches == (StateBatch(0, 2, AVAILABLE, 1),)


def test_default_cadence_is_500():
    assert SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_DEFAULT == 500
    with pytest.raises(ValueError):
        ShareCoordinatorShard(501)


def test_a_write_never_changes_the_state_epoch():
    """KAFKA-19456: only InitializeShareGroupState sets the state epoch. A write with a newer
    one is a plain ShareUpdate (it used to force a snapshot carrying it, which then fenced
    writes of the epoch the state was initialised with)."""
    rt = runtime()
    rt.initialize(state_epoch=1)
    records, row = rt.write(5, [], state_epoch=2)
    ok(row)
    assert isinstance(records[0].key, ShareUpdateKey)
    assert rt.shard.state(KEY).state_epoch == 1
    ok(rt.write(6, [], state_epoch=1)[1])
    assert rt.write(7, [], state_epoch=0)[1].error_code == ErrorCode.FENCED_STATE_EPOCH


def test_write_of_uninitialized_state_is_invalid_request():
    rt = runtime()
    records, row = rt.write(0, [(0, 1, AVAILABLE, 1)])
    assert records == []
    assert (row.error_code, row.error_message) == (ErrorCode.INVALID_REQUEST, WRITE_UNINITIALIZED_SHARE_PARTITION)
    assert rt.shard.entries() == {}


def test_leader_epoch_fencing_and_minus_one():
    """KAFKA-19456: a read records a newer leader epoch; a write is fenced by it but never
    changes it, and its records carry the current one."""
    rt = runtime()
    rt.initialize()
    ok(rt.read(leader_epoch=5)[1])
    records, row = rt.write(0, [], leader_epoch=4)
    assert records == []
    assert (row.error_code, row.error_message) == (ErrorCode.FENCED_LEADER_EPOCH, FENCED_LEADER_EPOCH_MESSAGE)
    records, row = rt.write(1, [], leader_epoch=7)
    ok(row)
    assert records[0].value.leader_epoch == 5
    # -1 means "not supplied": no fence either.
    ok(rt.write(3, [], leader_epoch=-1, state_epoch=-1)[1])
    st = rt.shard.state(KEY)
    assert (st.leader_epoch, st.state_epoch, st.start_offset) == (5, 0, 3)
    assert rt.shard.entry(KEY).leader_epoch_fence == 5


def test_state_epoch_fencing():
    rt = runtime()
    rt.initialize(state_epoch=2)
    records, row = rt.write(0, [], state_epoch=1, leader_epoch=9)
    assert records == []
    assert (row.error_code, row.error_message) == (ErrorCode.FENCED_STATE_EPOCH, FENCED_STATE_EPOCH_MESSAGE)
    assert rt.shard.entry(KEY).leader_epoch_fence == 0     # the fenced write changed nothing


def test_invalid_requests():
    rt = runtime()
    rt.initialize()
    for records, row in (rt.write(0, [], partition=-1), rt.read(partition=-1), rt.delete(partition=-1),
                         rt.initialize(partition=-1)):
        assert records == []
        assert (row.error_code, row.error_message) == (ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID)
    row = rt.summary(partition=-1)
    assert (row.error_code, row.error_message) == (ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID)
    records, row = rt.write(0, [(5, 4, AVAILABLE, 1)])
    assert records == [] and row.error_code == ErrorCode.INVALID_REQUEST


def test_empty_group_id_is_answered_with_no_results():
    rt = runtime()
    assert rt.write(0, [], group="")[1] is None
    assert rt.read(group="")[1] is None
    assert rt.summary(group="") is None
    assert rt.initialize(group="")[1] is None
    assert rt.delete(group="")[1] is None
    assert rt.log == []


def test_unknown_topic_or_partition_from_metadata():
    topics = {T1: 2, T2: 1}
    rt = runtime(topic_partitions=topics.get)
    ok(rt.initialize(partition=1)[1])
    ok(rt.initialize(topic=T2)[1])
    del topics[T2]                                   # the topic is deleted after initialisation
    for records, row in (rt.initialize(partition=2), rt.initialize(topic=T2), rt.write(0, [], topic=T2),
                         rt.read(topic=T2), rt.delete(topic=T2)):
        assert records == []
        assert (row.error_code, row.error_message) == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
    assert rt.summary(topic=T2).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # Uninitialised state is reported before the metadata check for reads and writes.
    assert rt.write(0, [], partition=5)[1].error_code == ErrorCode.INVALID_REQUEST


def test_two_writes_for_one_key_in_one_request_see_each_other():
    rt = runtime(1)
    rt.initialize()
    p = wreq.PartitionData(0, 0, 0, -1, 3, [wreq.StateBatch(0, 0, AVAILABLE, 1)])
    q = wreq.PartitionData(0, 0, 0, -1, 4, [wreq.StateBatch(1, 1, AVAILABLE, 1)])
    records, rsp = rt.shard.write_state(wreq.WriteShareGroupStateRequest(G, [wreq.WriteStateData(T1, [p, q])]))
    assert [type(r.key) for r in records] == [ShareUpdateKey, ShareSnapshotKey]
    assert records[1].value.snapshot_epoch == 1
    rt.append(records)
    assert rt.shard.state(KEY).state_batches == (StateBatch(0, 1, AVAILABLE, 1),)
    assert [r.error_code for r in rsp.results[0].partitions] == [0, 0]


# ---------------------------------------------------------------- read and summary


def test_read_returns_state_and_missing_state_is_invalid_request():
    rt = runtime()
    records, row = rt.read()
    assert records == []
    assert (row.error_code, row.error_message) == (ErrorCode.INVALID_REQUEST, READ_UNINITIALIZED_SHARE_PARTITION)
    assert (row.state_epoch, row.start_offset, row.state_batches) == (0, 0, [])   # field defaults
    rt.initialize(state_epoch=2)
    rt.write(10, [(10, 12, ARCHIVED, 5)], state_epoch=2)
    records, row = rt.read(leader_epoch=0)
    ok(row)
    assert records == []
    assert (row.state_epoch, row.start_offset) == (2, 10)
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in row.state_batches] == [
        (10, 12, ARCHIVED, 5)]


def test_read_with_a_newer_leader_epoch_records_it_and_fences_the_old_leader():
    rt = runtime()
    rt.initialize()
    rt.write(10, [], leader_epoch=1, dcc=6)
    records, row = rt.read(leader_epoch=3)
    ok(row)
    ((key, value),) = records
    assert isinstance(key, ShareUpdateKey)
    assert (value.leader_epoch, value.start_offset, value.state_batches) == (3, 10, [])
    assert value.delivery_complete_count == 6                  # the count is carried, not lost
    assert rt.shard.entry(KEY).leader_epoch_fence == 3
    assert rt.write(11, [], leader_epoch=1)[1].error_code == ErrorCode.FENCED_LEADER_EPOCH
    # Same epoch or -1: nothing to record.
    assert rt.read(leader_epoch=3)[0] == []
    assert rt.read(leader_epoch=-1)[0] == []
    records, row = rt.read(leader_epoch=2)
    assert records == [] and row.error_code == ErrorCode.FENCED_LEADER_EPOCH


def test_summary_of_missing_and_present_state():
    rt = runtime()
    row = rt.summary()
    ok(row)
    assert (row.state_epoch, row.leader_epoch, row.start_offset, row.delivery_complete_count) == (0, 0, -1, -1)
    rt.initialize(state_epoch=4)
    rt.read(leader_epoch=2)
    rt.write(100, [(100, 104, ACKNOWLEDGED, 1)], leader_epoch=2, state_epoch=4, dcc=5)
    row = rt.summary(leader_epoch=1)           # the summary does not fence
    ok(row)
    assert (row.state_epoch, row.leader_epoch, row.start_offset, row.delivery_complete_count) == (4, 2, 100, 5)
    assert rt.summary(version=0).delivery_complete_count == -1


def test_delivery_complete_count_rules():
    rt = runtime()
    rt.initialize()
    assert rt.summary().delivery_complete_count == -1          # start offset not known yet
    rt.write(0, [(0, 4, ACKNOWLEDGED, 1)], dcc=5)
    assert rt.summary().delivery_complete_count == 5
    # Each ShareUpdate carries the count; moving the start offset takes the new count.
    rt.write(5, [], dcc=0)
    assert (rt.summary().start_offset, rt.summary().delivery_complete_count) == (5, 0)
    rt.write(-1, [(7, 7, ARCHIVED, 1)], dcc=1)
    assert rt.summary().delivery_complete_count == 1
    # A v0 write has no count: it becomes unknown again.
    records, _ = rt.write(-1, [(8, 8, ACKNOWLEDGED, 1)], dcc=9, version=0)
    assert records[0].value.delivery_complete_count == -1
    assert rt.summary().delivery_complete_count == -1
    rt.write(-1, [], dcc=3)
    assert rt.summary().delivery_complete_count == 3
    assert rt.replayed().entries() == rt.shard.entries()
    # v1 responses carry the count on the wire, v0 ones do not.
    rsp = srsp.ReadShareGroupStateSummaryResponse([srsp.ReadStateSummaryResult(T1, [rt.summary()])])
    assert len(rsp.to_bytes(1)) == len(rsp.to_bytes(0)) + 4


# ---------------------------------------------------------------- delete


def test_delete_writes_a_tombstone_and_forgets_the_key():
    rt = runtime()
    rt.initialize()
    rt.write(0, [(0, 3, AVAILABLE, 1)], leader_epoch=4)
    records, row = rt.delete()
    ok(row)
    assert records == [(ShareSnapshotKey(G, T1, 0), None)]
    assert rt.log[-1][2] is None                                 # a null value on disk
    assert rt.shard.entry(KEY) is None
    assert rt.read()[1].error_code == ErrorCode.INVALID_REQUEST
    # The key can be initialised again from scratch: the old fences are gone.
    rt.initialize()
    ok(rt.write(0, [], leader_epoch=1)[1])
    # Deleting what is not there succeeds and writes nothing.
    records, row = rt.delete(partition=9)
    ok(row)
    assert records == []


def test_tombstones_for_deleted_topics():
    rt = runtime()
    rt.initialize(topic=T1)
    rt.initialize(topic=T2)
    records = rt.shard.tombstones_for_topics([T1])
    assert records == [(ShareSnapshotKey(G, T1, 0), None)]
    rt.append(records)
    assert set(rt.shard.entries()) == {SharePartitionKey(G, T2, 0)}


# ---------------------------------------------------------------- replay and pruning


def test_replay_ignores_other_record_types():
    from protocol.coordinator_records.share_group_metadata_key import ShareGroupMetadataKey

    shard = ShareCoordinatorShard()
    shard.replay(0, ShareGroupMetadataKey("g"), None)
    assert shard.entries() == {}


def test_last_redundant_offset_tracks_the_latest_snapshot_of_each_key():
    rt = runtime(2)
    assert rt.shard.last_redundant_offset() is None
    rt.initialize(partition=0)                    # 0: snapshot p0
    assert rt.shard.last_redundant_offset() is None   # offset 0: nothing below it
    rt.initialize(partition=1)                    # 1: snapshot p1
    rt.write(0, [], partition=0)                  # 2: update p0
    rt.write(0, [], partition=0)                  # 3: update p0
    assert rt.shard.last_redundant_offset() is None
    rt.write(0, [], partition=0)                  # 4: snapshot p0
    assert rt.shard.last_redundant_offset() == 1  # p1 still needs offset 1
    rt.write(0, [], partition=1)                  # 5: update p1
    rt.write(0, [], partition=1)                  # 6: update p1
    rt.write(0, [], partition=1)                  # 7: snapshot p1
    assert rt.shard.last_redundant_offset() == 4
    rt.delete(partition=0)                        # 8: tombstone p0
    assert rt.shard.last_redundant_offset() == 7
    rt.delete(partition=1)                        # 9: tombstone p1
    # Nothing left: everything below the last tombstone is redundant, and the log keeps that
    # tombstone (Kafka's ShareCoordinatorOffsetsManager.updateState counts its offset).
    assert rt.shard.last_redundant_offset() == 9


def test_cold_snapshots_let_an_idle_key_be_pruned():
    """Kafka's snapshotColdPartitions: a key whose last snapshot is old enough is snapshotted
    again as it is (snapshot epoch + 1, written now, created when it was)."""
    clock = FakeClock(1_000)
    rt = runtime(3, clock_ms=clock)
    rt.initialize(partition=0, start_offset=0)    # 0: idle from here on
    clock.now += 200_000
    rt.initialize(partition=1, start_offset=0)    # 1
    for _ in range(5):
        rt.write(0, [], partition=1)              # 2-4 updates, 5 snapshot, 6 update
    assert rt.shard.last_redundant_offset() is None   # p0's snapshot at offset 0 holds it back
    clock.now += 99_999
    assert rt.shard.cold_snapshot_records(300_000) == []
    clock.now += 1
    records = rt.shard.cold_snapshot_records(300_000)
    assert [r.key.partition for r in records] == [0]   # p1's snapshot at offset 5 is recent
    before = rt.shard.state(SharePartitionKey(G, T1, 0))
    rt.append(records)                            # 7
    after = rt.shard.state(SharePartitionKey(G, T1, 0))
    assert (after.snapshot_epoch, after.create_timestamp, after.write_timestamp) == (
        before.snapshot_epoch + 1, before.create_timestamp, clock.now)
    assert after.start_offset == before.start_offset and after.state_batches == before.state_batches
    assert rt.shard.last_redundant_offset() == 5


def test_cold_snapshots_skip_a_quiet_partition():
    """Nothing while every key's last snapshot is already a cold one: nothing has changed."""
    clock = FakeClock(1_000)
    rt = runtime(clock_ms=clock)
    assert rt.shard.cold_snapshot_records(1) == []      # no keys
    rt.initialize(partition=0, start_offset=0)
    rt.initialize(partition=1, start_offset=0)
    clock.now += 10
    rt.append(rt.shard.cold_snapshot_records(10))
    assert len(rt.log) == 4
    clock.now += 10
    assert rt.shard.cold_snapshot_records(10) == []
    rt.initialize(partition=1, start_offset=5)            # a fresh snapshot: not a cold one
    clock.now += 10
    assert [r.key.partition for r in rt.shard.cold_snapshot_records(10)] == [0, 1]


ops = st.one_of(
    st.tuples(st.just("init"), st.integers(0, 2), st.integers(0, 3), st.sampled_from([-1, 0, 50])),
    st.tuples(st.just("write"), st.integers(0, 2), st.sampled_from([-1, 10, 30, 60]),
              st.lists(st.tuples(st.integers(0, 70), st.integers(0, 8),
                                 st.sampled_from([AVAILABLE, ACKNOWLEDGED, ARCHIVED]), st.integers(0, 4)),
                       max_size=3),
              st.integers(-1, 4), st.integers(-1, 3), st.integers(-1, 20), st.sampled_from([0, 1])),
    st.tuples(st.just("read"), st.integers(0, 2), st.integers(-1, 5)),
    st.tuples(st.just("delete"), st.integers(0, 2)),
)


def run_op(rt: Runtime, op: tuple):
    """Apply one generated ``op`` to ``rt``; returns its answer."""
    if op[0] == "init":
        _, p, se, start = op
        return rt.initialize(partition=p, state_epoch=se, start_offset=start)
    if op[0] == "write":
        _, p, start, raw, le, se, dcc, version = op
        return rt.write(start, [(f, f + n, s, c) for f, n, s, c in raw], leader_epoch=le, state_epoch=se,
                        dcc=dcc, partition=p, version=version)
    if op[0] == "read":
        return rt.read(leader_epoch=op[2], partition=op[1])
    if op[0] == "summary":
        return rt.summary(partition=op[1])
    return rt.delete(partition=op[1])


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 4), st.lists(ops, max_size=30))
def test_replaying_the_log_rebuilds_the_same_state(records_per_snapshot, program):
    clock = FakeClock()
    rt = runtime(records_per_snapshot, clock_ms=clock)
    for op in program:
        clock.now += 7
        run_op(rt, op)
    full = rt.replayed()
    assert full.entries() == rt.shard.entries()
    assert full.last_redundant_offset() == rt.shard.last_redundant_offset()
    # Dropping every record below the last redundant offset loses no state.
    cut = rt.shard.last_redundant_offset() or 0
    pruned = rt.replayed(cut)
    assert set(pruned.entries()) == set(rt.shard.entries())
    for key, entry in rt.shard.entries().items():
        got = pruned.entry(key)
        assert got.state == entry.state
        assert got.updates_since_snapshot == entry.updates_since_snapshot
        assert got.state_epoch_fence == entry.state_epoch_fence
        # Re-initialising writes leader epoch 0 into the snapshot while the fence keeps the
        # highest epoch seen; pruning below that snapshot can only lower the fence (as in Kafka).
        assert got.leader_epoch_fence <= entry.leader_epoch_fence


class DirectRuntime(Runtime):
    """Append-then-replay of the very record objects the request built, as the service does:
    replay then takes the entries the request staged instead of combining again."""

    def append(self, records) -> None:
        for r in records:
            offset = len(self.log)
            self.log.append((offset, encode_key(r.key), encode_value(r.value)))
            self.shard.replay(offset, r.key, r.value)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 4), st.lists(st.one_of(ops, st.tuples(st.just("summary"), st.integers(0, 2))), max_size=30))
def test_staged_entries_answer_as_replay_from_bytes(records_per_snapshot, program):
    """The service's replay (the request's own record objects, its staged entries) against
    replay of the records read back from bytes: every answer, every record and the final
    state agree."""
    clocks = FakeClock(), FakeClock()
    direct = DirectRuntime(ShareCoordinatorShard(records_per_snapshot, clock_ms=clocks[0]))
    decoded = runtime(records_per_snapshot, clock_ms=clocks[1])
    for op in program:
        clocks[0].now += 7
        clocks[1].now += 7
        assert run_op(direct, op) == run_op(decoded, op)
    assert direct.log == decoded.log
    assert direct.shard.last_redundant_offset() == decoded.shard.last_redundant_offset()
    assert list(direct.shard.load_view().items()) == list(decoded.shard.load_view().items())
    assert direct.shard.entries() == decoded.shard.entries()
