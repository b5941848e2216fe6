"""WriteShareGroupState (v0-1): a share-partition leader persists a state change before it
answers the acknowledgement that caused it. v1 adds DeliveryCompleteCount (KIP-1226); a v0
write leaves the count unknown (-1). Epoch fences (FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH),
INVALID_REQUEST for never-initialised state and the load/ownership errors all come from
``broker.share_coordinator``; CLUSTER ClusterAction authorisation is not checked yet.
"""

from __future__ import annotations

from coordinator.share.service import WRITE
from coordinator.share.service import error_response as state_error_response

from ._group_admin import error_message

API_KEY = 85
MIN_VERSION, MAX_VERSION = 0, 1


async def handle(ctx, req):
    return await ctx.broker.share_coordinator.write_state(req, ctx.api_version)


def error_response(req, version: int, code: int):
    """Every topic and partition named, each with the code and Errors' default message."""
    return state_error_response(WRITE, req, code, error_message(code))
