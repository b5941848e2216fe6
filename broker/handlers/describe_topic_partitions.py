"""DescribeTopicPartitions (v0): topics in name order, paged by partition count with a cursor.

As Kafka's DescribeTopicPartitionsRequestHandler and KRaftMetadataCache.describeTopicResponse:
an empty topic list means all topics (then unknown names never appear); a page holds at most
min(response_partition_limit, max.request.partition.size.limit) partitions (at least 1); when a
topic does not fit, the next cursor points at its first missing partition, and when the page
is exactly full the cursor points at the next topic's partition 0. A cursor topic missing from
an explicit list, or a negative cursor partition, makes the whole request INVALID_REQUEST.
Unlike Metadata, a partition never carries an error (a leaderless one shows leader -1 and error
0), and every topic listed, unknown ones too, gets TopicAuthorizedOperations (Kafka's handler
sets it on all of the metadata cache's answer).
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages.describe_topic_partitions_response import (
    Cursor,
    DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponsePartition,
    DescribeTopicPartitionsResponseTopic,
)
from protocol.primitives import ZERO_UUID

from ..authz import TOPIC_OPERATIONS
from ..partitions import leader_of
from ..topic_configs import broker_value
from ..topics import INTERNAL_TOPICS, unknown_topic_error

API_KEY = 75
MIN_VERSION, MAX_VERSION = 0, 0

PARTITION_LIMIT_CONFIG = "max.request.partition.size.limit"


def _invalid_request(req) -> DescribeTopicPartitionsResponse:
    return DescribeTopicPartitionsResponse(topics=[
        DescribeTopicPartitionsResponseTopic(error_code=ErrorCode.INVALID_REQUEST, name=t.name, is_internal=False,
                                             partitions=[])
        for t in req.topics
    ])


def _missing(name: str) -> DescribeTopicPartitionsResponseTopic:
    return DescribeTopicPartitionsResponseTopic(error_code=unknown_topic_error(name), name=name, topic_id=ZERO_UUID,
                                                is_internal=name in INTERNAL_TOPICS, partitions=[],
                                                topic_authorized_operations=TOPIC_OPERATIONS)


def error_response(req, version: int, code: int) -> DescribeTopicPartitionsResponse:
    """Kafka's getErrorResponse: every requested topic by name with the error, no partitions, no cursor."""
    return DescribeTopicPartitionsResponse(topics=[
        DescribeTopicPartitionsResponseTopic(error_code=code, name=t.name, is_internal=False, partitions=[])
        for t in req.topics
    ])


async def handle(ctx, req) -> DescribeTopicPartitionsResponse:
    broker = ctx.broker
    node = broker.node_id
    cursor = req.cursor
    cursor_name = cursor.topic_name if cursor is not None else ""
    fetch_all = not req.topics
    if fetch_all:
        names = {t.name for t in broker.topics if t.name >= cursor_name}
    else:
        names = {t.name for t in req.topics if t.name >= cursor_name}
        if cursor is not None and cursor.topic_name not in names:
            return _invalid_request(req)
    if cursor is not None and cursor.partition_index < 0:
        return _invalid_request(req)

    limit = max(min(broker_value(broker.config, PARTITION_LIMIT_CONFIG), req.response_partition_limit), 1)
    remaining = limit
    topics, next_cursor = [], None
    for name in sorted(names):
        if remaining <= 0:
            next_cursor = Cursor(topic_name=name, partition_index=0)
            break
        topic = broker.topics.get(name)
        if topic is None:
            if not fetch_all:
                topics.append(_missing(name))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_name else 0
        end = min(topic.partitions, start + remaining)
        partitions = []
        for p in range(start, end):
            _, leader, offline = leader_of(broker.store, node, name, p)
            partitions.append(DescribeTopicPartitionsResponsePartition(
                error_code=ErrorCode.NONE, partition_index=p, leader_id=leader, leader_epoch=0,
                replica_nodes=[node], isr_nodes=[node], eligible_leader_replicas=[], last_known_elr=[],
                offline_replicas=offline,
            ))
        topics.append(DescribeTopicPartitionsResponseTopic(
            error_code=ErrorCode.NONE, name=name, topic_id=topic.topic_id, is_internal=topic.internal,
            partitions=partitions, topic_authorized_operations=TOPIC_OPERATIONS,
        ))
        remaining -= len(partitions)
        if end < topic.partitions:
            next_cursor = Cursor(topic_name=name, partition_index=end)
            break
    return DescribeTopicPartitionsResponse(topics=topics, next_cursor=next_cursor)
