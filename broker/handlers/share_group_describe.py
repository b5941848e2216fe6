"""ShareGroupDescribe (v1; v0 was early access and removed in Kafka 4.1): members, epochs,
state and assignor of share groups, from the group coordinator.

As Kafka 4.2: an empty group id is INVALID_GROUP_ID (answered with group id ""), a group
that does not exist or is not a share group is GROUP_ID_NOT_FOUND with Kafka's message, a
shard still loading answers COORDINATOR_LOAD_IN_PROGRESS for its groups (the code alone, no
message, as Kafka's getErrorDescribedGroupList). Authorized operations are filled in only for
groups described successfully, and only when asked for.
"""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.share_group_describe_response import (
    Assignment,
    DescribedGroup,
    Member,
    ShareGroupDescribeResponse,
    TopicPartitions,
)

from ..authz import GROUP_OPERATIONS, NOT_REQUESTED

API_KEY = 77
MIN_VERSION, MAX_VERSION = 1, 1


def _described(description, include_ops: bool) -> DescribedGroup:
    return DescribedGroup(
        group_id=description.group_id,
        group_state=description.state,
        group_epoch=description.group_epoch,
        assignment_epoch=description.assignment_epoch,
        assignor_name=description.assignor_name,
        members=[
            Member(
                member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch, client_id=m.client_id,
                client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
                assignment=Assignment(topic_partitions=[
                    TopicPartitions(topic_id=tid, topic_name=name, partitions=list(ps))
                    for tid, name, ps in m.assignment
                ]),
            )
            for m in description.members
        ],
        authorized_operations=GROUP_OPERATIONS if include_ops else NOT_REQUESTED,
    )


async def handle(ctx, req) -> ShareGroupDescribeResponse:
    runtime = ctx.broker.group_coordinator
    groups = []
    for group_id in req.group_ids:
        if not group_id:
            groups.append(DescribedGroup(group_id="", error_code=ErrorCode.INVALID_GROUP_ID))
            continue
        try:
            coordinator = await runtime.committed_coordinator(group_id)
        except KafkaError as e:  # the shard's (loading, unavailable): Kafka answers the code alone
            groups.append(DescribedGroup(group_id=group_id, error_code=e.code))
            continue
        try:
            description = coordinator.describe(group_id)
        except KafkaError as e:
            groups.append(DescribedGroup(group_id=group_id, error_code=e.code, error_message=e.message))
            continue
        groups.append(_described(description, req.include_authorized_operations))
    return ShareGroupDescribeResponse(groups=groups)


def error_response(req, version: int, code: int) -> ShareGroupDescribeResponse:
    """One group per group id requested, each with the code (no message)."""
    return ShareGroupDescribeResponse(groups=[DescribedGroup(group_id=g, error_code=code) for g in req.group_ids])
