"""AlterShareGroupOffsets (v0): reset the share-partition start offsets of an empty share group
(kafka-share-groups.sh --reset-offsets). The group coordinator records the partitions as
initializing, the share coordinator re-initialises their state with the new start offset
(discarding in-flight state and delivery counts), and the partitions are recorded as
initialized; the share-partition leaders drop their cached state so it is reloaded.

Kafka 4.2's answers: an empty group id is INVALID_GROUP_ID; a group with members
NON_EMPTY_GROUP; a non-share group id GROUP_ID_NOT_FOUND; a group that does not exist is
created (empty) so it can start at the given offsets. Unknown topics and partitions are
UNKNOWN_TOPIC_OR_PARTITION per partition; a partition the share coordinator fails to reset
carries that error.
"""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.alter_share_group_offsets_response import (
    AlterShareGroupOffsetsResponse,
    AlterShareGroupOffsetsResponsePartition,
    AlterShareGroupOffsetsResponseTopic,
)
from protocol.primitives import ZERO_UUID

from ._group_admin import error_message

API_KEY = 91
MIN_VERSION, MAX_VERSION = 0, 0


def _error(code: ErrorCode, message: str | None) -> AlterShareGroupOffsetsResponse:
    return AlterShareGroupOffsetsResponse(error_code=code, error_message=error_message(code, message))


async def handle(ctx, req) -> AlterShareGroupOffsetsResponse:
    broker = ctx.broker
    if not req.group_id:
        return _error(ErrorCode.INVALID_GROUP_ID, None)
    topics = [(t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions]) for t in req.topics]
    try:
        altered = await broker.group_coordinator.alter_share_group_offsets(
            req.group_id, topics, invalidate=broker.share_manager.forget_share_state)
    except KafkaError as e:
        return _error(e.code, e.message)
    # KafkaApis' response builder lists the unknown topics first, then merges in the
    # coordinator's answer; a topic named twice is one entry.
    by_name: dict[str, AlterShareGroupOffsetsResponseTopic] = {}
    for t in sorted(altered, key=lambda t: t.topic_id is not None):
        entry = by_name.setdefault(t.name, AlterShareGroupOffsetsResponseTopic(
            topic_name=t.name, topic_id=t.topic_id or ZERO_UUID))
        entry.partitions += [
            AlterShareGroupOffsetsResponsePartition(partition_index=p, error_code=code,
                                                    error_message=error_message(code, message))
            for p, code, message in t.partitions
        ]
    return AlterShareGroupOffsetsResponse(responses=list(by_name.values()))


def error_response(req, version: int, code: int) -> AlterShareGroupOffsetsResponse:
    """The top-level error code with its default message, and no topics."""
    return _error(code, None)
