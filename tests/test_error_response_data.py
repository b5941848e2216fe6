"""What each ``error_response`` mirrors of its request, as Kafka 4.2's ``getErrorResponse`` does.

The generic test (test_handler_failure.py) only checks that no other error code comes back;
here every topic / partition a request names must come back with the error under its own key
(name, topic id, partition index), at the versions where Kafka does so, and the top-level error
code where Kafka sets it. Responses are checked after an encode / decode at the version, so a
field the version lacks reads as its default.
"""

from __future__ import annotations

import uuid

import pytest

from broker.handlers import REGISTRY
from protocol.errors import ErrorCode
from protocol.messages.api_versions_request import ApiVersionsRequest
from protocol.messages.delete_records_request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from protocol.messages.describe_cluster_request import DescribeClusterRequest
from protocol.messages.describe_log_dirs_request import DescribeLogDirsRequest
from protocol.messages.describe_producers_request import DescribeProducersRequest
from protocol.messages.describe_producers_request import TopicRequest as DescribeProducersTopic
from protocol.messages.describe_topic_partitions_request import DescribeTopicPartitionsRequest, TopicRequest
from protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from protocol.messages.init_producer_id_request import InitProducerIdRequest
from protocol.messages.list_offsets_request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from protocol.messages.produce_request import PartitionProduceData, ProduceRequest, TopicProduceData
from protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from protocol.messages.sasl_handshake_request import SaslHandshakeRequest

UNKNOWN = ErrorCode.UNKNOWN_SERVER_ERROR
ID_A, ID_B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)


def answer(api_key: int, request, version: int, code: int = UNKNOWN):
    """The error response as a client decodes it."""
    h = REGISTRY[api_key]
    return h.response_class.from_bytes(h.error_response(request, version, code).to_bytes(version), version)


def produce(v):
    return ProduceRequest(acks=-1, topic_data=[
        TopicProduceData(name="a", topic_id=ID_A, partition_data=[PartitionProduceData(index=0),
                                                                  PartitionProduceData(index=2)]),
        TopicProduceData(name="b", topic_id=ID_B, partition_data=[PartitionProduceData(index=1)]),
        TopicProduceData(name="a", topic_id=ID_A, partition_data=[PartitionProduceData(index=2)]),  # again
    ])


def fetch(v):
    return FetchRequest(session_id=7, topics=[
        FetchTopic(topic="a", topic_id=ID_A, partitions=[FetchPartition(partition=0), FetchPartition(partition=3)]),
        FetchTopic(topic="b", topic_id=ID_B, partitions=[FetchPartition(partition=1)]),
    ])


def list_offsets(v):
    return ListOffsetsRequest(topics=[
        ListOffsetsTopic(name="a", partitions=[ListOffsetsPartition(partition_index=0),
                                               ListOffsetsPartition(partition_index=4)]),
        ListOffsetsTopic(name="b", partitions=[ListOffsetsPartition(partition_index=1)]),
    ])


def delete_records(v):
    return DeleteRecordsRequest(topics=[
        DeleteRecordsTopic(name="a", partitions=[DeleteRecordsPartition(partition_index=0, offset=5),
                                                 DeleteRecordsPartition(partition_index=2, offset=5)]),
        DeleteRecordsTopic(name="b", partitions=[DeleteRecordsPartition(partition_index=1, offset=5)]),
    ])


def describe_producers(v):
    return DescribeProducersRequest(topics=[DescribeProducersTopic(name="a", partition_indexes=[0, 2]),
                                            DescribeProducersTopic(name="b", partition_indexes=[1]),
                                            DescribeProducersTopic(name="a", partition_indexes=[0])])  # again


def metadata(v):
    if v >= 12:
        return MetadataRequest(topics=[MetadataRequestTopic(name="a"), MetadataRequestTopic(name=None, topic_id=ID_B)])
    return MetadataRequest(topics=[MetadataRequestTopic(name="a"), MetadataRequestTopic(name="b")])


def _produce_parts(r):
    return [(t.name, t.topic_id, p.index, p.error_code, p.base_offset, p.error_message)
            for t in r.responses for p in t.partition_responses]


def _fetch_parts(r):
    return [(t.topic, t.topic_id, p.partition_index, p.error_code, p.high_watermark)
            for t in r.responses for p in t.partitions]


def _offsets_parts(r):
    return [(t.name, p.partition_index, p.error_code, p.offset, p.timestamp) for t in r.topics for p in t.partitions]


def _delete_parts(r):
    return [(t.name, p.partition_index, p.error_code, p.low_watermark) for t in r.topics for p in t.partitions]


def _metadata_topics(r):
    return [(t.name, t.topic_id, t.error_code, t.partitions) for t in r.topics]


Z = uuid.UUID(int=0)
E = UNKNOWN
CASES = [
    # api, request, version, what of the answer, expected
    (0, produce, 12, _produce_parts, [("a", Z, 0, E, -1, None), ("a", Z, 2, E, -1, None), ("b", Z, 1, E, -1, None)]),
    (0, produce, 13, _produce_parts, [("", ID_A, 0, E, -1, None), ("", ID_A, 2, E, -1, None),
                                      ("", ID_B, 1, E, -1, None)]),
    (1, fetch, 4, _fetch_parts, [("a", Z, 0, E, -1), ("a", Z, 3, E, -1), ("b", Z, 1, E, -1)]),
    (1, fetch, 12, _fetch_parts, [("a", Z, 0, E, -1), ("a", Z, 3, E, -1), ("b", Z, 1, E, -1)]),
    (1, fetch, 13, _fetch_parts, []),
    (1, fetch, 4, lambda r: (r.error_code, r.session_id), (0, 0)),  # not in v4
    (1, fetch, 12, lambda r: (r.error_code, r.session_id), (E, 7)),
    (1, fetch, 18, lambda r: (r.error_code, r.session_id), (E, 7)),
    (2, list_offsets, 1, _offsets_parts, [("a", 0, E, -1, -1), ("a", 4, E, -1, -1), ("b", 1, E, -1, -1)]),
    (2, list_offsets, 11, _offsets_parts, [("a", 0, E, -1, -1), ("a", 4, E, -1, -1), ("b", 1, E, -1, -1)]),
    (21, delete_records, 0, _delete_parts, [("a", 0, E, -1), ("a", 2, E, -1), ("b", 1, E, -1)]),
    (21, delete_records, 2, _delete_parts, [("a", 0, E, -1), ("a", 2, E, -1), ("b", 1, E, -1)]),
    (61, describe_producers, 0,
     lambda r: [(t.name, p.partition_index, p.error_code, p.error_message, p.active_producers)
                for t in r.topics for p in t.partitions],
     [("a", 0, E, None, []), ("a", 2, E, None, []), ("b", 1, E, None, []), ("a", 0, E, None, [])]),
    (3, metadata, 0, _metadata_topics, [("a", Z, E, []), ("b", Z, E, [])]),
    (3, metadata, 11, _metadata_topics, [("a", Z, E, []), ("b", Z, E, [])]),
    (3, metadata, 12, _metadata_topics, [("a", Z, E, []), ("", ID_B, E, [])]),
    (3, metadata, 13, _metadata_topics, [("a", Z, E, []), ("", ID_B, E, [])]),
    (3, metadata, 12, lambda r: r.error_code, 0),  # not in v12
    (3, metadata, 13, lambda r: r.error_code, E),
    (3, lambda v: MetadataRequest(topics=None), 13, lambda r: (r.topics, r.error_code), ([], E)),
    (75, lambda v: DescribeTopicPartitionsRequest(topics=[TopicRequest(name="a"), TopicRequest(name="b")]), 0,
     lambda r: [(t.name, t.topic_id, t.error_code, t.partitions) for t in r.topics] + [r.next_cursor],
     [("a", Z, E, []), ("b", Z, E, []), None]),
    (35, lambda v: DescribeLogDirsRequest(topics=None), 2, lambda r: (r.error_code, r.results), (0, [])),
    (35, lambda v: DescribeLogDirsRequest(topics=None), 3, lambda r: (r.error_code, r.results), (E, [])),
    (22, lambda v: InitProducerIdRequest(), 5, lambda r: (r.error_code, r.producer_id, r.producer_epoch), (E, -1, -1)),
    (60, lambda v: DescribeClusterRequest(), 2, lambda r: (r.error_code, r.error_message, r.brokers), (E, None, [])),
    (17, lambda v: SaslHandshakeRequest(mechanism="PLAIN"), 1, lambda r: (r.error_code, r.mechanisms), (E, [])),
    (36, lambda v: SaslAuthenticateRequest(auth_bytes=b"x"), 2, lambda r: (r.error_code, r.error_message), (E, None)),
    (18, lambda v: ApiVersionsRequest(), 3, lambda r: (r.error_code, r.api_keys), (E, [])),
]


@pytest.mark.parametrize("api_key,request_for,version,what,expected", CASES,
                         ids=[f"{REGISTRY[c[0]].name}-v{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_error_response_mirrors_the_request(api_key, request_for, version, what, expected):
    assert what(answer(api_key, request_for(version), version)) == expected


def test_api_versions_unsupported_version_names_its_own_range():
    r = answer(18, ApiVersionsRequest(), 0, ErrorCode.UNSUPPORTED_VERSION)
    h = REGISTRY[18]
    assert r.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in r.api_keys] == [(18, h.min_version, h.max_version)]


def test_an_acks_0_produce_gets_no_answer():
    request = produce(9)
    request.acks = 0
    assert REGISTRY[0].error_response(request, 9, UNKNOWN) is None
