"""The share-group coordinator's admin steps, as a pure state machine: ShareGroupDescribe
lookups, AlterShareGroupOffsets (partitions to initializing, then initialized) and
DeleteShareGroupOffsets (initialized to deleting, then gone), with Kafka's errors; every
step's records rebuild the same state when replayed on a fresh coordinator."""

from __future__ import annotations

import uuid

import pytest

from coordinator.group.share_group import ShareGroupCoordinator
from coordinator.group.share_offsets import TopicOffsets, lag_is_computable, share_partition_lag
from coordinator.group.share_state import NO_OFFSET_INFORMATION
from coordinator.group.topics import TopicInfo, TopicsImage
from persister.api import SummaryResult
from protocol.errors import ErrorCode, KafkaError

ORDERS = TopicInfo(uuid.UUID(int=0xA1), "orders", 3)
PAYMENTS = TopicInfo(uuid.UUID(int=0xB2), "payments", 2)
HOST = "/127.0.0.1"
MEMBER = "kAMA2MYCSgWVW/t4+7NOvA"


def coordinator(**kwargs) -> ShareGroupCoordinator:
    return ShareGroupCoordinator(TopicsImage([ORDERS, PAYMENTS]), track_share_state=True, **kwargs)


def replayed(records) -> ShareGroupCoordinator:
    other = coordinator()
    other.replay_all(records)
    return other


def initialized(c, group="g"):
    return {t: sorted(ps) for t, ps in c.initialized_partitions(group).items()}


def alter(c, group, topics, now=0):
    return c.prepare_offsets_alter(group, topics, now)


# --- describe ---------------------------------------------------------------------------------


def test_describe_answers_kafkas_group_id_not_found_messages():
    c = coordinator(foreign_group_type=lambda g: "consumer" if g == "classic" else None)
    with pytest.raises(KafkaError) as e:
        c.describe("nope")
    assert (e.value.code, e.value.message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group nope not found.")
    with pytest.raises(KafkaError) as e:
        c.describe("classic")
    assert (e.value.code, e.value.message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group classic is not a share group.")
    c.heartbeat("g", MEMBER, 0, None, ["orders"], "cli", HOST, 0)
    d = c.describe("g")
    assert (d.state, d.assignor_name, [m.member_id for m in d.members]) == ("Stable", "simple", [MEMBER])


# --- AlterShareGroupOffsets -------------------------------------------------------------------


def test_alter_creates_an_empty_group_and_initializes_the_named_partitions():
    c = coordinator()
    plan = alter(c, "new", [("orders", [(0, 5), (2, 7)]), ("payments", [(1, 0)])], now=100)
    assert plan.results == [("orders", ORDERS.topic_id, [(0, 0), (2, 0)]), ("payments", PAYMENTS.topic_id, [(1, 0)])]
    assert plan.offsets == {(ORDERS.topic_id, 0): 5, (ORDERS.topic_id, 2): 7, (PAYMENTS.topic_id, 1): 0}
    assert plan.request.state_epoch == 0  # the (new) group's epoch
    assert plan.request.pairs() == sorted([(ORDERS.topic_id, 0), (ORDERS.topic_id, 2), (PAYMENTS.topic_id, 1)])
    assert c.group_state("new") == "Empty" and initialized(c, "new") == {}  # initializing, not yet initialized
    done = c.initialize_share_state("new", plan.request.partitions)
    assert initialized(c, "new") == {ORDERS.topic_id: [0, 2], PAYMENTS.topic_id: [1]}
    assert replayed(plan.records + done).snapshot() == c.snapshot()


def test_alter_reports_unknown_topics_and_partitions_per_partition():
    c = coordinator()
    plan = alter(c, "g", [("missing", [(0, 1)]), ("orders", [(3, 1), (-1, 1), (1, 4)])])
    unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert plan.results == [("missing", None, [(0, unknown)]), ("orders", ORDERS.topic_id, [(3, unknown), (-1, unknown), (1, 0)])]
    assert plan.request.pairs() == [(ORDERS.topic_id, 1)]


def test_alter_with_nothing_valid_writes_nothing():
    c = coordinator()
    plan = alter(c, "g", [("missing", [(0, 1)])])
    assert plan.records == [] and plan.request is None and not c.has_group("g")


def test_alter_naming_only_missing_partitions_of_a_topic_records_it_and_creates_the_group():
    """GroupMetadataManager.alterShareGroupOffsets puts every existing topic named in its
    initializing map, with no partitions when none exists, so addInitializingTopicsRecords
    writes the record (the new group is kept); buildInitializeShareGroupState has no topics,
    so nothing is sent to the share coordinator."""
    c = coordinator()
    plan = alter(c, "new", [("orders", [(7, 1)])])
    assert plan.results == [("orders", ORDERS.topic_id, [(7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)])]
    assert plan.request is None and len(plan.records) == 1
    assert c.has_group("new") and c.group_state("new") == "Empty" and initialized(c, "new") == {}
    assert replayed(plan.records).snapshot() == c.snapshot()


def test_alter_refuses_a_group_with_members_and_a_foreign_group():
    c = coordinator(foreign_group_type=lambda g: "classic" if g == "classic" else None)
    c.heartbeat("g", MEMBER, 0, None, ["orders"], "cli", HOST, 0)
    with pytest.raises(KafkaError) as e:
        alter(c, "g", [("orders", [(0, 0)])])
    assert e.value.code == ErrorCode.NON_EMPTY_GROUP
    with pytest.raises(KafkaError) as e:
        alter(c, "classic", [("orders", [(0, 0)])])
    assert (e.value.code, e.value.message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group classic is not a share group.")


def test_alter_uses_the_group_epoch_as_state_epoch_and_keeps_partitions_initialized():
    c = coordinator()
    first = c.heartbeat("g", MEMBER, 0, None, ["orders"], "cli", HOST, 0)
    c.initialize_share_state("g", {t: ps for t, ps in first.initialize.partitions.items()})
    c.heartbeat("g", MEMBER, -1, None, None, "cli", HOST, 0)  # leaves: the epoch is bumped
    epoch = c.describe("g").group_epoch
    plan = alter(c, "g", [("orders", [(1, 9)])])
    assert plan.request.state_epoch == epoch
    assert initialized(c) == {ORDERS.topic_id: [0, 1, 2]}  # still assignable while being reset
    c.initialize_share_state("g", plan.request.partitions)
    assert initialized(c) == {ORDERS.topic_id: [0, 1, 2]}
    assert c.snapshot()["g"]["initializing_topics"] == {}


# --- DeleteShareGroupOffsets ------------------------------------------------------------------


def test_delete_offsets_moves_initialized_topics_to_deleting_then_forgets_them():
    c = coordinator()
    plan = alter(c, "g", [("orders", [(0, 0), (1, 0)]), ("payments", [(0, 0)])])
    log = plan.records + c.initialize_share_state("g", plan.request.partitions)
    step = c.prepare_offsets_delete("g", ["orders", "missing", "orders"])
    assert step.to_delete == {ORDERS.topic_id: ("orders", frozenset({0, 1}))}
    assert step.errors == [("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)]
    assert initialized(c) == {PAYMENTS.topic_id: [0]}
    assert c.snapshot()["g"]["deleting_topics"] == {str(ORDERS.topic_id): "orders"}
    log += step.records
    log += c.complete_offsets_delete("g", [ORDERS.topic_id])
    assert c.snapshot()["g"]["deleting_topics"] == {}
    assert replayed(log).snapshot() == c.snapshot()


def test_delete_offsets_of_a_topic_without_state_and_a_retried_deleting_topic():
    c = coordinator()
    plan = alter(c, "g", [("orders", [(0, 0)])])
    c.initialize_share_state("g", plan.request.partitions)
    step = c.prepare_offsets_delete("g", ["payments"])
    assert step.errors == [("payments", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, NO_OFFSET_INFORMATION)]
    c.prepare_offsets_delete("g", ["orders"])  # its state delete "failed": orders stays deleting
    again = c.prepare_offsets_delete("g", ["orders"])
    assert again.to_delete == {ORDERS.topic_id: ("orders", frozenset({0, 1, 2}))}  # every partition, as Kafka


def test_an_initialisation_answered_after_the_group_deletion_began_assigns_nothing_being_deleted():
    """An offsets reset's InitializeShareGroupState outlives the runtime's wait and answers after
    DeleteGroups moved the partitions to deleting; the DeleteShareGroupState then fails. The late
    answer must not make them assignable: their state may be gone. A member that joins gets them
    once they are initialised again."""
    c = coordinator()
    reset = alter(c, "g", [("payments", [(0, 0), (1, 0)])])
    deletion = c.prepare_group_deletion("g")
    assert deletion.request.pairs() == [(PAYMENTS.topic_id, 0), (PAYMENTS.topic_id, 1)]
    late = c.initialize_share_state("g", reset.request.partitions)
    joined = c.heartbeat("g", MEMBER, 0, None, ["payments"], "cli", HOST, 0)  # the deletion failed: not deleted
    assert joined.assignment == []
    assert joined.initialize.pairs() == [(PAYMENTS.topic_id, 0), (PAYMENTS.topic_id, 1)]
    done = c.initialize_share_state("g", joined.initialize.partitions)
    again = c.heartbeat("g", MEMBER, joined.member_epoch, None, None, "cli", HOST, 0)
    assert again.assignment == [(PAYMENTS.topic_id, [0, 1])]
    assert replayed(reset.records + deletion.records + late + joined.records + done + again.records
                    ).snapshot() == c.snapshot()


def test_delete_offsets_errors_and_a_group_without_share_state():
    c = coordinator()
    with pytest.raises(KafkaError) as e:
        c.prepare_offsets_delete("nope", ["orders"])
    assert (e.value.code, e.value.message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group nope not found.")
    c.heartbeat("g", MEMBER, 0, None, ["orders"], "cli", HOST, 0)
    with pytest.raises(KafkaError) as e:
        c.prepare_offsets_delete("g", ["payments"])  # any member forbids it, whatever it subscribes to
    assert e.value.code == ErrorCode.NON_EMPTY_GROUP
    untracked = ShareGroupCoordinator(TopicsImage([ORDERS]))
    untracked.heartbeat("h", MEMBER, 0, None, ["orders"], "cli", HOST, 0)
    untracked.heartbeat("h", MEMBER, -1, None, None, "cli", HOST, 0)
    step = untracked.prepare_offsets_delete("h", ["orders"])
    assert (step.records, step.to_delete, step.errors) == ([], {}, [])  # Kafka answers no topics at all


# --- lag --------------------------------------------------------------------------------------


@pytest.mark.parametrize("end, start, dcc, lag", [
    (11, 2, 2, 7),       # KIP-1226's example: highest offset 10, so end offset 11
    (5, 5, 0, 0),
    (10, -1, 0, -1),     # start offset unknown
    (10, 0, -1, -1),     # delivery-complete count unknown (version-0 write)
    (3, 5, 0, -2),       # Kafka does not clamp
])
def test_share_partition_lag(end, start, dcc, lag):
    assert share_partition_lag(end, start, dcc) == lag


def test_lag_is_computed_only_for_successful_known_summaries():
    assert lag_is_computable(SummaryResult(start_offset=0, delivery_complete_count=0))
    assert not lag_is_computable(None)
    assert not lag_is_computable(SummaryResult(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, start_offset=0,
                                               delivery_complete_count=0))
    assert not lag_is_computable(SummaryResult(start_offset=-1, delivery_complete_count=0))
    assert not lag_is_computable(SummaryResult(start_offset=4, delivery_complete_count=-1))
    assert TopicOffsets("t", None).partitions == []


# --- share-state initialisation bookkeeping ---------------------------------------------------


def test_initialisation_times_go_when_the_initialisation_finishes_or_its_topic_goes():
    """The coordinator remembers when it started initialising a topic's share state (to retry
    a stalled one later). A long-lived group subscribed to a topic that is deleted and
    recreated must not keep one such entry per topic id it ever saw."""
    c = coordinator()
    epoch = c.heartbeat("g", MEMBER, 0, None, ["churn"], "cli", HOST, 0).member_epoch
    for i in range(10):
        churn = TopicInfo(uuid.UUID(int=0x100 + i), "churn", 2)
        c.on_metadata_change(TopicsImage([ORDERS, PAYMENTS, churn]), ["churn"])
        r = c.heartbeat("g", MEMBER, epoch, None, None, "cli", HOST, i)
        epoch = r.member_epoch
        assert churn.topic_id in r.initialize.partitions
        if i % 2:  # the other half is deleted while initialising
            c.initialize_share_state("g", r.initialize.partitions)
            assert not c._init_since
        c.on_metadata_change(TopicsImage([ORDERS, PAYMENTS]), ["churn"])
        assert not c._init_since
