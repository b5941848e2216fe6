"""Acknowledgements on the wire (ShareAcknowledge v1-2 and acks piggybacked on ShareFetch):
accept / release / reject / gap, the delivery-count limit, request-shape validation (atomic per
partition), record-state errors, unknown topics and partitions, and RENEW (KIP-1222, v2).
"""

from __future__ import annotations

import uuid

import pytest

from protocol.messages import initialize_share_group_state_request as init_req
from protocol.messages import share_acknowledge_request as ack_req
from protocol.messages import share_fetch_request as fetch_req
from tests.raw_client import RawClient
from tests.test_share_wire_support import (
    ACCEPT,
    INITIALIZE_SHARE_GROUP_STATE,
    GAP,
    REJECT,
    RELEASE,
    RENEW,
    SHORT_LOCKS,
    ShareMember,
    acquired,
    all_acquired,
    create_topic,
    parts,
    produce_batches,
    record_offsets,
    unique,
)

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
INVALID_REQUEST = 42
UNKNOWN_TOPIC_ID = 100
INVALID_RECORD_STATE = 121


@pytest.fixture
def admin(broker):
    with RawClient(broker.bootstrap) as c:
        yield c


def holding(broker, admin, topic_name, sizes, *, members=1, group=None):
    """A topic whose records (one log batch per entry of ``sizes``) member 0 has acquired.

    Returns (topic-partition, members); every member has an open session on the partition.
    """
    tp = (create_topic(admin, topic_name), 0)
    group = group or unique("g")
    ms = [ShareMember(broker.bootstrap, group) for _ in range(members)]
    for m in ms:
        m.open([tp], version=2)
    produce_batches(admin, topic_name, sizes)
    total = sum(sizes)
    assert all_acquired(ms[0].fetch(max_wait_ms=5000)) == {tp: [(0, total - 1, 1)]}
    return tp, ms


def close_all(ms) -> None:
    for m in ms:
        m.close()


# --- the four outcomes ----------------------------------------------------------------------------


def test_accept_release_reject_and_gap(broker, admin, topic_name):
    tp, (a,) = holding(broker, admin, topic_name, [8])
    try:
        resp = a.acknowledge({tp: [(0, 1, [ACCEPT]), (2, 3, [RELEASE]), (4, 5, [REJECT]), (6, 7, [GAP])]})
        assert resp.error_code == NONE
        assert parts(resp)[tp].error_code == NONE
        resp = a.fetch(max_wait_ms=5000)
        p = parts(resp)[tp]
        assert acquired(p) == [(2, 3, 2)]  # only the released records come back
        assert {2, 3} <= set(record_offsets(p))
        # Per-offset types piggybacked on ShareFetch; the release is redelivered in the same answer.
        produce_batches(admin, topic_name, [4])  # 8-11
        resp = a.fetch(acks={tp: [(2, 3, [ACCEPT])]}, max_wait_ms=5000)
        assert all_acquired(resp) == {tp: [(8, 11, 1)]}
        resp = a.fetch(acks={tp: [(8, 11, [ACCEPT, RELEASE, REJECT, GAP])]}, max_wait_ms=5000)
        assert parts(resp)[tp].acknowledge_error_code == NONE
        assert all_acquired(resp) == {tp: [(9, 9, 2)]}
        resp = a.fetch(acks={tp: [(9, 9, [ACCEPT])]}, max_wait_ms=300)
        assert parts(resp)[tp].acknowledge_error_code == NONE
        assert all_acquired(resp) == {}  # accepted, rejected and gap records never come back
    finally:
        a.close()


def test_a_poison_record_is_archived_at_the_delivery_limit(broker, admin, topic_name):
    tp, (a,) = holding(broker, admin, topic_name, [1])
    try:
        # delivery 1 is held; each piggybacked release is followed by the next delivery
        for count in (2, 3, 4, 5):
            resp = a.fetch(acks={tp: [(0, 0, [RELEASE])]}, max_wait_ms=5000)
            assert parts(resp)[tp].acknowledge_error_code == NONE
            assert all_acquired(resp) == {tp: [(0, 0, count)]}
        resp = a.fetch(acks={tp: [(0, 0, [RELEASE])]}, max_wait_ms=0)  # the 5th release archives it
        assert parts(resp)[tp].acknowledge_error_code == NONE
        assert all_acquired(resp) == {}
        produce_batches(admin, topic_name, [1])
        assert all_acquired(a.fetch(max_wait_ms=5000)) == {tp: [(1, 1, 1)]}
        assert all_acquired(a.fetch(acks={tp: [(1, 1, [RELEASE])]}, max_wait_ms=5000)) == {tp: [(1, 1, 2)]}
    finally:
        a.close()


def test_a_released_batch_is_delivered_at_most_five_times_per_record(broker, admin, topic_name):
    tp, (a,) = holding(broker, admin, topic_name, [4, 4])
    deliveries = {o: 1 for o in range(8)}
    held = [(0, 7)]
    try:
        for _ in range(60):
            resp = a.fetch(acks={tp: [(f, l, [RELEASE]) for f, l in held]}, max_wait_ms=0)
            assert parts(resp)[tp].acknowledge_error_code == NONE
            got = all_acquired(resp).get(tp, [])
            if not got:
                break
            held = [(f, l) for f, l, _ in got]
            for f, l, count in got:
                for o in range(f, l + 1):
                    assert count == deliveries[o] + 1, (o, count, deliveries[o])
                    deliveries[o] = count
        else:
            pytest.fail("redelivery never stopped")
        assert deliveries == {o: 5 for o in range(8)}  # group.share.delivery.count.limit
        produce_batches(admin, topic_name, [1])
        assert all_acquired(a.fetch(max_wait_ms=5000)) == {tp: [(8, 8, 1)]}
    finally:
        a.close()


# --- request shape: the whole partition is INVALID_REQUEST and nothing is applied -------------------

BAD_BATCHES = {
    "overlapping": [(0, 3, [ACCEPT]), (2, 5, [ACCEPT])],
    "descending": [(4, 5, [ACCEPT]), (0, 1, [ACCEPT])],
    "first-after-last": [(0, 0, [ACCEPT]), (3, 1, [ACCEPT])],
    "types-count-mismatch": [(0, 0, [ACCEPT]), (1, 4, [ACCEPT, ACCEPT])],
    "no-types": [(0, 0, [ACCEPT]), (1, 1, [])],
    "type-5": [(0, 0, [ACCEPT]), (1, 1, [5])],
    "negative-type": [(0, 0, [ACCEPT]), (1, 1, [-1])],
    "renew-without-is-renew-ack": [(0, 0, [ACCEPT]), (1, 1, [RENEW])],
}


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("api", ["ShareAcknowledge", "ShareFetch"])
@pytest.mark.parametrize("case", list(BAD_BATCHES))
def test_malformed_batches_reject_the_whole_partition(broker, admin, topic_name, case, api, version):
    tp, (a,) = holding(broker, admin, topic_name, [8])
    try:
        acks = {tp: BAD_BATCHES[case]}
        if api == "ShareAcknowledge":
            resp = a.acknowledge(acks, version=version)
            assert resp.error_code == NONE
            assert parts(resp)[tp].error_code == INVALID_REQUEST
        else:
            resp = a.fetch(acks=acks, version=version, max_wait_ms=0)
            assert resp.error_code == NONE
            p = parts(resp)[tp]
            assert (p.error_code, p.acknowledge_error_code) == (NONE, INVALID_REQUEST)
        # Nothing was applied, not even the valid first batch: all eight are still a's.
        resp = a.acknowledge({tp: [(0, 7, [ACCEPT])]})
        assert parts(resp)[tp].error_code == NONE
    finally:
        a.close()


def test_renew_needs_v2_with_is_renew_ack(broker, admin, topic_name):
    tp, (a,) = holding(broker, admin, topic_name, [2])
    try:
        assert parts(a.acknowledge({tp: [(0, 1, [RENEW])]}, version=1))[tp].error_code == INVALID_REQUEST
        assert parts(a.fetch(acks={tp: [(0, 1, [RENEW])]}, version=1))[tp].acknowledge_error_code == INVALID_REQUEST
        # v2 with IsRenewAck takes it.
        resp = a.acknowledge({tp: [(0, 1, [RENEW])]}, version=2, is_renew_ack=True)
        assert parts(resp)[tp].error_code == NONE
    finally:
        a.close()


# --- record state ---------------------------------------------------------------------------------


def test_acks_for_records_never_acquired_are_invalid_record_state(broker, admin, topic_name):
    tp = (create_topic(admin, topic_name), 0)
    with ShareMember(broker.bootstrap, unique("g")) as a:
        a.open([tp], version=2)
        produce_batches(admin, topic_name, [3])
        # Nothing fetched yet: no in-flight records at all.
        assert parts(a.acknowledge({tp: [(0, 0, [ACCEPT])]}))[tp].error_code == INVALID_RECORD_STATE
        # Record-limit mode acquires 0 only; 1-2 sit in flight, AVAILABLE.
        assert all_acquired(a.fetch(max_records=1, acquire_mode=1, version=2)) == {tp: [(0, 0, 1)]}
        assert parts(a.acknowledge({tp: [(1, 1, [ACCEPT])]}))[tp].error_code == INVALID_RECORD_STATE
        assert parts(a.acknowledge({tp: [(0, 1, [ACCEPT])]}))[tp].error_code == INVALID_RECORD_STATE
        assert parts(a.acknowledge({tp: [(0, 0, [ACCEPT])]}))[tp].error_code == NONE  # atomic: 0 untouched


def test_acks_by_another_member_are_invalid_record_state(broker, admin, topic_name):
    tp, (a, b) = holding(broker, admin, topic_name, [4], members=2)
    try:
        assert parts(b.acknowledge({tp: [(0, 3, [ACCEPT])]}))[tp].error_code == INVALID_RECORD_STATE
        assert parts(b.acknowledge({tp: [(1, 1, [RELEASE])]}))[tp].error_code == INVALID_RECORD_STATE
        assert parts(b.fetch(acks={tp: [(0, 0, [REJECT])]}))[tp].acknowledge_error_code == INVALID_RECORD_STATE
        assert parts(a.acknowledge({tp: [(0, 3, [ACCEPT])]}))[tp].error_code == NONE
    finally:
        close_all([a, b])


def test_refused_acks_say_why_in_kafkas_words(broker, admin, topic_name):
    """SharePartition's reason travels in ShareAcknowledge's ErrorMessage and ShareFetch's
    AcknowledgeErrorMessage, per whole batch or per offset once the batch is split."""
    tp, (a, b) = holding(broker, admin, topic_name, [4], members=2)
    try:
        p = parts(b.acknowledge({tp: [(0, 3, [ACCEPT])]}))[tp]
        assert (p.error_code, p.error_message) == (INVALID_RECORD_STATE, "Member is not the owner of batch record")
        p = parts(b.fetch(acks={tp: [(0, 0, [REJECT])]}))[tp]
        assert (p.acknowledge_error_code, p.acknowledge_error_message) == (
            INVALID_RECORD_STATE, "Member is not the owner of batch record")
        p = parts(a.acknowledge({tp: [(0, 9, [ACCEPT])]}))[tp]
        assert (p.error_code, p.error_message) == (
            INVALID_REQUEST, "Batch record not found. The last offset in request is past acquired records.")
        assert parts(a.acknowledge({tp: [(1, 1, [ACCEPT])]}))[tp].error_code == NONE  # splits the batch
        p = parts(a.acknowledge({tp: [(1, 1, [ACCEPT])]}))[tp]
        assert (p.error_code, p.error_message) == (
            INVALID_RECORD_STATE, "The offset cannot be acknowledged. The offset is not acquired.")
        p = parts(b.acknowledge({tp: [(2, 3, [ACCEPT])]}))[tp]
        assert (p.error_code, p.error_message) == (INVALID_RECORD_STATE, "Member is not the owner of offset")
        p = parts(a.acknowledge({tp: [(0, 0, [ACCEPT]), (2, 3, [ACCEPT])]}))[tp]
        assert (p.error_code, p.error_message) == (NONE, None)
    finally:
        close_all([a, b])


def test_acks_after_the_lock_expired_are_invalid_record_state(broker_factory, topic_name):
    broker = broker_factory(SHORT_LOCKS)
    with RawClient(broker.bootstrap) as admin:
        tp, (a, b) = holding(broker, admin, topic_name, [2], members=2)
        try:
            # b's long poll returns once a's 1 s lock has expired
            assert all_acquired(b.fetch(max_wait_ms=5000)) == {tp: [(0, 1, 2)]}
            assert parts(a.acknowledge({tp: [(0, 1, [ACCEPT])]}))[tp].error_code == INVALID_RECORD_STATE
            assert parts(b.acknowledge({tp: [(0, 1, [ACCEPT])]}))[tp].error_code == NONE
        finally:
            close_all([a, b])


def test_unknown_topics_partitions_and_share_partitions(broker, admin, topic_name):
    tp, (a,) = holding(broker, admin, topic_name, [1])
    tid = tp[0]
    never_fetched = (create_topic(admin, topic_name + "-x"), 0)
    ghost = (uuid.uuid4(), 0)
    try:
        resp = a.acknowledge({ghost: [(0, 0, [ACCEPT])], (tid, 5): [(0, 0, [ACCEPT])],
                              never_fetched: [(0, 0, [ACCEPT])], tp: [(0, 0, [ACCEPT])]})
        assert {k: p.error_code for k, p in parts(resp).items()} == {
            ghost: UNKNOWN_TOPIC_ID, (tid, 5): UNKNOWN_TOPIC_OR_PARTITION,
            never_fetched: UNKNOWN_TOPIC_OR_PARTITION, tp: NONE,
        }
        # Only SharePartitionManager's answer (no share partition loaded) carries a message.
        assert {k: p.error_message for k, p in parts(resp).items()} == {
            ghost: None, (tid, 5): None, never_fetched: "This server does not host this topic-partition.", tp: None,
        }
        resp = a.fetch(acks={ghost: [(0, 0, [ACCEPT])], (tid, 5): [(0, 0, [ACCEPT])]})
        p = parts(resp)
        assert (p[ghost].error_code, p[ghost].acknowledge_error_code) == (UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_ID)
        assert p[(tid, 5)].acknowledge_error_code == UNKNOWN_TOPIC_OR_PARTITION
        p = parts(a.fetch(acks={never_fetched: [(0, 0, [ACCEPT])]}))[never_fetched]
        assert (p.acknowledge_error_code, p.acknowledge_error_message) == (
            UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
    finally:
        a.close()


def test_a_partition_refused_for_leadership_names_the_current_leader(broker, admin, topic_name):
    """Kafka's processShareAcknowledgeResponse (and processShareFetchResponse) fill CurrentLeader
    and NodeEndpoints for NOT_LEADER_OR_FOLLOWER: here a write fenced by state another
    InitializeShareGroupState replaced with a newer state epoch."""
    group = unique("g")
    tp, (a,) = holding(broker, admin, topic_name, [1], group=group)
    try:
        init = admin.request(INITIALIZE_SHARE_GROUP_STATE, 0, init_req.InitializeShareGroupStateRequest(
            group_id=group, topics=[init_req.InitializeStateData(topic_id=tp[0], partitions=[
                init_req.PartitionData(partition=0, state_epoch=99, start_offset=0)])]))
        assert init.results[0].partitions[0].error_code == NONE
        resp = a.acknowledge({tp: [(0, 0, [ACCEPT])]})
        p = parts(resp)[tp]
        assert p.error_code == NOT_LEADER_OR_FOLLOWER
        host, port = broker.bootstrap.rsplit(":", 1)
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (1, 0)  # node.id 1
        assert [(e.node_id, e.host, e.port) for e in resp.node_endpoints] == [(1, host, int(port))]
        resp = a.acknowledge({tp: [(0, 0, [ACCEPT])]})  # the stale share partition was dropped
        assert (parts(resp)[tp].error_code, resp.node_endpoints) == (UNKNOWN_TOPIC_OR_PARTITION, [])
    finally:
        a.close()


def test_the_batches_shape_is_checked_after_the_topic_id_and_before_the_partition(broker, admin, topic_name):
    """KafkaApis.handleAcknowledgements: an unknown topic id first, then INVALID_REQUEST for
    malformed batches, and only then UNKNOWN_TOPIC_OR_PARTITION."""
    tp, (a,) = holding(broker, admin, topic_name, [1])
    tid, ghost = tp[0], (uuid.uuid4(), 0)
    bad = [(3, 1, [ACCEPT])]
    try:
        resp = a.acknowledge({ghost: bad, (tid, 5): bad, (tid, 6): [(0, 0, [ACCEPT])]})
        assert {k: p.error_code for k, p in parts(resp).items()} == {
            ghost: UNKNOWN_TOPIC_ID, (tid, 5): INVALID_REQUEST, (tid, 6): UNKNOWN_TOPIC_OR_PARTITION,
        }
        resp = a.fetch(acks={ghost: bad, (tid, 5): bad})
        assert {k: p.acknowledge_error_code for k, p in parts(resp).items()} == {
            ghost: UNKNOWN_TOPIC_ID, (tid, 5): INVALID_REQUEST,
        }
        assert parts(a.acknowledge({tp: [(0, 0, [ACCEPT])]}))[tp].error_code == NONE
    finally:
        a.close()


def test_a_share_fetch_with_acknowledgements_answers_every_partition_it_names(broker, admin, topic_name):
    """Once a ShareFetch carries acknowledgements, Kafka gives every partition it names an
    acknowledgement result, NONE where it had no batches, and lists it even with no news."""
    tid = create_topic(admin, topic_name, partitions=2)
    p0, p1, missing, ghost = (tid, 0), (tid, 1), (tid, 5), (uuid.uuid4(), 0)
    with ShareMember(broker.bootstrap, unique("g")) as a:
        a.open([p0, p1], version=2)
        produce_batches(admin, topic_name, [2])
        assert all_acquired(a.fetch(max_wait_ms=5000)) == {p0: [(0, 1, 1)]}
        resp = a.fetch([p1, missing, ghost], acks={p0: [(0, 1, [ACCEPT])]})
        assert {k: (p.error_code, p.acknowledge_error_code) for k, p in parts(resp).items()} == {
            p0: (NONE, NONE), p1: (NONE, NONE),
            missing: (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION),
            ghost: (UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_ID),
        }
        # Without acknowledgements, an incremental answer lists only partitions with news.
        resp = a.fetch([p1])
        assert set(parts(resp)) == {missing, ghost}


def test_a_partition_with_no_batches_is_answered_none_once_an_acknowledgement_is_applied(
        broker, admin, topic_name):
    """KafkaApis.handleAcknowledgements answers the partitions without batches (NONE) along
    with the share partitions' results; with nothing to apply, only the refused partitions."""
    tp, (a,) = holding(broker, admin, topic_name, [1])
    never_fetched = (create_topic(admin, topic_name + "-x"), 0)
    ghost = (uuid.uuid4(), 0)
    try:
        assert parts(a.acknowledge({tp: [], never_fetched: []})) == {}
        resp = a.acknowledge({tp: [], ghost: [(0, 0, [ACCEPT])]})
        assert {k: p.error_code for k, p in parts(resp).items()} == {ghost: UNKNOWN_TOPIC_ID}
        resp = a.fetch(acks={tp: [], ghost: [(0, 0, [ACCEPT])]})
        assert {k: p.acknowledge_error_code for k, p in parts(resp).items()} == {ghost: UNKNOWN_TOPIC_ID}
        resp = a.acknowledge({tp: [(0, 0, [ACCEPT])], never_fetched: []})
        assert {k: p.error_code for k, p in parts(resp).items()} == {tp: NONE, never_fetched: NONE}
    finally:
        a.close()


def test_a_partition_named_twice_keeps_the_batches_of_its_last_entry(broker, admin, topic_name):
    """KafkaApis.getAcknowledgeBatchesFromShareAcknowledgeRequest (and ...FromShareFetchRequest)
    map each topic-partition to its batches, so a partition named twice, in one topic or in a
    topic named twice, keeps only its last entry: the earlier ones are neither checked nor applied."""
    tp, (a,) = holding(broker, admin, topic_name, [3])
    tid = tp[0]

    def entry(cls, batch_cls, first, last, kind):
        return cls(partition_index=0, acknowledgement_batches=[
            batch_cls(first_offset=first, last_offset=last, acknowledge_types=[kind])])

    try:
        resp = a.acknowledge(None, topics=[ack_req.AcknowledgeTopic(topic_id=tid, partitions=[
            entry(ack_req.AcknowledgePartition, ack_req.AcknowledgementBatch, 0, 0, RELEASE),
            entry(ack_req.AcknowledgePartition, ack_req.AcknowledgementBatch, 1, 1, ACCEPT)])])
        assert {k: p.error_code for k, p in parts(resp).items()} == {tp: NONE}
        # The last entry is malformed: the partition is INVALID_REQUEST and the valid one is dropped.
        resp = a.fetch(topics=[fetch_req.FetchTopic(topic_id=tid, partitions=[p]) for p in (
            entry(fetch_req.FetchPartition, fetch_req.AcknowledgementBatch, 2, 2, ACCEPT),
            entry(fetch_req.FetchPartition, fetch_req.AcknowledgementBatch, 2, 1, ACCEPT))])
        p = parts(resp)[tp]
        assert (p.error_code, p.acknowledge_error_code, acquired(p)) == (NONE, INVALID_REQUEST, [])
        # Offsets 0 and 2 are still a's: neither the release nor the accept was applied.
        assert parts(a.acknowledge({tp: [(0, 0, [ACCEPT]), (2, 2, [ACCEPT])]}))[tp].error_code == NONE
    finally:
        a.close()


# --- renew (v2) -----------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["max_bytes", "min_bytes", "max_records", "max_wait_ms"])
def test_share_fetch_renew_needs_zero_fetch_limits(broker, admin, topic_name, field):
    tp, (a,) = holding(broker, admin, topic_name, [1])
    try:
        limits = {"max_bytes": 0, "min_bytes": 0, "max_records": 0, "max_wait_ms": 0, field: 1}
        resp = a.fetch(acks={tp: [(0, 0, [RENEW])]}, is_renew_ack=True, version=2, **limits)
        assert (resp.error_code, resp.responses, resp.acquisition_lock_timeout_ms) == (INVALID_REQUEST, [], 0)
    finally:
        a.close()


def test_share_fetch_renew_fetches_nothing(broker, admin, topic_name):
    tp, (a,) = holding(broker, admin, topic_name, [1])
    try:
        produce_batches(admin, topic_name, [2])  # 1-2 available, yet a renew request does not fetch
        resp = a.fetch(acks={tp: [(0, 0, [RENEW])]}, is_renew_ack=True, version=2,
                       max_bytes=0, min_bytes=0, max_records=0, max_wait_ms=0)
        assert resp.error_code == NONE
        p = parts(resp)[tp]
        assert (p.acknowledge_error_code, bytes(p.records), p.acquired_records) == (NONE, b"", [])
        assert all_acquired(a.fetch(acks={tp: [(0, 0, [ACCEPT])]}, max_wait_ms=0)) == {tp: [(1, 2, 1)]}
    finally:
        a.close()


def test_a_renew_share_fetch_answers_only_its_acknowledgements(broker, admin, topic_name):
    """With IsRenewAck KafkaApis.handleShareFetchRequest reads nothing, and the share session
    context lists only the partitions it has data for (ShareSessionContext
    .updateAndGenerateResponseData): a new session or a partition the request adds is not listed,
    only the acknowledgement results are (of every partition named, once one has batches)."""
    tp, (a,) = holding(broker, admin, topic_name, [1])
    other, third = (create_topic(admin, topic_name + "-x"), 0), (create_topic(admin, topic_name + "-y"), 0)
    zeros = {"max_bytes": 0, "min_bytes": 0, "max_records": 0, "max_wait_ms": 0}
    try:
        resp = a.fetch([other], is_renew_ack=True, version=2, **zeros)
        assert (resp.error_code, parts(resp)) == (NONE, {})
        resp = a.fetch([third], acks={tp: [(0, 0, [RENEW])]}, is_renew_ack=True, version=2, **zeros)
        assert {k: (p.error_code, p.acknowledge_error_code) for k, p in parts(resp).items()} == {
            tp: (NONE, NONE), third: (NONE, NONE)}
        with ShareMember(broker.bootstrap, a.group) as b:
            resp = b.fetch([tp, other], epoch=0, is_renew_ack=True, version=2, **zeros)
            assert (resp.error_code, parts(resp)) == (NONE, {})
    finally:
        a.close()


@pytest.mark.parametrize("api", ["ShareAcknowledge", "ShareFetch"])
def test_renew_keeps_records_locked_past_the_lock_duration(broker_factory, topic_name, api):
    broker = broker_factory(SHORT_LOCKS)
    with RawClient(broker.bootstrap) as admin:
        tp, (a, b) = holding(broker, admin, topic_name, [3], members=2)
        try:
            # b keeps trying for 1.6 s in all: past the 1 s lock and past the first renewal's
            # deadline (about 1.5 s), with about 0.5 s of slack before each renewal is due.
            for wait_ms in (500, 500, 600):
                assert all_acquired(b.fetch(max_wait_ms=wait_ms)) == {}
                if api == "ShareAcknowledge":
                    resp = a.acknowledge({tp: [(0, 2, [RENEW])]}, version=2, is_renew_ack=True)
                    assert resp.acquisition_lock_timeout_ms == 1000
                    assert parts(resp)[tp].error_code == NONE
                else:
                    resp = a.fetch(acks={tp: [(0, 2, [RENEW])]}, is_renew_ack=True, version=2,
                                   max_bytes=0, min_bytes=0, max_records=0, max_wait_ms=0)
                    assert parts(resp)[tp].acknowledge_error_code == NONE
            assert parts(a.acknowledge({tp: [(0, 2, [ACCEPT])]}))[tp].error_code == NONE
        finally:
            close_all([a, b])


def test_renew_mixed_with_accept_per_offset(broker_factory, topic_name):
    broker = broker_factory(SHORT_LOCKS)
    with RawClient(broker.bootstrap) as admin:
        tp, (a, b) = holding(broker, admin, topic_name, [2], members=2)
        try:
            assert all_acquired(b.fetch(max_wait_ms=500)) == {}
            resp = a.acknowledge({tp: [(0, 1, [ACCEPT, RENEW])]}, version=2, is_renew_ack=True)
            assert parts(resp)[tp].error_code == NONE
            assert all_acquired(b.fetch(max_wait_ms=700)) == {}  # 1.2 s after acquisition: 1 still a's
            assert parts(a.acknowledge({tp: [(1, 1, [ACCEPT])]}))[tp].error_code == NONE
            assert parts(a.acknowledge({tp: [(0, 0, [ACCEPT])]}))[tp].error_code == NONE  # already done, below SPSO
        finally:
            close_all([a, b])
