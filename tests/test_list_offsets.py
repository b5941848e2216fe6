"""ListOffsets: earliest / latest / max timestamp / by timestamp, tiered specials, errors."""

from __future__ import annotations

import time

import pytest

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.context import RequestContext
from broker.handlers import list_offsets as list_offsets_handler
from protocol.errors import ErrorCode
from protocol.messages.list_offsets_request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from protocol.records import build_batch, check_batches
from tests.raw_client import RawClient
from tests.test_produce_support import LIST_OFFSETS, batch, create_topic, list_offset, produce

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5, -6
# An hour old: within the shared broker's retention (7 days), which deletes older segments
# whole, the active one too, at any retention pass.
T0 = int(time.time() * 1000) - 3_600_000


def answer(p):
    return p.error_code, p.timestamp, p.offset, p.leader_epoch


def test_empty_partition(broker, topic_name):
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)
        assert answer(list_offset(c, topic_name, EARLIEST)) == (0, -1, 0, 0)
        assert answer(list_offset(c, topic_name, LATEST)) == (0, -1, 0, 0)
        assert answer(list_offset(c, topic_name, MAX_TIMESTAMP)) == (0, -1, -1, -1)
        assert answer(list_offset(c, topic_name, T0)) == (0, -1, -1, -1)


def test_offsets_by_timestamp_and_the_special_timestamps(broker, topic_name):
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)
        # offsets 0..2 at T0, T0+30, T0+10; offsets 3..4 at T0+20, T0+40; offset 5 at T0+40 again
        produce(c, topic_name, build_batch([(None, b"a", [], T0), (None, b"b", [], T0 + 30), (None, b"c", [], T0 + 10)]))
        produce(c, topic_name, build_batch([(None, b"d", [], T0 + 20), (None, b"e", [], T0 + 40)]))
        produce(c, topic_name, build_batch([(None, b"f", [], T0 + 40)]))
        assert answer(list_offset(c, topic_name, EARLIEST)) == (0, -1, 0, 0)
        assert answer(list_offset(c, topic_name, LATEST)) == (0, -1, 6, 0)
        assert answer(list_offset(c, topic_name, T0 + 5)) == (0, T0 + 30, 1, 0)
        assert answer(list_offset(c, topic_name, T0 + 31)) == (0, T0 + 40, 4, 0)
        assert answer(list_offset(c, topic_name, T0 + 41)) == (0, -1, -1, -1)
        assert answer(list_offset(c, topic_name, MAX_TIMESTAMP, version=7)) == (0, T0 + 40, 4, 0)
        assert answer(list_offset(c, topic_name, EARLIEST_LOCAL, version=8)) == (0, -1, 0, 0)
        assert answer(list_offset(c, topic_name, LATEST_TIERED, version=9)) == (0, -1, -1, -1)
        assert answer(list_offset(c, topic_name, EARLIEST_PENDING_UPLOAD, version=11)) == (0, -1, -1, -1)
        assert answer(list_offset(c, topic_name, LATEST, isolation_level=1)) == (0, -1, 6, 0)
        v1 = list_offset(c, topic_name, LATEST, version=1)
        assert (v1.error_code, v1.offset) == (0, 6)


def test_errors(broker, topic_name):
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)
        produce(c, topic_name, batch([b"a"]))
        assert list_offset(c, "no-such-topic", LATEST).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert list_offset(c, topic_name, LATEST, partition=3).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert list_offset(c, topic_name, LATEST, leader_epoch=0).error_code == 0
        assert list_offset(c, topic_name, LATEST, leader_epoch=4).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
        twice = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(name=topic_name, partitions=[
            ListOffsetsPartition(partition_index=0, timestamp=LATEST),
            ListOffsetsPartition(partition_index=0, timestamp=EARLIEST),
        ])])
        resp = c.request(LIST_OFFSETS, 9, twice)
        assert [p.error_code for p in resp.topics[0].partitions] == [ErrorCode.INVALID_REQUEST]


def test_answers_are_keyed_by_partition_and_grouped_by_topic(broker, topic_name):
    """Kafka's ReplicaManager.fetchOffset keeps one status per partition in a map and groups the
    answers by topic name: a partition named twice gets one INVALID_REQUEST, and a topic named
    in two entries gets one."""
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)  # one partition: partition 1 is unknown
        def part(index, timestamp=LATEST):
            return ListOffsetsPartition(partition_index=index, timestamp=timestamp)

        req = ListOffsetsRequest(replica_id=-1, topics=[
            ListOffsetsTopic(name=topic_name, partitions=[part(0)]),
            ListOffsetsTopic(name="no-such-topic", partitions=[part(0)]),
            ListOffsetsTopic(name=topic_name, partitions=[part(1), part(0, EARLIEST)]),
        ])
        resp = c.request(LIST_OFFSETS, 9, req)
        assert sorted((t.name, p.partition_index, p.error_code) for t in resp.topics for p in t.partitions) == sorted([
            (topic_name, 0, ErrorCode.INVALID_REQUEST), (topic_name, 1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            ("no-such-topic", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)])
        assert sorted(t.name for t in resp.topics) == sorted([topic_name, "no-such-topic"])


def test_a_topic_entry_without_partitions_is_not_answered(broker, topic_name):
    """Kafka's ReplicaManager.fetchOffset builds its topics from the partitions' statuses: a
    topic entry that names no partition (known or not) has no entry in the response."""
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)
        req = ListOffsetsRequest(replica_id=-1, topics=[
            ListOffsetsTopic(name=topic_name, partitions=[]),
            ListOffsetsTopic(name="no-such-topic", partitions=[]),
            ListOffsetsTopic(name=topic_name + "-other", partitions=[]),
        ])
        assert c.request(LIST_OFFSETS, 9, req).topics == []
        req.topics[2].name = topic_name
        req.topics[2].partitions = [ListOffsetsPartition(partition_index=0, timestamp=LATEST)]
        resp = c.request(LIST_OFFSETS, 9, req)
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in resp.topics] == [(topic_name, [0])]


@pytest.mark.parametrize("timestamp, version", [
    (MAX_TIMESTAMP, 6), (EARLIEST_LOCAL, 7), (LATEST_TIERED, 8), (EARLIEST_PENDING_UPLOAD, 10), (-7, 11), (-100, 11),
])
def test_a_special_timestamp_the_version_does_not_have_is_unsupported(broker, topic_name, timestamp, version):
    """As Kafka's ReplicaManager.isListOffsetsTimestampUnsupported: not a timestamp to look up."""
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)
        produce(c, topic_name, batch([b"a"]))
        assert answer(list_offset(c, topic_name, timestamp, version=version)) == (
            ErrorCode.UNSUPPORTED_VERSION, -1, -1, -1)
        assert list_offset(c, "no-such-topic", timestamp, version=version).error_code == ErrorCode.UNSUPPORTED_VERSION


@pytest.fixture
async def local(tmp_path):
    b = Broker(BrokerConfig({"log.dirs": str(tmp_path / "data")}))
    yield b
    await b.store.close()


async def test_earliest_follows_the_log_start_offset(local):
    local.topics.create("t", 1)
    lg = local.store.get("t", 0)
    data = bytearray(build_batch([(None, b"x", [], T0 + i) for i in range(5)]))
    local.partitions.append(lg, data, check_batches(data))
    lg.delete_records_before(3)
    ctx = RequestContext(local, None, 2, 9, 1, "tests")
    req = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(name="t", partitions=[
        ListOffsetsPartition(partition_index=0, timestamp=EARLIEST)])])
    resp = await list_offsets_handler.handle(ctx, req)
    assert resp.topics[0].partitions[0].offset == 3
    req.topics[0].partitions[0].timestamp = T0  # by timestamp: never below the log start
    resp = await list_offsets_handler.handle(ctx, req)
    assert (resp.topics[0].partitions[0].offset, resp.topics[0].partitions[0].timestamp) == (3, T0 + 3)


def test_an_unknown_isolation_level_fails_the_request(broker, topic_name):
    """KafkaApis passes IsolationLevel.forId's answer to fetchOffset: anything but 0 and 1
    throws, and every partition is answered UNKNOWN_SERVER_ERROR."""
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)
        p = list_offset(c, topic_name, LATEST, isolation_level=2)
        assert (p.error_code, p.offset, p.timestamp) == (ErrorCode.UNKNOWN_SERVER_ERROR, -1, -1)
        assert list_offset(c, topic_name, LATEST, isolation_level=1).error_code == 0
