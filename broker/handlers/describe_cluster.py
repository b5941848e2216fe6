"""DescribeCluster: this broker is the whole cluster (and, in the answer, its controller).

The endpoint type (v1+) must be BROKER; CONTROLLER is MISMATCHED_ENDPOINT_TYPE and anything else
UNSUPPORTED_ENDPOINT_TYPE, with Kafka's messages. A single broker is never fenced, so
include_fenced_brokers (v2) changes nothing.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages.describe_cluster_response import DescribeClusterBroker, DescribeClusterResponse

from ..authz import CLUSTER_OPERATIONS, NOT_REQUESTED

API_KEY = 60
MIN_VERSION, MAX_VERSION = 0, 2

BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2
_ENDPOINT_NAMES = {BROKER_ENDPOINT: "BROKER", CONTROLLER_ENDPOINT: "CONTROLLER"}


def error_response(req, version: int, code: int) -> DescribeClusterResponse:
    """Kafka's getErrorResponse: the error with no message, and no cluster."""
    return DescribeClusterResponse(error_code=code, error_message=None)


async def handle(ctx, req) -> DescribeClusterResponse:
    broker = ctx.broker
    wanted = req.endpoint_type
    if wanted not in _ENDPOINT_NAMES:
        code = ErrorCode.INVALID_REQUEST if ctx.api_version == 0 else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
        return DescribeClusterResponse(error_code=code, error_message=f"Unsupported endpoint type {wanted}")
    if wanted != BROKER_ENDPOINT:
        code = ErrorCode.INVALID_REQUEST if ctx.api_version == 0 else ErrorCode.MISMATCHED_ENDPOINT_TYPE
        return DescribeClusterResponse(
            error_code=code,
            error_message="The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type "
                          + _ENDPOINT_NAMES[wanted],
        )
    return DescribeClusterResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        endpoint_type=BROKER_ENDPOINT,
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        brokers=[DescribeClusterBroker(broker_id=broker.node_id, host=broker.host, port=broker.port, rack=None,
                                       is_fenced=False)],
        cluster_authorized_operations=(
            CLUSTER_OPERATIONS if req.include_cluster_authorized_operations else NOT_REQUESTED
        ),
    )
