"""KIP-951 for the handlers that read or write a partition: a partition refused for
leadership names the current leader, always this broker, and the response lists its endpoint."""

from __future__ import annotations

from protocol.errors import ErrorCode

from ..partitions import LEADER_EPOCH


def point_at_the_leader(broker, resp, leader_cls, endpoint_cls, *, endpoints: bool = True) -> None:
    """Fill CurrentLeader of every NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH partition of
    ``resp`` (``leader_cls`` and ``endpoint_cls``: the response module's own classes) and,
    with ``endpoints``, NodeEndpoints."""
    named = False
    for tr in resp.responses:
        for pd in tr.partitions:
            if pd.error_code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
                pd.current_leader = leader_cls(leader_id=broker.node_id, leader_epoch=LEADER_EPOCH)
                named = True
    if named and endpoints:
        resp.node_endpoints = [endpoint_cls(node_id=broker.node_id, host=broker.host, port=broker.port, rack=None)]
