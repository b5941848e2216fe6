"""InitializeShareGroupState (v0): the group coordinator's request to create share-partition
state (a ShareSnapshot with the given state epoch and start offset, -1 meaning "apply
share.auto.offset.reset"). An inter-broker RPC answered by the share coordinator
(``broker.share_coordinator``), which does all validation; Kafka authorises it as CLUSTER
ClusterAction, which kshare does not check yet (no ACLs).
"""

from __future__ import annotations

from coordinator.share.service import INITIALIZE
from coordinator.share.service import error_response as state_error_response

API_KEY = 83
MIN_VERSION, MAX_VERSION = 0, 0


async def handle(ctx, req):
    return await ctx.broker.share_coordinator.initialize_state(req)


def error_response(req, version: int, code: int):
    """Every topic and partition named, each with the code (no message)."""
    return state_error_response(INITIALIZE, req, code, None)
