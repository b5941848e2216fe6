"""The share coordinator's journal, loader and service without sockets.

The journal appends the records of a request as one Kafka batch to a (memory) log; the loader
reads such a log back into lazily replayed keys. The central property: for any history of
state RPCs, a shard loaded from the log (from its start or from the pruning point) holds the
same state, answers the same summaries before replaying anything, and keeps answering like
the shard that wrote the history.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.log import LogConfig, MemoryLogStore
from broker.partitions import AppendError
from coordinator.share.journal import LogJournal
from coordinator.share.loader import LoadError, PartitionLoader
from coordinator.share.service import ShareCoordinatorService
from coordinator.share.shard import ShareCoordinatorShard, SharePartitionKey
from protocol.coordinator_records.share_snapshot_key import ShareSnapshotKey
from protocol.coordinator_records.share_snapshot_value import ShareSnapshotValue
from protocol.coordinator_records.share_update_key import ShareUpdateKey
from protocol.coordinator_records.share_update_value import ShareUpdateValue
from protocol.coordinator_serde import decode, encode_key, encode_value
from protocol.errors import ErrorCode
from protocol.messages import delete_share_group_state_request as dreq
from protocol.messages import initialize_share_group_state_request as ireq
from protocol.messages import read_share_group_state_request as rreq
from protocol.messages import read_share_group_state_summary_request as sreq
from protocol.messages import write_share_group_state_request as wreq
from protocol.records import build_batch, check_batch, iter_records, parse_header

TOPIC = "__share_group_state"
T1, T2 = uuid.UUID(int=0xA1), uuid.UUID(int=0xB2)
GROUPS = ("g1", "group-two")


class FakePartitions:
    """``broker.partitions.append`` for a bare log store."""

    def append(self, lg, data, headers):
        return lg.append(data, headers, leader_epoch=0)


def new_log(store: MemoryLogStore, partition: int = 0, **config):
    return store.create(TOPIC, partition, uuid.UUID(int=1), LogConfig(**config))


def journal_on(store, clock=lambda: 1_700_000_000_000, compression=0) -> LogJournal:
    return LogJournal(store, FakePartitions(), compression=compression, clock_ms=clock)


def service_on(store, *, records_per_snapshot=3, compression=0, num_partitions=1) -> ShareCoordinatorService:
    for p in range(num_partitions):
        new_log(store, p)
    return ShareCoordinatorService(num_partitions=num_partitions, records_per_snapshot=records_per_snapshot,
                                   clock_ms=lambda: 5_000, journal=journal_on(store, compression=compression))


def run(coro):
    return asyncio.run(coro)


def init(group, topic, partition, state_epoch=0, start=-1):
    return ireq.InitializeShareGroupStateRequest(group_id=group, topics=[ireq.InitializeStateData(
        topic_id=topic, partitions=[ireq.PartitionData(partition=partition, state_epoch=state_epoch,
                                                       start_offset=start)])])


def write(group, topic, partition, *, start=-1, leader_epoch=0, state_epoch=0, dcc=-1, batches=()):
    return wreq.WriteShareGroupStateRequest(group_id=group, topics=[wreq.WriteStateData(
        topic_id=topic, partitions=[wreq.PartitionData(
            partition=partition, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start,
            delivery_complete_count=dcc,
            state_batches=[wreq.StateBatch(f, l, s, c) for f, l, s, c in batches])])])


def read(group, topic, partition, leader_epoch=0):
    return rreq.ReadShareGroupStateRequest(group_id=group, topics=[rreq.ReadStateData(
        topic_id=topic, partitions=[rreq.PartitionData(partition=partition, leader_epoch=leader_epoch)])])


def delete(group, topic, partition):
    return dreq.DeleteShareGroupStateRequest(group_id=group, topics=[dreq.DeleteStateData(
        topic_id=topic, partitions=[dreq.PartitionData(partition=partition)])])


def summary(group, pairs):
    by_topic: dict = {}
    for t, p in pairs:
        by_topic.setdefault(t, []).append(sreq.PartitionData(partition=p))
    return sreq.ReadShareGroupStateSummaryRequest(group_id=group, topics=[
        sreq.ReadStateSummaryData(topic_id=t, partitions=ps) for t, ps in by_topic.items()])


def load(lg, buffer_size=5 << 20) -> tuple[ShareCoordinatorShard, PartitionLoader]:
    loader = PartitionLoader(lg, buffer_size)
    while loader.step():
        pass
    shard = ShareCoordinatorShard(3, clock_ms=lambda: 5_000)
    keys, last = loader.result()
    shard.load(keys, last)
    return shard, loader


def summaries(shard, keys):
    out = {}
    for k in keys:
        resp = shard.read_state_summary(summary(k.group_id, [(k.topic_id, k.partition)]))
        p = resp.results[0].partitions[0]
        out[k] = (p.error_code, p.state_epoch, p.leader_epoch, p.start_offset, p.delivery_complete_count)
    return out


# --- the journal ------------------------------------------------------------------------------------


def test_one_batch_per_append_in_kafkas_coordinator_layout():
    store = MemoryLogStore()
    lg = new_log(store)
    j = journal_on(store, clock=lambda: 1_234_567)
    key = SharePartitionKey("g", T1, 3)
    shard = ShareCoordinatorShard()
    records, _ = shard.initialize_state(init("g", T1, 3, state_epoch=2, start=40))
    records += [shard.tombstone(key)]
    assert j.append(0, records) == [0, 1]
    assert j.append(0, records[:1]) == [2]
    rr = lg.read(0, 1 << 20)
    assert [(b.base_offset, b.last_offset) for b in rr.batches] == [(0, 1), (2, 2)]
    buf = b"".join(bytes(v) for v in rr.views())
    h = check_batch(buf, 0)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (-1, -1, 0)
    assert (h.is_transactional, h.log_append_time, h.attributes & 7) == (False, False, 0)
    assert (h.base_timestamp, h.max_timestamp, h.partition_leader_epoch) == (1_234_567, 1_234_567, 0)
    got = [(r.offset, r.timestamp, *decode(r.key, r.value)) for r in iter_records(buf, 0)]
    assert [g[:2] for g in got] == [(0, 1_234_567), (1, 1_234_567)]
    assert got[0][2] == ShareSnapshotKey("g", T1, 3) and got[0][3] == records[0].value
    assert got[1][2] == ShareSnapshotKey("g", T1, 3) and got[1][3] is None


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_the_configured_codec_compresses_each_batch(codec):
    store = MemoryLogStore()
    lg = new_log(store)
    j = journal_on(store, compression=codec)
    shard = ShareCoordinatorShard()
    records, _ = shard.initialize_state(init("g", T1, 0))
    j.append(0, records * 3)
    buf = b"".join(bytes(v) for v in lg.read(0, 1 << 20).views())
    assert check_batch(buf).attributes & 7 == codec
    assert [decode(r.key, r.value)[1] for r in iter_records(buf)] == [records[0].value] * 3


def test_sync_flushes_only_when_flush_messages_says_so():
    store = MemoryLogStore()
    flushed = []
    lg = new_log(store, flush_messages=2)

    async def flush(upto=None):
        flushed.append(upto)

    lg.flush = flush
    j = journal_on(store)
    shard = ShareCoordinatorShard()
    rec, _ = shard.initialize_state(init("g", T1, 0))

    async def go():
        await j.sync(0, j.append(0, rec))  # 1 message: below flush.messages
        await j.sync(0, j.append(0, rec))  # 2: flush up to offset 2
        await j.sync(0, j.append(0, rec))

    run(go())
    assert flushed == [2]


def test_a_missing_state_partition_is_an_append_error():
    j = journal_on(MemoryLogStore())
    shard = ShareCoordinatorShard()
    rec, _ = shard.initialize_state(init("g", T1, 0))
    with pytest.raises(AppendError) as e:
        j.append(7, rec)
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# --- the loader: property ------------------------------------------------------------------------

KEYS = [SharePartitionKey("g1", T1, 0), SharePartitionKey("g1", T2, 1), SharePartitionKey("group-two", T1, 0)]
batch_st = st.tuples(st.integers(0, 40), st.integers(0, 5), st.sampled_from([0, 2, 4]), st.integers(1, 5))
write_st = st.tuples(st.just("write"), st.sampled_from(KEYS), st.integers(-1, 30), st.integers(-1, 3),
                     st.integers(-1, 10), st.lists(batch_st, max_size=3))
op_st = st.one_of(
    st.tuples(st.just("init"), st.sampled_from(KEYS), st.integers(0, 3), st.integers(-1, 20)),
    write_st, write_st, write_st,
    st.tuples(st.just("read"), st.sampled_from(KEYS), st.integers(-1, 4)),
    st.tuples(st.just("delete"), st.sampled_from(KEYS)),
)


INIT_ALL = [("init", k, 0, -1) for k in KEYS]


def apply_ops(service, ops):
    async def go():
        for op in ops:
            kind, k = op[0], op[1]
            if kind == "init":
                await service.initialize_state(init(k.group_id, k.topic_id, k.partition, op[2], op[3]))
            elif kind == "write":
                batches = [(f, f + n, s, c) for f, n, s, c in op[5]]
                await service.write_state(write(k.group_id, k.topic_id, k.partition, start=op[2],
                                                leader_epoch=op[3], dcc=op[4], batches=batches))
            elif kind == "read":
                await service.read_state(read(k.group_id, k.topic_id, k.partition, op[2]))
            else:
                await service.delete_state(delete(k.group_id, k.topic_id, k.partition))
    run(go())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op_st, min_size=3, max_size=40).map(lambda ops: INIT_ALL + ops), codec=st.sampled_from([0, 0, 3]), buffer=st.sampled_from([61, 300, 1 << 20]),
       prune=st.booleans())
def test_a_loaded_shard_equals_the_shard_that_wrote_the_log(ops, codec, buffer, prune):
    store = MemoryLogStore()
    service = service_on(store, compression=codec)
    apply_ops(service, ops)
    original = service.shard(0)
    lg = store.get(TOPIC, 0)
    if prune and (cut := original.last_redundant_offset()) is not None:
        lg.delete_records_before(cut)
    loaded, loader = load(lg, buffer)
    # Before anything is replayed: the same keys, the same summaries, nothing combined yet.
    assert sorted(loaded.keys()) == sorted(original.keys())
    assert loaded.pending_count() == len(original.keys())
    assert summaries(loaded, KEYS) == summaries(original, KEYS)
    assert loaded.pending_count() == len(original.keys())
    assert loaded.last_redundant_offset() == original.last_redundant_offset()
    # Replayed: the same state and snapshot bookkeeping (fences only from the latest snapshot on).
    want, got = original.entries(), loaded.entries()
    assert {k: (e.state, e.updates_since_snapshot) for k, e in got.items()} == \
           {k: (e.state, e.updates_since_snapshot) for k, e in want.items()}
    for k, e in got.items():
        for mine, theirs in ((e.leader_epoch_fence, want[k].leader_epoch_fence),
                             (e.state_epoch_fence, want[k].state_epoch_fence)):
            assert mine is None or theirs is not None and mine <= theirs


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op_st, max_size=25).map(lambda ops: INIT_ALL + ops), more=st.lists(op_st, max_size=15))
def test_a_loaded_shard_keeps_answering_like_the_original(ops, more):
    """Requests after a load give the same responses and records as without the restart."""
    store = MemoryLogStore()
    service = service_on(store)
    apply_ops(service, ops)
    twin_store = MemoryLogStore()
    twin = service_on(twin_store)
    loaded, _ = load(store.get(TOPIC, 0))
    twin.shards[0] = loaded
    # Fences can be lower after a load (documented), so only fence-free requests are compared.
    more = [op for op in more if op[0] in ("init", "delete") or (op[0] == "write" and op[3] == -1)]
    apply_ops(service, more)
    apply_ops(twin, more)
    assert summaries(twin.shard(0), KEYS) == summaries(service.shard(0), KEYS)
    assert {k: e.state for k, e in twin.shard(0).entries().items()} == \
           {k: e.state for k, e in service.shard(0).entries().items()}


# --- the loader: cases ---------------------------------------------------------------------------


def append_raw(lg, records, **kw):
    data = bytearray(build_batch(records, **kw))
    return lg.append(data, [parse_header(data)])


def snapshot_bytes(key, start=5, dcc=0, epoch=1):
    v = ShareSnapshotValue(snapshot_epoch=epoch, state_epoch=1, leader_epoch=0, start_offset=start,
                           delivery_complete_count=dcc, create_timestamp=1, write_timestamp=1)
    return encode_key(ShareSnapshotKey(*key)), encode_value(v)


def update_bytes(key, start=-1, leader=-1, dcc=7):
    v = ShareUpdateValue(snapshot_epoch=1, leader_epoch=leader, start_offset=start, delivery_complete_count=dcc)
    return encode_key(ShareUpdateKey(*key)), encode_value(v)


def test_records_of_other_types_and_control_batches_are_skipped():
    store = MemoryLogStore()
    lg = new_log(store)
    k = ("g", T1, 0)
    append_raw(lg, [(b"\x00\x07whatever", b"\x00\x00", None)])  # an unknown record type
    append_raw(lg, [(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", None)], is_control=True)
    append_raw(lg, [(*snapshot_bytes(k), None), (*update_bytes(k, start=9, leader=3), None),
                    (*update_bytes(k, dcc=4), None)])
    shard, _ = load(lg)
    key = SharePartitionKey(*k)
    assert shard.keys() == [key]
    assert summaries(shard, [key])[key] == (0, 1, 3, 9, 4)
    assert shard.state(key).start_offset == 9 and shard.pending_count() == 0


def test_a_tombstone_forgets_the_key_and_a_later_update_starts_it_again():
    store = MemoryLogStore()
    lg = new_log(store)
    k = ("g", T1, 0)
    append_raw(lg, [(*snapshot_bytes(k), None)])
    append_raw(lg, [(encode_key(ShareSnapshotKey(*k)), None, None)])
    shard, _ = load(lg)
    assert shard.keys() == []
    assert shard.last_redundant_offset() == 1  # nothing is needed any more but the tombstone
    append_raw(lg, [(*update_bytes(k, start=3, leader=1), None)])
    shard, _ = load(lg)
    key = SharePartitionKey(*k)
    assert summaries(shard, [key])[key] == (0, 0, 1, 3, 7)  # state epoch 0: never initialised
    assert shard.last_redundant_offset() == 2


@pytest.mark.parametrize("key_bytes", [None, b"\x00", b"\x00\x01\x00\x05ab"])
def test_an_unreadable_key_fails_the_load(key_bytes):
    store = MemoryLogStore()
    lg = new_log(store)
    append_raw(lg, [(key_bytes, b"\x00\x00", None)])
    with pytest.raises(LoadError):
        load(lg)


def test_a_batch_larger_than_the_buffer_is_read_whole():
    store = MemoryLogStore()
    lg = new_log(store)
    k = ("g", T1, 0)
    append_raw(lg, [(*update_bytes(k, start=i), None) for i in range(50)])
    shard, loader = load(lg, buffer_size=64)
    key = SharePartitionKey(*k)
    assert summaries(shard, [key])[key][3] == 49 and loader.records == 50


# --- the service ---------------------------------------------------------------------------------


def test_loading_and_failed_partitions_answer_kafkas_coordinator_errors():
    svc = ShareCoordinatorService(num_partitions=4)
    k = KEYS[0]
    sp = svc.partition_of(*k)
    svc.set_loading(sp)
    r = run(svc.write_state(write(*k)))
    p = r.results[0].partitions[0]
    assert (p.error_code, p.error_message) == (
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        "Unable to write share group state: The coordinator is loading and hence can't process requests.")
    svc.set_failed(sp)
    p = run(svc.read_state_summary(summary(k.group_id, [(k.topic_id, k.partition)]))).results[0].partitions[0]
    assert (p.error_code, p.error_message) == (
        ErrorCode.NOT_COORDINATOR, "Unable to read share group state summary: This is not the correct coordinator.")
    svc.set_loaded(sp)
    assert run(svc.initialize_state(init(*k))).results[0].partitions[0].error_code == 0
    svc.active = False
    p = run(svc.read_state(read(*k))).results[0].partitions[0]
    assert (p.error_code, p.error_message) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, "Share coordinator is not available.")


def test_a_request_spanning_loaded_and_loading_partitions_answers_each_part():
    svc = ShareCoordinatorService(num_partitions=50)
    pairs = [(T1, p) for p in range(8)]
    loading = svc.partition_of("g", T1, 0)
    svc.set_loading(loading)
    resp = run(svc.read_state_summary(summary("g", pairs)))
    codes = {p.partition: p.error_code for t in resp.results for p in t.partitions}
    assert codes == {p: (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if svc.partition_of("g", T1, p) == loading else 0)
                     for p in range(8)}


@pytest.mark.parametrize("req", [
    wreq.WriteShareGroupStateRequest(group_id="g", topics=[]),
    wreq.WriteShareGroupStateRequest(group_id="", topics=[wreq.WriteStateData(topic_id=T1, partitions=[
        wreq.PartitionData(partition=0)])]),
    wreq.WriteShareGroupStateRequest(group_id="g", topics=[
        wreq.WriteStateData(topic_id=T1, partitions=[wreq.PartitionData(partition=0)]),
        wreq.WriteStateData(topic_id=T2, partitions=[])]),
])
def test_degenerate_requests_get_an_empty_response_even_when_not_active(req):
    svc = ShareCoordinatorService(active=False)
    assert run(svc.write_state(req)).results == []


def test_summary_delete_and_initialize_check_the_coordinator_runs_before_the_requests_shape():
    """ShareCoordinatorService's readStateSummary, deleteState and initializeState answer
    COORDINATOR_NOT_AVAILABLE for every partition named before looking at the group id or
    at topics without partitions (write and read look first, above)."""
    svc = ShareCoordinatorService(active=False)
    for call, req in ((svc.read_state_summary, summary("", [(T1, 0)])), (svc.delete_state, delete("", T1, 0)),
                      (svc.initialize_state, init("", T1, 0))):
        [p] = run(call(req)).results[0].partitions
        assert (p.error_code, p.error_message) == (ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                                   "Share coordinator is not available.")


def test_an_initialize_without_a_group_id_is_answered_empty_before_any_state_partition():
    """ShareCoordinatorService.initializeState answers an empty group id with an empty response
    once the coordinator runs, before scheduling anything on a state partition: a partition
    still loading (or not coordinated) does not turn it into per-partition errors."""
    svc = ShareCoordinatorService(num_partitions=1)
    for mark in (svc.set_loading, svc.set_failed, svc.set_loaded):
        mark(0)
        assert run(svc.initialize_state(init("", T1, 0))).results == []


def test_a_topic_named_twice_is_one_topic():
    """Kafka keys a state RPC's work by topic id and partition: a topic named twice is written
    once per partition and answered as one topic."""
    journal = FailingJournal()
    svc = ShareCoordinatorService(num_partitions=1, journal=journal)
    req = ireq.InitializeShareGroupStateRequest(group_id="g", topics=[
        ireq.InitializeStateData(topic_id=T1, partitions=[ireq.PartitionData(partition=p, start_offset=0)])
        for p in (0, 1)])
    resp = run(svc.initialize_state(req))
    assert [(t.topic_id, [(p.partition, p.error_code) for p in t.partitions]) for t in resp.results] == \
        [(T1, [(0, 0), (1, 0)])]
    assert sorted(r.key.partition for records in journal.appended for r in records) == [0, 1]


def test_a_partition_named_twice_is_handled_twice_and_answered_once():
    """Kafka's futureMap holds one future per topic id and partition, the last one scheduled:
    both writes are made, in order, and the answer has the partition once, with the last
    outcome (here the second write, fenced after the first moved the state epoch up)."""
    journal = FailingJournal()
    svc = ShareCoordinatorService(num_partitions=1, journal=journal)
    req = ireq.InitializeShareGroupStateRequest(group_id="g", topics=[
        ireq.InitializeStateData(topic_id=T1, partitions=[ireq.PartitionData(partition=0, start_offset=0),
                                                          ireq.PartitionData(partition=1, start_offset=0)]),
        ireq.InitializeStateData(topic_id=T1, partitions=[ireq.PartitionData(partition=0, start_offset=4)])])
    resp = run(svc.initialize_state(req))
    assert [(t.topic_id, [(p.partition, p.error_code) for p in t.partitions]) for t in resp.results] == \
        [(T1, [(0, 0), (1, 0)])]
    assert [r.key.partition for records in journal.appended for r in records] == [0, 1, 0]
    assert svc.shard(0).state(SharePartitionKey("g", T1, 0)).start_offset == 4
    req = ireq.InitializeShareGroupStateRequest(group_id="g", topics=[
        ireq.InitializeStateData(topic_id=T1, partitions=[ireq.PartitionData(partition=0, state_epoch=s)
                                                          for s in (3, 2)])])
    [t] = run(svc.initialize_state(req)).results
    assert [(p.partition, p.error_code) for p in t.partitions] == [(0, ErrorCode.FENCED_STATE_EPOCH)]


def test_initialize_with_state_epoch_minus_one_is_not_fenced():
    """Kafka's maybeGetInitializeStateError fences only a state epoch that is not -1."""
    svc = ShareCoordinatorService(num_partitions=4)
    for state_epoch, code in ((5, 0), (3, ErrorCode.FENCED_STATE_EPOCH), (-1, 0)):
        [p] = run(svc.initialize_state(init("g", T1, 0, state_epoch=state_epoch))).results[0].partitions
        assert p.error_code == code, state_epoch


def test_initialize_naming_only_topics_without_partitions_answers_nothing():
    svc = ShareCoordinatorService(num_partitions=4)
    req = ireq.InitializeShareGroupStateRequest(group_id="g", topics=[ireq.InitializeStateData(topic_id=T1)])
    assert run(svc.initialize_state(req)).results == []


class FailingJournal:
    def __init__(self, append_error=None, sync_error=None):
        self.append_error, self.sync_error = append_error, sync_error
        self.appended = []

    def append(self, partition, records):
        if self.append_error:
            raise self.append_error
        self.appended.append(records)
        return list(range(len(records)))

    async def sync(self, partition, offsets):
        if self.sync_error:
            raise self.sync_error


@pytest.mark.parametrize("code, answered, warned", [
    (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_COORDINATOR, False),  # the log reports it, once
    (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.COORDINATOR_NOT_AVAILABLE, True),
    (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.UNKNOWN_SERVER_ERROR, True),
])
def test_failed_writes_map_like_kafkas_coordinator_runtime(code, answered, warned, caplog):
    svc = ShareCoordinatorService(journal=FailingJournal(append_error=AppendError(code, log_message="boom")))
    p = run(svc.initialize_state(init("g", T1, 0))).results[0].partitions[0]
    assert (p.error_code, p.error_message) == (answered, "Unable to initialize share group state: boom")
    assert any(r.levelno == logging.WARNING for r in caplog.records) == warned
    assert svc.shard(svc.partition_of("g", T1, 0)).keys() == []  # nothing replayed


def test_a_failed_sync_answers_not_coordinator():
    err = AppendError(ErrorCode.KAFKA_STORAGE_ERROR, log_message="fsync failed")
    svc = ShareCoordinatorService(journal=FailingJournal(sync_error=err))
    p = run(svc.initialize_state(init("g", T1, 0))).results[0].partitions[0]
    assert p.error_code == ErrorCode.NOT_COORDINATOR


def test_snapshot_records_cover_keys_with_updates_only():
    store = MemoryLogStore()
    svc = service_on(store, records_per_snapshot=500)
    a, b = KEYS[0], KEYS[1]
    run(svc.initialize_state(init(*a)))
    run(svc.initialize_state(init(*b)))
    run(svc.write_state(write(*a, start=4, dcc=1, batches=[(4, 6, 0, 1)])))
    shard = svc.shard(0)
    records = shard.snapshot_records()
    assert [SharePartitionKey(r.key.group_id, r.key.topic_id, r.key.partition) for r in records] == [a]
    before = shard.state(a)
    assert records[0].value.snapshot_epoch == before.snapshot_epoch + 1
    run(svc.write_records(0, records))
    assert shard.entry(a).updates_since_snapshot == 0
    assert shard.state(a).start_offset == 4 and shard.state(a).state_batches == before.state_batches
    assert shard.snapshot_records() == []
    # Everything before the two latest snapshots is now redundant.
    assert shard.last_redundant_offset() == 1
