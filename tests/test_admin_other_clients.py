"""The admin APIs through kafka-python and aiokafka, which pick other versions than librdkafka."""

from __future__ import annotations

import asyncio

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewTopic as AioNewTopic
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic


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
