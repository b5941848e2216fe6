"""The handler registry: one module per Kafka API key, and the only source of ApiVersions.

Each module declares ``API_KEY``, ``MIN_VERSION``, ``MAX_VERSION`` and
``async def handle(ctx, request) -> response | None``; request and response classes come from
the generated protocol package. Each also declares ``error_response(request, version, code)``:
the answer Kafka's ``getErrorResponse`` of that request gives when its handler fails unexpectedly
(the server sends it with UNKNOWN_SERVER_ERROR instead of closing the connection; None, for an
acks=0 Produce, closes it). Registering the same key twice, a version range the schema
does not have, or a version the schema marks unstable (Kafka serves those only with
``unstable.api.versions.enable``, default false), fails at import time rather than on the wire.
"""

from __future__ import annotations

import pkgutil
from importlib import import_module
from typing import Awaitable, Callable, NamedTuple

from protocol import messages
from protocol.messages.api_versions_response import ApiVersion

# Every module in this package is a handler (helpers start with an underscore).
MODULES = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


class Handler(NamedTuple):
    api_key: int
    name: str
    min_version: int
    max_version: int
    request_class: type
    response_class: type
    handle: Callable[..., Awaitable]
    error_response: Callable


def build_registry(module_names: list[str]) -> dict[int, Handler]:
    registry: dict[int, Handler] = {}
    for name in module_names:
        mod = import_module(f"{__name__}.{name}")
        key = mod.API_KEY
        if key in registry:
            raise ValueError(f"API key {key} registered by both {registry[key].name} and {name}")
        req_mod, req_cls, resp_mod, resp_cls = messages.APIS[key]
        lo, hi = messages.VALID_VERSIONS[key]
        if not lo <= mod.MIN_VERSION <= mod.MAX_VERSION <= hi:
            raise ValueError(f"{name}: versions {mod.MIN_VERSION}-{mod.MAX_VERSION} outside the schema's {lo}-{hi}")
        if mod.MAX_VERSION > messages.STABLE_MAX_VERSION[key]:
            raise ValueError(f"{name}: version {mod.MAX_VERSION} is unstable in the schema; Kafka does not serve it")
        if not callable(getattr(mod, "error_response", None)):
            raise ValueError(f"{name}: no error_response (Kafka's getErrorResponse of the request)")
        registry[key] = Handler(
            key, name, mod.MIN_VERSION, mod.MAX_VERSION,
            messages.load(req_mod, req_cls), messages.load(resp_mod, resp_cls), mod.handle,
            mod.error_response,
        )
    return registry


REGISTRY = build_registry(MODULES)


def supported_api_versions() -> list[ApiVersion]:
    return [
        ApiVersion(api_key=h.api_key, min_version=h.min_version, max_version=h.max_version)
        for h in sorted(REGISTRY.values())
    ]
