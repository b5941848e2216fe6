"""ShareGroupHeartbeat on the wire against a subprocess broker: joins, sharing, leaves, Kafka's
error codes, size limits, session expiry and topic changes; then a real librdkafka
ShareConsumer joining and leaving a group."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import ShareConsumer

from protocol.errors import ErrorCode
from protocol.messages.create_partitions_request import CreatePartitionsRequest, CreatePartitionsTopic
from protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest
from tests.raw_client import RawClient

SHARE_GROUP_HEARTBEAT, CREATE_TOPICS, CREATE_PARTITIONS, METADATA = 76, 19, 37, 3
SHORT_SESSIONS = {  # bounds lowered so a session can expire within a test
    "group.share.min.heartbeat.interval.ms": "100", "group.share.heartbeat.interval.ms": "100",
    "group.share.min.session.timeout.ms": "800", "group.share.session.timeout.ms": "800",
}


def member_id() -> str:
    return uuid.uuid4().hex[:22]  # librdkafka sends 22 characters


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def client(broker):
    with RawClient(broker.bootstrap) as c:
        yield c


def heartbeat(client, group, member, epoch, topics=None, rack=None):
    return client.request(SHARE_GROUP_HEARTBEAT, 1, ShareGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch, rack_id=rack, subscribed_topic_names=topics))


def create_topic(client, name, partitions):
    resp = client.request(CREATE_TOPICS, 7, CreateTopicsRequest(topics=[CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])]))
    assert resp.topics[0].error_code == 0, resp.topics[0]


def topic_id(client, name) -> uuid.UUID:
    resp = client.request(METADATA, 12, MetadataRequest(topics=[MetadataRequestTopic(name=name)],
                                                        allow_auto_topic_creation=False))
    return resp.topics[0].topic_id


def assigned(resp, tid) -> list[int]:
    assert resp.error_code == 0, (resp.error_code, resp.error_message)
    assert resp.assignment is not None
    return sorted(p for tp in resp.assignment.topic_partitions if tp.topic_id == tid for p in tp.partitions)


def test_join_gets_every_partition_then_quiet_heartbeats(client, group, topic_name):
    create_topic(client, topic_name, 3)
    tid = topic_id(client, topic_name)
    a = member_id()
    join = heartbeat(client, group, a, 0, [topic_name])
    assert (join.error_code, join.member_id, join.heartbeat_interval_ms) == (0, a, 5000)
    assert join.member_epoch >= 1 and assigned(join, tid) == [0, 1, 2]
    steady = heartbeat(client, group, a, join.member_epoch)
    assert (steady.error_code, steady.member_epoch, steady.assignment) == (0, join.member_epoch, None)
    full = heartbeat(client, group, a, join.member_epoch, [topic_name])  # a full request gets the assignment
    assert assigned(full, tid) == [0, 1, 2]


def test_second_member_balances_the_partitions(client, group, topic_name):
    create_topic(client, topic_name, 4)
    tid = topic_id(client, topic_name)
    a, b = member_id(), member_id()
    ja = heartbeat(client, group, a, 0, [topic_name])
    assert assigned(ja, tid) == [0, 1, 2, 3]
    jb = heartbeat(client, group, b, 0, [topic_name])
    assert jb.member_epoch == ja.member_epoch + 1
    ra = heartbeat(client, group, a, ja.member_epoch)
    assert ra.member_epoch == jb.member_epoch
    pa, pb = assigned(ra, tid), assigned(jb, tid)
    assert len(pa) == len(pb) == 2 and sorted(pa + pb) == [0, 1, 2, 3]  # balanced, disjoint


def test_more_members_than_partitions_share_them(client, group, topic_name):
    create_topic(client, topic_name, 1)
    tid = topic_id(client, topic_name)
    members = [member_id() for _ in range(3)]
    joins = [heartbeat(client, group, m, 0, [topic_name]) for m in members]
    latest = [heartbeat(client, group, m, j.member_epoch) for m, j in zip(members, joins)]
    assert {r.member_epoch for r in latest} == {joins[-1].member_epoch}
    assert all(assigned(r if r.assignment is not None else j, tid) == [0] for r, j in zip(latest, joins))


def test_leave_then_unknown_member(client, group, topic_name):
    create_topic(client, topic_name, 1)
    a = member_id()
    join = heartbeat(client, group, a, 0, [topic_name])
    leave = heartbeat(client, group, a, -1)
    assert (leave.error_code, leave.member_id, leave.member_epoch, leave.heartbeat_interval_ms, leave.assignment) == (
        0, a, -1, 0, None)
    gone = heartbeat(client, group, a, join.member_epoch)
    assert gone.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert gone.error_message == f"Member {a} is not a member of group {group}."
    assert heartbeat(client, group, a, -1).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_kafka_error_codes(client, group, topic_name):
    create_topic(client, topic_name, 1)
    a = member_id()
    missing = heartbeat(client, group, a, 1)
    assert (missing.error_code, missing.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                           f"Share group {group} not found.")
    join = heartbeat(client, group, a, 0, [topic_name])
    assert heartbeat(client, group, member_id(), 1).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    fenced = heartbeat(client, group, a, join.member_epoch + 1)
    assert fenced.error_code == ErrorCode.FENCED_MEMBER_EPOCH and fenced.member_epoch == 0
    invalid = {
        "MemberId can't be empty.": ("", 0, [topic_name], group, None),
        "GroupId can't be empty.": (a, 0, [topic_name], "", None),
        "RackId can't be empty.": (a, 0, [topic_name], group, " "),
        "SubscribedTopicNames must be set in first request.": (member_id(), 0, [], group, None),
        "MemberEpoch is invalid.": (a, -2, None, group, None),
    }
    for message, (m, epoch, topics, g, rack) in invalid.items():
        resp = heartbeat(client, g, m, epoch, topics, rack)
        assert (resp.error_code, resp.error_message, resp.member_id) == (ErrorCode.INVALID_REQUEST, message, None)
    assert heartbeat(client, group, "m" * 37, 0, [topic_name]).error_code == 0  # no length limit, as Kafka


def test_group_max_size(broker_factory, topic_name):
    b = broker_factory({"group.share.max.size": "2"})
    with RawClient(b.bootstrap) as client:
        create_topic(client, topic_name, 1)
        first = [member_id(), member_id()]
        joins = [heartbeat(client, "g", m, 0, [topic_name]) for m in first]
        assert [j.error_code for j in joins] == [0, 0]
        full = heartbeat(client, "g", member_id(), 0, [topic_name])
        assert (full.error_code, full.error_message) == (
            ErrorCode.GROUP_MAX_SIZE_REACHED, "The share group has reached its maximum capacity of 2 members.")
        again = heartbeat(client, "g", first[0], 0, [topic_name])  # members are never turned away
        assert again.error_code == 0
        assert heartbeat(client, "other", member_id(), 0, [topic_name]).error_code == 0  # per group


def test_session_expiry_removes_a_silent_member(broker_factory, topic_name):
    b = broker_factory(SHORT_SESSIONS)
    with RawClient(b.bootstrap) as client:
        create_topic(client, topic_name, 2)
        tid = topic_id(client, topic_name)
        silent, alive = member_id(), member_id()
        s = heartbeat(client, "g", silent, 0, [topic_name])
        r = heartbeat(client, "g", alive, 0, [topic_name])
        r = heartbeat(client, "g", alive, r.member_epoch)
        assert r.heartbeat_interval_ms == 100 and len(assigned(heartbeat(client, "g", alive, r.member_epoch,
                                                                         [topic_name]), tid)) == 1
        deadline = time.monotonic() + 10
        while True:  # heartbeat as a client would until the silent member's partition comes over
            assert r.error_code == 0
            if r.assignment is not None and assigned(r, tid) == [0, 1]:
                break
            assert time.monotonic() < deadline, "the silent member was never removed"
            time.sleep(r.heartbeat_interval_ms / 1000)
            r = heartbeat(client, "g", alive, r.member_epoch)
        assert heartbeat(client, "g", silent, s.member_epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_topic_creation_and_new_partitions_bump_the_epoch(client, group, topic_name):
    later = topic_name + "-later"
    create_topic(client, topic_name, 1)
    tid = topic_id(client, topic_name)
    a = member_id()
    join = heartbeat(client, group, a, 0, [topic_name, later])
    assert assigned(join, tid) == [0] and len(join.assignment.topic_partitions) == 1
    create_topic(client, later, 2)
    grown = heartbeat(client, group, a, join.member_epoch)
    assert grown.member_epoch == join.member_epoch + 1
    assert assigned(grown, topic_id(client, later)) == [0, 1] and assigned(grown, tid) == [0]
    resp = client.request(CREATE_PARTITIONS, 3, CreatePartitionsRequest(
        topics=[CreatePartitionsTopic(name=topic_name, count=3, assignments=None)], timeout_ms=5000))
    assert resp.results[0].error_code == 0
    again = heartbeat(client, group, a, grown.member_epoch)
    assert again.member_epoch == grown.member_epoch + 1 and assigned(again, tid) == [0, 1, 2]


def test_librdkafka_share_consumer_joins_and_leaves(client, broker, group, topic_name):
    """A real ShareConsumer shares the topic with a raw member: the raw member's assignment
    shrinks when the consumer joins and grows back when it closes (its leave heartbeat)."""
    create_topic(client, topic_name, 2)
    tid = topic_id(client, topic_name)
    raw = member_id()
    r = heartbeat(client, group, raw, 0, [topic_name])
    assert assigned(r, tid) == [0, 1]

    def raw_until(wanted, why: str, consumer=None) -> None:
        """Heartbeat the raw member until its assignment satisfies ``wanted``."""
        nonlocal r
        deadline = time.monotonic() + 20
        while r.assignment is None or not wanted(assigned(r, tid)):
            assert r.error_code == 0 and time.monotonic() < deadline, why
            if consumer is not None:
                consumer.poll(0.2)  # ShareFetch may not be served yet; only membership matters here
            else:
                time.sleep(0.2)
            r = heartbeat(client, group, raw, r.member_epoch)

    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "log_level": 0})
    try:
        consumer.subscribe([topic_name])
        raw_until(lambda ps: len(ps) == 1, "the share consumer never joined", consumer)
    finally:
        consumer.close()
    raw_until(lambda ps: ps == [0, 1], "the share consumer never left")
