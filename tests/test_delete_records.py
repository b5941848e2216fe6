"""DeleteRecords: Kafka's answers on the wire, confluent-kafka's ``delete_records``, what share
groups do with records deleted under them, and the new log start surviving kill -9."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition

from protocol.errors import ErrorCode
from protocol.messages.delete_records_request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from protocol.messages.describe_share_group_offsets_request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)
from tests.raw_client import RawClient
from tests.test_e2e_share_support import (
    TIMEOUT,
    Consumers,
    create_topic,
    earliest_group,
    offsets,
    poll_until,
)
from tests.test_e2e_share_support import produce as produce_records
from tests.test_produce_support import batch, fetch, list_offset, produce
from tests.test_produce_support import create_topic as auto_create_topic

DELETE_RECORDS, DESCRIBE_SHARE_GROUP_OFFSETS = 21, 90
EARLIEST = -2


def delete_records(client, *entries, version=2) -> list[tuple[str, int, int, int]]:
    """``entries``: (topic, partition, offset); returns (topic, partition, error, low watermark)."""
    topics: dict[str, list] = {}
    for name, partition, offset in entries:
        topics.setdefault(name, []).append(DeleteRecordsPartition(partition_index=partition, offset=offset))
    req = DeleteRecordsRequest(topics=[DeleteRecordsTopic(name=n, partitions=ps) for n, ps in topics.items()],
                               timeout_ms=5000)
    resp = client.request(DELETE_RECORDS, version, req)
    return [(t.name, p.partition_index, p.error_code, p.low_watermark) for t in resp.topics for p in t.partitions]


def share_offsets(bootstrap: str, group: str, topic: str) -> tuple[int, int]:
    """(start offset, lag) of partition 0 as DescribeShareGroupOffsets v1 answers."""
    req = DescribeShareGroupOffsetsRequest(groups=[DescribeShareGroupOffsetsRequestGroup(
        group_id=group, topics=[DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[0])])])
    with RawClient(bootstrap) as c:
        (g,) = c.request(DESCRIBE_SHARE_GROUP_OFFSETS, 1, req).groups
    (p,) = g.topics[0].partitions
    assert (g.error_code, p.error_code) == (0, 0), (g.error_message, p.error_message)
    return p.start_offset, p.lag


def test_kafka_answers_on_the_wire(broker, topic_name):
    compacted = f"{topic_name}-compacted"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
    futures = admin.create_topics([NewTopic(topic_name, 2, 1),
                                   NewTopic(compacted, 1, 1, config={"cleanup.policy": "compact"})])
    for f in futures.values():
        f.result(TIMEOUT)
    with RawClient(broker.bootstrap) as c:
        for i in range(10):
            produce(c, topic_name, batch([b"r%d" % i]))
        assert delete_records(c, (topic_name, 0, 4), version=0) == [(topic_name, 0, 0, 4)]
        assert list_offset(c, topic_name, EARLIEST).offset == 4
        # Below the start changes nothing; a partition named twice is answered once, for its
        # last offset.
        assert delete_records(c, (topic_name, 0, 2), (topic_name, 1, 5), (topic_name, 1, 0), version=1) == [
            (topic_name, 0, 0, 4), (topic_name, 1, 0, 0)]
        assert delete_records(
            c, (topic_name, 0, 11), (topic_name, 0, -2), (topic_name, 1, 1), (topic_name, 7, 0),
            ("no-such-topic", 0, 0), ("__consumer_offsets", 0, 0), ("__share_group_state", 0, 0), (compacted, 0, 0),
        ) == [
            (topic_name, 0, ErrorCode.OFFSET_OUT_OF_RANGE, -1),  # above the high watermark 10;
            # -2 overwrote 11 above: not -1 (the high watermark), so out of range too
            (topic_name, 1, ErrorCode.OFFSET_OUT_OF_RANGE, -1),  # partition 1 is empty
            (topic_name, 7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
            ("no-such-topic", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
            ("__consumer_offsets", 0, ErrorCode.INVALID_TOPIC_EXCEPTION, -1),
            ("__share_group_state", 0, ErrorCode.INVALID_TOPIC_EXCEPTION, -1),
            (compacted, 0, ErrorCode.POLICY_VIOLATION, -1),
        ]
        assert fetch(c, topic_name, 3).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert fetch(c, topic_name, 4).log_start_offset == 4
        # -1: everything up to the high watermark.
        assert delete_records(c, (topic_name, 0, -1)) == [(topic_name, 0, 0, 10)]
        produce(c, topic_name, batch([b"after"]))
        got = fetch(c, topic_name, 10)
        assert (got.error_code, got.log_start_offset, got.high_watermark) == (0, 10, 11)


@pytest.fixture
def holder(broker, topic_name):
    """Ten records, and an explicit-mode consumer of a new group starting at the earliest offset
    that holds them all: (group, consumers, that consumer, its records)."""
    create_topic(broker.bootstrap, topic_name)
    produce_records(broker.bootstrap, topic_name, [b"%d" % i for i in range(10)])
    group = earliest_group(broker.bootstrap)
    consumers = Consumers(broker.bootstrap)
    a = consumers.new(group, topic_name, explicit=True)
    yield group, consumers, a, poll_until(a, lambda got: len(got) == 10)
    consumers.close_all()


def test_confluent_delete_records_and_records_a_consumer_holds(broker, topic_name, holder):
    """Acquired records stay their consumer's to acknowledge when deleted under it (Kafka only
    archives available ones); the group's lag then counts nothing below the new start."""
    group, _, a, held = holder
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
    (future,) = admin.delete_records([TopicPartition(topic_name, 0, 5)]).values()
    assert future.result(TIMEOUT).low_watermark == 5
    for m in held:
        a.acknowledge(m)
    results = a.commit_sync()
    assert [(tp.partition, tp.error) for tp in results] == [(0, None)]
    assert share_offsets(broker.bootstrap, group, topic_name)[1] == 0


def test_released_records_below_the_new_start_are_not_delivered_again(broker, topic_name, holder):
    group, consumers, a, held = holder
    for m in held:
        if m.offset() < 3:
            a.acknowledge(m)
    a.commit_sync()
    consumers.close(a)  # releases 3-9
    with RawClient(broker.bootstrap) as c:
        assert delete_records(c, (topic_name, 0, 6)) == [(topic_name, 0, 0, 6)]
    produce_records(broker.bootstrap, topic_name, [b"10"])
    # As in Kafka, the group learns of the new start at its next fetch: until then its lag
    # still counts 3-5.
    assert share_offsets(broker.bootstrap, group, topic_name)[1] == 8
    # 3-5 were available below the new start: archived, never delivered again; a new group
    # starting at the earliest offset starts at the log start.
    for g in (group, earliest_group(broker.bootstrap)):
        b = consumers.new(g, topic_name)
        got = poll_until(b, lambda got: 10 in offsets(got))
        assert sorted(offsets(got)) == list(range(6, 11))
        b.commit_sync()
        assert share_offsets(broker.bootstrap, g, topic_name)[1] == 0
        consumers.close(b)


def test_the_new_log_start_survives_kill_9_and_whole_segments_below_it_go(broker_factory, topic_name):
    # Kafka's minimum segment size: three 300 KB batches each. DeleteRecords only moves the log
    # start; the whole segments below it go at the next retention pass, every 200 ms here.
    b = broker_factory({"log.segment.bytes": "1048576", "log.retention.check.interval.ms": "200",
                        "log.initial.task.delay.ms": "0"})
    data = b.data_dir / f"{topic_name}-0"
    with RawClient(b.bootstrap) as c:
        auto_create_topic(c, topic_name)
        for i in range(20):
            produce(c, topic_name, batch([(b"record %d " % i).ljust(300_000, b".")]))
        segments = sorted(data.glob("*.log"))
        assert len(segments) > 3
        assert delete_records(c, (topic_name, 0, 15)) == [(topic_name, 0, 0, 15)]
        deadline = time.monotonic() + TIMEOUT
        while len(remaining := sorted(data.glob("*.log"))) == len(segments) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert 0 < len(remaining) < len(segments)
        assert int(remaining[0].stem) <= 15
    b.kill()
    b.start()
    with RawClient(b.bootstrap) as c:
        assert list_offset(c, topic_name, EARLIEST).offset == 15
        assert fetch(c, topic_name, 14).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert produce(c, topic_name, batch([b"next"])).base_offset == 20


def test_kafka_python_and_aiokafka_delete_records(broker, topic_name):
    with RawClient(broker.bootstrap) as c:
        auto_create_topic(c, topic_name)
        for i in range(10):
            produce(c, topic_name, batch([b"r%d" % i]))
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        (result,) = admin.delete_records({KafkaTopicPartition(topic_name, 0): 4}).values()
        assert (result["error_code"], result["low_watermark"]) == (0, 4)
    finally:
        admin.close()

    async def aiokafka_delete() -> int:
        aio = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
        await aio.start()
        try:
            (low,) = (await aio.delete_records({AioTopicPartition(topic_name, 0): RecordsToDelete(7)})).values()
            return low
        finally:
            await aio.close()

    assert asyncio.run(aiokafka_delete()) == 7
