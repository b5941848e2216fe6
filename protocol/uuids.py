"""Kafka's textual form of a Uuid: the 16 bytes in URL-safe base64 without padding.

Topic ids appear in this form in partition.metadata, share-state keys and tool output.
"""

from __future__ import annotations

import base64
import uuid


def uuid_to_str(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def uuid_from_str(text: str) -> uuid.UUID:
    """Parse Kafka's form; raises ValueError for anything that is not 16 bytes of base64url."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as e:
        raise ValueError(f"invalid Kafka uuid {text!r}: {e}") from None
    if len(raw) != 16 or uuid_to_str(uuid.UUID(bytes=raw)) != text:
        raise ValueError(f"invalid Kafka uuid {text!r}")
    return uuid.UUID(bytes=raw)


def random_uuid() -> uuid.UUID:
    """A new id as Kafka makes them: random, never the zero uuid or the metadata-topic id."""
    while True:
        u = uuid.uuid4()
        if u.int != 0 and u.int != 1:
            return u
