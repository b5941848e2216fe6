"""ReadShareGroupState (v0): a share-partition leader reads the durable state of its
share-partitions (start offset, state epoch, in-flight state batches). A read with a newer
leader epoch also records that epoch, fencing older leaders, as in Kafka. State that was never
initialised answers INVALID_REQUEST (Kafka 4.2; the KIP's UNKNOWN_TOPIC_OR_PARTITION is for a
topic or partition that does not exist). Served by ``broker.share_coordinator``; CLUSTER
ClusterAction authorisation is not checked yet (no ACLs).
"""

from __future__ import annotations

from coordinator.share.service import READ
from coordinator.share.service import error_response as state_error_response

from ._group_admin import error_message

API_KEY = 84
MIN_VERSION, MAX_VERSION = 0, 0


async def handle(ctx, req):
    return await ctx.broker.share_coordinator.read_state(req)


def error_response(req, version: int, code: int):
    """Every topic and partition named, each with the code and Errors' default message."""
    return state_error_response(READ, req, code, error_message(code))
