"""SaslAuthenticate: answered as Kafka answers it on a connection already authenticated
(PLAINTEXT, the only listener kshare has): ILLEGAL_SASL_STATE with Kafka's message."""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages.sasl_authenticate_response import SaslAuthenticateResponse

API_KEY = 36
MIN_VERSION, MAX_VERSION = 0, 2


def error_response(req, version: int, code: int) -> SaslAuthenticateResponse:
    """Kafka's getErrorResponse: the error, with no message and no auth bytes."""
    return SaslAuthenticateResponse(error_code=code, error_message=None, auth_bytes=b"")


async def handle(ctx, req) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(
        error_code=ErrorCode.ILLEGAL_SASL_STATE,
        error_message="SaslAuthenticate request received after successful authentication",
        auth_bytes=b"",
    )
