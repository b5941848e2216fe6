"""DeleteGroups (v0-2): delete empty share groups. As in Kafka 4.2 a share group's
share-partition state is deleted first (DeleteShareGroupState through the persister, its
partitions marked deleting meanwhile), then its records are tombstoned. A group with members is
NON_EMPTY_GROUP, an unknown group id GROUP_ID_NOT_FOUND; persister and coordinator errors are
answered per group. The share-partition leaders then drop what they cached for the group.
"""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.delete_groups_response import DeletableGroupResult, DeleteGroupsResponse

API_KEY = 42
MIN_VERSION, MAX_VERSION = 0, 2


async def handle(ctx, req) -> DeleteGroupsResponse:
    broker = ctx.broker
    results = []
    for group_id in dict.fromkeys(req.groups_names):
        code = ErrorCode.NONE
        try:
            await broker.group_coordinator.delete_group(group_id, invalidate=broker.share_manager.forget_share_state)
        except KafkaError as e:
            code = e.code
        results.append(DeletableGroupResult(group_id=group_id, error_code=code))
    return DeleteGroupsResponse(results=results)


def error_response(req, version: int, code: int) -> DeleteGroupsResponse:
    """Every requested group id (duplicates too) with the error and no message."""
    return DeleteGroupsResponse(results=[DeletableGroupResult(group_id=g, error_code=code) for g in req.groups_names])
