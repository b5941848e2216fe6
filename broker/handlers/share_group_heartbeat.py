"""ShareGroupHeartbeat (KIP-932; v1 is the only version): join (epoch 0), heartbeat, leave (-1).

All of it is the group coordinator's (``broker.group_coordinator``); this only supplies what
the connection knows. Like Kafka, the member's client host is the peer address as Java's
``InetAddress.toString()`` prints it (``/127.0.0.1``) and a null client id is "".
"""

from __future__ import annotations

from protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest
from protocol.messages.share_group_heartbeat_response import ShareGroupHeartbeatResponse

API_KEY = 76
MIN_VERSION, MAX_VERSION = 1, 1


async def handle(ctx, req: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse:
    return await ctx.broker.group_coordinator.heartbeat(
        req.group_id, req.member_id, req.member_epoch, req.rack_id, req.subscribed_topic_names,
        ctx.client_id or "", "/" + ctx.client_host,
    )


def error_response(req, version: int, code: int) -> ShareGroupHeartbeatResponse:
    """The top-level error code alone (no message, member id or assignment)."""
    return ShareGroupHeartbeatResponse(error_code=code)
