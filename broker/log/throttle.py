"""Reporting a failure that recurs without flooding the log: the first occurrence at once, then
at most one report per interval, each with the count of occurrences since the previous one."""

from __future__ import annotations

from typing import Callable


class ReportThrottle:
    def __init__(self, interval: float, clock: Callable[[], float]) -> None:
        """``interval`` in the unit of ``clock``."""
        self.interval = interval
        self._clock = clock
        self._unreported = 0
        self._last: float | None = None

    def occurred(self) -> int:
        """Count one occurrence; returns how many to report now, 0 while the interval runs."""
        self._unreported += 1
        now = self._clock()
        if self._last is not None and now - self._last < self.interval:
            return 0
        count, self._unreported, self._last = self._unreported, 0, now
        return count
