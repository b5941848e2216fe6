"""WriteShareGroupState (v0-1): a share-partition leader persists a state change before it
answers the acknowledgement that caused it. v1 adds DeliveryCompleteCount (KIP-1226); a v0
write leaves the count unknown (-1). Epoch fences (FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH),
INVALID_REQUEST for never-initialised state and the load/ownership errors all come from
``broker.share_coordinator``; CLUSTER ClusterAction authorisation is not checked yet.
"""

from __future__ import annotations

API_KEY = 85
MIN_VERSION, MAX_VERSION = 0, 1


async def handle(ctx, req):
    return await ctx.broker.share_coordinator.write_state(req, ctx.api_version)
