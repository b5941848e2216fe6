"""ApiVersions: the versions come from the handler registry and nowhere else."""

from __future__ import annotations

import re

from protocol.errors import ErrorCode
from protocol.messages.api_versions_response import (
    ApiVersion,
    ApiVersionsResponse,
    FinalizedFeatureKey,
    SupportedFeatureKey,
)

API_KEY = 18
MIN_VERSION, MAX_VERSION = 0, 4

# Supported (min, max) levels, each finalized at its max, as Kafka 4.2's defaultSupportedFeatures:
# metadata.version 7 (3.3-IV3) to 29 (4.2-IV1), and the features kshare implements; share groups
# need share.version 1. Kafka lists no feature whose max is 0, so none for transactions.
FEATURES = {"metadata.version": (7, 29), "share.version": (0, 1), "group.version": (0, 1)}
# KIP-511: what a v3+ client may call itself.
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def error_response(request, version: int, code: int) -> ApiVersionsResponse:
    """Kafka's getErrorResponse: the error; for UNSUPPORTED_VERSION also ApiVersions' own range (KIP-511)."""
    keys = [ApiVersion(api_key=API_KEY, min_version=MIN_VERSION, max_version=MAX_VERSION)]
    return ApiVersionsResponse(error_code=code, api_keys=keys if code == ErrorCode.UNSUPPORTED_VERSION else [])


async def handle(ctx, request) -> ApiVersionsResponse:
    from . import supported_api_versions

    v = ctx.api_version
    if v >= 3 and not (
        _SOFTWARE.fullmatch(request.client_software_name or "")
        and _SOFTWARE.fullmatch(request.client_software_version or "")
    ):
        return ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST)
    resp = ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=supported_api_versions())
    if v >= 3:
        # Before v4 (KAFKA-17011) a supported feature could not have min version 0: leave those out.
        resp.supported_features = [
            SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
            for n, (lo, hi) in FEATURES.items() if v >= 4 or lo > 0
        ]
        resp.finalized_features = [
            FinalizedFeatureKey(name=n, min_version_level=hi, max_version_level=hi)
            for n, (lo, hi) in FEATURES.items() if hi > 0
        ]
        resp.finalized_features_epoch = 1
    return resp
