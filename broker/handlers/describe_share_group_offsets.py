"""DescribeShareGroupOffsets (v0-1): per share partition its start offset (SPSO) and leader
epoch from the share coordinator (ReadShareGroupStateSummary through the persister) and, from
v1, its lag (KIP-1226): log end offset - start offset - DeliveryCompleteCount, -1 when the start
offset or the count is unknown. Topics null means every initialized share partition of the
group; an empty topic list answers nothing.

As Kafka 4.2 does, the group's existence is not checked: an unknown group simply has no
initialized partitions, and a topic that does not exist or a partition whose summary could not
be read comes back as absent data (start offset -1, leader epoch 0, lag -1, no error). A
partition whose log end offset cannot be read gets that error instead: Kafka asks the
partition's leader (ListOffsets), so a partition whose log went offline, shown without a
leader in Metadata, is LEADER_NOT_AVAILABLE rather than a lag from its last known end.
Group-level errors are coordinator availability and a failing persister.
"""

from __future__ import annotations

from coordinator.group.share_offsets import (
    DEFAULT_LEADER_EPOCH,
    UNINITIALIZED_LAG,
    UNINITIALIZED_START_OFFSET,
    lag_is_computable,
    share_partition_lag,
)
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.describe_share_group_offsets_response import (
    DescribeShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponseGroup,
    DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
)
from protocol.primitives import ZERO_UUID

from ._group_admin import error_message

API_KEY = 90
MIN_VERSION, MAX_VERSION = 0, 1


def _partition(store, topic: str, partition: int, summary) -> DescribeShareGroupOffsetsResponsePartition:
    if not lag_is_computable(summary):
        ok = summary is not None and summary.error_code == ErrorCode.NONE
        return DescribeShareGroupOffsetsResponsePartition(
            partition_index=partition,
            start_offset=summary.start_offset if ok else UNINITIALIZED_START_OFFSET,
            leader_epoch=summary.leader_epoch if ok else DEFAULT_LEADER_EPOCH,
            lag=UNINITIALIZED_LAG,
        )
    lg = store.get(topic, partition)
    if lg is None or lg.offline:
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if lg is None else ErrorCode.LEADER_NOT_AVAILABLE
        return DescribeShareGroupOffsetsResponsePartition(partition_index=partition, error_code=code,
                                                          error_message=error_message(code))
    return DescribeShareGroupOffsetsResponsePartition(
        partition_index=partition, start_offset=summary.start_offset, leader_epoch=summary.leader_epoch,
        lag=share_partition_lag(lg.high_watermark, summary.start_offset, summary.delivery_complete_count),
    )


async def _group(broker, g) -> DescribeShareGroupOffsetsResponseGroup:
    if g.topics is not None and not g.topics:
        return DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id)
    wanted = None if g.topics is None else [(t.topic_name, list(t.partitions)) for t in g.topics]
    try:
        topics = await broker.group_coordinator.share_group_offsets(g.group_id, wanted)
    except KafkaError as e:  # KafkaApis answers Errors.forException(e) with its default message
        return DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, error_code=e.code,
                                                      error_message=error_message(e.code))
    return DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, topics=[
        DescribeShareGroupOffsetsResponseTopic(
            topic_name=t.name, topic_id=t.topic_id or ZERO_UUID,
            partitions=[_partition(broker.store, t.name, p, summary) for p, summary in t.partitions],
        )
        for t in topics
    ])


async def handle(ctx, req) -> DescribeShareGroupOffsetsResponse:
    return DescribeShareGroupOffsetsResponse(groups=[await _group(ctx.broker, g) for g in req.groups])


def error_response(req, version: int, code: int) -> DescribeShareGroupOffsetsResponse:
    """One group per group requested, with the code and its default message, and no topics."""
    return DescribeShareGroupOffsetsResponse(groups=[
        DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, error_code=code, error_message=error_message(code))
        for g in req.groups
    ])
