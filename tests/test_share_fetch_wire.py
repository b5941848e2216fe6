"""ShareFetch v1-2 on the wire against a subprocess broker: share sessions and their epochs,
member identity, acquisition (MaxRecords, ShareAcquireMode, BatchSize, whole log batches),
long polls woken by produce / release / lock expiry, connection close, and garbage input.

The broker resets new share partitions to ``latest``, so every test opens its sessions
(epoch 0, which loads the share partition) before producing.
"""

from __future__ import annotations

import struct
import time
import uuid

import pytest

from protocol.messages import share_fetch_request as fetch_req
from protocol.messages.api_versions_request import ApiVersionsRequest
from protocol.messages.delete_topics_request import (
    DeleteTopicsRequest,
    DeleteTopicState,
)
from protocol.messages.metadata_request import MetadataRequest
from protocol.records import iter_records
from tests.raw_client import RawClient
from tests.test_produce_support import batch, produce
from tests.test_share_state_support import only, read_state, state_partition, state_records
from tests.test_share_wire_support import (
    ACCEPT,
    METADATA,
    RELEASE,
    SHARE_ACKNOWLEDGE,
    SHARE_FETCH,
    SHORT_LOCKS,
    ShareMember,
    acquired,
    acquired_offsets,
    all_acquired,
    batch_headers,
    create_topic,
    initialize_share_state,
    parts,
    produce_batches,
    record_offsets,
    unique,
)

NONE = 0
UNKNOWN_SERVER_ERROR = -1
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REQUEST = 42
UNKNOWN_TOPIC_ID = 100
SHARE_SESSION_NOT_FOUND = 122
INVALID_SHARE_SESSION_EPOCH = 123
SHARE_SESSION_LIMIT_REACHED = 133

# "Promptly" for a long poll of 5 s: the wake-up path, not the timeout, answered.
PROMPT_S = 2.5


@pytest.fixture
def admin(broker):
    with RawClient(broker.bootstrap) as c:
        yield c


def assert_records_cover_acquired(part) -> None:
    """Records are whole, CRC-valid log batches holding every acquired offset, and no batch
    lies wholly before the first or after the last acquired offset."""
    offsets = acquired_offsets(part)
    assert offsets, "nothing acquired"
    headers = batch_headers(part)
    assert set(offsets) <= set(record_offsets(part))
    assert headers[0].base_offset <= offsets[0] <= headers[0].last_offset
    assert headers[-1].base_offset <= offsets[-1] <= headers[-1].last_offset


def assert_top_level_error(resp, code: int) -> None:
    """As Kafka's getErrorResponse builds it: the code alone (ErrorMessage null)."""
    assert (resp.error_code, resp.error_message) == (code, None)
    assert resp.responses == []
    assert resp.acquisition_lock_timeout_ms == 0


# --- session epochs -------------------------------------------------------------------------------


def test_epoch_zero_opens_and_fetch_and_acknowledge_share_one_epoch_sequence(broker, admin, topic_name):
    tp = (create_topic(admin, topic_name), 0)
    with ShareMember(broker.bootstrap, unique("g")) as m:
        resp = m.open([tp])
        assert resp.acquisition_lock_timeout_ms == 30000  # group.share.record.lock.duration.ms
        p = parts(resp)[tp]
        assert (p.error_code, p.acknowledge_error_code, bytes(p.records), p.acquired_records) == (0, 0, b"", [])
        assert m.fetch(epoch=1).error_code == NONE
        assert m.fetch(epoch=2).error_code == NONE
        for wrong in (2, 4, 1000, -2):
            assert_top_level_error(m.fetch(epoch=wrong), INVALID_SHARE_SESSION_EPOCH)
            assert_top_level_error(m.fetch(epoch=wrong, version=2), INVALID_SHARE_SESSION_EPOCH)
            assert_top_level_error(m.acknowledge({}, epoch=wrong), INVALID_SHARE_SESSION_EPOCH)
            assert_top_level_error(m.acknowledge({}, epoch=wrong, version=2), INVALID_SHARE_SESSION_EPOCH)
        # A wrong epoch does not move the session on; ShareAcknowledge uses up an epoch too.
        assert m.acknowledge({}, epoch=3).error_code == NONE
        assert_top_level_error(m.fetch(epoch=3), INVALID_SHARE_SESSION_EPOCH)
        assert m.fetch(epoch=4).error_code == NONE
        resp = m.acknowledge({}, epoch=5, version=2)
        assert (resp.error_code, resp.acquisition_lock_timeout_ms) == (NONE, 30000)
        assert m.fetch(epoch=6, version=2).error_code == NONE
        # A ShareAcknowledge can never open a session, even over an existing one.
        assert_top_level_error(m.acknowledge({}, epoch=0), INVALID_SHARE_SESSION_EPOCH)
        assert m.fetch(epoch=7).error_code == NONE


def test_unknown_sessions_and_acknowledgements_on_the_opening_request(broker, admin, topic_name):
    tp = (create_topic(admin, topic_name), 0)
    with ShareMember(broker.bootstrap, unique("g")) as m:
        for epoch in (5, -1, 1):
            assert_top_level_error(m.fetch([tp], epoch=epoch), SHARE_SESSION_NOT_FOUND)
            assert_top_level_error(m.acknowledge({}, epoch=epoch), SHARE_SESSION_NOT_FOUND)
        assert_top_level_error(m.acknowledge({}, epoch=0), INVALID_SHARE_SESSION_EPOCH)
        # Acknowledgements at epoch 0 are refused and no session is opened.
        resp = m.fetch([tp], epoch=0, acks={tp: [(0, 0, [ACCEPT])]})
        assert_top_level_error(resp, INVALID_REQUEST)
        assert_top_level_error(m.fetch(epoch=1), SHARE_SESSION_NOT_FOUND)


@pytest.mark.parametrize("api", ["ShareFetch", "ShareAcknowledge"])
def test_epoch_minus_one_applies_acks_fetches_nothing_and_releases_the_rest(broker, admin, topic_name, api):
    tp = (create_topic(admin, topic_name), 0)
    group = unique("g")
    with ShareMember(broker.bootstrap, group) as a, ShareMember(broker.bootstrap, group) as b:
        a.open([tp])
        b.open([tp])
        produce_batches(admin, topic_name, [3])
        assert all_acquired(a.fetch(max_wait_ms=5000)) == {tp: [(0, 2, 1)]}
        produce_batches(admin, topic_name, [3])  # 3-5: available, but a closing request fetches nothing
        acks = {tp: [(0, 0, [ACCEPT])]}
        if api == "ShareFetch":
            resp = a.fetch(epoch=-1, acks=acks, max_wait_ms=5000)
            assert resp.error_code == NONE
            p = parts(resp)[tp]
            assert (p.error_code, p.acknowledge_error_code, bytes(p.records), p.acquired_records) == (0, 0, b"", [])
        else:
            resp = a.acknowledge(acks, epoch=-1)
            assert resp.error_code == NONE
            assert parts(resp)[tp].error_code == NONE
        assert_top_level_error(a.fetch(epoch=1), SHARE_SESSION_NOT_FOUND)
        # 1-2 were released (their fetch still counts as a delivery); 0 was accepted.
        resp = b.fetch(max_wait_ms=5000)
        assert all_acquired(resp) == {tp: [(1, 2, 2), (3, 5, 1)]}
        assert_records_cover_acquired(parts(resp)[tp])


def test_reopening_replaces_the_session_without_releasing_records(broker_factory, topic_name):
    broker = broker_factory(SHORT_LOCKS)
    group = unique("g")
    with RawClient(broker.bootstrap) as admin, ShareMember(broker.bootstrap, group) as a, \
            ShareMember(broker.bootstrap, group) as b:
        tp = (create_topic(admin, topic_name), 0)
        resp = a.open([tp])
        assert resp.acquisition_lock_timeout_ms == 1000
        b.open([tp])
        produce_batches(admin, topic_name, [2])
        assert all_acquired(a.fetch(max_wait_ms=5000)) == {tp: [(0, 1, 1)]}
        a.open([tp])  # a new session at epoch 1; the old epoch sequence is gone
        assert_top_level_error(a.fetch(epoch=2), INVALID_SHARE_SESSION_EPOCH)
        assert all_acquired(b.fetch(max_wait_ms=0)) == {}  # still locked by a
        resp, took = b.timed_fetch(max_wait_ms=5000)
        assert all_acquired(resp) == {tp: [(0, 1, 2)]}
        assert 0.5 <= took < 4, took  # freed by the lock expiring (1 s), not by the re-open


def test_session_limit_answers_after_max_wait(broker_factory, topic_name):
    broker = broker_factory({"group.share.max.share.sessions": "1", "group.share.max.size": "1"})
    group = unique("g")
    with RawClient(broker.bootstrap) as admin, ShareMember(broker.bootstrap, group) as a, \
            ShareMember(broker.bootstrap, group) as b:
        tp = (create_topic(admin, topic_name), 0)
        a.open([tp])
        resp, took = b.timed_fetch([tp], epoch=0, max_wait_ms=400)
        assert_top_level_error(resp, SHARE_SESSION_LIMIT_REACHED)
        assert took >= 0.38, took
        a.open([tp])  # the member already holding a session may replace it
        assert a.fetch(epoch=-1).error_code == NONE
        b.open([tp])


def test_forgotten_partitions_leave_the_session(broker, admin, topic_name):
    t1, t2 = topic_name, topic_name + "-2"
    tp1, tp2 = (create_topic(admin, t1), 0), (create_topic(admin, t2), 0)
    group = unique("g")
    with ShareMember(broker.bootstrap, group) as a, ShareMember(broker.bootstrap, group) as b:
        a.open([tp1, tp2])
        b.open([tp2])
        produce_batches(admin, t1, [1])
        produce_batches(admin, t2, [1])
        assert all_acquired(a.fetch(forgotten=[tp2], max_wait_ms=5000)) == {tp1: [(0, 0, 1)]}
        produce_batches(admin, t1, [1])
        assert all_acquired(a.fetch(max_wait_ms=5000)) == {tp1: [(1, 1, 1)]}
        assert all_acquired(b.fetch(max_wait_ms=5000)) == {tp2: [(0, 0, 1)]}


def test_later_requests_fetch_every_session_partition_whatever_topics_lists(broker, admin, topic_name):
    t1, t2 = topic_name, topic_name + "-2"
    tp1, tp2 = (create_topic(admin, t1), 0), (create_topic(admin, t2), 0)
    with ShareMember(broker.bootstrap, unique("g")) as a:
        a.open([tp1, tp2])
        produce_batches(admin, t1, [1])
        produce_batches(admin, t2, [1])
        resp = a.fetch([], max_wait_ms=5000)
        assert all_acquired(resp) == {tp1: [(0, 0, 1)], tp2: [(0, 0, 1)]}
        produce_batches(admin, t1, [1])
        produce_batches(admin, t2, [1])
        resp = a.fetch([tp1], max_wait_ms=0)
        assert all_acquired(resp) == {tp1: [(1, 1, 1)], tp2: [(1, 1, 1)]}


def test_a_topic_listed_twice_in_one_request_is_merged(broker, admin, topic_name):
    tid = create_topic(admin, topic_name, partitions=2)
    p0, p1 = (tid, 0), (tid, 1)
    FT, FP, AB = fetch_req.FetchTopic, fetch_req.FetchPartition, fetch_req.AcknowledgementBatch
    with ShareMember(broker.bootstrap, unique("g")) as a:
        resp = a.fetch(epoch=0, topics=[FT(topic_id=tid, partitions=[FP(partition_index=0)]),
                                        FT(topic_id=tid, partitions=[FP(partition_index=1)]),
                                        FT(topic_id=tid, partitions=[FP(partition_index=0)])])
        assert resp.error_code == NONE
        assert len(resp.responses) == 1
        assert sorted(parts(resp)) == [p0, p1]
        produce_batches(admin, topic_name, [1], partition=0)
        produce_batches(admin, topic_name, [1], partition=1)
        resp = a.fetch(max_wait_ms=5000)
        assert all_acquired(resp) == {p0: [(0, 0, 1)], p1: [(0, 0, 1)]}
        # librdkafka writes ack-carrying and newly added partitions as separate topic entries.
        release = [AB(first_offset=0, last_offset=0, acknowledge_types=[RELEASE])]
        resp = a.fetch(max_wait_ms=5000, topics=[
            FT(topic_id=tid, partitions=[FP(partition_index=1, acknowledgement_batches=release)]),
            FT(topic_id=tid, partitions=[FP(partition_index=0, acknowledgement_batches=release)]),
        ])
        assert resp.error_code == NONE
        assert len(resp.responses) == 1
        assert {tp: p.acknowledge_error_code for tp, p in parts(resp).items()} == {p0: 0, p1: 0}
        assert all_acquired(resp) == {p0: [(0, 0, 2)], p1: [(0, 0, 2)]}  # both releases applied


# --- identity -------------------------------------------------------------------------------------


@pytest.mark.parametrize("group, member_id", [
    (None, "m"), ("g", ""), ("g", None), ("g", "x" * 37),
], ids=["null-group", "empty-member", "null-member", "37-char-member"])
def test_bad_identity_is_a_top_level_invalid_request(broker, admin, topic_name, group, member_id):
    tp = (create_topic(admin, topic_name), 0)
    with ShareMember(broker.bootstrap, unique("g")) as m:
        assert_top_level_error(m.fetch([tp], epoch=0, group=group, member_id=member_id), INVALID_REQUEST)
        assert_top_level_error(m.acknowledge({}, epoch=1, group=group, member_id=member_id), INVALID_REQUEST)
        assert_top_level_error(m.fetch([tp], epoch=0, group=group, member_id=member_id, version=2), INVALID_REQUEST)


def test_a_36_character_member_id_is_accepted(broker, admin, topic_name):
    tp = (create_topic(admin, topic_name), 0)
    with ShareMember(broker.bootstrap, unique("g"), member_id=str(uuid.uuid4())) as m:
        assert len(m.member_id) == 36
        m.open([tp])
        assert m.acknowledge({}).error_code == NONE
        assert m.fetch(epoch=-1).error_code == NONE


# --- share-partition state -------------------------------------------------------------------------


def test_a_partition_no_group_coordinator_initialised_is_not_part_of_the_group(broker, admin, topic_name):
    """Only the group coordinator initialises share-partition state, before it assigns the
    partition (KIP-932, Kafka 4.1+). A ShareFetch naming a group id that has no share group (a
    raw client, no heartbeat) answers what Kafka 4.2's SharePartition.maybeInitialize fails with
    on the share coordinator's INVALID_REQUEST: UNKNOWN_SERVER_ERROR. The leader creates no state
    (any group id would otherwise grow __share_group_state for good, and DeleteGroups cannot
    remove it), a ShareAcknowledge finds no share partition, and the failed one is not kept: each
    fetch reads the state again, so once initialised the partition loads."""
    tp = (create_topic(admin, topic_name), 0)
    group = unique("no-share-group")
    with ShareMember(broker.bootstrap, group, initialize=False) as m:
        for _ in range(2):
            p = parts(m.fetch([tp]))[tp]
            # (no ErrorMessage: KafkaApis.getResponsePartitionData copies the code alone)
            assert (p.error_code, p.error_message, p.acquired_records) == (UNKNOWN_SERVER_ERROR, None, [])
        assert parts(m.acknowledge({tp: [(0, 0, [ACCEPT])]}))[tp].error_code == UNKNOWN_TOPIC_OR_PARTITION
        assert only(read_state(admin, group, *tp, leader_epoch=-1)).error_code == INVALID_REQUEST

        initialize_share_state(broker.bootstrap, group, [tp])  # what the group coordinator sends
        records = [r for r in state_records(admin, state_partition(group, *tp))
                   if (r[1].group_id, r[1].topic_id, r[1].partition) == (group, *tp)]
        assert [type(r[1]).__name__ for r in records] == ["ShareSnapshotKey"]  # that one: the fetches wrote none
        # Loaded now, at the log end (share.auto.offset.reset latest); listed once more without
        # news as the error is gone (Kafka's requiresUpdateInResponse), then no longer.
        p = parts(m.fetch([tp]))[tp]
        assert (p.error_code, p.acquired_records) == (NONE, [])
        assert tp not in parts(m.fetch())
        produce_batches(admin, topic_name, [3])
        assert acquired(parts(m.fetch())[tp]) == [(0, 2, 1)]


# --- acquisition ----------------------------------------------------------------------------------


def test_members_of_one_group_acquire_disjoint_records_covering_the_partition(broker, admin, topic_name):
    tp = (create_topic(admin, topic_name), 0)
    group = unique("g")
    members = [ShareMember(broker.bootstrap, group) for _ in range(3)]
    try:
        for m in members:
            m.open([tp])
        produce_batches(admin, topic_name, [3] * 10)
        got: dict[int, list[int]] = {i: [] for i in range(3)}
        for _ in range(30):
            progress = False
            for i, m in enumerate(members):
                p = parts(m.fetch(max_records=4, max_wait_ms=0)).get(tp)
                if p is not None and p.acquired_records:
                    assert_records_cover_acquired(p)
                    assert {c for _, _, c in acquired(p)} == {1}
                    got[i] += acquired_offsets(p)
                    progress = True
            if not progress:
                break
        every = [o for offsets in got.values() for o in offsets]
        assert sorted(every) == list(range(30))  # disjoint and complete
        assert all(got.values()), got  # everyone got a share
    finally:
        for m in members:
            m.close()


def test_max_records_is_whole_batches_in_batch_optimized_mode_and_exact_in_record_limit_mode(
        broker, admin, topic_name):
    tp = (create_topic(admin, topic_name), 0)
    with ShareMember(broker.bootstrap, unique("g")) as batchy, ShareMember(broker.bootstrap, unique("g")) as exact:
        batchy.open([tp])
        exact.open([tp], version=2)
        produce_batches(admin, topic_name, [3, 3, 3, 3])  # 0-2, 3-5, 6-8, 9-11
        p = parts(batchy.fetch(max_records=4))[tp]
        assert acquired(p) == [(0, 5, 1)]  # the 4th record's batch comes whole
        assert [h.base_offset for h in batch_headers(p)] == [0, 3]
        assert acquired(parts(batchy.fetch(max_records=4))[tp]) == [(6, 11, 1)]

        p = parts(exact.fetch(max_records=4, acquire_mode=1, version=2))[tp]
        assert acquired(p) == [(0, 3, 1)]
        assert [h.base_offset for h in batch_headers(p)] == [0, 3]
        assert_records_cover_acquired(p)
        p = parts(exact.fetch(max_records=4, acquire_mode=1, version=2))[tp]
        assert acquired_offsets(p) == [4, 5, 6, 7]
        assert {c for _, _, c in acquired(p)} == {1}
        assert [h.base_offset for h in batch_headers(p)] == [3, 6]
        p = parts(exact.fetch(max_records=100, acquire_mode=1, version=2))[tp]
        assert acquired_offsets(p) == [8, 9, 10, 11]
        assert_records_cover_acquired(p)


def test_batch_size_cuts_acquired_ranges_at_log_batch_boundaries(broker, admin, topic_name):
    tp = (create_topic(admin, topic_name), 0)
    with ShareMember(broker.bootstrap, unique("g")) as five, ShareMember(broker.bootstrap, unique("g")) as three:
        five.open([tp])
        three.open([tp])
        produce_batches(admin, topic_name, [3, 3, 3, 3])
        p = parts(five.fetch(batch_size=5))[tp]
        assert acquired(p) == [(0, 5, 1), (6, 11, 1)]
        assert [h.base_offset for h in batch_headers(p)] == [0, 3, 6, 9]
        p = parts(three.fetch(batch_size=3))[tp]
        assert acquired(p) == [(0, 2, 1), (3, 5, 1), (6, 8, 1), (9, 11, 1)]
        with ShareMember(broker.bootstrap, unique("g")) as exact:
            exact.open([tp], version=2)
            produce_batches(admin, topic_name, [3, 3])  # 12-17
            p = parts(exact.fetch(batch_size=2, max_records=5, acquire_mode=1, version=2))[tp]
            assert acquired(p) == [(12, 16, 1)]  # record_limit mode: one range, BatchSize unused


def test_released_records_of_a_big_batch_come_back_in_a_cut_copy(broker, admin, topic_name):
    """Redelivering every 10th record of a 43 KB batch sends a CRC-valid batch holding only
    those records, as a compacted log would; the first delivery and a mostly acquired batch
    go out whole. Record-limit mode cuts the same way."""
    tp = (create_topic(admin, topic_name), 0)
    values = [b"%04d" % i + b"." * 100 for i in range(400)]
    with ShareMember(broker.bootstrap, unique("g")) as m, ShareMember(broker.bootstrap, unique("g")) as exact:
        m.open([tp])
        exact.open([tp], version=2)
        assert produce(admin, topic_name, batch(values)).error_code == NONE
        first = parts(m.fetch())[tp]
        assert acquired(first) == [(0, 399, 1)]
        (whole,) = batch_headers(first)
        assert whole.records_count == 400

        types = [RELEASE if o % 10 == 0 else ACCEPT for o in range(400)]
        assert parts(m.acknowledge({tp: [(0, 399, types)]}))[tp].error_code == NONE
        again = parts(m.fetch())[tp]
        assert acquired(again) == [(o, o, 2) for o in range(0, 400, 10)]
        (h,) = batch_headers(again)
        assert (h.base_offset, h.last_offset, h.records_count) == (0, 399, 40)
        assert h.size < whole.size // 5
        assert [(r.offset, r.value) for r in iter_records(bytes(again.records))] == [
            (o, values[o]) for o in range(0, 400, 10)]

        p = parts(exact.fetch(max_records=4, acquire_mode=1, version=2))[tp]
        assert acquired_offsets(p) == record_offsets(p) == [0, 1, 2, 3]
        p = parts(exact.fetch(max_records=300, acquire_mode=1, version=2))[tp]
        assert acquired(p) == [(4, 303, 1)]
        assert batch_headers(p) == [whole]


def test_max_records_is_one_budget_for_all_partitions_of_a_request(broker, admin, topic_name):
    t1, t2 = topic_name, topic_name + "-2"
    tp1, tp2 = (create_topic(admin, t1), 0), (create_topic(admin, t2), 0)
    with ShareMember(broker.bootstrap, unique("g")) as m:
        m.open([tp1, tp2])
        produce_batches(admin, t1, [3])
        produce_batches(admin, t2, [3])
        first = all_acquired(m.fetch(max_records=3))
        assert list(first.values()) == [[(0, 2, 1)]]  # one partition's batch used up the budget
        second = all_acquired(m.fetch(max_records=3))
        assert list(second.values()) == [[(0, 2, 1)]]
        assert {*first, *second} == {tp1, tp2}
        # record_limit mode (v2) counts exactly across partitions as well
        produce_batches(admin, t1, [3])
        produce_batches(admin, t2, [3])
        got = all_acquired(m.fetch(max_records=4, acquire_mode=1, version=2))
        assert sum(last - first + 1 for ranges in got.values() for first, last, _ in ranges) == 4


def test_max_bytes_limits_the_batches_read_but_never_below_one(broker, admin, topic_name):
    tp = (create_topic(admin, topic_name), 0)
    with ShareMember(broker.bootstrap, unique("g")) as m:
        m.open([tp])
        produce_batches(admin, topic_name, [3, 3, 3])
        p = parts(m.fetch(max_bytes=1))[tp]
        assert acquired(p) == [(0, 2, 1)]
        assert [h.base_offset for h in batch_headers(p)] == [0]
        assert acquired(parts(m.fetch(max_bytes=1 << 20))[tp]) == [(3, 8, 1)]


def test_only_the_first_partition_read_may_exceed_max_bytes(broker, admin, topic_name):
    """As Kafka's ReplicaManager.readFromLog, which DelayedShareFetch reads with: the first
    partition that returns records gets at least one batch whatever MaxBytes (KIP-74); the
    others get what fits in their share of what is left, here nothing."""
    tid = create_topic(admin, topic_name, partitions=2)
    p0, p1 = (tid, 0), (tid, 1)
    with ShareMember(broker.bootstrap, unique("g")) as m:
        m.open([p0, p1])
        for p in (0, 1):
            produce_batches(admin, topic_name, [3], partition=p)
        assert all_acquired(m.fetch(max_bytes=1)) == {p1: [(0, 2, 1)]}  # epoch 1 reads p1 first
        assert all_acquired(m.fetch(max_bytes=1)) == {p0: [(0, 2, 1)]}


def test_records_are_empty_not_null_when_nothing_is_acquired(broker, admin, topic_name):
    tp = (create_topic(admin, topic_name), 0)
    group = unique("g")
    with ShareMember(broker.bootstrap, group) as a, ShareMember(broker.bootstrap, group) as b:
        a.open([tp])
        produce_batches(admin, topic_name, [2])
        assert all_acquired(a.fetch(max_wait_ms=5000)) == {tp: [(0, 1, 1)]}
        # b's opening response lists the partition; its records are all locked by a.
        p = parts(b.open([tp], max_wait_ms=0))[tp]  # the codec refuses a null Records field
        assert (p.error_code, bytes(p.records), p.acquired_records) == (0, b"", [])
        # a's acknowledgement-only answer for the partition also carries empty Records.
        p = parts(a.fetch(acks={tp: [(0, 1, [ACCEPT])]}, max_wait_ms=0))[tp]
        assert (p.acknowledge_error_code, bytes(p.records), p.acquired_records) == (0, b"", [])


def test_unknown_topics_and_partitions_in_a_session(broker, admin, topic_name):
    tid = create_topic(admin, topic_name)
    ghost = (uuid.uuid4(), 0)
    with ShareMember(broker.bootstrap, unique("g")) as m:
        resp = m.open([(tid, 0), (tid, 7), ghost])
        codes = {tp: p.error_code for tp, p in parts(resp).items()}
        assert codes == {(tid, 0): NONE, (tid, 7): UNKNOWN_TOPIC_OR_PARTITION, ghost: UNKNOWN_TOPIC_ID}
        for p in parts(resp).values():
            assert (bytes(p.records), p.acquired_records) == (b"", [])
        produce_batches(admin, topic_name, [1])
        resp = m.fetch(max_wait_ms=5000)
        assert all_acquired(resp) == {(tid, 0): [(0, 0, 1)]}
        codes = {tp: p.error_code for tp, p in parts(resp).items()}
        assert codes == {(tid, 0): NONE, (tid, 7): UNKNOWN_TOPIC_OR_PARTITION, ghost: UNKNOWN_TOPIC_ID}


# --- long polls -----------------------------------------------------------------------------------


def test_long_poll_returns_when_a_record_is_produced(broker, admin, topic_name):
    tp = (create_topic(admin, topic_name), 0)
    with ShareMember(broker.bootstrap, unique("g")) as m:
        m.open([tp])
        t0 = time.monotonic()
        result = m.send_fetch(max_wait_ms=5000)
        admin.request(METADATA, 12, MetadataRequest(topics=[]))  # a round trip: the fetch is parked by now
        produce_batches(admin, topic_name, [1])
        resp = result()
        assert time.monotonic() - t0 < PROMPT_S
        assert all_acquired(resp) == {tp: [(0, 0, 1)]}


def test_members_waiting_together_split_what_arrives(broker, admin, topic_name):
    tp = (create_topic(admin, topic_name), 0)
    group = unique("g")
    with ShareMember(broker.bootstrap, group) as a, ShareMember(broker.bootstrap, group) as b:
        a.open([tp])
        b.open([tp])
        t0 = time.monotonic()
        results = [a.send_fetch(max_wait_ms=5000), b.send_fetch(max_wait_ms=5000)]
        admin.request(METADATA, 12, MetadataRequest(topics=[]))  # both are parked by now
        produce_batches(admin, topic_name, [1])  # wakes both; one acquires, the other waits on
        admin.request(METADATA, 12, MetadataRequest(topics=[]))
        produce_batches(admin, topic_name, [1])
        got = [all_acquired(r()) for r in results]
        assert time.monotonic() - t0 < PROMPT_S
        assert sorted(g[tp][0][0] for g in got) == [0, 1]  # each got one record, none came back empty


def test_long_poll_returns_when_another_member_releases(broker, admin, topic_name):
    tp = (create_topic(admin, topic_name), 0)
    group = unique("g")
    with ShareMember(broker.bootstrap, group) as a, ShareMember(broker.bootstrap, group) as b:
        a.open([tp])
        b.open([tp])
        produce_batches(admin, topic_name, [2])
        assert all_acquired(a.fetch(max_wait_ms=5000)) == {tp: [(0, 1, 1)]}
        t0 = time.monotonic()
        result = b.send_fetch(max_wait_ms=5000)
        assert parts(a.acknowledge({tp: [(0, 1, [RELEASE])]}))[tp].error_code == NONE
        resp = result()
        assert time.monotonic() - t0 < PROMPT_S
        assert all_acquired(resp) == {tp: [(0, 1, 2)]}


def test_long_poll_returns_when_a_lock_expires(broker_factory, topic_name):
    broker = broker_factory(SHORT_LOCKS)
    group = unique("g")
    with RawClient(broker.bootstrap) as admin, ShareMember(broker.bootstrap, group) as a, \
            ShareMember(broker.bootstrap, group) as b:
        tp = (create_topic(admin, topic_name), 0)
        a.open([tp])
        b.open([tp])
        produce_batches(admin, topic_name, [2])
        assert all_acquired(a.fetch(max_wait_ms=5000)) == {tp: [(0, 1, 1)]}
        resp, took = b.timed_fetch(max_wait_ms=5000)
        assert all_acquired(resp) == {tp: [(0, 1, 2)]}
        assert 0.5 <= took < PROMPT_S, took


def test_long_poll_with_nothing_happening_waits_max_wait(broker, admin, topic_name):
    tp = (create_topic(admin, topic_name), 0)
    with ShareMember(broker.bootstrap, unique("g")) as m:
        m.open([tp])
        resp, took = m.timed_fetch(max_wait_ms=500)
        assert resp.error_code == NONE and all_acquired(resp) == {}
        assert 0.45 <= took < PROMPT_S, took


def test_min_bytes_waits_for_more_data_until_max_wait(broker, admin, topic_name):
    tp = (create_topic(admin, topic_name), 0)
    with ShareMember(broker.bootstrap, unique("g")) as m:
        m.open([tp])
        produce_batches(admin, topic_name, [1])
        resp, took = m.timed_fetch(max_wait_ms=500, min_bytes=1 << 20)
        assert all_acquired(resp) == {tp: [(0, 0, 1)]}  # not enough bytes: answered at MaxWaitMs
        assert 0.45 <= took < PROMPT_S, took


def test_partitions_that_returned_records_move_behind_the_others(broker, admin, topic_name):
    """Kafka rotates a session's partitions by its epoch, and its ShareSessionContext moves those
    that returned records in an incremental response to the end of the session: with records
    waiting on both partitions and MaxRecords taken by one, p1, p0, p0, p1 are served."""
    tid = create_topic(admin, topic_name, partitions=2)
    p0, p1 = (tid, 0), (tid, 1)
    with ShareMember(broker.bootstrap, unique("g")) as m:
        m.open([p0, p1])
        served = []
        for _ in range(4):
            for p in (0, 1):
                produce_batches(admin, topic_name, [3], partition=p)
            got = all_acquired(m.fetch(max_wait_ms=5000, max_records=3))
            assert len(got) == 1, got
            served.extend(got)
        assert served == [p1, p0, p0, p1]


def test_the_rotation_counts_only_the_partitions_the_fetch_reads(broker, admin, topic_name):
    """Kafka rotates the partitions it fetches (SharePartitionManager.fetchMessages gets them
    after KafkaApis set the unknown ones aside), so a session partition answered with an error
    does not shift the order: the same p1, p0, p0, p1 as without it."""
    tid = create_topic(admin, topic_name, partitions=2)
    p0, p1, ghost = (tid, 0), (tid, 1), (uuid.uuid4(), 0)
    with ShareMember(broker.bootstrap, unique("g")) as m:
        m.open([ghost, p0, p1])
        served = []
        for _ in range(4):
            for p in (0, 1):
                produce_batches(admin, topic_name, [3], partition=p)
            resp = m.fetch(max_wait_ms=5000, max_records=3)
            assert parts(resp)[ghost].error_code == UNKNOWN_TOPIC_ID
            got = all_acquired(resp)
            assert len(got) == 1, got
            served.extend(got)
        assert served == [p1, p0, p0, p1]


def test_min_bytes_is_capped_at_max_bytes(broker, admin, topic_name):
    """KafkaApis.handleFetchFromShareFetchRequest waits for min(MinBytes, MaxBytes): a fetch
    that may take no more than is already there answers at once."""
    tp = (create_topic(admin, topic_name), 0)
    with ShareMember(broker.bootstrap, unique("g")) as m:
        m.open([tp])
        produce_batches(admin, topic_name, [1])
        resp, took = m.timed_fetch(max_wait_ms=10_000, min_bytes=1 << 20, max_bytes=10)
        assert all_acquired(resp) == {tp: [(0, 0, 1)]}
        assert took < PROMPT_S, took


def test_closing_the_connection_releases_the_members_records(broker, admin, topic_name):
    tp = (create_topic(admin, topic_name), 0)
    group = unique("g")
    with ShareMember(broker.bootstrap, group) as b:
        a = ShareMember(broker.bootstrap, group)
        a.open([tp])
        b.open([tp])
        produce_batches(admin, topic_name, [2])
        assert all_acquired(a.fetch(max_wait_ms=5000)) == {tp: [(0, 1, 1)]}
        a.close()
        resp, took = b.timed_fetch(max_wait_ms=5000)  # the lock would last 30 s
        assert all_acquired(resp) == {tp: [(0, 1, 2)]}
        assert took < PROMPT_S, took


def test_a_long_poll_of_a_closed_connection_does_not_keep_records(broker, admin, topic_name):
    tp = (create_topic(admin, topic_name), 0)
    group = unique("g")
    with ShareMember(broker.bootstrap, group) as b:
        a = ShareMember(broker.bootstrap, group)
        a.open([tp])
        b.open([tp])
        a.send_fetch(max_wait_ms=5000)
        admin.request(METADATA, 12, MetadataRequest(topics=[]))  # a's fetch is parked by now
        a.close()  # gone while its fetch waits
        admin.request(METADATA, 12, MetadataRequest(topics=[]))
        produce_batches(admin, topic_name, [2])  # wakes a's orphaned fetch too
        resp, took = b.timed_fetch(max_wait_ms=5000)  # a lock would last 30 s
        assert acquired_offsets(parts(resp)[tp]) == [0, 1]
        assert took < PROMPT_S, took


def test_a_topic_deleted_and_recreated_under_a_parked_fetch(broker, admin, topic_name):
    """As in Kafka (DelayedShareFetch cannot acquire the fenced share partition, and a produce
    to the new topic id does not reach it), the parked fetch waits out MaxWaitMs and answers
    nothing for the deleted partition; the session's next fetch reports it."""
    tp = (create_topic(admin, topic_name), 0)
    with ShareMember(broker.bootstrap, unique("g")) as m:
        m.open([tp])
        t0 = time.monotonic()
        result = m.send_fetch(max_wait_ms=1000)
        admin.request(METADATA, 12, MetadataRequest(topics=[]))  # the fetch is parked by now
        resp = admin.request(20, 6, DeleteTopicsRequest(topics=[DeleteTopicState(name=topic_name)],
                                                        timeout_ms=5000))
        assert resp.responses[0].error_code == NONE
        new_id = create_topic(admin, topic_name)
        assert new_id != tp[0]
        produce_batches(admin, topic_name, [1])  # the same name's partition: not the fetch's
        resp = result()
        took = time.monotonic() - t0
        assert took >= 0.95, took  # waited out MaxWaitMs (give or take the broker's timer)
        assert resp.error_code == NONE
        assert parts(resp) == {}  # the old topic's share partition is gone, unanswered
        # The member carries on with the new one; the session keeps the old one until forgotten.
        resp = m.fetch([(new_id, 0)], max_wait_ms=0)
        assert resp.error_code == NONE
        assert parts(resp)[tp].error_code == UNKNOWN_TOPIC_OR_PARTITION
    _still_serving(broker)


def test_a_deleted_topic_stays_in_the_session_until_forgotten(broker, admin, topic_name):
    """Kafka's session keeps each partition with the topic name it had when it joined
    (CachedSharePartition), so a deleted topic's partition is answered UNKNOWN_TOPIC_OR_PARTITION
    at every fetch until the member forgets it; a topic id unknown when it joined stays
    UNKNOWN_TOPIC_ID."""
    tp = (create_topic(admin, topic_name), 0)
    other = (create_topic(admin, topic_name + "-o"), 0)
    with ShareMember(broker.bootstrap, unique("g")) as m:
        m.open([tp, other])
        resp = admin.request(20, 6, DeleteTopicsRequest(topics=[DeleteTopicState(name=topic_name)],
                                                        timeout_ms=5000))
        assert resp.responses[0].error_code == NONE
        for _ in range(2):
            resp = m.fetch(max_wait_ms=0)
            assert resp.error_code == NONE
            assert {k: p.error_code for k, p in parts(resp).items()} == {tp: UNKNOWN_TOPIC_OR_PARTITION}
        ghost = (uuid.uuid4(), 0)
        resp = m.fetch([ghost], max_wait_ms=0)
        assert {k: p.error_code for k, p in parts(resp).items()} == {
            tp: UNKNOWN_TOPIC_OR_PARTITION, ghost: UNKNOWN_TOPIC_ID}
        resp = m.fetch(max_wait_ms=0, forgotten=[tp, ghost])
        assert resp.error_code == NONE and parts(resp) == {}


# --- garbage --------------------------------------------------------------------------------------


def _still_serving(broker) -> None:
    with RawClient(broker.bootstrap) as c:
        resp = c.request(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        assert resp.error_code == 0


def test_broker_survives_malformed_share_requests(broker, admin, topic_name):
    tp = (create_topic(admin, topic_name), 0)
    m = ShareMember(broker.bootstrap, unique("g"))
    good = m.client.frame(SHARE_FETCH, 1, m.fetch_request([tp], epoch=0))
    m.close()
    header = 4 + 8 + 2 + len(m.client.client_id) + 1  # size, key/version/correlation, client id, tags
    frames = [
        good[:-7],  # truncated body
        good[:header] + b"\xff" * (len(good) - header),  # noise for a body
        good[:header] + b"\x02g\x02m" + b"\x00" * 24 + b"\xff\xff\xff\xff\x0f",  # absurd Topics count
        struct.pack(">i", 8) + struct.pack(">hhi", SHARE_FETCH, 0, 1),  # v0: not supported
        struct.pack(">i", 8) + struct.pack(">hhi", SHARE_ACKNOWLEDGE, 3, 1),  # v3: not supported
    ]
    for data in frames:
        fixed = struct.pack(">i", len(data) - 4) + data[4:]
        with RawClient(broker.bootstrap) as c:
            c.send_raw(fixed)
            assert c.is_closed_by_broker()
        _still_serving(broker)


@pytest.mark.parametrize("mode", [2, -1])
def test_an_unknown_acquire_mode_fails_the_fetch_after_the_acknowledgements(broker, admin, topic_name, mode):
    """Kafka's ShareFetch turns the mode into ShareAcquireMode.forId, whose
    IllegalArgumentException leaves KafkaApis as a top-level UNKNOWN_SERVER_ERROR; the
    piggybacked acknowledgements were applied and the session moved on by then."""
    tp = (create_topic(admin, topic_name), 0)
    with ShareMember(broker.bootstrap, unique("g")) as m:
        m.open([tp], version=2)
        produce_batches(admin, topic_name, [3])
        assert all_acquired(m.fetch(version=2)) == {tp: [(0, 2, 1)]}
        resp = m.fetch(acks={tp: [(0, 2, [RELEASE])]}, acquire_mode=mode, version=2)
        assert_top_level_error(resp, UNKNOWN_SERVER_ERROR)
        assert resp.responses == []
        m.epoch += 1
        assert all_acquired(m.fetch(version=2)) == {tp: [(0, 2, 2)]}  # released, not fetched then
        resp = m.fetch(acquire_mode=mode, max_records=0, version=2)  # no records wanted: same
        assert_top_level_error(resp, UNKNOWN_SERVER_ERROR)
        m.epoch += 1
        # Nothing to fetch (a renewal, a close): the mode is never looked at.
        resp = m.fetch(acks={tp: [(0, 2, [ACCEPT])]}, acquire_mode=mode, epoch=-1, version=2)
        assert (resp.error_code, parts(resp)[tp].acknowledge_error_code) == (NONE, NONE)


@pytest.mark.parametrize("field, value", [
    ("max_wait_ms", -1), ("min_bytes", -5), ("max_bytes", -1), ("max_bytes", 0), ("max_records", -3),
    ("max_records", 0), ("batch_size", 0), ("batch_size", -1),
])
def test_odd_fetch_limits_answer_without_breaking_the_broker(broker, admin, topic_name, field, value):
    tp = (create_topic(admin, topic_name), 0)
    with ShareMember(broker.bootstrap, unique("g")) as m:
        m.open([tp], version=2)
        produce_batches(admin, topic_name, [3])
        kw = {"max_wait_ms": 0, field: value}
        resp = m.fetch(version=2, **kw)
        assert resp.error_code in (NONE, INVALID_REQUEST)
    _still_serving(broker)
