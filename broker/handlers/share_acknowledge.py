"""ShareAcknowledge (v1-2): acknowledge records outside a fetch (explicit commits, close).

It shares the session's epoch sequence with ShareFetch but can never open a session; epoch -1
applies the acknowledgements and then closes the session, releasing the member's records.
"""

from __future__ import annotations

import logging

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.share_acknowledge_response import (
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionData,
    ShareAcknowledgeResponse,
    ShareAcknowledgeTopicResponse,
)

from ..share.sessions import CLOSE
from ._leader import point_at_the_leader
from ._share import apply_acks, check_identity, close_session, split_acks

API_KEY = 79
MIN_VERSION, MAX_VERSION = 1, 2

log = logging.getLogger(__name__)


async def handle(ctx, req) -> ShareAcknowledgeResponse:
    broker = ctx.broker
    group, member, epoch = req.group_id, req.member_id, req.share_session_epoch
    try:
        check_identity(group, member)
        session = broker.share_sessions.check_epoch(group, member, epoch, acknowledge=True)
    except KafkaError as e:  # Kafka's getErrorResponse: the code alone, no ErrorMessage
        log.debug("ShareAcknowledge answered %s: %s", ErrorCode(e.code).name, e.message)
        return ShareAcknowledgeResponse(error_code=e.code)
    if epoch != CLOSE:
        broker.share_sessions.advance(session)

    parts = [(t.topic_id, p.partition_index, p.acknowledgement_batches) for t in req.topics for p in t.partitions]
    acks, results = split_acks(broker, parts, ctx.api_version, req.is_renew_ack)
    messages = await apply_acks(broker, group, member, acks, results)
    if epoch == CLOSE:
        await close_session(broker, session)

    by_topic: dict = {}
    for tp in dict.fromkeys((t, p) for t, p, _ in parts if (t, p) in results):
        by_topic.setdefault(tp[0], []).append(
            PartitionData(partition_index=tp[1], error_code=results[tp], error_message=messages.get(tp))
        )
    resp = ShareAcknowledgeResponse(
        acquisition_lock_timeout_ms=broker.share_manager.lock_duration_ms(group),
        responses=[ShareAcknowledgeTopicResponse(topic_id=t, partitions=ps) for t, ps in by_topic.items()],
    )
    point_at_the_leader(broker, resp, LeaderIdAndEpoch, NodeEndpoint)  # processShare*Response
    return resp


def error_response(req, version: int, code: int) -> ShareAcknowledgeResponse:
    """The top-level error code alone: no message, no partitions."""
    return ShareAcknowledgeResponse(error_code=code)
