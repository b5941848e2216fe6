"""DeleteRecords: move partitions' log start offsets up (AdminClient ``delete_records``).

Follows Kafka's ReplicaManager.deleteRecords and Partition.deleteRecordsOnLeader: offset -1
means the high watermark; an offset above it, or negative, is OFFSET_OUT_OF_RANGE; one at or
below the log start offset changes nothing. The answer's low watermark is the log start offset
afterwards, -1 with an error. The internal topics get INVALID_TOPIC_EXCEPTION, a topic whose
``cleanup.policy`` lacks ``delete`` POLICY_VIOLATION, an unknown partition
UNKNOWN_TOPIC_OR_PARTITION. A partition named twice is deleted up to its last offset and answered
once, as Kafka collects the request into a map. Share groups see the new start at their next
fetch: available records below it are archived, as after retention. The partition's producer
state is loaded first (kshare loads it on first use, Kafka at start-up), so the producers whose
records go stay known, as in Kafka.
"""

from __future__ import annotations

import logging

from protocol.errors import ErrorCode
from protocol.messages.delete_records_response import (
    DeleteRecordsPartitionResult,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)

from ..log import READ_ERRORS, KafkaStorageError

API_KEY = 21
MIN_VERSION, MAX_VERSION = 0, 2

HIGH_WATERMARK = -1

log = logging.getLogger("kshare.admin")


def delete_before(broker, topic: str, partition: int, offset: int) -> tuple[int, int]:
    """``(error code, low watermark)`` for one partition."""
    t = broker.topics.get(topic)
    lg = broker.store.get(topic, partition) if t is not None and 0 <= partition < t.partitions else None
    if lg is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1
    if t.internal:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, -1
    if lg.closed or lg.offline:
        return ErrorCode.KAFKA_STORAGE_ERROR, -1
    if not lg.config.deletes:
        return ErrorCode.POLICY_VIOLATION, -1
    if offset == HIGH_WATERMARK:
        offset = lg.high_watermark
    if not 0 <= offset <= lg.high_watermark:
        return ErrorCode.OFFSET_OUT_OF_RANGE, -1
    before = lg.start_offset
    if offset > before:
        try:
            broker.partitions.producer_state(lg)
        except (OSError, *READ_ERRORS) as e:  # a log that cannot be replayed: its appends fail too
            log.warning("DeleteRecords: cannot load the producer state of %s-%d: %s", topic, partition, e)
    try:
        lg.delete_records_before(offset)
    except (OSError, KafkaStorageError) as e:
        log.warning("DeleteRecords of %s-%d up to %d failed: %s", topic, partition, offset, e)
        return ErrorCode.KAFKA_STORAGE_ERROR, -1
    if lg.start_offset != before:
        log.info("DeleteRecords: %s-%d now starts at %d (was %d)", topic, partition, lg.start_offset, before)
    return ErrorCode.NONE, lg.start_offset


def error_response(req, version: int, code: int) -> DeleteRecordsResponse:
    """Kafka's getErrorResponse: every requested partition with the error and low watermark -1."""
    return DeleteRecordsResponse(topics=[
        DeleteRecordsTopicResult(name=t.name, partitions=[
            DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1, error_code=code)
            for p in t.partitions])
        for t in req.topics
    ])


async def handle(ctx, req) -> DeleteRecordsResponse:
    wanted: dict[str, dict[int, int]] = {}
    for t in req.topics:
        for p in t.partitions:
            wanted.setdefault(t.name, {})[p.partition_index] = p.offset
    out = []
    for topic, offsets in wanted.items():
        tr = DeleteRecordsTopicResult(name=topic)
        out.append(tr)
        for partition, offset in offsets.items():
            code, low = delete_before(ctx.broker, topic, partition, offset)
            tr.partitions.append(DeleteRecordsPartitionResult(
                partition_index=partition, low_watermark=low, error_code=code))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=out)
