"""Fetch: raw record batches straight from the log, with long polling.

Every fetch is sessionless, as on a Kafka broker with ``max.incremental.fetch.session.cache.slots=0``
(valid Kafka behaviour, KIP-227): full requests are answered with SessionId 0, so clients keep
sending full requests; an incremental request (a session id, or an epoch above 0) gets
FETCH_SESSION_ID_NOT_FOUND and the client starts over with a full one.

Reading follows ReplicaManager.readFromLog: partitions in request order, each limited by its
PartitionMaxBytes and by what is left of min(MaxBytes, fetch.max.bytes); the first batch
returned may exceed both so a consumer always progresses (KIP-74); a negative limit fails
that partition's read (UNKNOWN_SERVER_ERROR) unless there is nothing to read. While many response bytes
wait for clients that stopped reading, the total shrinks (``Server.response_bytes``). Batches go
out as slices of the segment reads, never re-encoded. If less than MinBytes is available, the
request waits up to MaxWaitMs for appends to its partitions (``broker.partitions.wait_for_data``),
counting, like Kafka's DelayedFetch, each partition's bytes from its fetch offset on (at most its
PartitionMaxBytes; never less when retention or DeleteRecords drop segments meanwhile), then
reads again. As DelayedFetch (its case F), a fetch offset on a segment older than the log end's
is enough whatever MinBytes asks: as Kafka's
LocalLog.read, a partition is read from the fetch offset's segment only (the next one only when
that one holds nothing at or after the offset), so such a fetch would never gather more. As Kafka's
handleFetch, partitions that do not exist (unknown topic, topic id or partition) are set aside
and answered after the others (for a consumer, unknown topic ids before unknown partitions)
without cutting the wait short; an error met reading a partition
that exists (epochs, offsets, a damaged or offline log) answers at once. A partition named twice
is answered once, with the later entry's values (Kafka keys them in a LinkedHashMap).

A partition whose log went offline answers KAFKA_STORAGE_ERROR, as Kafka's getPartitionOrError
does for a partition in an offline log directory (NOT_LEADER_OR_FOLLOWER for v4-5, whose clients
may not know that error: Kafka's maybeDownConvertStorageError).

The last stable offset is the high watermark (no transactions yet), so read_committed reads
the same as read_uncommitted, with an empty aborted-transactions list. Leader epoch is always
0: a CurrentLeaderEpoch above it is UNKNOWN_LEADER_EPOCH; a negative one is no epoch (Kafka's
FetchRequest drops them), so a Fetch is never FENCED_LEADER_EPOCH. A follower (ReplicaId 0 or
more) is no assigned replica: UNKNOWN_LEADER_EPOCH if it sent an epoch, else
NOT_LEADER_OR_FOLLOWER, which from v16 names the leader (KIP-951). A LastFetchedEpoch (v12+, 0
or more) is checked as Kafka's Partition.readRecords does: epoch 0 ends at the log end, so a fetch
offset past it answers at once with DivergingEpoch (0, log end) and no error; any other epoch is
OFFSET_OUT_OF_RANGE.
"""

from __future__ import annotations

import asyncio
import logging

from protocol.errors import ErrorCode
from protocol.messages.fetch_request import FetchTopic
from protocol.messages.fetch_response import (
    EpochEndOffset,
    FetchableTopicResponse,
    FetchResponse,
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionData,
)

from ..log import READ_ERRORS, KafkaStorageError, OffsetOutOfRange
from ..partitions import LEADER_EPOCH, data_key
from ._leader import point_at_the_leader

log = logging.getLogger(__name__)

API_KEY = 1
MIN_VERSION, MAX_VERSION = 4, 18

READ_COMMITTED = 1
EMPTY = b""


def leader_epoch_error(requested: int) -> ErrorCode | None:
    """Kafka's Partition.checkCurrentLeaderEpoch against our fixed epoch 0 (-1: not checked)."""
    if requested == -1 or requested == LEADER_EPOCH:
        return None
    return ErrorCode.FENCED_LEADER_EPOCH if requested < LEADER_EPOCH else ErrorCode.UNKNOWN_LEADER_EPOCH


def _fetch_epoch_error(requested: int) -> ErrorCode | None:
    """As ``leader_epoch_error``, for a Fetch: FetchRequest.fetchData drops every negative epoch
    (optionalEpoch), so none is checked and a Fetch is never fenced by our epoch 0."""
    return None if requested < 0 else leader_epoch_error(requested)


def _error_partition(index: int, code: ErrorCode) -> PartitionData:
    """A partition whose read failed: ReplicaManager's error LogReadResult, without aborted
    transactions (null) whatever the isolation level."""
    return PartitionData(
        partition_index=index, error_code=code, high_watermark=-1, last_stable_offset=-1,
        log_start_offset=-1, aborted_transactions=None, records=EMPTY,
    )


def _unknown_partition(index: int, code: ErrorCode) -> PartitionData:
    """A partition set aside as unknown: FetchResponse.partitionResponse, which leaves
    AbortedTransactions at its generated default, an empty array (not null)."""
    return PartitionData(partition_index=index, error_code=code, high_watermark=-1, records=EMPTY)


def _set_error(pd: PartitionData, code: ErrorCode) -> None:
    pd.error_code = code
    pd.high_watermark = pd.last_stable_offset = pd.log_start_offset = -1
    pd.aborted_transactions = None
    pd.records = EMPTY


class _Plan:
    """One request's partitions: ``responses`` holds those that exist, in request order, and
    ``readable`` the ones of them to read (response entry, log, request partition); ``unknown``
    holds (request topic, response entry) of those that do not exist, which Kafka sets aside
    (KafkaApis' ``erroneous``) and appends after the rest. ``errors``: a partition that exists
    was refused, which answers at once. ``storage_error``: this version's answer for an offline log."""

    __slots__ = ("responses", "readable", "unknown", "errors", "diverged", "storage_error", "by_id", "sizes")

    def __init__(self, v: int) -> None:
        self.responses: list[FetchableTopicResponse] = []
        self.readable: list[tuple[PartitionData, object, object]] = []
        self.unknown: list[tuple[object, PartitionData]] = []
        self.errors = False
        self.diverged = False  # a partition got DivergingEpoch, which answers at once
        self.storage_error = ErrorCode.NOT_LEADER_OR_FOLLOWER if v <= 5 else ErrorCode.KAFKA_STORAGE_ERROR
        self.by_id = v >= 13
        self.sizes: list[int] = []  # bytes read from each readable partition by the last _read


def _topic_key(v: int):
    """What identifies a request topic: its id from v13, its name before."""
    return (lambda ft: ft.topic_id) if v >= 13 else (lambda ft: ft.topic)


def _unique(topics: list, v: int) -> list:
    """The request's topics with each partition once. Kafka's FetchRequest.fetchData puts them
    in a LinkedHashMap: a partition named again keeps its first place and takes the later values.
    Requests without repeats (all real clients) come back as they are."""
    key = _topic_key(v)
    if len({key(ft) for ft in topics}) == len(topics) and all(
            len({fp.partition for fp in ft.partitions}) == len(ft.partitions) for ft in topics):
        return topics
    entries = {}  # (topic key, partition) -> (request topic, request partition), first place kept
    for ft in topics:
        for fp in ft.partitions:
            k = (key(ft), fp.partition)
            entries[k] = (entries[k][0] if k in entries else ft, fp)
    out = []
    for ft, fp in entries.values():
        if not out or key(out[-1]) != key(ft):
            out.append(FetchTopic(topic=ft.topic, topic_id=ft.topic_id, partitions=[]))
        out[-1].partitions.append(fp)
    return out


def _topic_response(ft, v: int) -> FetchableTopicResponse:
    return FetchableTopicResponse(topic="", topic_id=ft.topic_id) if v >= 13 else FetchableTopicResponse(topic=ft.topic)


def _plan(broker, req, v: int) -> _Plan:
    plan = _Plan(v)
    topics = broker.topics
    store = broker.store
    from_follower = (req.replica_state.replica_id if v >= 15 else req.replica_id) >= 0
    committed = req.isolation_level == READ_COMMITTED
    for ft in _unique(req.topics, v):
        if v >= 13:
            topic = topics.by_id(ft.topic_id)
            missing = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            topic = topics.get(ft.topic)
            missing = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        tr = None
        for fp in ft.partitions:
            index = fp.partition
            if topic is None:
                plan.unknown.append((ft, _unknown_partition(index, missing)))
                continue
            if not 0 <= index < topic.partitions or (lg := store.get(topic.name, index)) is None:
                plan.unknown.append((ft, _unknown_partition(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
                continue
            if tr is None:
                tr = _topic_response(ft, v)
                plan.responses.append(tr)
            if lg.offline:
                code = plan.storage_error
            else:
                code = _fetch_epoch_error(fp.current_leader_epoch)
                if code is None and from_follower:  # no replica is assigned: followerReplicaOrThrow
                    code = (ErrorCode.UNKNOWN_LEADER_EPOCH if fp.current_leader_epoch >= 0
                            else ErrorCode.NOT_LEADER_OR_FOLLOWER)
            if code is not None:
                tr.partitions.append(_error_partition(index, code))
                plan.errors = True
                continue
            pd = PartitionData(partition_index=index, aborted_transactions=[] if committed else None, records=EMPTY)
            tr.partitions.append(pd)
            plan.readable.append((pd, lg, fp))
    if not from_follower:  # handleFetchRequest sets a consumer's unknown topic ids aside in a first pass
        plan.unknown.sort(key=lambda entry: entry[1].error_code != ErrorCode.UNKNOWN_TOPIC_ID)
    return plan


def _append_unknown(plan: _Plan, v: int) -> None:
    """Kafka's processResponseCallback: the set-aside partitions after the others, joining the
    last topic entry when it is theirs (FetchResponse.toMessage groups consecutive partitions)."""
    key = _topic_key(v)
    responses = plan.responses
    for ft, pd in plan.unknown:
        if not responses or key(responses[-1]) != key(ft):
            responses.append(_topic_response(ft, v))
        responses[-1].partitions.append(pd)


def _gone(plan: _Plan, lg, store) -> ErrorCode:
    """A partition deleted while the fetch waited: UNKNOWN_TOPIC_OR_PARTITION, or, when a topic
    created again under its name holds it now and the request named the old topic id, Kafka's
    topic-id check in readFromLog (INCONSISTENT_TOPIC_ID)."""
    if plan.by_id and store.get(lg.topic, lg.partition) is not None:
        return ErrorCode.INCONSISTENT_TOPIC_ID
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _read(plan: _Plan, max_bytes: int, store) -> int:
    """Fill the readable partitions in order; returns the bytes read (KIP-74 budget rules)."""
    limit = max_bytes
    min_one = True
    total = 0
    sizes = plan.sizes = [0] * len(plan.readable)
    for i, (pd, lg, fp) in enumerate(plan.readable):
        budget = min(fp.partition_max_bytes, limit)
        limit = max(0, limit)  # readFromLog: what is left never goes below 0 after a partition
        if lg.closed or lg.offline:  # deleted, or gone offline, while we waited
            _set_error(pd, _gone(plan, lg, store) if lg.closed else plan.storage_error)
            plan.errors = True
            continue
        if fp.last_fetched_epoch >= 0:  # Partition.readRecords: only epoch 0 ends, at the log end
            if fp.last_fetched_epoch != LEADER_EPOCH or fp.fetch_offset < lg.start_offset:
                _set_error(pd, ErrorCode.OFFSET_OUT_OF_RANGE)
                plan.errors = True
                continue
            if fp.fetch_offset > lg.end_offset:
                pd.error_code = 0
                pd.high_watermark = pd.last_stable_offset = lg.end_offset
                pd.log_start_offset = lg.start_offset
                pd.diverging_epoch = EpochEndOffset(epoch=LEADER_EPOCH, end_offset=lg.end_offset)
                pd.aborted_transactions = None  # FetchDataInfo.empty
                pd.records = EMPTY
                plan.diverged = True
                continue
        if budget < 0 and lg.start_offset <= fp.fetch_offset < lg.end_offset:
            # LogSegment.read refuses a negative size (IllegalArgumentException); at the high
            # watermark LocalLog.read answers empty without asking it
            log.error("Error processing fetch with max size %d on partition %s-%d", budget, lg.topic, lg.partition)
            _set_error(pd, ErrorCode.UNKNOWN_SERVER_ERROR)
            plan.errors = True
            continue
        try:
            r = lg.read(fp.fetch_offset, budget, min_one=min_one, headers=False, one_segment=True)
        except OffsetOutOfRange:
            _set_error(pd, ErrorCode.OFFSET_OUT_OF_RANGE)
            plan.errors = True
            continue
        except READ_ERRORS as e:  # a damaged log, which has reported it
            _set_error(pd, plan.storage_error if isinstance(e, KafkaStorageError) else e.error_code)
            plan.errors = True
            continue
        pd.error_code = 0
        pd.high_watermark = pd.last_stable_offset = r.end_offset
        pd.log_start_offset = r.start_offset
        if r.size:
            pd.records = r.chunks  # one segment's slice: the last batch may be cut
            min_one = False
            limit = max(0, limit - r.size)
            total += r.size
            sizes[i] = r.size
        else:
            pd.records = EMPTY
    return total


def error_response(req, version: int, code: int) -> FetchResponse:
    """Kafka's getErrorResponse: the top-level error and the session id; before v13 also every
    requested partition with the error."""
    topics = [] if version >= 13 else [
        FetchableTopicResponse(topic=ft.topic, topic_id=ft.topic_id, partitions=[
            PartitionData(partition_index=fp.partition, error_code=code, high_watermark=-1, records=EMPTY)
            for fp in ft.partitions])
        for ft in req.topics
    ]
    return FetchResponse(error_code=code, session_id=req.session_id, responses=topics)


async def handle(ctx, req) -> FetchResponse:
    broker = ctx.broker
    v = ctx.api_version
    if v >= 7 and req.session_epoch not in (0, -1):
        # Incremental fetch: there is no session to continue (epoch 0 or -1 make a full fetch,
        # closing any session named; none is ever created).
        return FetchResponse(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0)
    max_bytes = broker.server.response_bytes(min(req.max_bytes, broker.config["fetch.max.bytes"]))
    min_bytes = min(req.min_bytes, max_bytes)
    plan = _plan(broker, req, v)
    if plan.responses and req.isolation_level not in (0, READ_COMMITTED):
        # Kafka's FetchIsolation.of reads it with IsolationLevel.forId once a partition exists:
        # its exception answers the whole request UNKNOWN_SERVER_ERROR (KafkaApis.handle)
        log.error("Fetch v%d failed: Unknown isolation level %d", v, req.isolation_level)
        return error_response(req, v, ErrorCode.UNKNOWN_SERVER_ERROR)
    total = _read(plan, max_bytes, broker.store)
    if (total < min_bytes and req.max_wait_ms > 0 and plan.readable and not plan.errors and not plan.diverged
            and not any(_on_older_segment(lg, fp) for _pd, lg, fp in plan.readable)):
        await _wait(broker, plan, min_bytes, req.max_wait_ms / 1000)
        _read(plan, max_bytes, broker.store)
    if plan.unknown:
        _append_unknown(plan, v)
    resp = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=plan.responses)
    if plan.errors and v >= 16:  # KafkaApis names the leader from v16, not v12 (the field's first)
        point_at_the_leader(broker, resp, LeaderIdAndEpoch, NodeEndpoint)
    return resp


async def _wait(broker, plan: _Plan, min_bytes: int, max_wait_s: float) -> bool:
    """Wait until ``min_bytes`` are available: as DelayedFetch.tryComplete, each partition counts
    the bytes from its fetch offset on (what the first read got, plus appends since), at most its
    PartitionMaxBytes."""
    partitions = broker.partitions
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_s
    keys = []
    sizes = []  # appended_bytes less what the first read got: what the fetch offset started from
    for (pd, lg, fp), read in zip(plan.readable, plan.sizes):
        keys.append(data_key(lg.topic, lg.partition))
        sizes.append(lg.appended_bytes - read)
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0 or not await partitions.wait_for_data(keys, remaining):
            return False
        grown = 0
        for (pd, lg, fp), size in zip(plan.readable, sizes):
            if lg.closed or lg.offline or fp.fetch_offset > lg.end_offset or fp.fetch_offset < lg.start_offset:
                return True  # deleted, offline or moved under us: answer now, the read reports it
            if _on_older_segment(lg, fp):  # the segment rolled
                return True
            grown += min(lg.appended_bytes - size, fp.partition_max_bytes)
        if grown >= min_bytes:
            return True


def _on_older_segment(lg, fp) -> bool:
    """DelayedFetch's case F: the fetch offset lies on a segment older than the log end's."""
    return fp.fetch_offset < lg.active_segment_base
