"""CreatePartitions: grow a topic (never shrink), optionally with manual assignments.

Messages follow Kafka's ReplicationControlManager.createPartitions; on one broker the only valid
assignment for a new partition is ``[node id]``. validate_only checks without growing. The
coordinators' topics keep their partition count (POLICY_VIOLATION; see ``_admin``).
"""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.create_partitions_response import CreatePartitionsResponse, CreatePartitionsTopicResult

from ._admin import (
    COORDINATOR_TOPICS,
    MAX_PARTITIONS_PER_BATCH,
    check_manual_assignment,
    coordinator_topic_refusal,
    duplicates,
)

API_KEY = 37
MIN_VERSION, MAX_VERSION = 0, 3


def _grow(broker, req_topic, validate_only: bool) -> None:
    topic = broker.topics.get(req_topic.name)
    if topic is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
    if topic.name in COORDINATOR_TOPICS:
        raise coordinator_topic_refusal(topic.name, "grow")
    current, count = topic.partitions, req_topic.count
    if count == current:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if count < current:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"The topic {topic.name} currently has {current} "
                         f"partition(s); {count} would not be an increase.")
    additional = count - current
    if req_topic.assignments is not None:
        if len(req_topic.assignments) != additional:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Attempted to add {additional} additional "
                             f"partition(s), but only {len(req_topic.assignments)} assignment(s) were specified.")
        for a in req_topic.assignments:
            problem = check_manual_assignment(list(a.broker_ids), broker.node_id, 1)
            if problem:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
    if additional > MAX_PARTITIONS_PER_BATCH:
        # Kafka's controller overflows its per-operation record bound here.
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, None)
    if not validate_only:
        broker.topics.add_partitions(topic.name, count)


async def handle(ctx, req) -> CreatePartitionsResponse:
    broker = ctx.broker
    dup = duplicates(t.name for t in req.topics)
    results = []
    for t in req.topics:
        if t.name in dup:
            continue
        try:
            _grow(broker, t, req.validate_only)
            results.append(CreatePartitionsTopicResult(name=t.name, error_code=ErrorCode.NONE, error_message=None))
        except KafkaError as e:
            results.append(CreatePartitionsTopicResult(name=t.name, error_code=e.code, error_message=e.message))
    for name in sorted(dup):
        results.append(CreatePartitionsTopicResult(name=name, error_code=ErrorCode.INVALID_REQUEST,
                                                   error_message="Duplicate topic name."))
    return CreatePartitionsResponse(results=results)


def error_response(req, version: int, code: int) -> CreatePartitionsResponse:
    """Every requested topic name (duplicates too) with the error and no message."""
    return CreatePartitionsResponse(results=[
        CreatePartitionsTopicResult(name=t.name, error_code=code, error_message=None) for t in req.topics
    ])
