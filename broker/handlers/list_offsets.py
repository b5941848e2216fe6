"""ListOffsets: log start / end offsets and offsets by timestamp.

Special timestamps as Kafka 4.2 answers them without tiered storage: EARLIEST (-2) and
EARLIEST_LOCAL (-4) give the log start offset, LATEST (-1) the high watermark (also the last
stable offset: no transactions yet, so isolation levels agree), MAX_TIMESTAMP (-3) the first
record with the largest timestamp, LATEST_TIERED (-5) and EARLIEST_PENDING_UPLOAD (-6) give no
offset (-1) with leader epoch -1. Any other timestamp finds the first record at or after it;
results at or beyond the high watermark are not returned (Kafka filters them the same way).
A special timestamp asked for below the version that introduced it, or a negative one Kafka
does not know, gets UNSUPPORTED_VERSION for its partition (ReplicaManager's
``isListOffsetsTimestampUnsupported``).

The leader epoch is always 0 (responses v4+); CurrentLeaderEpoch is checked (only -1 means
none, unlike Fetch, so -2 is FENCED_LEADER_EPOCH). A partition named twice in one request gets
one INVALID_REQUEST answer, and a topic named in several entries one entry: Kafka's
ReplicaManager.fetchOffset keeps a status per partition in a map and groups them by topic (in
its map's order; kshare keeps the request's), so a topic entry without partitions gets none.
A partition whose log went offline gets KAFKA_STORAGE_ERROR (before the epoch check), as Kafka's
getPartitionOrError answers for a partition in an offline log directory, even for lookups that
would not read the damaged bytes.
"""

from __future__ import annotations

import logging
from collections import Counter

from protocol.errors import ErrorCode
from protocol.messages.list_offsets_response import (
    ListOffsetsPartitionResponse,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)

from ..log import READ_ERRORS
from ..partitions import LEADER_EPOCH
from .fetch import leader_epoch_error

log = logging.getLogger(__name__)

API_KEY = 2
MIN_VERSION, MAX_VERSION = 1, 11

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5, -6
NO_TIMESTAMP = -1
# the first version that may ask for each special timestamp (Kafka's timestampMinSupportedVersion)
SPECIAL_SINCE = {EARLIEST: 1, LATEST: 1, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9,
                 EARLIEST_PENDING_UPLOAD: 11}


def lookup(lg, timestamp: int) -> tuple[int, int, int]:
    """``(timestamp, offset, leader_epoch)`` for one partition; offset -1 when none."""
    hw = lg.end_offset
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return NO_TIMESTAMP, lg.start_offset, LEADER_EPOCH
    if timestamp == LATEST:
        return NO_TIMESTAMP, hw, LEADER_EPOCH
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return NO_TIMESTAMP, -1, -1
    if timestamp == MAX_TIMESTAMP:
        found = lg.max_timestamp()
        if found[1] < 0:
            found = None
    else:
        found = lg.offset_for_timestamp(timestamp)
    if found is None or found[1] >= hw:
        return NO_TIMESTAMP, -1, -1
    return found[0], found[1], LEADER_EPOCH


def error_response(req, version: int, code: int) -> ListOffsetsResponse:
    """Kafka's getErrorResponse: every requested partition with the error, offset and timestamp -1."""
    return ListOffsetsResponse(topics=[
        ListOffsetsTopicResponse(name=t.name, partitions=[
            ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=code, offset=-1, timestamp=-1)
            for p in t.partitions])
        for t in req.topics
    ])


async def handle(ctx, req) -> ListOffsetsResponse:
    broker = ctx.broker
    topics = broker.topics
    store = broker.store
    if req.topics and req.isolation_level not in (0, 1):
        # IsolationLevel.forId in KafkaApis' call to fetchOffset: UNKNOWN_SERVER_ERROR for all
        log.error("ListOffsets v%d failed: Unknown isolation level %d", ctx.api_version, req.isolation_level)
        return error_response(req, ctx.api_version, ErrorCode.UNKNOWN_SERVER_ERROR)
    seen = Counter((t.name, p.partition_index) for t in req.topics for p in t.partitions)
    by_name: dict[str, ListOffsetsTopicResponse] = {}  # Kafka groups its answers by topic name
    answered = set()
    for t in req.topics:
        topic = topics.get(t.name)
        for p in t.partitions:
            index = p.partition_index
            if (t.name, index) in answered:  # Kafka keeps one status per partition
                continue
            answered.add((t.name, index))
            resp = ListOffsetsPartitionResponse(partition_index=index)
            tr = by_name.get(t.name)
            if tr is None:  # made for a partition: an entry without partitions is not answered
                tr = by_name[t.name] = ListOffsetsTopicResponse(name=t.name)
            tr.partitions.append(resp)
            lg = None
            if seen[(t.name, index)] > 1:
                code = ErrorCode.INVALID_REQUEST
            elif p.timestamp < 0 and ctx.api_version < SPECIAL_SINCE.get(p.timestamp, MAX_VERSION + 1):
                code = ErrorCode.UNSUPPORTED_VERSION
            elif topic is None or not 0 <= index < topic.partitions or (lg := store.get(t.name, index)) is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif lg.offline:
                code = ErrorCode.KAFKA_STORAGE_ERROR
            else:
                code = leader_epoch_error(p.current_leader_epoch)
            if code is not None:
                resp.error_code = code
                continue
            try:
                resp.timestamp, resp.offset, resp.leader_epoch = lookup(lg, p.timestamp)
            except READ_ERRORS as e:  # a damaged log, which has reported it
                resp.error_code = e.error_code
    return ListOffsetsResponse(throttle_time_ms=0, topics=list(by_name.values()))
