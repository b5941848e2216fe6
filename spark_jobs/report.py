"""The lag report job: export, fold, join with the brokers' offsets, write the outputs.

``DIR/state-export/`` keeps the incremental export (``export.py``), so a rerun reads only new
state records. Outputs, rewritten on each run:

- ``lag.csv``: group, topic, partition, start_offset, log_end_offset, delivery_complete_count,
  lag (an unknown lag or log end offset is an empty field);
- ``lag.parquet``: the same rows with topic id, leader epoch and state epoch;
- ``lag_totals.csv``: per group and topic, and per group (topic ``*``);
- ``lag_history.csv``: total lag per group over time;
- ``delivery_health.csv``: per share-partition, what the state records show about delivery;
- ``report.html``: all of it on one self-contained page with a lag chart per group.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from protocol.uuids import uuid_to_str

from .export import ExportResult, committed, committed_files, export_share_state, floor_filter
from .export_scan import ExportScan
from .html_report import render
from .kafka_io import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Cluster
from .lag import LAG_COLUMNS, end_offset_at, group_history, lag_table, lag_totals
from .progress import Progress
from .state_rows import KEY_COLUMNS

__all__ = ["ReportResult", "build_report", "DEFAULT_HISTORY_POINTS", "DEFAULT_DELIVERY_COUNT_LIMIT"]

DEFAULT_HISTORY_POINTS = 60
DEFAULT_DELIVERY_COUNT_LIMIT = 5  # group.share.delivery.count.limit


@dataclass
class ReportResult:
    lag: pd.DataFrame
    totals: pd.DataFrame
    history: pd.DataFrame
    health: pd.DataFrame
    exported: int          # state records this run exported
    state_records: int     # state records the report covers
    files: dict[str, Path]
    export: ExportResult | None = None  # what the export did (see its notes())

    @property
    def notes(self) -> list[str]:
        """What the reader should know about the state behind this report."""
        return self.export.notes() if self.export is not None else []


def build_report(spark, bootstrap: str, out_dir: str | Path, *, groups: list[str] | None = None,
                 state_topic: str = "__share_group_state", history_points_max: int = DEFAULT_HISTORY_POINTS,
                 delivery_count_limit: int = DEFAULT_DELIVERY_COUNT_LIMIT, progress: Progress | None = None,
                 max_offsets_per_split: int | None = None) -> ReportResult:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    step = progress.step if progress is not None else (lambda _phase: None)

    step(f"exporting {state_topic}")
    export_dir = out / "state-export"
    exported = export_share_state(spark, bootstrap, export_dir, topic=state_topic,
                                  max_offsets_per_split=max_offsets_per_split)
    notes = exported.notes()
    for note in notes:
        step(note)
    scan = ExportScan(spark, export_dir, groups)
    lo_ms, hi_ms, total_records, partitions = _time_span(export_dir, groups)
    bucket_ms = max(1, math.ceil((hi_ms - lo_ms + 1) / max(1, history_points_max)))
    # The brokers' offsets are asked for while Spark folds: every partition the state
    # names, at the end of every time bucket the history can have (what the report then
    # needs is a subset; anything missing is asked for afterwards).
    buckets = (hi_ms - lo_ms) // bucket_ms + 1 if total_records else 0
    prefetch = _OffsetsPrefetch(bootstrap, partitions, [(b + 1) * bucket_ms + lo_ms for b in range(buckets)])

    step("folding the latest state, lag history and delivery health per share-partition")
    folded = scan.fold(history=(bucket_ms, lo_ms) if total_records else None,
                       delivery_count_limit=delivery_count_limit)
    latest, health_raw = folded["latest"], folded["health"]
    if total_records:
        points = folded["points"]
    else:
        points = pd.DataFrame(columns=[*KEY_COLUMNS, "at_ms", "start_offset", "delivery_complete_count"])

    step("offsets from the brokers")
    names, existing, leo, first, at = prefetch.result()
    with Cluster(bootstrap) as cluster:
        if names is None:
            names = {uuid_to_str(tid): name for tid, name in cluster.topic_names_by_id().items()}
            existing = {name: cluster.topic(name).leaders for name in set(names.values())}

        def known(topic_id: str, partition: int):
            name = names.get(topic_id)
            return (name, partition) if name is not None and partition in existing.get(name, {}) else None

        wanted = {tp for tp in (known(r.topic_id, int(r.partition)) for r in latest.itertuples()) if tp}
        wanted |= {tp for tp in (known(r.topic_id, int(r.partition)) for r in points.itertuples()) if tp}
        missing = wanted - leo.keys()
        if missing:
            leo.update(cluster.list_offsets({tp: LATEST_TIMESTAMP for tp in missing}))
            first.update(cluster.list_offsets({tp: EARLIEST_TIMESTAMP for tp in missing}))
        # The log end offset of every partition at every point in time: a partition's lag
        # changes as records arrive even while its share state stays the same.
        for t in sorted({int(x) for x in points["at_ms"]}) if wanted else ():
            missing = {tp for tp in wanted if (tp[0], tp[1], t) not in at}
            if missing:
                for (topic, p), offset in cluster.list_offsets({tp: t for tp in missing}).items():
                    at[(topic, p, t)] = offset
        ends_at = {k: end_offset_at(offset, first[k[:2]], leo[k[:2]]) for k, offset in at.items()}

    step("writing the report")
    table = lag_table(latest, names, leo)
    totals = lag_totals(table)
    history = group_history(points.to_dict("records"), names, ends_at)
    health = _health_table(latest, health_raw, names)
    files = {
        "lag.csv": out / "lag.csv", "lag.parquet": out / "lag.parquet", "lag_totals.csv": out / "lag_totals.csv",
        "lag_history.csv": out / "lag_history.csv", "delivery_health.csv": out / "delivery_health.csv",
        "report.html": out / "report.html",
    }
    table[LAG_COLUMNS].to_csv(files["lag.csv"], index=False)
    table.to_parquet(files["lag.parquet"], index=False)
    totals.to_csv(files["lag_totals.csv"], index=False)
    history.to_csv(files["lag_history.csv"], index=False)
    health.to_csv(files["delivery_health.csv"], index=False)
    files["report.html"].write_text(render(
        lag=table, totals=totals, history=history, health=health, generated_ms=int(time.time() * 1000),
        bootstrap=bootstrap, delivery_count_limit=delivery_count_limit, state_records=total_records,
        notes=notes))
    return ReportResult(table, totals, history, health, exported.records, total_records, files, exported)


def _time_span(export_dir: Path, groups: list[str] | None) -> tuple[int, int, int, set[tuple[str, int]]]:
    """(first, last record timestamp in ms, records, the (topic id, partition) pairs) of the
    export, read from its Parquet files directly (a column scan, cheaper than a Spark job)."""
    content = committed(export_dir)
    files = committed_files(export_dir, content)
    if not files:
        return 0, 0, 0, set()
    ds = pads.dataset(files, format="parquet")
    flt = pads.field("group_id").isin(list(groups)) if groups else None
    floor = floor_filter(export_dir, content)
    if floor is not None:
        flt = floor if flt is None else flt & floor
    t = ds.to_table(columns=["timestamp", "topic_id", "partition"], filter=flt)
    ts = t.column("timestamp")
    if len(ts) == 0:
        return 0, 0, 0, set()
    ms = pc.cast(ts, pa.timestamp("ms", tz=ts.type.tz), safe=False).cast(pa.int64())  # whatever unit Parquet had
    lo, hi = pc.min_max(ms).values()
    pairs = t.select(["topic_id", "partition"]).group_by(["topic_id", "partition"]).aggregate([]).to_pydict()
    return lo.as_py(), hi.as_py(), len(ts), set(zip(pairs["topic_id"], pairs["partition"]))


class _OffsetsPrefetch:
    """In a thread: topic names, leaders, log end and start offsets and the offsets at ``times``
    of the partitions named by ``partitions`` ((topic id, partition) pairs), exactly as the report
    asks for them. ``result()`` waits; after a failure it returns (None, None, {}, {}, {}) and the
    report asks for everything itself."""

    def __init__(self, bootstrap: str, partitions: set[tuple[str, int]], times: list[int]) -> None:
        self._answer = (None, None, {}, {}, {})
        self._thread = threading.Thread(target=self._run, args=(bootstrap, partitions, times),
                                        name="kshare-offsets", daemon=True)
        self._thread.start()

    def _run(self, bootstrap: str, partitions: set[tuple[str, int]], times: list[int]) -> None:
        try:
            with Cluster(bootstrap) as cluster:
                names = {uuid_to_str(tid): name for tid, name in cluster.topic_names_by_id().items()}
                existing = {name: cluster.topic(name).leaders for name in set(names.values())}
                wanted = {(names[tid], p) for tid, p in partitions
                          if tid in names and p in existing.get(names[tid], {})}
                leo = cluster.list_offsets({tp: LATEST_TIMESTAMP for tp in wanted}) if wanted else {}
                first = cluster.list_offsets({tp: EARLIEST_TIMESTAMP for tp in wanted}) if wanted else {}
                at: dict[tuple[str, int, int], int] = {}
                for t in times if wanted else ():
                    for (topic, p), offset in cluster.list_offsets({tp: t for tp in wanted}).items():
                        at[(topic, p, t)] = offset
            self._answer = (names, existing, leo, first, at)
        except Exception:  # noqa: BLE001 - the report asks again, and reports errors then
            self._answer = (None, None, {}, {}, {})

    def result(self):
        self._thread.join()
        return self._answer


_HEALTH = ["acknowledged", "archived_rejected", "archived_delivery_limit", "redelivered", "redeliveries"]
_INFLIGHT = ["inflight_available", "inflight_acknowledged", "inflight_archived", "inflight_redelivered",
             "max_delivery_count"]


def _health_table(latest: pd.DataFrame, health: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    keys = ["group_id", "topic_id", "partition"]
    base = latest[[*keys, *_INFLIGHT]]
    merged = base.merge(health[[*keys, *_HEALTH]], on=keys, how="left") if len(health) else base.assign(
        **{c: 0 for c in _HEALTH})
    for c in _HEALTH:
        merged[c] = merged[c].fillna(0).astype("int64")
    merged.insert(1, "topic", [names.get(t, t) for t in merged["topic_id"]])
    merged = merged.rename(columns={"group_id": "group"})
    return merged[["group", "topic", "partition", *_HEALTH, *_INFLIGHT]].sort_values(
        ["group", "topic", "partition"], kind="stable").reset_index(drop=True)
