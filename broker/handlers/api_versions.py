"""ApiVersions: the versions come from the handler registry and nowhere else."""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages.api_versions_response import ApiVersionsResponse, FinalizedFeatureKey, SupportedFeatureKey

API_KEY = 18
MIN_VERSION, MAX_VERSION = 0, 4

# Kafka 4.2 feature levels that gate what clients may use; share groups need share.version 1.
FEATURES = {"share.version": (0, 1), "group.version": (0, 1), "transaction.version": (0, 0)}


async def handle(ctx, request) -> ApiVersionsResponse:
    from . import supported_api_versions

    resp = ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=supported_api_versions())
    if ctx.api_version >= 3:
        resp.supported_features = [
            SupportedFeatureKey(name=n, min_version=lo, max_version=hi) for n, (lo, hi) in FEATURES.items()
        ]
        resp.finalized_features = [
            FinalizedFeatureKey(name=n, min_version_level=hi, max_version_level=hi)
            for n, (lo, hi) in FEATURES.items() if hi > 0
        ]
        resp.finalized_features_epoch = 1
    return resp
