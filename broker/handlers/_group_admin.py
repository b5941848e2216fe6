"""Helpers shared by the group admin handlers (not a handler: the name starts with an underscore)."""

from __future__ import annotations

from protocol.errors import ErrorCode

from ._admin import default_message


def error_message(code: int, message: str | None = None) -> str | None:
    """``message``, else Kafka's default message for ``code`` (None for no error)."""
    if not code:
        return None
    if message:
        return message
    return default_message(ErrorCode(code))
