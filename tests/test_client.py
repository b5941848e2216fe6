"""The blocking tools client against a live broker: negotiation, metadata, routing."""

import pytest

from protocol.client import KafkaClient
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.list_offsets_request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest


def test_negotiates_metadata_and_finds_the_group_coordinator(broker, topic_name):
    with KafkaClient(broker.bootstrap) as c:
        assert c.version(3) == 13 and c.version(3, 12) == 12  # newest common, or capped
        resp = c.send(CreateTopicsRequest(topics=[CreatableTopic(name=topic_name, num_partitions=2,
                                                                  replication_factor=1)], timeout_ms=5000))
        assert resp.topics[0].error_code == 0
        md = c.metadata([topic_name])
        (t,) = md.topics
        assert t.name == topic_name and len(t.partitions) == 2
        node = c.group_coordinator("g")
        assert node == md.brokers[0].node_id
        lo = c.send(ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(
            name=topic_name, partitions=[ListOffsetsPartition(partition_index=0, timestamp=-1)])]), node=node)
        assert lo.topics[0].partitions[0].offset == 0


def test_unknown_topics_are_not_created_and_bad_bootstrap_is_clear(broker, topic_name):
    with KafkaClient(broker.bootstrap) as c:
        (t,) = c.metadata([topic_name]).topics
        assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        with pytest.raises(KafkaError):
            c.node(12345)
    with pytest.raises(ConnectionError, match="cannot reach"):
        KafkaClient("127.0.0.1:1", timeout_s=2).any_broker()
