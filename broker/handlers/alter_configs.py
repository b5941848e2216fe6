"""AlterConfigs (the legacy, replace-everything API): each resource's configs become exactly the
given set, validated as a whole and applied all-or-nothing by the type's provider.

Kafka's broker-side pre-processing comes first: a resource named twice, a config named twice or
a null value is INVALID_REQUEST; BROKER_LOGGER and unknown types are "Unknown resource type N".
"""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.alter_configs_response import AlterConfigsResourceResponse, AlterConfigsResponse

from ..config_resources import BROKER, CLIENT_METRICS, GROUP, TOPIC, check_alter_entries, provider_for
from ._admin import alter_each

API_KEY = 33
MIN_VERSION, MAX_VERSION = 0, 2

ALTERABLE_TYPES = (TOPIC, BROKER, CLIENT_METRICS, GROUP)


def _alter_one(broker, resource, validate_only: bool) -> None:
    check_alter_entries([c.name for c in resource.configs], [c.name for c in resource.configs if c.value is None])
    if resource.resource_type not in ALTERABLE_TYPES:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {resource.resource_type}")
    configs = {c.name: c.value for c in resource.configs}
    provider_for(resource.resource_type).alter(broker, resource.resource_name, configs, validate_only)


async def handle(ctx, req) -> AlterConfigsResponse:
    return AlterConfigsResponse(responses=alter_each(ctx.broker, req, _alter_one, AlterConfigsResourceResponse))


def error_response(req, version: int, code: int) -> AlterConfigsResponse:
    """Every requested resource with the error and no message."""
    return AlterConfigsResponse(responses=[
        AlterConfigsResourceResponse(error_code=code, error_message=None, resource_type=r.resource_type,
                                     resource_name=r.resource_name)
        for r in req.resources
    ])
