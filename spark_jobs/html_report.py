"""The lag report as one self-contained HTML page: inline CSS and inline SVG charts, no
scripts and nothing fetched (the page must open on machines without internet).

Per group: a line chart of its total lag over time (one SVG, drawn here from the points), then
tables of the current lag per partition, the totals per topic and what the state records show
about delivery. An unknown lag is shown as ``-``, as ``kafka-share-groups.sh`` does.
"""

from __future__ import annotations

import datetime as dt
import html
import math

import numpy as np
import pandas as pd

__all__ = ["render", "line_chart", "UNKNOWN_MARK"]

UNKNOWN_MARK = "-"

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
h3 { font-size: 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 3px 8px; }
th { background: #f3f3f3; text-align: left; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
svg.chart { background: #fcfcfc; border: 1px solid #ddd; }
svg.chart .axis { stroke: #888; stroke-width: 1; } svg.chart .grid { stroke: #eee; stroke-width: 1; }
svg.chart .line { fill: none; stroke: #1f6fb2; stroke-width: 2; } svg.chart .dot { fill: #1f6fb2; }
svg.chart text { font-size: 11px; fill: #555; }
p.meta { color: #666; font-size: 0.9em; }
"""


def _fmt(value) -> str:
    """A table cell: integers as they are, anything missing as ``-``."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return UNKNOWN_MARK
    if isinstance(value, (int, float, np.integer, np.floating)):
        return str(int(value))
    return html.escape(str(value))


def _time(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _table(frame: pd.DataFrame, columns: list[tuple[str, str]], css_class: str) -> str:
    head = "".join(f"<th>{html.escape(title)}</th>" for _, title in columns)
    body = []
    for row in frame.itertuples(index=False):
        cells = []
        for col, _ in columns:
            v = getattr(row, col)
            numeric = not isinstance(v, str)
            cells.append(f'<td class="n">{_fmt(v)}</td>' if numeric else f"<td>{html.escape(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table class="{css_class}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def line_chart(points: list[tuple[int, int]], *, width: int = 720, height: int = 240, title: str = "") -> str:
    """An SVG line chart of ``(time ms, value)`` points (sorted by time)."""
    left, right, top, bottom = 70, 20, 20, 40
    w, h = width - left - right, height - top - bottom
    parts = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(title)}">',
             f"<title>{html.escape(title)}</title>"]
    if not points:
        parts.append(f'<text x="{left}" y="{top + h / 2}">no lag history</text></svg>')
        return "".join(parts)
    t0, t1 = points[0][0], points[-1][0]
    lo = min(0, min(v for _, v in points))
    hi = max(v for _, v in points)
    if hi == lo:
        hi = lo + 1
    span = max(t1 - t0, 1)

    def x(t: int) -> float:
        return left + (w / 2 if t1 == t0 else (t - t0) / span * w)

    def y(v: int) -> float:
        return top + h - (v - lo) / (hi - lo) * h

    for i in range(5):  # horizontal grid and value labels
        v = lo + (hi - lo) * i / 4
        parts.append(f'<line class="grid" x1="{left}" y1="{y(v):.1f}" x2="{left + w}" y2="{y(v):.1f}"/>')
        parts.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:,.0f}</text>')
    parts.append(f'<line class="axis" x1="{left}" y1="{top + h}" x2="{left + w}" y2="{top + h}"/>')
    parts.append(f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + h}"/>')
    parts.append(f'<text x="{left}" y="{height - 12}">{_time(t0)} UTC</text>')
    if t1 != t0:
        parts.append(f'<text x="{left + w}" y="{height - 12}" text-anchor="end">{_time(t1)} UTC</text>')
    coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
    parts.append(f'<polyline class="line" points="{coords}"/>')
    for t, v in points:
        parts.append(f'<circle class="dot" cx="{x(t):.1f}" cy="{y(v):.1f}" r="2.5">'
                     f"<title>{_time(t)} UTC: lag {v:,}</title></circle>")
    parts.append("</svg>")
    return "".join(parts)


_LAG_COLUMNS = [("topic", "Topic"), ("partition", "Partition"), ("start_offset", "Start offset"),
                ("log_end_offset", "Log end offset"), ("delivery_complete_count", "Delivery complete count"),
                ("lag", "Lag")]
_TOTAL_COLUMNS = [("topic", "Topic"), ("partitions", "Partitions"), ("unknown_partitions", "Lag unknown"),
                  ("lag", "Lag")]
_HEALTH_COLUMNS = [("topic", "Topic"), ("partition", "Partition"), ("acknowledged", "Acknowledged"),
                   ("archived_rejected", "Archived (rejected)"),
                   ("archived_delivery_limit", "Archived (delivery limit)"), ("redelivered", "Completed after redelivery"),
                   ("redeliveries", "Their redeliveries"), ("inflight_available", "In flight: available"),
                   ("inflight_archived", "In flight: archived"),
                   ("inflight_redelivered", "In flight: redelivered"), ("max_delivery_count", "Max delivery count")]


def render(*, lag: pd.DataFrame, totals: pd.DataFrame, history: pd.DataFrame, health: pd.DataFrame,
           generated_ms: int, bootstrap: str, delivery_count_limit: int, state_records: int,
           notes: list[str] | None = None) -> str:
    """The whole page. ``lag``: ``lag.lag_table``; ``totals``: ``lag.lag_totals``; ``history``:
    ``lag.group_history``; ``health``: per partition (group, topic, partition and the health
    columns)."""
    # Groups with state now, and deleted groups whose lag history has something to show.
    groups = sorted(set(lag["group"]) | set(history.dropna(subset=["lag"])["group"]))
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           "<title>Share group lag report</title>", f"<style>{_CSS}</style></head><body>",
           "<h1>Share group lag report</h1>",
           f'<p class="meta">Cluster {html.escape(bootstrap)}, generated {_time(generated_ms)} UTC from '
           f"{state_records:,} share-state records. Lag as in KIP-1226: log end offset &minus; start offset "
           f"&minus; delivery complete count; {UNKNOWN_MARK} when unknown. Delivery limit "
           f"{delivery_count_limit}.</p>"]
    out.extend(f'<p class="meta note">{html.escape(n)}</p>' for n in notes or ())
    if not groups:
        out.append("<p>No share-group state found.</p>")
    for group in groups:
        g_lag = lag[lag["group"] == group]
        g_hist = history[history["group"] == group]
        pts = [(int(r.at_ms), int(r.lag)) for r in g_hist.itertuples(index=False) if not pd.isna(r.lag)]
        out.append(f'<section class="group" data-group="{html.escape(group)}"><h2>Group {html.escape(group)}</h2>')
        out.append("<h3>Lag over time</h3>")
        out.append(line_chart(pts, title=f"Lag of share group {group} over time"))
        out.append("<h3>Current lag</h3>")
        out.append(_table(g_lag, _LAG_COLUMNS, "lag"))
        out.append("<h3>Totals</h3>")
        g_tot = totals[totals["group"] == group].copy()
        g_tot["topic"] = g_tot["topic"].replace("*", "all topics")
        out.append(_table(g_tot, _TOTAL_COLUMNS, "totals"))
        g_health = health[health["group"] == group] if len(health) else health
        if len(g_health):
            out.append("<h3>Delivery (as the state records show it)</h3>")
            out.append(_table(g_health, _HEALTH_COLUMNS, "health"))
        out.append("</section>")
    out.append("</body></html>")
    return "\n".join(out)
