"""``share.auto.offset.reset``: where a share partition starts when the persister has no SPSO.

The persister answers StartOffset = -1 for a partition that was never consumed; the shell
resolves the group's (already parsed) setting against the log and passes the real offset to
``SharePartition.initialize``. Parsing lives with the group configs
(``coordinator.group.configs.parse_auto_offset_reset``).
"""

from __future__ import annotations

from collections.abc import Callable


def resolve_start_offset(
    reset,
    *,
    log_start_offset: int,
    log_end_offset: int,
    offset_for_timestamp: Callable[[int], int | None],
    now_ms: int,
) -> int | None:
    """SPSO for an uninitialized share partition, or None when no offset exists.

    ``reset`` is ``"latest"``, ``"earliest"`` or ``("by_duration", ms)``. latest -> the high
    watermark (read-uncommitted log end); earliest -> log start offset; by_duration -> first
    offset whose timestamp >= now - duration. None maps to OFFSET_NOT_AVAILABLE (78), as Kafka
    fails the load in that case.
    """
    if reset == "latest":
        return log_end_offset
    if reset == "earliest":
        return log_start_offset
    _, duration_ms = reset
    return offset_for_timestamp(now_ms - duration_ms)
