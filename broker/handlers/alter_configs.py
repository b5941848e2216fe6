"""AlterConfigs (the legacy, replace-everything API): each resource's configs become exactly the
given set, validated as a whole and applied all-or-nothing by the type's provider.

Kafka's broker-side pre-processing comes first: a resource named twice, a config named twice or
a null value is INVALID_REQUEST; BROKER_LOGGER and unknown types are "Unknown resource type N".
"""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.alter_configs_response import AlterConfigsResourceResponse, AlterConfigsResponse

from ..config_resources import BROKER, CLIENT_METRICS, GROUP, TOPIC, check_alter_entries, provider_for
from ._admin import duplicates

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
    dup = duplicates((r.resource_type, r.resource_name) for r in req.resources)
    responses = []
    for r in req.resources:
        code, message = ErrorCode.NONE, None
        if (r.resource_type, r.resource_name) in dup:
            code, message = ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."
        else:
            try:
                _alter_one(ctx.broker, r, req.validate_only)
            except KafkaError as e:
                code, message = e.code, e.message
        responses.append(AlterConfigsResourceResponse(error_code=code, error_message=message,
                                                      resource_type=r.resource_type, resource_name=r.resource_name))
    return AlterConfigsResponse(responses=responses)
