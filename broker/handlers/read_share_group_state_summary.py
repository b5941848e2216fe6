"""ReadShareGroupStateSummary (v0-1): epochs and start offset of share-partitions, and from v1
the DeliveryCompleteCount that share-partition lag is computed from (KIP-1226). State never
initialised is no error (start offset -1). Served by ``broker.share_coordinator`` without
combining state batches; CLUSTER ClusterAction authorisation is not checked yet.
"""

from __future__ import annotations

from coordinator.share.service import SUMMARY
from coordinator.share.service import error_response as state_error_response

from ._group_admin import error_message

API_KEY = 87
MIN_VERSION, MAX_VERSION = 0, 1


async def handle(ctx, req):
    return await ctx.broker.share_coordinator.read_state_summary(req, ctx.api_version)


def error_response(req, version: int, code: int):
    """Every topic and partition named, each with the code and Errors' default message."""
    return state_error_response(SUMMARY, req, code, error_message(code))
