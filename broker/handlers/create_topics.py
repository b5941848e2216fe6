"""CreateTopics: Kafka's controller checks in Kafka's order, on a one-broker cluster.

Order (ReplicationControlManager.createTopics): the whole request is refused past 10000 new
partitions; then every name (already exists, collision, Topic.validate) against the topics
before the request, so two names of one request that collide are both created; then per
topic: configs (null values, names, values), then assignment / replication factor / partition
count. A replication factor above 1 cannot be placed on one broker. Names given twice are
answered INVALID_REQUEST each, after the others. v5+ results carry the partition count,
replication factor and the effective configs (with their sources); v7 the topic id. With
validate_only nothing is created, and, like Kafka, the result still carries a fresh (never
used) topic id.
"""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.create_topics_response import (
    CreatableTopicConfigs,
    CreatableTopicResult,
    CreateTopicsResponse,
)
from protocol.uuids import random_uuid

from ..topic_configs import creation_topic_configs, validate_topic_configs
from ..topics import CLUSTER_METADATA
from ._admin import MAX_PARTITIONS_PER_BATCH, check_manual_assignment, check_replication_factor, duplicates

API_KEY = 19
MIN_VERSION, MAX_VERSION = 2, 7


def _requested_partitions(topic, default_partitions: int) -> int:
    if topic.assignments:
        return len(topic.assignments)
    if topic.num_partitions == -1:
        return default_partitions
    return max(topic.num_partitions, 0)


def _placement(topic, broker) -> tuple[int, int]:
    """(partitions, replication factor) for ``topic``, or KafkaError as Kafka's createTopic raises it."""
    node = broker.node_id
    if topic.assignments:
        if topic.replication_factor != -1:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but "
                             "replication factor was not set to -1.")
        if topic.num_partitions != -1:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but "
                             "numPartitions was not set to -1.")
        seen: set[int] = set()
        rf = None
        for a in topic.assignments:
            if a.partition_index in seen:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Found multiple manual partition assignments for partition {a.partition_index}")
            problem = check_manual_assignment(list(a.broker_ids), node, rf)
            if problem:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
            rf = len(a.broker_ids)
            seen.add(a.partition_index)
        if seen != set(range(len(seen))):
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             "partitions should be a consecutive 0-based integer sequence")
        return len(seen), rf
    if topic.replication_factor < -1 or topic.replication_factor == 0:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         "Replication factor must be larger than 0, or -1 to use the default value.")
    if topic.num_partitions < -1 or topic.num_partitions == 0:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                         "Number of partitions was set to an invalid non-positive value.")
    cfg = broker.config
    partitions = cfg["num.partitions"] if topic.num_partitions == -1 else topic.num_partitions
    rf = cfg["default.replication.factor"] if topic.replication_factor == -1 else topic.replication_factor
    check_replication_factor(rf)
    return partitions, rf


def _create_one(broker, topic, validate_only: bool) -> CreatableTopicResult:
    """Create ``topic``, whose name the caller checked before the request created anything."""
    registry = broker.topics
    configs = {c.name: c.value for c in topic.configs}
    validate_topic_configs(configs, broker.config)
    partitions, rf = _placement(topic, broker)
    if validate_only:
        topic_id = random_uuid()
    else:
        topic_id = registry.create(topic.name, partitions, configs, name_checked=True).topic_id
    return CreatableTopicResult(
        name=topic.name, topic_id=topic_id, error_code=ErrorCode.NONE, error_message=None,
        topic_config_error_code=ErrorCode.NONE, num_partitions=partitions, replication_factor=rf,
        configs=[
            CreatableTopicConfigs(name=name, value=value, read_only=False, config_source=source, is_sensitive=False)
            for name, value, source in creation_topic_configs(configs, broker.config)
        ],
    )


async def handle(ctx, req) -> CreateTopicsResponse:
    broker = ctx.broker
    dup = duplicates(t.name for t in req.topics)
    unique = [t for t in req.topics if t.name not in dup and t.name != CLUSTER_METADATA]
    total = sum(_requested_partitions(t, broker.config["num.partitions"]) for t in unique)
    if total > MAX_PARTITIONS_PER_BATCH:
        message = "Excessively large number of partitions per request."
        return CreateTopicsResponse(topics=[
            CreatableTopicResult(name=t.name, error_code=ErrorCode.POLICY_VIOLATION, error_message=message)
            for t in req.topics
        ])
    name_errors = broker.topics.new_name_errors(t.name for t in unique)
    results = []
    for topic in unique:
        try:
            if topic.name in name_errors:
                raise name_errors[topic.name]
            results.append(_create_one(broker, topic, req.validate_only))
        except KafkaError as e:
            results.append(CreatableTopicResult(name=topic.name, error_code=e.code, error_message=e.message))
    for name in sorted(dup, key=lambda n: (n is None, n)):
        results.append(CreatableTopicResult(name=name, error_code=ErrorCode.INVALID_REQUEST,
                                            error_message="Duplicate topic name."))
    if any(t.name == CLUSTER_METADATA for t in req.topics) and CLUSTER_METADATA not in dup:
        message = f"Creation of internal topic {CLUSTER_METADATA} is prohibited."
        results.append(CreatableTopicResult(name=CLUSTER_METADATA, error_code=ErrorCode.INVALID_REQUEST,
                                            error_message=message))
    return CreateTopicsResponse(topics=results)


def error_response(req, version: int, code: int) -> CreateTopicsResponse:
    """Every requested topic name (duplicates too) with the error and no message."""
    return CreateTopicsResponse(topics=[
        CreatableTopicResult(name=t.name, error_code=code, error_message=None) for t in req.topics
    ])
