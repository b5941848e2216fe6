"""``share.auto.offset.reset``: where a share partition starts when the persister has no SPSO.

The persister answers StartOffset = -1 for a partition that was never consumed; the shell then
asks this helper, giving it the log's bounds and a timestamp lookup, and passes the real offset
to ``SharePartition.initialize``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal

LATEST = "latest"
EARLIEST = "earliest"
BY_DURATION = "by_duration"

# java.time.Duration.parse syntax (days, hours, minutes, seconds with up to 9 decimals).
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE,
)


def parse_iso8601_duration_ms(text: str) -> int:
    """Milliseconds in an ISO-8601 duration as Java's Duration.parse reads it; negatives rejected."""
    m = _DURATION.fullmatch(text)
    if not m:
        raise ValueError(f"invalid ISO-8601 duration: {text!r}")
    sign, days, t_part, hours, minutes, seconds, fraction = m.groups()
    if t_part == "T" or (days is None and t_part is None):
        raise ValueError(f"invalid ISO-8601 duration: {text!r}")
    total = Decimal(0)
    total += Decimal(int(days or 0)) * 86_400_000
    total += Decimal(int(hours or 0)) * 3_600_000
    total += Decimal(int(minutes or 0)) * 60_000
    if seconds is not None:
        secs = Decimal(int(seconds))
        if fraction:
            frac = Decimal("0." + fraction)
            secs = secs - frac if seconds.startswith("-") else secs + frac
        total += secs * 1000
    if sign == "-":
        total = -total
    if total < 0:
        raise ValueError(f"negative duration not allowed: {text!r}")
    return int(total)


def parse_auto_offset_reset(value: str) -> tuple[str, int]:
    """``latest`` | ``earliest`` | ``by_duration:<ISO-8601>`` -> (strategy, duration_ms or 0)."""
    lowered = value.strip().lower()
    if lowered in (LATEST, EARLIEST):
        return lowered, 0
    prefix = BY_DURATION + ":"
    if lowered.startswith(prefix):
        return BY_DURATION, parse_iso8601_duration_ms(value.strip()[len(prefix):])
    raise ValueError(f"invalid share.auto.offset.reset: {value!r}")


def resolve_start_offset(
    value: str,
    *,
    log_start_offset: int,
    log_end_offset: int,
    offset_for_timestamp: Callable[[int], int | None],
    now_ms: int,
) -> int | None:
    """SPSO for an uninitialized share partition, or None when no offset exists.

    latest -> the high watermark (read-uncommitted log end); earliest -> log start offset;
    by_duration -> first offset whose timestamp >= now - duration. None maps to
    OFFSET_NOT_AVAILABLE (78) in the shell, as Kafka fails the load in that case.
    """
    strategy, duration_ms = parse_auto_offset_reset(value)
    if strategy == LATEST:
        return log_end_offset
    if strategy == EARLIEST:
        return log_start_offset
    return offset_for_timestamp(now_ms - duration_ms)
