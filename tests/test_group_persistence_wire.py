"""Share groups on ``__consumer_offsets`` with subprocess brokers: graceful and crash restarts
keep groups, members, epochs and assignments; the partition holds exactly Kafka's records for
a join and a leave; a torn tail is cut at start-up; heartbeats answer
COORDINATOR_LOAD_IN_PROGRESS while a big partition loads."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest

from broker.log import FileLogStore
from coordinator.group import records as rec
from coordinator.group.offsets_topic import CONSUMER_OFFSETS, OffsetsTopic, partition_for
from protocol import coordinator_serde as serde
from protocol.errors import ErrorCode
from protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest
from protocol.records import iter_records, parse_header, walk_headers
from tests.raw_client import RawClient

SHARE_GROUP_HEARTBEAT, CREATE_TOPICS, METADATA = 76, 19, 3
DURABLE = {"log.flush.interval.messages": "1"}  # every acknowledged write is fsynced
GROUP = "g"  # "g".hashCode() == 103: partition 3 of 50
PARTITION = 3
A, B, C = "kAMA2MYCSgWVW/t4+7NOvA", "bBBB2MYCSgWVW/t4+7NOvA", "cCCC2MYCSgWVW/t4+7NOvA"


def heartbeat(client, member, epoch, topics=None, group=GROUP):
    return client.request(SHARE_GROUP_HEARTBEAT, 1, ShareGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch, rack_id=None, subscribed_topic_names=topics))


def heartbeat_once_loaded(client, member, epoch, topics=None, timeout_s=20.0):
    """Heartbeat as a client does after a restart: retry while the group's partition loads."""
    deadline = time.monotonic() + timeout_s
    while True:
        resp = heartbeat(client, member, epoch, topics)
        if resp.error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return resp
        assert time.monotonic() < deadline, "the group's partition never finished loading"
        time.sleep(0.01)


def create_topic(client, name, partitions) -> uuid.UUID:
    resp = client.request(CREATE_TOPICS, 7, CreateTopicsRequest(topics=[CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])]))
    assert resp.topics[0].error_code == 0, resp.topics[0]
    meta = client.request(METADATA, 12, MetadataRequest(topics=[MetadataRequestTopic(name=name)],
                                                        allow_auto_topic_creation=False))
    return meta.topics[0].topic_id


def assigned(resp, tid) -> list[int]:
    assert resp.error_code == 0, (resp.error_code, resp.error_message)
    assert resp.assignment is not None
    return sorted(p for tp in resp.assignment.topic_partitions if tp.topic_id == tid for p in tp.partitions)


def segment_files(data_dir, partition=PARTITION):
    return sorted((data_dir / f"{CONSUMER_OFFSETS}-{partition}").glob("*.log"))


def read_partition(data_dir, partition=PARTITION):
    """(batch header, decoded record) for every record of a ``__consumer_offsets`` partition on disk."""
    out = []
    for path in segment_files(data_dir, partition):
        data = path.read_bytes()
        for pos, _ in walk_headers(data):
            header = parse_header(data, pos)
            for r in iter_records(data, pos):
                out.append((header, rec.CoordinatorRecord(*serde.decode(r.key, r.value, serde.CONSUMER_OFFSETS_TOPIC))))
    return out


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "kill-9"])
def test_a_restart_keeps_groups_members_epochs_and_assignments(broker_factory, topic_name, crash):
    b = broker_factory(DURABLE)
    with RawClient(b.bootstrap) as client:
        tid = create_topic(client, topic_name, 4)
        ja = heartbeat(client, A, 0, [topic_name])
        jb = heartbeat(client, B, 0, [topic_name])
        epoch = jb.member_epoch
        ra = heartbeat(client, A, ja.member_epoch)
        assert ra.member_epoch == epoch
        pa, pb = assigned(heartbeat(client, A, epoch, [topic_name]), tid), assigned(jb, tid)
        assert sorted(pa + pb) == [0, 1, 2, 3]
    if crash:
        b.kill()
    else:
        assert b.stop() == 0
    b.start()
    with RawClient(b.bootstrap) as client:
        steady = heartbeat_once_loaded(client, A, epoch)
        assert (steady.error_code, steady.member_epoch, steady.assignment) == (0, epoch, None)  # still a member
        assert assigned(heartbeat(client, A, epoch, [topic_name]), tid) == pa
        assert assigned(heartbeat(client, B, epoch, [topic_name]), tid) == pb
        assert heartbeat(client, C, epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID  # never joined
        joined = heartbeat(client, C, 0, [topic_name])
        assert joined.member_epoch == epoch + 1  # the group epoch carries on: never backwards
    assert b.stop() == 0
    assert "Traceback" not in b.log()


def test_the_partition_holds_kafkas_records_for_a_join_and_a_leave(broker_factory, topic_name):
    b = broker_factory()
    with RawClient(b.bootstrap) as client:
        tid = create_topic(client, topic_name, 2)
        join = heartbeat(client, A, 0, [topic_name])
        assert (join.member_epoch, assigned(join, tid)) == (2, [0, 1])
        assert heartbeat(client, A, -1).error_code == 0
    assert b.stop() == 0
    assert partition_for(GROUP, 50) == PARTITION
    entries = read_partition(b.data_dir)
    records = [r for _, r in entries]
    assert {getattr(r.key, "member_id", A) for r in records} == {A} and {r.key.group_id for r in records} == {GROUP}
    assert [type(r.key).__name__ for r in records] == [
        # the join: Kafka's heartbeat records, the partitions marked initializing last
        "ShareGroupMemberMetadataKey", "ShareGroupMetadataKey", "ShareGroupTargetAssignmentMemberKey",
        "ShareGroupTargetAssignmentMetadataKey", "ShareGroupCurrentMemberAssignmentKey",
        "ShareGroupStatePartitionMetadataKey",
        # the share coordinator initialised them
        "ShareGroupStatePartitionMetadataKey",
        # the member's next heartbeat: a new epoch with the partitions
        "ShareGroupMetadataKey", "ShareGroupTargetAssignmentMemberKey", "ShareGroupTargetAssignmentMetadataKey",
        "ShareGroupCurrentMemberAssignmentKey",
        # the leave
        "ShareGroupCurrentMemberAssignmentKey", "ShareGroupTargetAssignmentMemberKey",
        "ShareGroupMemberMetadataKey", "ShareGroupMetadataKey",
    ]
    member = records[0].value
    assert (member.rack_id, member.client_id, member.client_host, member.subscribed_topic_names) == (
        None, "kshare-tests", "/127.0.0.1", [topic_name])
    assert [r.value.epoch for r in records if type(r.key).__name__ == "ShareGroupMetadataKey"] == [1, 2, 3]
    assert records[-1].value.metadata_hash == 0  # nobody subscribes any more
    current = [r.value for r in records if type(r.key).__name__ == "ShareGroupCurrentMemberAssignmentKey"]
    assert [(v.member_epoch, v.previous_member_epoch, v.state) for v in current[:2]] == [(1, 0, 0), (2, 1, 0)]
    assert current[0].assigned_partitions == [] and current[2] is None
    assert [(t.topic_id, t.partitions) for t in current[1].assigned_partitions] == [(tid, [0, 1])]
    initializing, initialized = records[5].value, records[6].value
    assert [(t.topic_id, t.topic_name, t.partitions) for t in initializing.initializing_topics] == [
        (tid, topic_name, [0, 1])]
    assert (initializing.initialized_topics, initialized.initializing_topics, initialized.deleting_topics) == (
        [], [], [])
    assert [(t.topic_id, t.partitions) for t in initialized.initialized_topics] == [(tid, [0, 1])]
    assert [r.value for r in records[11:14]] == [None, None, None]
    # one batch per write, laid out as Kafka's coordinator runtime writes them
    batches = {}
    for header, _ in entries:
        batches.setdefault(header.base_offset, header)
    assert [h.records_count for h in batches.values()] == [6, 1, 4, 4]
    assert {(h.producer_id, h.producer_epoch, h.base_sequence, h.attributes) for h in batches.values()} == {
        (-1, -1, 0, 0)}
    # nothing else on the topic; Kafka's topic configs
    assert all(not read_partition(b.data_dir, p) for p in range(50) if p != PARTITION)
    registry = json.loads((b.data_dir / "kshare-topics.json").read_text())["topics"][CONSUMER_OFFSETS]
    assert registry["partitions"] == 50 and registry["configs"] == {
        "cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": "104857600"}


def test_a_torn_tail_is_cut_at_start_up_and_the_group_survives(broker_factory, topic_name):
    b = broker_factory(DURABLE)
    with RawClient(b.bootstrap) as client:
        tid = create_topic(client, topic_name, 2)
        join = heartbeat(client, A, 0, [topic_name])
        assert assigned(join, tid) == [0, 1]
    b.kill()
    (segment,) = segment_files(b.data_dir)
    good = segment.read_bytes()
    last_pos = list(walk_headers(good))[-1][0]
    with open(segment, "ab") as f:  # a write torn half-way: the head of a batch, then nothing
        f.write(good[last_pos:last_pos + 40])
    b.start()
    with RawClient(b.bootstrap) as client:
        steady = heartbeat_once_loaded(client, A, join.member_epoch)
        assert (steady.error_code, steady.member_epoch) == (0, join.member_epoch)
        assert assigned(heartbeat(client, A, join.member_epoch, [topic_name]), tid) == [0, 1]
    assert b.stop() == 0
    assert segment.read_bytes() == good  # the torn batch is gone, nothing else
    assert "truncating the log" in b.log()


def test_heartbeats_answer_load_in_progress_while_a_big_partition_loads(broker_factory, topic_name):
    b = broker_factory()
    with RawClient(b.bootstrap) as client:
        create_topic(client, topic_name, 1)
        join = heartbeat(client, A, 0, [topic_name])
        assert join.error_code == 0
    assert b.stop() == 0
    epochs = 60_000

    async def grow() -> None:  # what a long-lived group leaves behind: many epoch bumps
        store = FileLogStore(str(b.data_dir))
        offsets = OffsetsTopic(50, lambda p: store.get(CONSUMER_OFFSETS, p))
        for first in range(join.member_epoch + 1, epochs + 1, 2000):
            await offsets.append(PARTITION, [rec.group_metadata(GROUP, e, 0)
                                             for e in range(first, min(first + 2000, epochs + 1))])
        await store.close()

    asyncio.run(grow())
    b.start()
    with RawClient(b.bootstrap) as client:
        first = heartbeat(client, A, join.member_epoch)
        assert (first.error_code, first.error_message) == (
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "The coordinator is loading and hence can't process requests.")
        other = next(g for g in (f"other-{i}" for i in range(100)) if partition_for(g, 50) != PARTITION)
        assert heartbeat(client, B, 0, [topic_name], group=other).error_code == 0  # other partitions serve
        loaded = heartbeat_once_loaded(client, A, join.member_epoch)
        # the member is still there; the group epoch moved past everything loaded, never back
        assert loaded.error_code == 0 and loaded.member_epoch > epochs
    assert b.stop() == 0


def wait_for_log(b, text: str, after: int = 0, timeout_s: float = 20.0) -> str:
    """The first broker log line containing ``text`` past character ``after`` of the log (the
    broker reports the event there)."""
    deadline = time.monotonic() + timeout_s
    while True:
        line = next((line for line in b.log()[after:].splitlines() if text in line), None)
        if line is not None:
            return line
        assert time.monotonic() < deadline, f"no {text!r} in the broker log"
        time.sleep(0.05)


def test_the_partition_is_compacted_and_a_restart_loads_only_the_current_records(broker_factory, topic_name):
    """12,000 superseded records (a long-lived group's epoch bumps) are compacted away once the
    partition is loaded, at ``log.cleaner.backoff.ms``; the next start loads a handful (the log
    start moved past the rest; their segment goes once it is rolled and wholly below it)."""
    b = broker_factory({"log.cleaner.backoff.ms": "100"})
    with RawClient(b.bootstrap) as client:
        create_topic(client, topic_name, 1)
        join = heartbeat(client, A, 0, [topic_name])
    assert b.stop() == 0

    async def grow() -> None:
        store = FileLogStore(str(b.data_dir))
        offsets = OffsetsTopic(50, lambda p: store.get(CONSUMER_OFFSETS, p))
        for first in range(join.member_epoch + 1, 12_000, 2000):
            await offsets.append(PARTITION, [rec.group_metadata(GROUP, e, 0) for e in range(first, first + 2000)])
        await store.close()

    asyncio.run(grow())
    b.start()
    line = wait_for_log(b, f"compacted {CONSUMER_OFFSETS}-{PARTITION}:")
    kept = int(line.split("kept the ")[1].split()[0])
    assert kept < 10
    with RawClient(b.bootstrap) as client:
        epoch = heartbeat_once_loaded(client, A, join.member_epoch).member_epoch
    assert b.stop() == 0
    before = len(b.log())
    b.start()
    loaded = wait_for_log(b, f"loaded {CONSUMER_OFFSETS}-{PARTITION}:", after=before)
    assert int(loaded.split(" from ")[1].split()[0]) < 20, loaded
    with RawClient(b.bootstrap) as client:
        steady = heartbeat_once_loaded(client, A, epoch)
        assert (steady.error_code, steady.member_epoch) == (0, epoch)
    assert b.stop() == 0
    assert "Traceback" not in b.log()
