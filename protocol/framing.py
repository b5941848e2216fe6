"""Request and response frames: size prefix, header version per API version, body.

One place for the rule every peer needs (broker, clients, tests): a request uses header v2 in
the API's flexible versions and v1 before; a response uses header v1 or v0 the same way,
except ApiVersions, which always answers with header v0 so any client can read it.
"""

from __future__ import annotations

import struct

from . import messages
from .messages.request_header import RequestHeader
from .messages.response_header import ResponseHeader

API_VERSIONS = 18
_SIZE = struct.Struct(">i")


def request_header_version(api_key: int, api_version: int) -> int:
    first = messages.FIRST_FLEXIBLE.get(api_key)
    return 2 if first is not None and api_version >= first else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS:
        return 0
    first = messages.FIRST_FLEXIBLE.get(api_key)
    return 1 if first is not None and api_version >= first else 0


def response_class(api_key: int) -> type:
    _, _, module, name = messages.APIS[api_key]
    return messages.load(module, name)


def request_frame(request, version: int, correlation_id: int, client_id: str | None) -> bytes:
    """A size-prefixed request frame; the API key comes from the request's class."""
    api_key = request.API_KEY
    header = RequestHeader(
        request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id=client_id
    ).to_bytes(request_header_version(api_key, version))
    body = request.to_bytes(version)
    return _SIZE.pack(len(header) + len(body)) + header + body


def correlation_id(frame) -> int:
    """The correlation id of a response frame (without its size prefix): its first four bytes."""
    return _SIZE.unpack_from(frame, 0)[0]


def parse_response(frame, api_key: int, version: int):
    """Decode a response frame (without its size prefix) of ``api_key`` at ``version``."""
    view = memoryview(frame)
    _, pos = ResponseHeader.decode(view, response_header_version(api_key, version))
    response, _ = response_class(api_key).decode(view, version, pos)
    return response
