"""The admin APIs through kafka-python and aiokafka, which pick other versions than librdkafka."""

from __future__ import annotations

import asyncio

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewTopic as AioNewTopic
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType
from confluent_kafka import Producer
from kafka import TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic

from tests.raw_client import RawClient
from tests.test_produce_support import fetch, headers_of


def test_kafka_python_admin(broker, topic_name):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic(topic_name, 2, 1, topic_configs={"retention.ms": "5000"})])
        assert topic_name in admin.list_topics()
        admin.create_partitions({topic_name: NewPartitions(3)})
        (described,) = admin.describe_topics([topic_name])
        assert len(described["partitions"]) == 3
        resource = [ConfigResource(ConfigResourceType.TOPIC, topic_name)]
        everything = admin.describe_configs(resource, config_filter="all")["topic"][topic_name]
        assert len(everything) == 33 and everything["segment.bytes"]["value"] == "1073741824"
        modified = admin.describe_configs(resource, include_synonyms=True)["topic"][topic_name]
        assert list(modified) == ["retention.ms"] and modified["retention.ms"]["value"] == "5000"
        assert modified["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic_name, configs={"segment.ms": "6000"})])
        modified = admin.describe_configs(resource)["topic"][topic_name]
        assert {k: v["value"] for k, v in modified.items()} == {"retention.ms": "5000", "segment.ms": "6000"}
        (answer,) = admin.describe_log_dirs({topic_name: [0, 2]})
        (log_dir,) = answer["log_dirs"]
        assert log_dir["error_code"] == 0 and log_dir["usable_bytes"] > 0
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in log_dir["topics"]] == [
            (topic_name, [0, 2])]
        admin.delete_topics([topic_name])
        assert topic_name not in admin.list_topics()
    finally:
        admin.close()


def test_kafka_python_describe_producers(broker_factory, topic_name):
    """kafka-python 3's describe_producers (DescribeProducers v0) after an idempotent
    confluent-kafka producer wrote: the id, epoch and last sequence of the stored batches,
    the same after a restart (the state then comes from the producer snapshot)."""
    b = broker_factory()

    def described():
        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=10000)
        try:
            return admin.describe_producers([TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)])
        finally:
            admin.close()

    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic(topic_name, 2, 1)])
    finally:
        admin.close()
    producer = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for i in range(7):
        producer.produce(topic_name, b"v%d" % i, partition=0)
        if i % 3 == 0:
            producer.flush(10)  # several batches
    assert producer.flush(10) == 0
    del producer
    with RawClient(b.bootstrap) as c:
        stored = headers_of(fetch(c, topic_name, 0).records)
    last = stored[-1]
    assert len(stored) >= 3 and last.producer_id >= 0 and sum(h.records_count for h in stored) == 7
    expected = (last.producer_id, last.producer_epoch, last.base_sequence + last.last_offset_delta, last.max_timestamp)
    assert expected[2] == 6
    for restart in (False, True):
        if restart:
            b.restart()
        answer = described()
        (state,) = answer[TopicPartition(topic_name, 0)].active_producers
        assert (state.producer_id, state.producer_epoch, state.last_sequence, state.last_timestamp) == expected
        assert (state.coordinator_epoch, state.current_transaction_start_offset) == (-1, -1)
        assert answer[TopicPartition(topic_name, 1)].active_producers == []


def test_aiokafka_admin(broker, topic_name):
    async def run():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
        await admin.start()
        try:
            await admin.create_topics([AioNewTopic(topic_name, 1, 1, topic_configs={"cleanup.policy": "compact"})])
            assert topic_name in await admin.list_topics()
            (resp,) = await admin.describe_configs([AioConfigResource(AioConfigResourceType.TOPIC, topic_name)])
            entries = {e[0]: e[1] for e in resp.resources[0][4]}
            assert entries["cleanup.policy"] == "compact"
            await admin.delete_topics([topic_name])
            assert topic_name not in await admin.list_topics()
        finally:
            await admin.close()

    asyncio.run(run())
