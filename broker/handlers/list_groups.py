"""ListGroups (v0-5): the share groups this coordinator holds (kshare has no other group
types), each with protocol type and group type "share" and its state (Empty / Stable).

Filters as Kafka 4.2 applies them: StatesFilter (v4+) is compared case-insensitively after
trimming, TypesFilter (v5+) names group types case-insensitively (an unknown name matches no
group); an empty filter matches everything. While a ``__consumer_offsets`` partition is
still loading the answer is COORDINATOR_LOAD_IN_PROGRESS with no groups, as Kafka's
read-all-shards operation fails then. Like Kafka's, the answer is the groups as of the
writes persisted: it waits for those queued (a group whose creation a failed write takes
back is never listed).
"""

from __future__ import annotations

from coordinator.group.broker_defaults import java_trim
from protocol.errors import ErrorCode
from protocol.messages.list_groups_response import ListedGroup, ListGroupsResponse

API_KEY = 16
MIN_VERSION, MAX_VERSION = 0, 5

SHARE = "share"  # ShareGroup.PROTOCOL_TYPE and GroupType.SHARE's name


def _matches(state: str, states: set[str], types: set[str]) -> bool:
    return (not states or state.lower() in states) and (not types or SHARE in types)


async def handle(ctx, req) -> ListGroupsResponse:
    runtime = ctx.broker.group_coordinator
    listed = await runtime.committed_groups()
    if listed is None:
        return ListGroupsResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    v = ctx.api_version
    states = {java_trim(s.lower()) for s in req.states_filter} if v >= 4 else set()
    types = {t.lower() for t in req.types_filter} if v >= 5 else set()
    groups = [
        ListedGroup(group_id=group_id, protocol_type=SHARE, group_state=state, group_type=SHARE)
        for group_id, state in listed
        if _matches(state, states, types)
    ]
    return ListGroupsResponse(groups=groups)


def error_response(req, version: int, code: int) -> ListGroupsResponse:
    """The top-level error and no groups."""
    return ListGroupsResponse(error_code=code, groups=[])
