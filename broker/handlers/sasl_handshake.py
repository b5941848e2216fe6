"""SaslHandshake: answered as Kafka answers it on a connection already authenticated.

kshare listens in PLAINTEXT only, where a connection is authenticated from the start, so Kafka's
KafkaApis answers ILLEGAL_SASL_STATE with no mechanisms. A client configured for SASL then fails
at once with that error, instead of retrying a connection that closes.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages.sasl_handshake_response import SaslHandshakeResponse

API_KEY = 17
MIN_VERSION, MAX_VERSION = 0, 1


def error_response(req, version: int, code: int) -> SaslHandshakeResponse:
    """Kafka's getErrorResponse: the error, with no mechanisms."""
    return SaslHandshakeResponse(error_code=code, mechanisms=[])


async def handle(ctx, req) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
