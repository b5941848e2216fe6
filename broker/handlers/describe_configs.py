"""DescribeConfigs: dispatch each resource to its type's provider (broker/config_resources.py).

A resource type Kafka does not know at all makes Kafka refuse the whole request (every resource
INVALID_REQUEST with the default message); a known type this broker has no provider for is
refused for that resource only ("Unsupported resource type: GROUP"), as Kafka's ConfigHelper
does. Synonyms and documentation are included only when asked for.
"""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.describe_configs_response import (
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
)

from ..config_resources import TYPE_NAMES, ConfigEntry, provider_for
from ._admin import default_message
from ._group_admin import error_message

API_KEY = 32
MIN_VERSION, MAX_VERSION = 1, 4


def _result(entry: ConfigEntry, synonyms: bool, docs: bool) -> DescribeConfigsResourceResult:
    return DescribeConfigsResourceResult(
        name=entry.name, value=entry.value, read_only=entry.read_only, config_source=entry.source,
        is_sensitive=entry.sensitive,
        synonyms=[DescribeConfigsSynonym(name=n, value=v, source=s) for n, v, s in entry.synonyms] if synonyms else [],
        config_type=entry.type, documentation=entry.doc if docs else None,
    )


async def handle(ctx, req) -> DescribeConfigsResponse:
    broker = ctx.broker
    if any(r.resource_type not in TYPE_NAMES for r in req.resources):
        code = ErrorCode.INVALID_REQUEST
        return DescribeConfigsResponse(results=[
            DescribeConfigsResult(error_code=code, error_message=default_message(code), resource_type=r.resource_type,
                                  resource_name=r.resource_name, configs=[])
            for r in req.resources
        ])
    results = []
    for r in req.resources:
        try:
            provider = provider_for(r.resource_type)
            entries = provider.describe(broker, r.resource_name, list(r.configuration_keys or []) or None)
        except KafkaError as e:
            results.append(DescribeConfigsResult(error_code=e.code, error_message=e.message,
                                                 resource_type=r.resource_type, resource_name=r.resource_name,
                                                 configs=[]))
            continue
        results.append(DescribeConfigsResult(
            error_code=ErrorCode.NONE, error_message=None, resource_type=r.resource_type,
            resource_name=r.resource_name,
            configs=[_result(e, req.include_synonyms, req.include_documentation) for e in entries],
        ))
    return DescribeConfigsResponse(results=results)


def error_response(req, version: int, code: int) -> DescribeConfigsResponse:
    """Every requested resource with the error, its default message and no configs."""
    message = error_message(code)
    return DescribeConfigsResponse(results=[
        DescribeConfigsResult(error_code=code, error_message=message, resource_type=r.resource_type,
                              resource_name=r.resource_name, configs=[])
        for r in req.resources
    ])
