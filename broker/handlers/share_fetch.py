"""ShareFetch (v1-2): acknowledge piggybacked records, then acquire new ones for the member.

Session epochs: 0 opens a share session over the listed partitions (acknowledgements are not
allowed then), -1 closes it (acknowledgements are applied, nothing is fetched, the member's
records are released), anything else must match the session and may add or forget partitions.
Every later request fetches all the session's partitions, in an order rotated by the epoch.
"""

from __future__ import annotations

import asyncio
import logging
from itertools import starmap

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.share_fetch_response import (
    AcquiredRecords,
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionData,
    ShareFetchableTopicResponse,
    ShareFetchResponse,
)

from ..share.manager import FetchParams
from ..share.sessions import CLOSE, OPEN, rotated
from ..share.state import AcquireMode
from ._leader import point_at_the_leader
from ._share import (
    apply_acks,
    check_identity,
    close_session,
    connection_gone,
    resolve_in_session,
    split_acks,
    tie_session_to_connection,
)

API_KEY = 78
MIN_VERSION, MAX_VERSION = 1, 2
_ACQUIRE_MODES = frozenset(AcquireMode)

log = logging.getLogger(__name__)


def _top_level_error(code: ErrorCode, message: str | None) -> ShareFetchResponse:
    """Kafka's ShareFetchRequest.getErrorResponse: the code alone, no ErrorMessage."""
    log.debug("ShareFetch answered %s: %s", ErrorCode(code).name, message)
    return ShareFetchResponse(error_code=code)


async def handle(ctx, req) -> ShareFetchResponse:
    broker = ctx.broker
    v = ctx.api_version
    try:
        check_identity(req.group_id, req.member_id)
        if v >= 2 and req.is_renew_ack and (req.max_bytes or req.min_bytes or req.max_records or req.max_wait_ms):
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                "MaxBytes, MinBytes, MaxRecords and MaxWaitMs must be 0 when IsRenewAck is set.",
            )
    except KafkaError as e:
        return _top_level_error(e.code, e.message)

    group, member, epoch = req.group_id, req.member_id, req.share_session_epoch
    listed: dict[tuple, str | None] = {}  # partitions named in Topics, with their topic's name
    ack_parts = []
    for t in req.topics:
        topic = broker.topics.by_id(t.topic_id)
        for p in t.partitions:
            listed[(t.topic_id, p.partition_index)] = topic.name if topic is not None else None
            ack_parts.append((t.topic_id, p.partition_index, p.acknowledgement_batches))
    # When any partition carries acknowledgements, Kafka answers the acknowledgement of every
    # partition the request names (NONE where it had no batches, unless none of them could be
    # applied: see apply_acks), and lists each of them.
    has_acks = any(batches for _, _, batches in ack_parts)
    forgotten = [(t.topic_id, p) for t in req.forgotten_topics_data for p in t.partitions]

    sessions = broker.share_sessions
    try:
        if epoch == OPEN:
            if has_acks:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Acknowledge data present on initial ShareFetch.")
            session, _ = sessions.open(group, member, listed, id(ctx.connection))
            tie_session_to_connection(ctx, session)
            added = list(listed)
        else:
            session = sessions.check_epoch(group, member, epoch)
            added = [] if epoch == CLOSE else sessions.advance(session, listed, forgotten)
    except KafkaError as e:
        if e.code == ErrorCode.SHARE_SESSION_LIMIT_REACHED:
            await asyncio.sleep(max(req.max_wait_ms, 0) / 1000)  # Kafka answers after MaxWaitMs
        return _top_level_error(e.code, e.message)

    if req.is_renew_ack:
        # Kafka fetches nothing then, and its session context lists only partitions it has
        # data for (ShareSessionContext.updateAndGenerateResponseData): new ones are not named.
        added = []
    manager = broker.share_manager
    acks, ack_results = split_acks(broker, ack_parts, v, req.is_renew_ack) if has_acks else ({}, {})
    ack_messages = await apply_acks(broker, group, member, acks, ack_results)

    fetched: dict[tuple, object] = {}
    errors: dict[tuple, ErrorCode] = {}
    wanted: list[tuple] = []  # (topic id, partition, name) this fetch reads
    if epoch == CLOSE:
        await close_session(broker, session)
    elif not req.is_renew_ack:
        for (topic_id, p), known_as in session.partitions.items():
            name, code = resolve_in_session(broker, topic_id, p, known_as)
            if code:
                errors[(topic_id, p)] = code
            else:
                wanted.append((topic_id, p, name))
        # Kafka rotates only the partitions it reads (fetchMessages gets them once KafkaApis has
        # set the erroneous ones aside), so an unknown one does not shift the order.
        wanted = rotated(wanted, epoch)
        if wanted and v >= 2 and req.share_acquire_mode not in _ACQUIRE_MODES:
            # Kafka's ShareFetch reads the mode with ShareAcquireMode.forId, whose
            # IllegalArgumentException fails the whole request once the acks are applied.
            return _top_level_error(ErrorCode.UNKNOWN_SERVER_ERROR,
                                    f"Unknown share acquire mode id: {req.share_acquire_mode}")
        if wanted:
            max_bytes = broker.server.response_bytes(min(req.max_bytes, broker.config["fetch.max.bytes"]))
            params = FetchParams(
                max_wait_ms=req.max_wait_ms, min_bytes=min(req.min_bytes, max_bytes),
                max_bytes=max_bytes,
                max_records=req.max_records, batch_size=req.batch_size,
                acquire_mode=req.share_acquire_mode if v >= 2 else 0,
            )
            fetched = await manager.fetch(group, member, wanted, params, gone=lambda: connection_gone(ctx))
            if connection_gone(ctx):
                # The client left while this fetch long-polled: nobody will read the answer,
                # so give back what it acquired now instead of when the locks expire.
                got = {tp for tp, f in fetched.items() if f.acquired}
                if got:
                    await manager.release(group, member, got)

    # Initial and final responses list every partition; incremental ones only those with
    # news: records, an error, an acknowledgement result, newly added to the session, or read
    # again after an error (ShareSession.responded).
    full = epoch in (OPEN, CLOSE)
    read = dict(errors)  # each partition this fetch read, with its code
    read.update(((t, p), fetched[(t, p)].error_code if (t, p) in fetched else ErrorCode.NONE) for t, p, _ in wanted)
    resend = [tp for tp in read if tp in session.resend]
    include = list(dict.fromkeys([*fetched, *errors, *ack_results, *added, *resend]))
    by_topic: dict = {}
    for tp in include:
        f = fetched.get(tp)
        code = errors.get(tp, f.error_code if f is not None else ErrorCode.NONE)
        has_records = f is not None and f.acquired
        if not (full or has_records or code or tp in ack_results or tp in added or tp in resend):
            continue
        part = PartitionData(  # no ErrorMessage: Kafka's getResponsePartitionData drops it
            partition_index=tp[1],
            error_code=code,
            acknowledge_error_code=ack_results.get(tp, ErrorCode.NONE),
            acknowledge_error_message=ack_messages.get(tp),
            records=f.records if has_records else None,
            # (first, last, delivery count) in the schema's field order; a redelivery's ~700
            # one-offset ranges are built in ~47 us this way, ~126 with keywords.
            acquired_records=list(starmap(AcquiredRecords, f.acquired)) if has_records else [],
        )
        by_topic.setdefault(tp[0], []).append(part)
    if not full:
        session.responded(read, [tp for tp, f in fetched.items() if f.acquired])
    resp = ShareFetchResponse(
        acquisition_lock_timeout_ms=manager.lock_duration_ms(group),
        responses=[ShareFetchableTopicResponse(topic_id=t, partitions=ps) for t, ps in by_topic.items()],
    )
    point_at_the_leader(broker, resp, LeaderIdAndEpoch, NodeEndpoint)  # processShare*Response
    return resp


def error_response(req, version: int, code: int) -> ShareFetchResponse:
    """The top-level error code alone: no message, no partitions, acquisition lock timeout 0."""
    return ShareFetchResponse(error_code=code)
