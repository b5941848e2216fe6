"""DescribeProducers: the idempotent producers a partition remembers (Admin ``describeProducers``,
``kafka-transactions.sh describe-producers``), as the broker checks their sequences.

As Kafka's KafkaApis.handleDescribeProducersRequest and ReplicaManager.activeProducerState:
a name that could never be a topic gets INVALID_TOPIC_EXCEPTION with Topic.validate's message,
an unknown topic UNKNOWN_TOPIC_OR_PARTITION with the default message (both for each partition
asked), an unknown partition of a known topic UNKNOWN_TOPIC_OR_PARTITION and an offline one
KAFKA_STORAGE_ERROR, without a message. Topics and partitions named twice are answered twice, in
request order (Kafka iterates the request). Every producer the partition's state holds is listed,
as after start-up (from the snapshots), including idle ones the next expiration check removes;
CoordinatorEpoch and CurrentTxnStartOffset are -1 until kshare has transactions.
"""

from __future__ import annotations

import logging

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.describe_producers_response import (
    DescribeProducersResponse,
    PartitionResponse,
    ProducerState,
    TopicResponse,
)

from ..log import READ_ERRORS
from ..topics import validate_topic_name
from ._admin import default_message

API_KEY = 61
MIN_VERSION, MAX_VERSION = 0, 0

log = logging.getLogger("kshare.admin")


def active_producers(broker, topic, partition: int) -> PartitionResponse:
    """One partition of a known topic."""
    lg = broker.store.get(topic.name, partition) if 0 <= partition < topic.partitions else None
    if lg is None:
        return PartitionResponse(partition_index=partition, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if lg.closed or lg.offline:
        return PartitionResponse(partition_index=partition, error_code=ErrorCode.KAFKA_STORAGE_ERROR)
    try:
        # Loads the partition's state (snapshot plus replay) if nothing was appended since start-up.
        state = broker.partitions.producer_state(lg)
    except (OSError, *READ_ERRORS) as e:  # a failed read, or a corrupt batch in the replay
        log.warning("DescribeProducers: cannot load the producer state of %s-%d: %s", topic.name, partition, e)
        return PartitionResponse(partition_index=partition, error_code=ErrorCode.KAFKA_STORAGE_ERROR)
    return PartitionResponse(partition_index=partition, error_code=ErrorCode.NONE, active_producers=[
        ProducerState(producer_id=e.producer_id, producer_epoch=e.epoch, last_sequence=e.last_seq,
                      last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
                      current_txn_start_offset=-1)
        for e in sorted(state.producers.values(), key=lambda e: e.producer_id)
    ])


def error_response(req, version: int, code: int) -> DescribeProducersResponse:
    """Kafka's getErrorResponse: every requested partition with the error, no message."""
    return DescribeProducersResponse(topics=[
        TopicResponse(name=t.name, partitions=[PartitionResponse(partition_index=p, error_code=code)
                                               for p in t.partition_indexes])
        for t in req.topics
    ])


async def handle(ctx, req) -> DescribeProducersResponse:
    broker = ctx.broker
    out = []
    for t in req.topics:
        error: tuple[ErrorCode, str] | None = None
        try:
            validate_topic_name(t.name)
        except KafkaError as e:
            error = e.code, e.message
        topic = broker.topics.get(t.name) if error is None else None
        if error is None and topic is None:
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, default_message(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if error is not None:
            partitions = [PartitionResponse(partition_index=p, error_code=error[0], error_message=error[1])
                          for p in t.partition_indexes]
        else:
            partitions = [active_producers(broker, topic, p) for p in t.partition_indexes]
        out.append(TopicResponse(name=t.name, partitions=partitions))
    return DescribeProducersResponse(throttle_time_ms=0, topics=out)
