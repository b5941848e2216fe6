"""DeleteShareGroupOffsets (v0): delete the share-partition state of whole topics of an empty
share group (kafka-share-groups.sh --delete-offsets); a later member starts those partitions
afresh (share.auto.offset.reset). Kafka 4.2's flow: the topics' initialized partitions move to
"deleting" in ShareGroupStatePartitionMetadata, their state is deleted (DeleteShareGroupState),
and the deleted topics leave "deleting". The share-partition leaders drop their cached state.

Answers as Kafka's: an empty group id is INVALID_GROUP_ID; an unknown or non-share group
GROUP_ID_NOT_FOUND and any member NON_EMPTY_GROUP (top level); per topic, one that does not
exist is UNKNOWN_TOPIC_OR_PARTITION and one without share state UNKNOWN_TOPIC_OR_PARTITION
"There is no offset information to delete."; topics whose state could not be deleted carry
the persister's error. A group that never had share state answers no topics at all.
"""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.delete_share_group_offsets_response import (
    DeleteShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsResponseTopic,
)
from protocol.primitives import ZERO_UUID

from ._group_admin import error_message

API_KEY = 92
MIN_VERSION, MAX_VERSION = 0, 0


def _error(code: ErrorCode, message: str | None) -> DeleteShareGroupOffsetsResponse:
    return DeleteShareGroupOffsetsResponse(error_code=code, error_message=error_message(code, message))


async def handle(ctx, req) -> DeleteShareGroupOffsetsResponse:
    broker = ctx.broker
    if not req.group_id:
        return _error(ErrorCode.INVALID_GROUP_ID, None)
    try:
        topics = await broker.group_coordinator.delete_share_group_offsets(
            req.group_id, [t.topic_name for t in req.topics], invalidate=broker.share_manager.forget_share_state)
    except KafkaError as e:
        return _error(e.code, e.message)
    return DeleteShareGroupOffsetsResponse(responses=[
        DeleteShareGroupOffsetsResponseTopic(
            topic_name=t.name, topic_id=t.topic_id or ZERO_UUID, error_code=t.error_code,
            error_message=error_message(t.error_code, t.error_message),
        )
        for t in topics
    ])


def error_response(req, version: int, code: int) -> DeleteShareGroupOffsetsResponse:
    """The top-level error code with its default message, and no topics."""
    return _error(code, None)
