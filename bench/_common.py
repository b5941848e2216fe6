"""Helpers shared by the benchmark scripts: what a server process cost, read from /proc.

Both are read from the outside so the broker (or Redis) needs no instrumentation; /proc/<pid>
figures of the thread-group leader cover every thread of the process.
"""

from __future__ import annotations

import os

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    """Peak resident set size (VmHWM) of ``pid`` in MiB, NaN if the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used so far (utime + stime of /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    # The command name (field 2) may hold spaces and parentheses: split after its closing one.
    fields = stat[stat.rindex(")") + 2:].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / _CLK_TCK


def busy_cpu_seconds() -> float:
    """CPU seconds every core has spent busy since boot (/proc/stat: all but idle and iowait).

    The difference over a window minus what the measured processes used is what everything else
    on the machine took meanwhile: a run that shared the cores with other work shows it.
    """
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / _CLK_TCK


def percentile(values: list[float], pct: float) -> float:
    """The ``pct`` percentile of ``values`` (linear interpolation between closest ranks, as
    ``statistics.quantiles(method="inclusive")``)."""
    if not 0 <= pct <= 100:
        raise ValueError(f"percentile {pct} is not between 0 and 100")
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * pct / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)
