"""DescribeGroups (v0-6): the classic-group describe. kshare has no classic groups, so every
group id is answered the way Kafka 4.2 answers one that is not a classic group: state "Dead",
no members, empty protocol type and data; from v6 (KIP-1043) with GROUP_ID_NOT_FOUND and the
message "Group <id> is not a classic group." for a share group or "Group <id> not found."
otherwise, as of the group's persisted writes (Kafka reads at the last committed offset). A
shard still loading answers COORDINATOR_LOAD_IN_PROGRESS for its groups (the code alone, no
message, as Kafka's getErrorDescribedGroupList).
Authorized operations (v3+) are filled in only for results without an error.
"""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.describe_groups_response import DescribedGroup, DescribeGroupsResponse

from ..authz import GROUP_OPERATIONS

API_KEY = 15
MIN_VERSION, MAX_VERSION = 0, 6

DEAD = "Dead"


async def _describe(runtime, group_id: str, version: int) -> DescribedGroup:
    try:
        coordinator = await runtime.committed_coordinator(group_id)
    except KafkaError as e:  # the shard's (loading, unavailable): Kafka's getErrorDescribedGroupList, code alone
        return DescribedGroup(group_id=group_id, error_code=e.code)
    if version < 6:
        return DescribedGroup(group_id=group_id, group_state=DEAD)
    if coordinator.has_group(group_id):
        message = f"Group {group_id} is not a classic group."
    else:
        message = f"Group {group_id} not found."
    return DescribedGroup(group_id=group_id, group_state=DEAD, error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                          error_message=message)


async def handle(ctx, req) -> DescribeGroupsResponse:
    runtime = ctx.broker.group_coordinator
    v = ctx.api_version
    groups = [await _describe(runtime, group_id, v) for group_id in req.groups]
    if v >= 3 and req.include_authorized_operations:
        for g in groups:
            if g.error_code == ErrorCode.NONE:
                g.authorized_operations = GROUP_OPERATIONS
    return DescribeGroupsResponse(groups=groups)


def error_response(req, version: int, code: int) -> DescribeGroupsResponse:
    """Every group id with the error, no message, empty state and protocol, no members."""
    return DescribeGroupsResponse(groups=[DescribedGroup(group_id=g, error_code=code) for g in req.groups])
