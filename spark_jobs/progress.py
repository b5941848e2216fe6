"""A progress line on stderr for long Spark runs: the phase, and the tasks done of the active
stages, polled from Spark's status tracker by a daemon thread. On a terminal the line is
rewritten in place; otherwise a line is printed when something changed, at most every few
seconds (so logs of CI runs stay short)."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    def __init__(self, spark=None, *, stream: TextIO | None = None, prefix: str = "kshare-lag-report",
                 interval_s: float = 0.5, quiet_interval_s: float = 5.0) -> None:
        self.spark = spark
        self.stream = stream or sys.stderr
        self.prefix = prefix
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s = interval_s if self.tty else quiet_interval_s
        self.phase = ""
        self._started = time.monotonic()
        self._last = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        if self.spark is not None:
            self._thread = threading.Thread(target=self._poll, name="kshare-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self.tty and self._last:
            self.stream.write("\n")
            self.stream.flush()

    def step(self, phase: str) -> None:
        """Start a new phase (always printed)."""
        self.phase = phase
        self._emit(self._line(""), force=True)

    def _line(self, detail: str) -> str:
        elapsed = time.monotonic() - self._started
        return f"[{self.prefix} {elapsed:6.1f}s] {self.phase}{'  ' + detail if detail else ''}"

    def _emit(self, line: str, force: bool = False) -> None:
        if not force and line == self._last:
            return
        if self.tty:
            self.stream.write("\r" + line.ljust(len(self._last)))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self._last = line

    def _poll(self) -> None:
        tracker = self.spark.sparkContext.statusTracker()
        shown = ""
        while not self._stop.wait(self.interval_s):
            try:
                stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            except Exception:  # the context is stopping
                return
            detail = "  ".join(f"stage {s.stageId}: {s.numCompletedTasks}/{s.numTasks} tasks"
                               for s in stages if s is not None)
            if detail and detail != shown:
                shown = detail
                self._emit(self._line(detail))
