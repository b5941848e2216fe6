"""Helpers shared by the group admin handlers (not a handler: the name starts with an underscore)."""

from __future__ import annotations

from protocol.errors import ErrorCode

from ._admin import default_message

# Errors.java's default messages for the codes the group admin APIs answer with.
_GROUP_MESSAGES = {
    ErrorCode.INVALID_GROUP_ID: "The configured groupId is invalid.",
    ErrorCode.GROUP_ID_NOT_FOUND: "The group id does not exist.",
    ErrorCode.NON_EMPTY_GROUP: "The group is not empty.",
    ErrorCode.NOT_COORDINATOR: "This is not the correct coordinator.",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
    ErrorCode.UNKNOWN_SERVER_ERROR: "The server experienced an unexpected error when processing the request.",
    ErrorCode.LEADER_NOT_AVAILABLE: "There is no leader for this topic-partition as we are in the middle of a "
                                    "leadership election.",
}


def error_message(code: int, message: str | None = None) -> str | None:
    """``message``, else Kafka's default message for ``code`` (None for no error)."""
    if not code:
        return None
    if message:
        return message
    code = ErrorCode(code)
    return _GROUP_MESSAGES.get(code) or default_message(code)
