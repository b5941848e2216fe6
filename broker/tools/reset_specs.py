"""The time arguments of ``--reset-offsets``, parsed the way Kafka's tools parse them.

``--to-datetime`` follows ``Utils.getDateTime``: ``YYYY-MM-DDThh:mm:ss.sss`` with an optional
zone (``Z``, ``+hh``, ``+hhmm`` or ``+hh:mm``); without one the time is UTC (Kafka appends
"Z"). ``--by-duration`` is a ``java.time.Duration`` text, ``PnDTnHnMnS`` (case-insensitive,
optional signs, fractional seconds), and means "that long before now".
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from ..config import java_split

_DATETIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{1,3})"
    r"(?:(Z)|([+-])(\d{2})(?::?(\d{2}))?)?"
)
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?"
    r"(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


class SpecError(ValueError):
    """An argument that does not parse; the message is the one line the tool prints."""


def parse_datetime(text: str) -> int:
    """Milliseconds since the epoch for a ``--to-datetime`` argument."""
    parts = java_split(text, "T")
    if len(parts) < 2:
        raise SpecError("Error parsing timestamp. It does not contain a 'T' according to ISO8601 format")
    # Kafka appends "Z" to a text without a zone before parsing; the error quotes that text
    parsed = text if any(c in parts[1] for c in "+-Z") else text + "Z"
    m = _DATETIME.fullmatch(text)
    if m is None:
        raise SpecError(f'Unparseable date: "{parsed}"')
    year, month, day, hour, minute, second, millis, z, sign, zh, zm = m.groups()
    if z or sign is None:
        zone = timezone.utc
    else:
        offset = timedelta(hours=int(zh), minutes=int(zm or 0))
        zone = timezone(offset if sign == "+" else -offset)
    try:
        dt = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                      int(millis.ljust(3, "0")) * 1000, tzinfo=zone)
    except ValueError:
        raise SpecError(f'Unparseable date: "{parsed}"') from None
    return int(dt.timestamp() * 1000)


def parse_duration(text: str) -> int:
    """Milliseconds of a ``--by-duration`` argument (may be negative, like Java's)."""
    m = _DURATION.fullmatch(text)
    if m is None or text.upper().endswith("T") or m.group(0).upper() in ("P", "+P", "-P"):
        raise SpecError("Text cannot be parsed to a Duration")
    sign, days, hours, minutes, seconds, fraction = m.groups()
    if not any((days, hours, minutes, seconds)):
        raise SpecError("Text cannot be parsed to a Duration")
    total_ms = (int(days or 0) * 86_400_000 + int(hours or 0) * 3_600_000 + int(minutes or 0) * 60_000
                + int(seconds or 0) * 1000)
    if fraction:
        frac_ms = int(fraction.ljust(9, "0")[:3])
        total_ms += -frac_ms if (seconds or "").startswith("-") else frac_ms
    return -total_ms if sign == "-" else total_ms
