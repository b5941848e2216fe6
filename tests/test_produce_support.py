"""Helpers for the data-path tests: raw Produce / Fetch / ListOffsets / InitProducerId calls.

Not a test module (nothing here is collected); the produce, fetch, list-offsets, idempotence
and durability tests share these so each test reads as the Kafka exchange it checks.
"""

from __future__ import annotations

from protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from protocol.messages.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from protocol.messages.init_producer_id_request import InitProducerIdRequest
from protocol.messages.list_offsets_request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from protocol.messages.produce_request import PartitionProduceData, ProduceRequest, TopicProduceData
from protocol.records import build_batch, check_batch, iter_records

PRODUCE, FETCH, LIST_OFFSETS, METADATA, INIT_PRODUCER_ID, INCREMENTAL_ALTER_CONFIGS = 0, 1, 2, 3, 22, 44


def create_topic(client, name: str):
    """Create ``name`` (broker defaults) through Metadata auto-creation; returns its metadata."""
    resp = client.request(METADATA, 12, MetadataRequest(topics=[MetadataRequestTopic(name=name)]))
    (topic,) = resp.topics
    assert topic.error_code == 0, topic.error_code
    return topic


def batch(values, *, producer_id=-1, epoch=-1, seq=-1, compression=0, timestamp_ms=None, keys=None) -> bytes:
    """One v2 batch as a client sends it (base offset 0)."""
    keys = keys or [None] * len(values)
    return build_batch(
        [(k, v, []) for k, v in zip(keys, values)],
        compression=compression, producer_id=producer_id, producer_epoch=epoch, base_sequence=seq,
        timestamp_ms=timestamp_ms,
    )


def produce_request(topic: str, records, *, partition=0, acks=-1, transactional_id=None, topic_id=None):
    td = TopicProduceData(name=topic, partition_data=[PartitionProduceData(index=partition, records=records)])
    if topic_id is not None:
        td.topic_id = topic_id
    return ProduceRequest(transactional_id=transactional_id, acks=acks, timeout_ms=30000, topic_data=[td])


def produce(client, topic: str, records, *, version=9, **kw):
    """Send one partition's records; returns that partition's response."""
    resp = client.request(PRODUCE, version, produce_request(topic, records, **kw))
    (t,) = resp.responses
    (p,) = t.partition_responses
    return p


def fetch_request(topic: str, offset: int, *, partition=0, max_wait_ms=0, min_bytes=0, max_bytes=50 << 20,
                  partition_max_bytes=1 << 20, leader_epoch=-1, isolation_level=0, topic_id=None):
    ft = FetchTopic(topic=topic, partitions=[FetchPartition(
        partition=partition, current_leader_epoch=leader_epoch, fetch_offset=offset,
        partition_max_bytes=partition_max_bytes,
    )])
    if topic_id is not None:
        ft.topic_id = topic_id
    return FetchRequest(max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                        isolation_level=isolation_level, topics=[ft])


def fetch(client, topic: str, offset: int, *, version=12, **kw):
    """Fetch one partition; returns that partition's response data."""
    resp = client.request(FETCH, version, fetch_request(topic, offset, **kw))
    assert resp.error_code == 0, resp.error_code
    (t,) = resp.responses
    (p,) = t.partitions
    return p


def raw(data) -> bytes:
    """A records field as bytes (decoded: one buffer; built in-process: a list of buffers)."""
    if isinstance(data, list):
        return b"".join(bytes(x) for x in data)
    return bytes(data or b"")


def records_of(data) -> list:
    """Decode every batch of a fetched records field (CRC-checked) into records."""
    out = []
    buf = raw(data)
    pos = 0
    while pos < len(buf):
        h = check_batch(buf, pos)
        out.extend(iter_records(buf, pos))
        pos += h.size
    return out


def headers_of(data) -> list:
    buf = raw(data)
    out, pos = [], 0
    while pos < len(buf):
        h = check_batch(buf, pos)
        out.append(h)
        pos += h.size
    return out


def list_offset(client, topic: str, timestamp: int, *, partition=0, version=9, isolation_level=0, leader_epoch=-1):
    req = ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level, topics=[ListOffsetsTopic(
        name=topic, partitions=[ListOffsetsPartition(partition_index=partition, timestamp=timestamp,
                                                     current_leader_epoch=leader_epoch)],
    )])
    resp = client.request(LIST_OFFSETS, version, req)
    (t,) = resp.topics
    (p,) = t.partitions
    return p


def alter_broker_config(client, name: str, value: str) -> int:
    """IncrementalAlterConfigs: SET one cluster-wide broker default; returns its error code."""
    resp = client.request(INCREMENTAL_ALTER_CONFIGS, 1, IncrementalAlterConfigsRequest(resources=[
        AlterConfigsResource(4, "", [AlterableConfig(name, 0, value)])]))
    return resp.responses[0].error_code


def init_producer_id(client, *, version=4, transactional_id=None, producer_id=-1, producer_epoch=-1):
    return client.request(INIT_PRODUCER_ID, version, InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout_ms=60000,
        producer_id=producer_id, producer_epoch=producer_epoch,
    ))
