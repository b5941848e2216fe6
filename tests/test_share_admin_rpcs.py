"""The share-group admin RPCs on the wire (raw client, shared broker): ShareGroupDescribe,
ListGroups, DescribeGroups, DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets and DeleteGroups, with Kafka 4.2's versions, error codes and messages.
Members are raw ShareGroupHeartbeat joins; share-partition leaders are driven with raw
ShareFetch to show that resets and deletes replace their in-flight state."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from broker.authz import GROUP_OPERATIONS, NOT_REQUESTED
from protocol.errors import ErrorCode
from protocol.messages.alter_share_group_offsets_request import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from protocol.messages.delete_groups_request import DeleteGroupsRequest
from protocol.messages.delete_share_group_offsets_request import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequestTopic,
)
from protocol.messages.describe_groups_request import DescribeGroupsRequest
from protocol.messages.describe_share_group_offsets_request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)
from protocol.messages.list_groups_request import ListGroupsRequest
from protocol.messages.share_group_describe_request import ShareGroupDescribeRequest
from protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest
from protocol.primitives import ZERO_UUID
from tests.raw_client import RawClient
from tests.test_produce_support import batch, fetch, produce
from tests.test_share_wire_support import ShareMember, acquired, create_topic, parts, produce_batches

DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, HEARTBEAT, SHARE_DESCRIBE = 15, 16, 42, 76, 77
DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = 90, 91, 92
UNKNOWN_TOPIC_TEXT = "This server does not host this topic-partition."


@pytest.fixture
def client(broker):
    with RawClient(broker.bootstrap) as c:
        yield c


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:12]}"


def member_id() -> str:
    return uuid.uuid4().hex[:22]


def join(client, group, topics, member=None, rack=None):
    member = member or member_id()
    resp = client.request(HEARTBEAT, 1, ShareGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=0, rack_id=rack, subscribed_topic_names=topics))
    assert resp.error_code == 0, (resp.error_code, resp.error_message)
    return member, resp


def leave(client, group, member):
    resp = client.request(HEARTBEAT, 1, ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=-1))
    assert resp.error_code == 0, (resp.error_code, resp.error_message)


def share_describe(client, *groups, ops=False):
    return client.request(SHARE_DESCRIBE, 1, ShareGroupDescribeRequest(group_ids=list(groups),
                                                                       include_authorized_operations=ops)).groups


def offsets(client, group, topics=None, version=1):
    """DescribeShareGroupOffsets; ``topics``: {name: [partitions]} or None for all."""
    req_topics = None if topics is None else [
        DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps) for t, ps in topics.items()]
    (g,) = client.request(DESCRIBE_OFFSETS, version, DescribeShareGroupOffsetsRequest(groups=[
        DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=req_topics)])).groups
    return g


def rows(g) -> dict:
    """{(topic, partition): (start offset, leader epoch, lag, error code)} of a described group."""
    return {(t.topic_name, p.partition_index): (p.start_offset, p.leader_epoch, p.lag, p.error_code)
            for t in g.topics for p in t.partitions}


def alter(client, group, topics):
    """AlterShareGroupOffsets; ``topics``: {name: {partition: start offset}}."""
    return client.request(ALTER_OFFSETS, 0, AlterShareGroupOffsetsRequest(group_id=group, topics=[
        AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=[
            AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o) for p, o in ps.items()])
        for t, ps in topics.items()]))


def delete_offsets(client, group, *topics):
    return client.request(DELETE_OFFSETS, 0, DeleteShareGroupOffsetsRequest(group_id=group, topics=[
        DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics]))


def list_groups(client, version=5, states=(), types=()):
    resp = client.request(LIST_GROUPS, version, ListGroupsRequest(states_filter=list(states), types_filter=list(types)))
    assert resp.error_code == 0
    return {g.group_id: g for g in resp.groups}


def delete_groups(client, *groups, version=2):
    return {r.group_id: r.error_code
            for r in client.request(DELETE_GROUPS, version, DeleteGroupsRequest(groups_names=list(groups))).results}


def empty_group_at(client, group, topic, start_offsets: dict[int, int]) -> None:
    resp = alter(client, group, {topic: start_offsets})
    assert resp.error_code == 0, (resp.error_code, resp.error_message)
    assert all(p.error_code == 0 for t in resp.responses for p in t.partitions), resp


# --- ShareGroupDescribe ---------------------------------------------------------------------------


def test_share_group_describe_reports_members_assignments_and_epochs(client, group, topic_name):
    tid = create_topic(client, topic_name, 2)
    a, first = join(client, group, [topic_name], rack="rack-1")
    b, _ = join(client, group, [topic_name])
    again = client.request(HEARTBEAT, 1, ShareGroupHeartbeatRequest(  # a catches up with b's arrival
        group_id=group, member_id=a, member_epoch=first.member_epoch))
    assert again.error_code == 0
    (d,) = share_describe(client, group, ops=True)
    assert (d.error_code, d.group_id, d.group_state, d.assignor_name) == (0, group, "Stable", "simple")
    assert d.group_epoch == d.assignment_epoch >= 2
    assert d.authorized_operations == GROUP_OPERATIONS
    members = {m.member_id: m for m in d.members}
    assert set(members) == {a, b}
    assert (members[a].rack_id, members[b].rack_id) == ("rack-1", None)
    for m in d.members:
        host = "/" + client.sock.getsockname()[0]  # the address the broker sees (not loopback under compose)
        assert (m.client_id, m.client_host, m.subscribed_topic_names) == ("kshare-tests", host, [topic_name])
        assert m.member_epoch == d.group_epoch
    owned = sorted(p for m in d.members for tp in m.assignment.topic_partitions for p in tp.partitions)
    assert owned == [0, 1]  # one partition each
    assert {(tp.topic_id, tp.topic_name) for m in d.members for tp in m.assignment.topic_partitions} == {
        (tid, topic_name)}
    (plain,) = share_describe(client, group)
    assert plain.authorized_operations == NOT_REQUESTED


def test_share_group_describe_errors(client, group):
    unknown, empty = share_describe(client, group, "", ops=True)
    assert (unknown.group_id, unknown.error_code, unknown.error_message) == (
        group, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group} not found.")
    assert unknown.authorized_operations == NOT_REQUESTED and unknown.members == []
    assert (empty.group_id, empty.error_code) == ("", ErrorCode.INVALID_GROUP_ID)


# --- ListGroups and DescribeGroups ----------------------------------------------------------------


def test_list_groups_filters_by_state_and_type(client, group, topic_name):
    create_topic(client, topic_name, 1)
    idle = f"{group}-idle"
    empty_group_at(client, idle, topic_name, {0: 0})
    member, _ = join(client, group, [topic_name])
    everything = list_groups(client)
    assert (everything[group].protocol_type, everything[group].group_type, everything[group].group_state) == (
        "share", "share", "Stable")
    assert everything[idle].group_state == "Empty"
    assert group in list_groups(client, states=["STABLE"]) and idle not in list_groups(client, states=[" stable "])
    assert idle in list_groups(client, states=["Empty", "Dead"]) and group not in list_groups(client, states=["empty"])
    # Java's String.trim: every char up to U+0020 (control chars too), no Unicode spaces
    assert idle in list_groups(client, states=["\x00EMPTY\x1b"])
    assert idle not in list_groups(client, states=["\xa0empty"])
    assert group in list_groups(client, types=["Share"]) and group in list_groups(client, types=["bogus", "share"])
    assert list_groups(client, types=["consumer", "classic"]) == {}
    v3 = list_groups(client, version=3)
    assert v3[group].protocol_type == "share"
    assert group in list_groups(client, version=4, states=["stable"])
    leave(client, group, member)
    assert list_groups(client)[group].group_state == "Empty"


@pytest.mark.parametrize("version", [0, 5, 6])
def test_describe_groups_answers_share_groups_as_kafka_answers_non_classic_groups(client, group, topic_name, version):
    create_topic(client, topic_name, 1)
    join(client, group, [topic_name])
    unknown = f"{group}-unknown"
    share, missing = client.request(DESCRIBE_GROUPS, version, DescribeGroupsRequest(
        groups=[group, unknown], include_authorized_operations=True)).groups
    for g in (share, missing):
        assert (g.group_state, g.protocol_type, g.protocol_data, g.members) == ("Dead", "", "", [])
    if version >= 6:
        assert (share.error_code, share.error_message) == (69, f"Group {group} is not a classic group.")
        assert (missing.error_code, missing.error_message) == (69, f"Group {unknown} not found.")
        assert share.authorized_operations == NOT_REQUESTED  # only for results without an error
    else:
        assert share.error_code == missing.error_code == 0
        assert share.authorized_operations == (GROUP_OPERATIONS if version >= 3 else NOT_REQUESTED)


# --- DescribeShareGroupOffsets --------------------------------------------------------------------


def test_describe_offsets_of_an_unknown_group_or_topic_is_absent_data(client, group, topic_name):
    g = offsets(client, group)
    assert (g.group_id, g.error_code, g.topics) == (group, 0, [])  # Kafka does not check the group
    g = offsets(client, group, {"no-such-topic": [0, 1]})
    (t,) = g.topics
    assert (t.topic_name, t.topic_id) == ("no-such-topic", ZERO_UUID)
    assert rows(g) == {("no-such-topic", 0): (-1, 0, -1, 0), ("no-such-topic", 1): (-1, 0, -1, 0)}
    assert offsets(client, group, {}).topics == []


def test_describe_offsets_answers_each_partition_once_in_order(client, group, topic_name):
    """Kafka's persister answers from maps keyed by topic id and partition: a topic named twice
    is one topic, and its partitions come once each, ascending."""
    create_topic(client, topic_name, 3)
    (g,) = client.request(DESCRIBE_OFFSETS, 1, DescribeShareGroupOffsetsRequest(groups=[
        DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=[
            DescribeShareGroupOffsetsRequestTopic(topic_name=topic_name, partitions=[2, 0]),
            DescribeShareGroupOffsetsRequestTopic(topic_name=topic_name, partitions=[1, 0])])])).groups
    assert [(t.topic_name, [p.partition_index for p in t.partitions]) for t in g.topics] == [(topic_name, [0, 1, 2])]


def test_describe_offsets_of_an_uninitialised_partition_has_unknown_lag(client, group, topic_name):
    create_topic(client, topic_name, 2)
    join(client, group, [topic_name])  # initialised with start offset -1: not consumed yet
    assert rows(offsets(client, group)) == {(topic_name, 0): (-1, 0, -1, 0), (topic_name, 1): (-1, 0, -1, 0)}


def test_describe_offsets_lag_and_versions(client, group, topic_name):
    create_topic(client, topic_name, 2)
    produce_batches(client, topic_name, [3, 2])  # 5 records in partition 0
    empty_group_at(client, group, topic_name, {0: 1, 1: 0})
    assert rows(offsets(client, group)) == {(topic_name, 0): (1, 0, 4, 0), (topic_name, 1): (0, 0, 0, 0)}
    assert rows(offsets(client, group, {topic_name: [1]})) == {(topic_name, 1): (0, 0, 0, 0)}
    v0 = rows(offsets(client, group, version=0))
    assert v0[(topic_name, 0)] == (1, 0, -1, 0)  # no Lag field before v1


def test_describe_offsets_of_an_offline_partition_is_leader_not_available(broker_factory, group, topic_name):
    """Kafka reads the end offset from the partition's leader; a partition whose log went
    offline has none (Metadata shows no leader), so its row is that error, not a lag."""
    b = broker_factory()
    with RawClient(b.bootstrap) as c:
        create_topic(c, topic_name, 1)
        for _ in range(10):
            produce(c, topic_name, batch([b"x" * 1000]))
        empty_group_at(c, group, topic_name, {0: 2})
        assert rows(offsets(c, group)) == {(topic_name, 0): (2, 0, 8, 0)}
        segment = b.data_dir / f"{topic_name}-0" / ("%020d.log" % 0)
        os.truncate(segment, segment.stat().st_size // 2)
        assert fetch(c, topic_name, 8).error_code == ErrorCode.KAFKA_STORAGE_ERROR  # the read that finds it
        ((p,),) = [t.partitions for t in offsets(c, group).topics]
        assert (p.partition_index, p.error_code, p.error_message) == (
            0, ErrorCode.LEADER_NOT_AVAILABLE,
            "There is no leader for this topic-partition as we are in the middle of a leadership election.")
        assert rows(offsets(c, group, version=0))[(topic_name, 0)][3] == ErrorCode.LEADER_NOT_AVAILABLE


# --- AlterShareGroupOffsets -----------------------------------------------------------------------


def test_alter_offsets_errors(client, group, topic_name):
    create_topic(client, topic_name, 2)
    resp = alter(client, "", {topic_name: {0: 0}})
    assert (resp.error_code, resp.error_message, resp.responses) == (
        ErrorCode.INVALID_GROUP_ID, "The configured groupId is invalid.", [])
    resp = alter(client, group, {"no-such-topic": {0: 0}, topic_name: {1: 0, 2: 0}})
    assert resp.error_code == 0
    by_topic = {t.topic_name: t for t in resp.responses}
    assert by_topic["no-such-topic"].topic_id == ZERO_UUID
    assert [(p.partition_index, p.error_code, p.error_message) for p in by_topic["no-such-topic"].partitions] == [
        (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_TEXT)]
    assert [(p.partition_index, p.error_code, p.error_message) for p in by_topic[topic_name].partitions] == [
        (1, 0, None), (2, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_TEXT)]
    member, _ = join(client, group, [topic_name])
    resp = alter(client, group, {topic_name: {0: 0}})
    assert (resp.error_code, resp.error_message, resp.responses) == (
        ErrorCode.NON_EMPTY_GROUP, "The group is not empty.", [])
    leave(client, group, member)
    assert alter(client, group, {topic_name: {0: 0}}).error_code == 0


def test_alter_offsets_naming_only_missing_partitions_creates_the_group(client, group, topic_name):
    """Kafka's alterShareGroupOffsets records an existing topic as initializing even when none
    of the partitions named exists, which creates the (empty) group."""
    create_topic(client, topic_name, 1)
    resp = alter(client, group, {topic_name: {3: 0}})
    assert [(p.partition_index, p.error_code) for t in resp.responses for p in t.partitions] == [
        (3, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert list_groups(client)[group].group_state == "Empty"
    (d,) = share_describe(client, group)
    assert (d.error_code, d.group_state, d.group_epoch, d.members) == (0, "Empty", 0, [])
    assert offsets(client, group).topics == []
    assert delete_groups(client, group) == {group: 0}


def test_alter_offsets_lists_unknown_topics_first_and_each_topic_once(client, group, topic_name):
    """KafkaApis.handleAlterShareGroupOffsetsRequest adds the unknown topics to its response
    builder before merging the coordinator's answer, one entry per topic name."""
    create_topic(client, topic_name, 2)
    resp = client.request(ALTER_OFFSETS, 0, AlterShareGroupOffsetsRequest(group_id=group, topics=[
        AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=[
            AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=0)])
        for t, p in ((topic_name, 0), ("zz-no-such-topic", 0), ("aa-no-such-topic", 0), ("zz-no-such-topic", 1))]))
    assert [(t.topic_name, [p.partition_index for p in t.partitions]) for t in resp.responses] == [
        ("zz-no-such-topic", [0, 1]), ("aa-no-such-topic", [0]), (topic_name, [0])]


def test_alter_offsets_creates_the_group_and_consumption_starts_there(client, group, topic_name):
    tid = create_topic(client, topic_name, 1)
    produce_batches(client, topic_name, [1] * 6)
    empty_group_at(client, group, topic_name, {0: 4})
    assert list_groups(client)[group].group_state == "Empty"
    (d,) = share_describe(client, group)
    assert (d.error_code, d.group_state, d.members) == (0, "Empty", [])
    with ShareMember(client_bootstrap(client), group) as m:
        resp = m.open([(tid, 0)])
        assert acquired(parts(resp)[(tid, 0)]) == [(4, 5, 1)]


def client_bootstrap(client: RawClient) -> str:
    host, port = client.sock.getpeername()[:2]
    return f"{host}:{port}"


def test_a_reset_discards_the_leaders_in_flight_state(client, group, topic_name):
    tid = create_topic(client, topic_name, 1)
    bootstrap = client_bootstrap(client)
    with ShareMember(bootstrap, group) as m:
        m.open([(tid, 0)])  # loads the share partition at the end of the (empty) log
        produce_batches(client, topic_name, [1] * 5)
        first = m.fetch()
        assert acquired(parts(first)[(tid, 0)]) == [(0, 4, 1)]  # all five in flight
        empty_group_at(client, group, topic_name, {0: 2})
        assert rows(offsets(client, group)) == {(topic_name, 0): (2, 0, 3, 0)}  # state reset, delivery counts gone
        again = m.fetch()
        assert acquired(parts(again)[(tid, 0)]) == [(2, 4, 1)]  # delivered afresh


# --- DeleteShareGroupOffsets ----------------------------------------------------------------------


def test_delete_offsets_errors(client, group, topic_name):
    create_topic(client, topic_name, 1)
    resp = delete_offsets(client, "", topic_name)
    assert (resp.error_code, resp.error_message) == (ErrorCode.INVALID_GROUP_ID, "The configured groupId is invalid.")
    resp = delete_offsets(client, group, topic_name)
    assert (resp.error_code, resp.error_message, resp.responses) == (
        ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group} not found.", [])
    member, _ = join(client, group, [topic_name])
    resp = delete_offsets(client, group, "some-other-topic")  # any member forbids it
    assert (resp.error_code, resp.error_message) == (ErrorCode.NON_EMPTY_GROUP, "The group is not empty.")
    leave(client, group, member)
    other = f"{topic_name}-other"
    create_topic(client, other, 1)
    resp = delete_offsets(client, group, "no-such-topic", other)
    assert resp.error_code == 0
    assert {t.topic_name: (t.topic_id, t.error_code, t.error_message) for t in resp.responses} == {
        "no-such-topic": (ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_TEXT),
        other: (ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "There is no offset information to delete."),
    }


def test_delete_offsets_deletes_the_topics_state(client, group, topic_name):
    tid = create_topic(client, topic_name, 2)
    kept = f"{topic_name}-kept"
    create_topic(client, kept, 1)
    produce_batches(client, topic_name, [4])
    empty_group_at(client, group, topic_name, {0: 1, 1: 0})
    empty_group_at(client, group, kept, {0: 0})
    with ShareMember(client_bootstrap(client), group) as m:
        assert acquired(parts(m.open([(tid, 0)]))[(tid, 0)]) == [(1, 3, 1)]  # the leader caches in-flight state
        resp = delete_offsets(client, group, topic_name)
        assert resp.error_code == 0
        assert [(t.topic_name, t.topic_id, t.error_code, t.error_message) for t in resp.responses] == [
            (topic_name, tid, 0, None)]
        assert set(rows(offsets(client, group))) == {(kept, 0)}
        assert rows(offsets(client, group, {topic_name: [0]})) == {(topic_name, 0): (-1, 0, -1, 0)}
        # no state: the partition is not part of the group until the group coordinator initialises
        # it again (Kafka's SharePartition.maybeInitialize fails; the leader creates nothing)
        again = parts(m.fetch([(tid, 0)]))[(tid, 0)]
        assert (again.error_code, acquired(again)) == (ErrorCode.UNKNOWN_SERVER_ERROR, [])
        assert rows(offsets(client, group, {topic_name: [0]})) == {(topic_name, 0): (-1, 0, -1, 0)}
        join(client, group, [topic_name])  # a member: the group coordinator initialises it afresh
        deadline = time.monotonic() + 10
        while (again := parts(m.fetch([(tid, 0)])).get((tid, 0))) is not None and again.error_code:
            assert time.monotonic() < deadline, "not initialised again"
            time.sleep(0.01)
        assert again is None or acquired(again) == []  # share.auto.offset.reset (latest): nothing new
        produce_batches(client, topic_name, [2])
        assert acquired(parts(m.fetch())[(tid, 0)]) == [(4, 5, 1)]
        (ack,) = parts(m.acknowledge({(tid, 0): [(4, 5, [1])]})).values()  # written on the fresh state
        assert ack.error_code == 0
        ((start, _, lag, _),) = rows(offsets(client, group, {topic_name: [0]})).values()
        assert lag == 0 and start in (4, 6)  # the leader persists the SPSO it had before this ack


# --- DeleteGroups -----------------------------------------------------------------------------------


def test_delete_groups(client, group, topic_name):
    create_topic(client, topic_name, 1)
    idle = f"{group}-idle"
    empty_group_at(client, idle, topic_name, {0: 0})
    member, _ = join(client, group, [topic_name])
    assert delete_groups(client, group, idle, f"{group}-unknown") == {
        group: ErrorCode.NON_EMPTY_GROUP, idle: 0, f"{group}-unknown": ErrorCode.GROUP_ID_NOT_FOUND}
    (gone,) = share_describe(client, idle)
    assert gone.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert idle not in list_groups(client)
    assert rows(offsets(client, idle, {topic_name: [0]})) == {(topic_name, 0): (-1, 0, -1, 0)}  # state deleted
    leave(client, group, member)
    assert delete_groups(client, group, version=0) == {group: 0}
    assert group not in list_groups(client)
