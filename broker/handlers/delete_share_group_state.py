"""DeleteShareGroupState (v0): the group coordinator deletes the state of share-partitions
(a tombstone per key; state that does not exist is deleted quietly). Served by
``broker.share_coordinator``; CLUSTER ClusterAction authorisation is not checked yet.
"""

from __future__ import annotations

from coordinator.share.service import DELETE
from coordinator.share.service import error_response as state_error_response

API_KEY = 86
MIN_VERSION, MAX_VERSION = 0, 0


async def handle(ctx, req):
    return await ctx.broker.share_coordinator.delete_state(req)


def error_response(req, version: int, code: int):
    """Every topic and partition named, each with the code (no message)."""
    return state_error_response(DELETE, req, code, None)
