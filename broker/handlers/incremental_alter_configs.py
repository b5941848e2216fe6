"""IncrementalAlterConfigs: SET / DELETE / APPEND / SUBTRACT on each resource's configs.

Pre-checks as Kafka's ConfigAdminManager: a resource named twice, a config named twice, or a
null value for anything but DELETE is INVALID_REQUEST for that resource; unknown resource types
are "Unknown resource type N". Then the type's provider applies the operations to the current
configs and validates the result as a whole (nothing changes unless everything is valid).
"""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.incremental_alter_configs_response import (
    AlterConfigsResourceResponse,
    IncrementalAlterConfigsResponse,
)

from ..config_resources import (
    BROKER, BROKER_LOGGER, CLIENT_METRICS, DELETE, GROUP, TOPIC, AlterOp, check_alter_entries, check_op_types,
    provider_for,
)
from ._admin import alter_each

API_KEY = 44
MIN_VERSION, MAX_VERSION = 0, 1

ALTERABLE_TYPES = (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)


def _alter_one(broker, resource, validate_only: bool) -> None:
    ops = [AlterOp(c.name, c.config_operation, c.value) for c in resource.configs]
    check_alter_entries([op.name for op in ops], [op.name for op in ops if op.op != DELETE and op.value is None])
    if resource.resource_type not in ALTERABLE_TYPES:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {resource.resource_type}")
    if resource.resource_type != BROKER_LOGGER:
        check_op_types(ops)
    provider_for(resource.resource_type).incremental_alter(broker, resource.resource_name, ops, validate_only)


async def handle(ctx, req) -> IncrementalAlterConfigsResponse:
    return IncrementalAlterConfigsResponse(responses=alter_each(ctx.broker, req, _alter_one, AlterConfigsResourceResponse))


def error_response(req, version: int, code: int) -> IncrementalAlterConfigsResponse:
    """Every requested resource with the error and no message."""
    return IncrementalAlterConfigsResponse(responses=[
        AlterConfigsResourceResponse(error_code=code, error_message=None, resource_type=r.resource_type,
                                     resource_name=r.resource_name)
        for r in req.resources
    ])
