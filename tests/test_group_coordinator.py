"""Share-group coordinator: ShareGroupHeartbeat, leave, expiry, topics, deletion, replay."""

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.group import records as rec
from coordinator.group.share_group import ReplayError, ShareGroupCoordinator
from coordinator.group.topics import TopicInfo, TopicsImage
from protocol.errors import ErrorCode, KafkaError

ORDERS = TopicInfo(uuid.UUID(int=0xA1), "orders", 6)
PAYMENTS = TopicInfo(uuid.UUID(int=0xB2), "payments", 2)
HOST = "/127.0.0.1"
MEMBER_A = "kAMA2MYCSgWVW/t4+7NOvA"  # the shape librdkafka generates
MEMBER_B = "bBBB2MYCSgWVW/t4+7NOvA"
MEMBER_C = "cCCC2MYCSgWVW/t4+7NOvA"


def coordinator(*topics, **kwargs):
    return ShareGroupCoordinator(TopicsImage(topics or (ORDERS,)), **kwargs)


def hb(c, member, epoch, subs=None, now=0, group="g", rack=None, client_id="client"):
    return c.heartbeat(group, member, epoch, rack, subs, client_id, HOST, now)


def kinds(records):
    out = []
    for key, value in records:
        name = type(key).__name__.removeprefix("ShareGroup").removesuffix("Key")
        out.append(name if value is not None else name + "-")
    return out


def partitions(result, topic=ORDERS):
    return dict(result.assignment or []).get(topic.topic_id, [])


def fresh_replay(records, topics=(ORDERS,)):
    other = ShareGroupCoordinator(TopicsImage(topics))
    other.replay_all(records)
    return other


class Recorder:
    """Drives a coordinator and keeps every record it returned, as the log would."""

    def __init__(self, c):
        self.c = c
        self.log = []

    def hb(self, *args, **kwargs):
        r = hb(self.c, *args, **kwargs)
        self.log += r.records
        return r

    def __getattr__(self, name):
        method = getattr(self.c, name)

        def call(*args, **kwargs):
            out = method(*args, **kwargs)
            self.log += out if isinstance(out, list) else out.records
            return out
        return call


# --- join ----------------------------------------------------------------------------

def test_first_heartbeat_creates_group_and_assigns_everything():
    c = coordinator()
    r = hb(c, MEMBER_A, 0, ["orders"], now=1000)
    assert r.error_code == 0 and r.error_message is None
    assert kinds(r.records) == ["MemberMetadata", "Metadata", "TargetAssignmentMember",
                                "TargetAssignmentMetadata", "CurrentMemberAssignment"]
    assert r.member_id == MEMBER_A and r.member_epoch == 1 and r.heartbeat_interval_ms == 5000
    assert r.assignment == [(ORDERS.topic_id, [0, 1, 2, 3, 4, 5])]
    assert r.records[1].value.epoch == 1 and r.records[1].value.metadata_hash != 0
    assert r.records[3].value.assignment_epoch == 1 and r.records[3].value.assignment_timestamp == 0  # 4.3 field
    cur = r.records[4].value
    assert (cur.member_epoch, cur.previous_member_epoch, cur.state) == (1, 0, 0)
    assert c.group_state("g") == "Stable"
    assert c.session_deadline("g", MEMBER_A) == 1000 + 45000
    d = c.describe_group("g")
    assert (d.group_epoch, d.assignment_epoch, d.assignor_name) == (1, 1, "simple")
    assert d.members[0].assignment == [(ORDERS.topic_id, "orders", [0, 1, 2, 3, 4, 5])]
    assert d.members[0].client_host == HOST


def test_response_maps_onto_the_wire_message():
    c = coordinator()
    resp = hb(c, MEMBER_A, 0, ["orders"]).to_response()
    assert resp.member_epoch == 1 and resp.assignment.topic_partitions[0].partitions == [0, 1, 2, 3, 4, 5]
    err = hb(c, "", 0, ["orders"]).to_response()
    assert (err.error_code, err.member_id, err.assignment) == (42, None, None)


def test_second_member_rebalances_and_first_member_catches_up():
    c = coordinator()
    a = hb(c, MEMBER_A, 0, ["orders"])
    b = hb(c, MEMBER_B, 0, ["orders"])
    assert b.member_epoch == 2
    assert kinds(b.records) == ["MemberMetadata", "Metadata", "TargetAssignmentMember",
                                "TargetAssignmentMember", "TargetAssignmentMetadata", "CurrentMemberAssignment"]
    assert len(partitions(b)) == 3
    # A still holds all six until its next heartbeat moves it to epoch 2
    assert c.member("g", MEMBER_A).member_epoch == 1
    a2 = hb(c, MEMBER_A, a.member_epoch)
    assert a2.member_epoch == 2 and kinds(a2.records) == ["CurrentMemberAssignment"]
    assert sorted(partitions(a2) + partitions(b)) == [0, 1, 2, 3, 4, 5]
    prev = a2.records[0].value
    assert (prev.member_epoch, prev.previous_member_epoch) == (2, 1)
    # steady state: no records, no assignment in the response
    a3 = hb(c, MEMBER_A, 2)
    assert a3.records == [] and a3.assignment is None and a3.member_epoch == 2


def test_assignment_sent_for_full_requests_even_when_unchanged():
    c = coordinator()
    hb(c, MEMBER_A, 0, ["orders"])
    r = hb(c, MEMBER_A, 1, ["orders"])
    assert r.records == [] and partitions(r) == [0, 1, 2, 3, 4, 5]


def test_rejoin_with_epoch_zero_keeps_the_member():
    c = coordinator()
    hb(c, MEMBER_A, 0, ["orders"])
    hb(c, MEMBER_B, 0, ["orders"])
    hb(c, MEMBER_A, 1)
    r = hb(c, MEMBER_A, 0, ["orders"])  # e.g. after a lost response
    assert r.error_code == 0 and r.member_epoch == 2 and r.records == []
    assert len(partitions(r)) == 3


def test_client_metadata_changes_write_member_record_without_bump():
    c = coordinator()
    hb(c, MEMBER_A, 0, ["orders"], rack="r1")
    r = hb(c, MEMBER_A, 1, client_id="renamed")
    assert kinds(r.records) == ["MemberMetadata"]
    assert r.records[0].value.rack_id == "r1"  # a null rack keeps the old one
    assert c.describe_group("g").group_epoch == 1
    r = hb(c, MEMBER_A, 1, rack="r2", client_id="renamed")
    assert r.records[0].value.rack_id == "r2"


def test_subscription_change_bumps_and_filters_by_new_subscription():
    c = coordinator(ORDERS, PAYMENTS)
    hb(c, MEMBER_A, 0, ["orders"])
    r = hb(c, MEMBER_A, 1, ["payments", "orders"])
    assert r.member_epoch == 2 and "Metadata" in kinds(r.records)
    assert dict(r.assignment) == {ORDERS.topic_id: [0, 1, 2, 3, 4, 5], PAYMENTS.topic_id: [0, 1]}
    r = hb(c, MEMBER_A, 2, ["payments"])
    assert r.assignment == [(PAYMENTS.topic_id, [0, 1])] and r.member_epoch == 3


def test_subscribing_to_missing_topic_then_it_appears():
    c = coordinator(ORDERS)
    r = hb(c, MEMBER_A, 0, ["later"])
    assert r.assignment == [] and r.member_epoch == 1
    later = TopicInfo(uuid.UUID(int=0xC3), "later", 3)
    assert c.on_metadata_change(TopicsImage([ORDERS, later])) == []
    r = hb(c, MEMBER_A, 1)
    assert kinds(r.records)[0] == "Metadata" and r.records[0].value.epoch == 2
    assert r.member_epoch == 2 and r.assignment == [(later.topic_id, [0, 1, 2])]


def test_topic_changes_bump_the_epoch_at_the_next_heartbeat_once():
    """Kafka's onNewMetadataImage only asks the subscribed groups for a metadata refresh: the
    epoch stays until a member heartbeats (ShareGroupDescribe shows the old one), and several
    changes in between bump it once (shareGroupHeartbeat compares the metadata hash)."""
    c = coordinator(ORDERS, PAYMENTS)
    hb(c, MEMBER_A, 0, ["orders", "later"])
    later = TopicInfo(uuid.UUID(int=0xC3), "later", 1)
    grown = TopicInfo(later.topic_id, "later", 2)
    assert c.on_metadata_change(TopicsImage([ORDERS, PAYMENTS, later]), ["later"]) == []
    assert c.on_metadata_change(TopicsImage([ORDERS, PAYMENTS, grown]), ["later"]) == []
    assert c.on_metadata_change(TopicsImage([ORDERS, grown]), ["payments"]) == []
    d = c.describe_group("g")
    assert (d.group_epoch, d.assignment_epoch, d.members[0].member_epoch) == (1, 1, 1)
    r = hb(c, MEMBER_A, 1)
    assert r.member_epoch == 2 and partitions(r, grown) == [0, 1]
    assert kinds(r.records).count("Metadata") == 1
    assert hb(c, MEMBER_A, 2).records == []
    c.on_metadata_change(TopicsImage([grown]), ["orders"])  # a subscribed topic deleted
    r = hb(c, MEMBER_A, 2)
    assert r.member_epoch == 3 and r.assignment == [(grown.topic_id, [0, 1])]
    c.on_metadata_change(TopicsImage([grown, PAYMENTS]), ["payments"])  # not subscribed to
    assert hb(c, MEMBER_A, 3).records == []


def test_a_missing_topic_in_one_subscription_makes_the_group_heterogeneous():
    """Kafka's ModernGroup.subscriptionType counts subscribed topic names, a topic that does
    not exist included, so members naming different topics are balanced per topic: with one
    partition each and two subscribers, both members hold both partitions."""
    a, b = TopicInfo(uuid.UUID(int=0xD4), "a", 1), TopicInfo(uuid.UUID(int=0xE5), "b", 1)
    c = coordinator(a, b)
    hb(c, MEMBER_A, 0, ["a", "b", "missing"])
    r = hb(c, MEMBER_B, 0, ["a", "b"])
    assert (r.member_epoch, partitions(r, a), partitions(r, b)) == (2, [0], [0])
    both = {a.topic_id: frozenset({0}), b.topic_id: frozenset({0})}
    assert c.share_group("g").targets == {MEMBER_A: both, MEMBER_B: both}


# --- request validation and errors -------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (("g", "", 0, None, ["orders"]), "MemberId can't be empty."),
    (("g", "  ", 0, None, ["orders"]), "MemberId can't be empty."),
    (("", MEMBER_A, 0, None, ["orders"]), "GroupId can't be empty."),
    (("g", MEMBER_A, 0, " ", ["orders"]), "RackId can't be empty."),
    (("g", MEMBER_A, 0, None, None), "SubscribedTopicNames must be set in first request."),
    (("g", MEMBER_A, 0, None, []), "SubscribedTopicNames must be set in first request."),
    (("g", MEMBER_A, -2, None, ["orders"]), "MemberEpoch is invalid."),
])
def test_invalid_requests(args, message):
    c = coordinator()
    r = c.heartbeat(*args, "client", HOST, 0)
    assert (r.error_code, r.error_message) == (ErrorCode.INVALID_REQUEST, message)
    assert r.records == [] and r.member_id is None and r.assignment is None
    assert not c.has_group("g") and c.next_deadline() is None


def test_member_id_of_any_length_is_accepted():
    """Kafka's heartbeat has no length limit (ShareFetch refuses ids over 36 characters)."""
    c = coordinator()
    assert hb(c, "x" * 36, 0, ["orders"]).error_code == 0
    assert hb(c, "y" * 100, 0, ["orders"]).error_code == 0


def test_unknown_group_or_other_group_type_is_group_id_not_found():
    c = coordinator(foreign_group_type=lambda g: "consumer" if g == "classic" else None)
    r = hb(c, MEMBER_A, 3, ["orders"])
    assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Share group g not found.")
    r = hb(c, MEMBER_A, 0, ["orders"], group="classic")
    assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group classic is not a share group.")
    r = hb(c, MEMBER_A, -1, group="nope")  # a leave looks the group up as admin requests do
    assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group nope not found.")
    r = hb(c, MEMBER_A, -1, group="classic")
    assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group classic is not a share group.")


def test_unknown_member():
    c = coordinator()
    hb(c, MEMBER_A, 0, ["orders"])
    for epoch in (1, -1):
        r = hb(c, MEMBER_B, epoch)
        assert (r.error_code, r.error_message) == (ErrorCode.UNKNOWN_MEMBER_ID,
                                                   f"Member {MEMBER_B} is not a member of group g.")


def test_fenced_epochs_and_previous_epoch_tolerance():
    c = coordinator()
    hb(c, MEMBER_A, 0, ["orders"])
    hb(c, MEMBER_B, 0, ["orders"])
    hb(c, MEMBER_A, 1)  # A: epoch 2, previous 1
    assert hb(c, MEMBER_A, 3).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    hb(c, MEMBER_C, 0, ["orders"])  # group epoch 3
    assert hb(c, MEMBER_A, 2).member_epoch == 3  # A: epoch 3, previous 2
    r = hb(c, MEMBER_A, 2)  # the response to the last heartbeat was lost
    assert r.error_code == 0 and r.member_epoch == 3
    r = hb(c, MEMBER_A, 1)
    assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert r.error_message == (  # Kafka's throwIfShareGroupMemberEpochIsInvalid
        "The share group member has a smaller member epoch (1) than the one known by the group coordinator (3), "
        "and it does not match the previous member epoch (2). The member must abandon all its partitions and "
        "rejoin.")
    assert r.records == []


def test_group_max_size():
    c = coordinator(broker_config={"group.share.max.size": "2"})
    hb(c, MEMBER_A, 0, ["orders"])
    hb(c, MEMBER_B, 0, ["orders"])
    r = hb(c, MEMBER_C, 0, ["orders"])
    assert (r.error_code, r.error_message) == (
        ErrorCode.GROUP_MAX_SIZE_REACHED, "The share group has reached its maximum capacity of 2 members.")
    assert hb(c, MEMBER_A, 1).error_code == 0  # members already in are never refused
    assert hb(c, MEMBER_B, 0, ["orders"]).error_code == 0


# --- leave and session expiry --------------------------------------------------------------

def test_leave():
    c = coordinator()
    hb(c, MEMBER_A, 0, ["orders"])
    hb(c, MEMBER_B, 0, ["orders"])
    assert len(partitions(hb(c, MEMBER_A, 1))) == 3
    r = hb(c, MEMBER_B, -1)
    assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms, r.assignment) == (
        0, MEMBER_B, -1, 0, None)
    assert kinds(r.records) == ["CurrentMemberAssignment-", "TargetAssignmentMember-", "MemberMetadata-",
                                "Metadata"]
    assert r.records[3].value.epoch == 3
    assert r.departed == [("g", MEMBER_B)]
    assert c.member("g", MEMBER_B) is None and c.session_deadline("g", MEMBER_B) is None
    # the remaining member picks up everything on its next heartbeat
    a = hb(c, MEMBER_A, 2)
    assert a.member_epoch == 3 and partitions(a) == [0, 1, 2, 3, 4, 5]
    # the last member leaving leaves an empty group behind
    assert hb(c, MEMBER_A, -1).departed == [("g", MEMBER_A)]
    assert c.group_state("g") == "Empty" and c.describe_group("g").group_epoch == 4
    assert c.list_groups() == [("g", "Empty")] and c.list_groups(["stable"]) == []


def test_session_expiry_with_fake_clock():
    c = coordinator()
    hb(c, MEMBER_A, 0, ["orders"], now=0)
    hb(c, MEMBER_B, 0, ["orders"], now=10_000)
    assert c.next_deadline() == 45_000
    hb(c, MEMBER_A, 1, now=40_000)  # heartbeating pushes the deadline
    assert c.next_deadline() == 55_000
    assert c.expire_sessions(54_999).records == []
    out = c.expire_sessions(55_000)
    assert out.departed == [("g", MEMBER_B)]
    assert kinds(out.records) == ["CurrentMemberAssignment-", "TargetAssignmentMember-", "MemberMetadata-",
                                  "Metadata"]
    assert c.next_deadline() == 85_000
    r = hb(c, MEMBER_B, 2, now=56_000)
    assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    r = hb(c, MEMBER_B, 0, ["orders"], now=57_000)  # rejoin with the same id
    assert r.error_code == 0 and r.member_epoch == 4


def test_several_expiries_in_one_group_bump_one_epoch_each():
    run = Recorder(coordinator())
    for m in (MEMBER_A, MEMBER_B, MEMBER_C):
        run.hb(m, 0, ["orders"], now=0)
    out = run.expire_sessions(45_000)
    assert sorted(out.departed) == sorted(("g", m) for m in (MEMBER_A, MEMBER_B, MEMBER_C))
    epochs = [r.value.epoch for r in out.records if type(r.key).__name__ == "ShareGroupMetadataKey"]
    assert epochs == [4, 5, 6]
    assert run.c.group_state("g") == "Empty" and run.c.next_deadline() is None
    assert fresh_replay(run.log).snapshot() == run.c.snapshot()


def test_group_config_overrides_timeouts():
    props = {"g": {"share.session.timeout.ms": "50000", "share.heartbeat.interval.ms": "6000"}}
    c = coordinator(group_config=lambda g: props.get(g, {}),
                    broker_config={"group.share.max.session.timeout.ms": "60000"})
    r = hb(c, MEMBER_A, 0, ["orders"], now=0)
    assert r.heartbeat_interval_ms == 6000 and c.session_deadline("g", MEMBER_A) == 50_000
    r = hb(c, MEMBER_A, 0, ["orders"], now=0, group="other")
    assert r.heartbeat_interval_ms == 5000 and c.session_deadline("other", MEMBER_A) == 45_000


# --- topic metadata changes -------------------------------------------------------------------

def test_partition_increase_and_topic_deletion():
    c = coordinator(ORDERS, PAYMENTS)
    hb(c, MEMBER_A, 0, ["orders", "payments"])
    assert c.on_metadata_change(TopicsImage([ORDERS, PAYMENTS])) == []
    unrelated = TopicInfo(uuid.UUID(int=0xD4), "unrelated", 1)
    assert c.on_metadata_change(TopicsImage([ORDERS, PAYMENTS, unrelated])) == []
    bigger = TopicInfo(ORDERS.topic_id, "orders", 8)
    assert c.on_metadata_change(TopicsImage([bigger, PAYMENTS])) == []
    r = hb(c, MEMBER_A, 1)
    assert r.member_epoch == 2 and partitions(r, bigger) == list(range(8))
    assert c.on_metadata_change(TopicsImage([bigger])) == []  # payments deleted
    r = hb(c, MEMBER_A, 2)
    assert r.member_epoch == 3 and r.assignment == [(ORDERS.topic_id, list(range(8)))]


NAMES = ["a", "b", "c", "d"]
TOPIC_CHANGES = st.tuples(st.sampled_from(NAMES), st.sampled_from(["create", "delete", "grow", "recreate"]))
# a group's member (re)subscribes to these names (none: it leaves, and the group may be
# deleted) and the group's share-state metadata names those topics
GROUP_CHANGES = st.tuples(st.integers(0, 4), st.sets(st.sampled_from(NAMES), max_size=3),
                          st.sets(st.sampled_from(NAMES), max_size=3), st.booleans())


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.one_of(TOPIC_CHANGES, GROUP_CHANGES), min_size=1, max_size=20))
def test_a_metadata_change_with_the_changed_names_looks_only_at_groups_it_affects(steps):
    """Told which topics changed, a coordinator writes the records it would write looking at
    every group, and ends in the same state, while groups join, resubscribe, leave, are
    deleted and change their share-state metadata (initializing, initialized and deleting
    topics) in between. So does one rebuilt from the records, as after a restart."""
    ids = {n: uuid.UUID(int=i + 1) for i, n in enumerate(NAMES)}
    sizes = {"a": 2, "b": 1, "c": 3}
    epochs = {}

    def image():
        return TopicsImage(TopicInfo(ids[n], n, p) for n, p in sizes.items())

    told, looked = ShareGroupCoordinator(image()), ShareGroupCoordinator(image())
    for step in steps:
        if len(step) == 4:
            g, subscribed, with_state, delete = step
            group = f"g{g}"
            for c in (told, looked):
                if subscribed:
                    r = hb(c, MEMBER_A, epochs.get(group, 0), sorted(subscribed), group=group)
                    assert r.error_code == 0
                elif group in epochs:
                    assert hb(c, MEMBER_A, -1, group=group).error_code == 0
                    if delete:
                        c.delete_group(group)
                if c.has_group(group):
                    state = sorted(with_state)
                    c.replay(rec.state_partition_metadata(
                        group, {ids[n]: (n, [0]) for n in state[:1]}, {ids[n]: (n, [0, 1]) for n in state[1:2]},
                        {ids[n]: n for n in state[2:]}))
            if subscribed:
                epochs[group] = r.member_epoch
            else:
                epochs.pop(group, None)
            continue
        name, change = step
        if change == "delete":
            sizes.pop(name, None)
        elif change == "create" and name not in sizes:
            ids[name] = uuid.uuid4()
            sizes[name] = 1
        elif change == "grow" and name in sizes:
            sizes[name] += 1
        elif change == "recreate":
            ids[name] = uuid.uuid4()
            sizes[name] = 1
        rebuilt = ShareGroupCoordinator(told.topics)
        rebuilt.replay_all(told.snapshot_records())
        expected = looked.on_metadata_change(image())
        assert told.on_metadata_change(image(), [name]) == expected
        assert rebuilt.on_metadata_change(image(), [name]) == expected
        assert told.snapshot() == looked.snapshot() == rebuilt.snapshot()
    for names in (["a", "b"], ["c"], NAMES):
        assert told.groups_subscribed_to(names) == sorted(
            g for g, e in looked.snapshot().items() if e["subscribed_names"].keys() & set(names))


def test_a_group_deleted_without_its_state_tombstone_is_not_visited_by_topic_changes():
    c = coordinator(ORDERS)
    c.replay(rec.state_partition_metadata("g", {}, {ORDERS.topic_id: ("orders", [0])}, {}))
    c.replay(rec.group_metadata_tombstone("g"))
    assert c.on_metadata_change(TopicsImage([]), ["orders"]) == [] and not c.has_group("g")


def test_topic_recreated_with_new_id():
    c = coordinator()
    hb(c, MEMBER_A, 0, ["orders"])
    again = TopicInfo(uuid.UUID(int=0xEE), "orders", 6)
    assert c.on_metadata_change(TopicsImage([again])) == []
    r = hb(c, MEMBER_A, 1)
    assert r.member_epoch == 2 and r.assignment == [(again.topic_id, [0, 1, 2, 3, 4, 5])]


def test_assignable_hook_gates_partitions_until_they_are_ready():
    ready = {0, 1}
    c = coordinator(assignable_partitions=lambda g, t: ready)
    r = hb(c, MEMBER_A, 0, ["orders"])
    assert partitions(r) == [0, 1]
    assert hb(c, MEMBER_A, 1).records == []
    ready.update({2, 3})
    c.assignable_changed()
    r = hb(c, MEMBER_A, 1)
    assert r.member_epoch == 2 and partitions(r) == [0, 1, 2, 3]
    assert hb(c, MEMBER_A, 2).records == []


# --- deletion --------------------------------------------------------------------------------

def test_delete_group():
    c = coordinator()
    hb(c, MEMBER_A, 0, ["orders"])
    with pytest.raises(KafkaError) as e:
        c.delete_group("g")
    assert e.value.code == ErrorCode.NON_EMPTY_GROUP
    with pytest.raises(KafkaError) as e:
        c.delete_group("missing")
    assert e.value.code == ErrorCode.GROUP_ID_NOT_FOUND
    hb(c, MEMBER_A, -1)
    records = c.delete_group("g")
    assert kinds(records) == ["TargetAssignmentMetadata-", "StatePartitionMetadata-", "Metadata-"]
    assert not c.has_group("g") and c.group_state("g") == "Dead" and c.describe_group("g") is None


# --- replay ----------------------------------------------------------------------------------

def test_replay_rebuilds_identical_state_also_through_bytes():
    c = coordinator(ORDERS, PAYMENTS)
    run = Recorder(c)
    run.hb(MEMBER_A, 0, ["orders"], now=0, rack="r1")
    run.hb(MEMBER_B, 0, ["orders", "payments"], now=1)
    run.hb(MEMBER_C, 0, ["payments"], now=2)
    run.hb(MEMBER_A, 1, now=3)
    run.hb(MEMBER_B, 2, ["orders"], now=4)
    run.on_metadata_change(TopicsImage([TopicInfo(ORDERS.topic_id, "orders", 9), PAYMENTS]))
    run.hb(MEMBER_C, 3, now=5)
    run.hb(MEMBER_A, -1, now=6)
    run.hb(MEMBER_B, c.member("g", MEMBER_B).member_epoch, now=100)
    run.expire_sessions(5 + 45_000)  # C expires; B's deadline (100 + 45000) not yet
    run.hb(MEMBER_A, 0, ["orders"], group="other", now=7)
    run.hb(MEMBER_A, -1, group="other", now=8)
    run.delete_group("other")
    expected = c.snapshot()
    assert set(expected) == {"g"} and list(expected["g"]["members"]) == [MEMBER_B]

    assert fresh_replay(run.log).snapshot() == expected
    decoded = [rec.decode(*rec.encode(r)) for r in run.log]
    assert fresh_replay(decoded).snapshot() == expected
    # replay is idempotent for a tail that is applied twice
    twice = fresh_replay(run.log)
    twice.replay_all(run.log[-3:])
    assert twice.snapshot() == expected


def test_restart_arms_sessions_on_load():
    c = coordinator()
    run = Recorder(c)
    run.hb(MEMBER_A, 0, ["orders"], now=0)
    restarted = fresh_replay(run.log)
    assert restarted.next_deadline() is None
    assert restarted.on_loaded(now_ms=100_000) == []
    assert restarted.next_deadline() == 145_000
    # the member carries on at its epoch after the restart
    assert restarted.heartbeat("g", MEMBER_A, 1, None, None, "client", HOST, 100_001).error_code == 0
    # a topic that changed while down bumps the epoch at the group's first heartbeat after
    # the load, as a freshly loaded Kafka group's expired metadata refresh deadline does
    again = fresh_replay(run.log, topics=(TopicInfo(ORDERS.topic_id, "orders", 7),))
    assert again.on_loaded(0) == [] and again.describe_group("g").group_epoch == 1
    r = again.heartbeat("g", MEMBER_A, 1, None, None, "client", HOST, 1)
    assert r.member_epoch == 2 and partitions(r) == list(range(7))


def test_replay_rejects_member_tombstone_out_of_order():
    c = coordinator()
    hb(c, MEMBER_A, 0, ["orders"])
    with pytest.raises(ReplayError):
        c.replay(rec.member_metadata_tombstone("g", MEMBER_A))
    c.replay(rec.current_assignment_tombstone("g", MEMBER_A))
    with pytest.raises(ReplayError):
        c.replay(rec.member_metadata_tombstone("g", MEMBER_A))
    with pytest.raises(ReplayError):
        c.replay(rec.group_metadata_tombstone("g"))
    # tombstones for unknown groups or members are ignored
    c.replay(rec.member_metadata_tombstone("nope", MEMBER_A))
    c.replay(rec.group_metadata_tombstone("nope"))
    assert not c.has_group("nope")


def test_decode_ignores_other_record_types_and_roundtrips_tombstones():
    key, value = rec.encode(rec.member_metadata_tombstone("g", MEMBER_A))
    assert value is None and key[:2] == b"\x00\x0a"
    assert rec.decode(key, None) == rec.member_metadata_tombstone("g", MEMBER_A)
    assert rec.decode(b"\x00\x01" + b"\x00\x01g", b"") is None  # an OffsetCommit key
    key, value = rec.encode(rec.group_metadata("g", 3, -5))
    assert value[:2] == b"\x00\x00"
    with pytest.raises(ValueError):
        rec.decode(key, b"\x00\x01" + value[2:])


def test_metadata_hash_is_kafkas_xxh3_over_hash4j_encoding():
    """Utils.computeTopicHash / computeGroupHash: XXH3-64 of magic 0, the id's most and least
    significant longs, putString(name) (UTF-16LE units, then their count), the partition count
    and each partition index, all little-endian; the group hash covers the existing topics'
    hashes in name order."""
    import struct

    import xxhash

    from coordinator.group.topics import metadata_hash

    assert xxhash.xxh3_64_intdigest(b"") == 0x2D06800538D394C2  # the reference XXH3-64, seed 0
    foo = TopicInfo(uuid.UUID("0123456789abcdef" "fedcba9876543210"), "foo", 2)
    foo_bytes = bytes.fromhex(
        "00" "efcdab8967452301" "1032547698badcfe"   # magic, most then least significant bits
        "66006f006f00" "03000000"                    # "foo" as UTF-16LE, then its length
        "02000000" "00000000" "01000000")            # two partitions: 0 and 1, no racks
    foo_hash = xxhash.xxh3_64_intdigest(foo_bytes)
    topics = TopicsImage([foo, ORDERS])
    expected = xxhash.xxh3_64_intdigest(struct.pack("<Q", foo_hash))
    assert metadata_hash(["foo", "missing"], topics) == struct.unpack("<q", struct.pack("<Q", expected))[0]
    orders_hash = xxhash.xxh3_64_intdigest(
        b"\x00" + (0).to_bytes(8, "little") + (0xA1).to_bytes(8, "little")
        + "orders".encode("utf-16-le") + struct.pack("<i", 6) + struct.pack("<7i", 6, *range(6)))
    both = xxhash.xxh3_64_intdigest(struct.pack("<QQ", foo_hash, orders_hash))  # "foo" < "orders"
    assert metadata_hash(["orders", "foo"], topics) == struct.unpack("<q", struct.pack("<Q", both))[0]
    assert metadata_hash(["missing"], topics) == 0
