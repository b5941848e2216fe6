"""The lag report's passes over the exported state rows, a state partition at a time, in Arrow.

Every per-key result of the report (the latest state, the lag history points, delivery
health) depends only on the rows of one (state partition, key), and those rows live in the
export files of that state partition. So ``ExportScan.fold`` is one Spark job whose tasks each
take whole state partitions' files (grouped by the ``state_partition`` statistics in the
Parquet footers; files whose ranges overlap go to the same task), read the columns they need
once with pyarrow and compute all three with numpy, returning small Arrow IPC payloads: no
per-row work in the JVM or in Python (but for replaying the tails). The results are exactly
what the DataFrame functions of ``fold.py`` give on the same rows (``latest_state``,
``history_points(state_history(...))``, ``delivery_health``); where a shortcut's condition
does not hold they fall back to those functions:

- latest state: per key, the rows from its last snapshot or tombstone on (the tail) are
  replayed in the same task (``fold.replay_table``). ``latest_state`` hash-partitions the
  tails by (state partition, key) and replays each Spark partition into one shard keyed by
  (group, topic id, partition); a share-partition with rows under two state partitions
  (the state topic's partition count changed) may then merge, so when any appears the tails
  go through that exact path.
- lag history: per (key, time bucket) the last record, last snapshot or tombstone and last
  record with a start offset, carried forward over the key's buckets (valid while a key's
  buckets are in the same order as its offsets; otherwise ``history_points``).
- delivery health: the distinct terminal state batches per (key, state, delivery count),
  merged into islands exactly as the window query does.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from coordinator.share.combiner import ACKNOWLEDGED, ARCHIVED

from .export import committed, committed_files, floor_filter
from .fold import (
    _LATEST_ARROW,
    _REPLAY_COLUMNS,
    LATEST_SCHEMA,
    delivery_health,
    history_points,
    replay_batches,
    replay_table,
    state_history,
)
from .state_rows import KEY_COLUMNS, SNAPSHOT, STATE_ARROW_SCHEMA

__all__ = ["ExportScan"]

_HEALTH_SCHEMA = pa.schema([
    *(STATE_ARROW_SCHEMA.field(c) for c in KEY_COLUMNS),
    pa.field("acknowledged", pa.int64()), pa.field("archived_rejected", pa.int64()),
    pa.field("archived_delivery_limit", pa.int64()), pa.field("redelivered", pa.int64()),
    pa.field("redeliveries", pa.int64()),
])
_POINTS_SCHEMA = pa.schema([
    *(STATE_ARROW_SCHEMA.field(c) for c in KEY_COLUMNS),
    pa.field("at_ms", pa.int64()), pa.field("start_offset", pa.int64()),
    pa.field("delivery_complete_count", pa.int32()), pa.field("state_offset", pa.int64()),
    pa.field("_ordered", pa.bool_()),
])
_LATEST_CHECKED = pa.schema([*_LATEST_ARROW, pa.field("_state_partitions", pa.int32())])
_TAIL_SCHEMA = pa.schema([STATE_ARROW_SCHEMA.field(c) for c in _REPLAY_COLUMNS])
_PAYLOAD_SCHEMA = pa.schema([pa.field("kind", pa.string()), pa.field("data", pa.binary())])
_HISTORY_COLUMNS = [*KEY_COLUMNS, "offset", "timestamp", "record_type", "tombstone", "start_offset",
                    "delivery_complete_count"]
_I64_MIN = np.iinfo(np.int64).min


class ExportScan:
    """The committed files of an export, grouped into Spark tasks by state partition."""

    def __init__(self, spark, export_dir: str | Path, groups: list[str] | None = None) -> None:
        self.spark = spark
        self.export_dir = Path(export_dir)
        self.groups = list(groups) if groups else None
        content = committed(self.export_dir)
        # Rows below their state partition's floor (rebuilt from the log start) are not part of it.
        files = committed_files(self.export_dir, content)
        self.floor = floor_filter(self.export_dir, content)
        self.files = files
        self.tasks = self._plan(files, max(1, 2 * spark.sparkContext.defaultParallelism))

    @staticmethod
    def _plan(files: list[str], slots: int) -> list[list[str]]:
        """Files sharing a state partition in one group (by their footers' min/max of
        ``state_partition``; unknown: one group for all), groups packed into at most
        ``slots`` tasks by size, largest first."""
        spans = []
        for f in files:
            md = pq.ParquetFile(f).metadata
            if md.num_rows == 0:
                continue
            lo = hi = None
            col = md.schema.names.index("state_partition") if "state_partition" in md.schema.names else None
            for i in range(md.num_row_groups):
                st = md.row_group(i).column(col).statistics if col is not None else None
                if st is None or not st.has_min_max:
                    lo = hi = None
                    break
                lo = st.min if lo is None else min(lo, st.min)
                hi = st.max if hi is None else max(hi, st.max)
            if lo is None:
                lo, hi = -math.inf, math.inf
            spans.append((lo, hi, f, md.serialized_size + sum(md.row_group(i).total_byte_size
                                                               for i in range(md.num_row_groups))))
        spans.sort(key=lambda s: (s[0], s[1]))
        groups: list[tuple[list[str], int]] = []
        reach = None
        for lo, hi, f, size in spans:
            if groups and reach is not None and lo <= reach:
                groups[-1][0].append(f)
                groups[-1] = (groups[-1][0], groups[-1][1] + size)
                reach = max(reach, hi)
            else:
                groups.append(([f], size))
                reach = hi
        tasks: list[tuple[list[str], int]] = [([], 0) for _ in range(min(slots, len(groups)))]
        for fs, size in sorted(groups, key=lambda g: -g[1]):
            i = min(range(len(tasks)), key=lambda k: tasks[k][1])
            tasks[i] = (tasks[i][0] + fs, tasks[i][1] + size)
        return [fs for fs, _ in tasks if fs]

    # --- running a pass -----------------------------------------------------------------------------

    def _run(self, fn, schema: pa.Schema) -> DataFrame:
        return (self.spark.range(len(self.tasks), numPartitions=len(self.tasks))
                .mapInArrow(_Pass(fn, self.tasks, self.groups, self.floor), from_arrow_schema(schema)))

    def rows(self) -> DataFrame:
        """The committed rows as a DataFrame (``export.read_export``, group filter applied)."""
        from .export import read_export

        rows = read_export(self.spark, self.export_dir)
        return rows.where(F.col("group_id").isin(self.groups)) if self.groups else rows

    def fold(self, *, history: tuple[int, int] | None = None, delivery_count_limit: int | None = None,
             latest: bool = True) -> dict[str, pd.DataFrame]:
        """One pass computing, as pandas frames: ``latest`` (``latest_state(rows).toPandas()``),
        ``points`` with ``history=(bucket_ms, origin_ms)`` (``history_points(state_history(
        rows), ...).toPandas()``) and ``health`` with ``delivery_count_limit``
        (``delivery_health(rows, limit).toPandas()``)."""
        wanted = (["latest"] if latest else []) + (["points"] if history else []) + \
            (["health"] if delivery_count_limit is not None else [])
        tables: dict[str, list[pa.Table]] = {k: [] for k in wanted}
        if self.tasks:
            job = _FoldTask(wanted, history, delivery_count_limit)
            for r in self._run(job, _PAYLOAD_SCHEMA).collect():
                tables[r["kind"]].append(pa.ipc.open_stream(r["data"]).read_all())
        out: dict[str, pd.DataFrame] = {}
        if latest:
            found = pa.concat_tables(tables["latest"]) if tables["latest"] else _LATEST_CHECKED.empty_table()
            keys = found.select(["group_id", "topic_id", "partition"]).to_pandas()
            if found.num_rows and (pc.max(found["_state_partitions"]).as_py() > 1 or keys.duplicated().any()):
                # A share-partition under several state partitions: replay as latest_state does.
                tails = self._run(_tail_pass, _TAIL_SCHEMA)
                out["latest"] = tails.repartition(*KEY_COLUMNS).mapInArrow(replay_batches, LATEST_SCHEMA).toPandas()
            else:  # through Spark, for its pandas types (timestamps, nested batches)
                found = found.drop_columns(["_state_partitions"])
                out["latest"] = (self.spark.createDataFrame(found.to_pandas(), LATEST_SCHEMA).toPandas()
                                 if found.num_rows else self.spark.createDataFrame([], LATEST_SCHEMA).toPandas())
        if history:
            bucket_ms, origin_ms = history
            found = pa.concat_tables(tables["points"]) if tables["points"] else _POINTS_SCHEMA.empty_table()
            ordered = found.num_rows == 0 or pc.all(found["_ordered"]).as_py()
            if not self.tasks or not ordered:
                out["points"] = history_points(state_history(self.rows()), bucket_ms, origin_ms).toPandas()
            else:
                out["points"] = found.drop_columns(["_ordered"]).to_pandas()
        if delivery_count_limit is not None:
            if not self.tasks:
                out["health"] = delivery_health(self.rows(), delivery_count_limit).toPandas()
            else:
                found = pa.concat_tables(tables["health"]) if tables["health"] else _HEALTH_SCHEMA.empty_table()
                out["health"] = found.to_pandas()
        return out

    def latest_state(self) -> pd.DataFrame:
        """``fold.latest_state(rows).toPandas()``."""
        return self.fold()["latest"]

    def history_points(self, bucket_ms: int, origin_ms: int) -> pd.DataFrame:
        """``fold.history_points(fold.state_history(rows), bucket_ms, origin_ms).toPandas()``."""
        return self.fold(latest=False, history=(bucket_ms, origin_ms))["points"]

    def delivery_health(self, delivery_count_limit: int) -> pd.DataFrame:
        """``fold.delivery_health(rows, delivery_count_limit).toPandas()``."""
        return self.fold(latest=False, delivery_count_limit=delivery_count_limit)["health"]


class _FoldTask:
    """What one task of ``ExportScan.fold`` computes over its rows: Arrow IPC streams."""

    def __init__(self, wanted: list[str], history, delivery_count_limit) -> None:
        self.wanted, self.history, self.limit = wanted, history, delivery_count_limit

    def __call__(self, files: _Files) -> Iterator[pa.RecordBatch]:
        columns = set(KEY_COLUMNS)
        if "latest" in self.wanted:
            columns |= set(_REPLAY_COLUMNS)
        if "points" in self.wanted:
            columns |= set(_HISTORY_COLUMNS)
        if "health" in self.wanted:
            columns |= {"tombstone", "state_batches"}
        rows = _Rows(files.read([c for c in STATE_ARROW_SCHEMA.names if c in columns]))
        for kind in self.wanted:
            if kind == "latest":
                batches = list(_latest(rows))
            elif kind == "points":
                batches = list(_history(rows, *self.history))
            else:
                batches = list(_health(rows, self.limit))
            if not batches:
                continue
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, batches[0].schema) as w:
                for b in batches:
                    w.write_batch(b)
            yield pa.RecordBatch.from_pydict({"kind": [kind], "data": [sink.getvalue().to_pybytes()]},
                                             schema=_PAYLOAD_SCHEMA)


class _Rows:
    """One task's rows and their (state partition, key) ids."""

    def __init__(self, t: pa.Table) -> None:
        self.t = t
        self.kid, self.keys, self.key_row = _key_ids(t) if t.num_rows else (np.zeros(0, np.int64), 0,
                                                                               np.zeros(0, np.int64))


class _Pass:
    """``mapInArrow`` body: for each task index, read its files and run ``fn`` on them."""

    def __init__(self, fn, tasks: list[list[str]], groups: list[str] | None, floor=None) -> None:
        self.fn, self.tasks, self.groups, self.floor = fn, tasks, groups, floor

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for i in batch.column(0).to_pylist():
                yield from self.fn(_Files(self.tasks[i], self.groups, self.floor))


class _Files:
    """One task's files: read a few columns of all of them as one table (the rows at or above
    their state partition's floor, of the groups asked for)."""

    def __init__(self, files: list[str], groups: list[str] | None, floor=None) -> None:
        self.files, self.groups, self.floor = files, groups, floor

    def read(self, columns: list[str]) -> pa.Table:
        cols = list(dict.fromkeys([*columns, "group_id"] if self.groups else columns))
        if self.floor is not None:
            cols = list(dict.fromkeys([*cols, "state_partition", "offset"]))
        want = pa.schema([STATE_ARROW_SCHEMA.field(c) for c in cols])
        tables = []
        for f in self.files:
            part = pq.read_table(f, columns=cols)
            tables.append(part if part.schema.equals(want) else part.cast(want))  # e.g. Spark's INT96 timestamps
        t = pa.concat_tables(tables).combine_chunks() if tables else want.empty_table()
        if self.floor is not None:
            t = t.filter(self.floor)
        if self.groups:
            t = t.filter(pc.is_in(t["group_id"], pa.array(self.groups, pa.string())))
        return t.select(columns)


def _factorize(*columns: np.ndarray) -> tuple[np.ndarray, int]:
    """Ids 0..k-1 of the distinct tuples of ``columns`` (non-negative integers), numbered in
    order of first appearance: (ids, k)."""
    packed = np.zeros(len(columns[0]), dtype=np.int64)
    room = 1
    for c in columns:
        c = c.astype(np.int64, copy=False)
        lo = int(c.min()) if len(c) else 0
        width = (int(c.max()) - lo + 1) if len(c) else 1
        if room * width >= (1 << 62):  # too wide to pack: number the tuples as they are
            ids, uniques = pd.MultiIndex.from_arrays(list(columns)).factorize()
            return ids.astype(np.int64), len(uniques)
        packed = packed * width + (c - lo)
        room *= width
    ids, uniques = pd.factorize(packed)
    return ids.astype(np.int64), len(uniques)


def _key_ids(t: pa.Table) -> tuple[np.ndarray, int, np.ndarray]:
    """Each row's (state partition, key) id, the number of keys, and each key's first row."""
    g = pc.dictionary_encode(t["group_id"]).combine_chunks().indices.to_numpy()
    tp = pc.dictionary_encode(t["topic_id"]).combine_chunks().indices.to_numpy()
    kid, k = _factorize(t["state_partition"].to_numpy(), g, tp, t["partition"].to_numpy())
    first = np.ones(len(kid), dtype=bool)  # ids are numbered by first appearance
    if len(kid) > 1:
        first[1:] = kid[1:] > np.maximum.accumulate(kid)[:-1]
    return kid, k, np.flatnonzero(first)


# --- latest state -----------------------------------------------------------------------------------

def _tail_rows(rows: _Rows) -> pa.Table:
    """Every key's rows from its last snapshot or tombstone on (all its rows if it has none)."""
    t = rows.t
    if not t.num_rows:
        return t.select(_REPLAY_COLUMNS)
    offsets = t["offset"].to_numpy()
    reset = (pc.equal(t["record_type"], SNAPSHOT).to_numpy(zero_copy_only=False)
             | t["tombstone"].to_numpy(zero_copy_only=False))
    last_reset = np.full(rows.keys, _I64_MIN, dtype=np.int64)
    np.maximum.at(last_reset, rows.kid[reset], offsets[reset])
    return t.select(_REPLAY_COLUMNS).filter(pa.array(offsets >= last_reset[rows.kid]))


def _tail_pass(files: _Files) -> Iterator[pa.RecordBatch]:
    yield from _tail_rows(_Rows(files.read(_REPLAY_COLUMNS))).to_batches(max_chunksize=1 << 16)


def _latest(rows: _Rows) -> Iterator[pa.RecordBatch]:
    tail = _tail_rows(rows)
    if not tail.num_rows:
        return
    out = replay_table(tail)
    if out is None:
        return
    # How many state partitions each share-partition's rows came from.
    counts = (pa.table({"g": tail["group_id"], "t": tail["topic_id"], "p": tail["partition"],
                        "sp": tail["state_partition"]})
              .group_by(["g", "t", "p"]).aggregate([("sp", "count_distinct")]).to_pydict())
    seen = {(g, t, p): n for g, t, p, n in zip(counts["g"], counts["t"], counts["p"], counts["sp_count_distinct"])}
    n_sps = [seen[k] for k in zip(out.column("group_id").to_pylist(), out.column("topic_id").to_pylist(),
                                  out.column("partition").to_pylist())]
    yield pa.RecordBatch.from_arrays([*out.columns, pa.array(n_sps, pa.int32())], schema=_LATEST_CHECKED)


# --- lag history ------------------------------------------------------------------------------------

def _history(rows: _Rows, bucket_ms: int, origin_ms: int) -> Iterator[pa.RecordBatch]:
    t = rows.t
    n = t.num_rows
    if not n:
        return
    # Spark's (timestamp cast double * 1000) cast long, and floor((ms - origin) / bucket).
    micros = t["timestamp"].cast(pa.int64()).to_numpy()
    ts_ms = ((micros / 1e6) * 1000).astype(np.int64)
    bucket = np.floor((ts_ms - origin_ms) / bucket_ms).astype(np.int64)
    off = t["offset"].to_numpy()
    kid = rows.kid
    gid, m = _factorize(kid, bucket - bucket.min())
    rows = np.arange(n)
    # Per (key, bucket): first and last offset, the last record, the last snapshot or
    # tombstone, the last record with a start offset ("last": by offset, unique in a key).
    g_min = np.full(m, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(g_min, gid, off)
    g_max = np.full(m, _I64_MIN, dtype=np.int64)
    np.maximum.at(g_max, gid, off)
    g_last = np.zeros(m, dtype=np.int64)
    at_max = off == g_max[gid]
    g_last[gid[at_max]] = rows[at_max]
    tomb = t["tombstone"].to_numpy(zero_copy_only=False)
    reset = tomb | pc.equal(t["record_type"], SNAPSHOT).to_numpy(zero_copy_only=False)
    g_reset = np.full(m, _I64_MIN, dtype=np.int64)
    np.maximum.at(g_reset, gid[reset], off[reset])
    start_col = t["start_offset"]
    start_val = start_col.fill_null(-1).to_numpy()
    started = start_col.is_valid().to_numpy(zero_copy_only=False) & (start_val != -1)
    g_started_at = np.full(m, _I64_MIN, dtype=np.int64)
    np.maximum.at(g_started_at, gid[started], off[started])
    g_started = np.full(m, -1, dtype=np.int64)
    at_started = started & (off == g_started_at[gid])
    g_started[gid[at_started]] = rows[at_started]
    dcc_col = t["delivery_complete_count"]
    dcc_null = ~dcc_col.is_valid().to_numpy(zero_copy_only=False)
    dcc = dcc_col.fill_null(0).to_numpy()
    # The buckets in (key, bucket) order, carried forward per key.
    g_kid, g_bucket = kid[g_last], bucket[g_last]
    order = np.lexsort((g_bucket, g_kid))
    g_kid, g_bucket, g_min, g_max = g_kid[order], g_bucket[order], g_min[order], g_max[order]
    g_last, g_reset, g_started_at, g_started = g_last[order], g_reset[order], g_started_at[order], g_started[order]
    first_bucket = np.ones(m, dtype=bool)
    first_bucket[1:] = g_kid[1:] != g_kid[:-1]
    run_reset = _running_max(g_reset, first_bucket)
    run_started_at = _running_max(g_started_at, first_bucket)
    # the row of the key's last record with a start offset so far
    pos = np.where(g_started >= 0, np.arange(m), -1)
    run_pos = _running_max(pos, first_bucket)
    run_started = np.where(run_pos >= 0, g_started[np.maximum(run_pos, 0)], -1)
    has_start = (run_started >= 0) & ((run_reset == _I64_MIN) | (run_started_at >= run_reset))
    start = np.where(has_start, start_val[np.maximum(run_started, 0)], -1)
    deleted = tomb[g_last]
    prev_max = np.concatenate(([_I64_MIN], g_max[:-1]))
    ordered = first_bucket | (prev_max < g_min)
    at_ms = (g_bucket + 1) * bucket_ms + origin_ms
    keys = t.select(KEY_COLUMNS).take(pa.array(g_last))
    yield pa.RecordBatch.from_arrays([
        *(keys[c].combine_chunks() for c in KEY_COLUMNS),
        pa.array(at_ms, pa.int64()),
        pa.array(start, pa.int64(), mask=deleted),
        pa.array(dcc[g_last].astype(np.int32), pa.int32(), mask=dcc_null[g_last] | deleted),
        pa.array(g_max, pa.int64()),
        pa.array(ordered),
    ], schema=_POINTS_SCHEMA)


def _running_max(values: np.ndarray, restart: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` that starts over where ``restart`` is set."""
    if not len(values):
        return values
    segment = np.cumsum(restart) - 1
    lo, hi = int(values.min()), int(values.max())
    span = hi - lo + 1
    if span * (int(segment[-1]) + 1) < (1 << 62):
        # Lift each segment above all earlier ones: one accumulate over the whole array.
        lifted = (values - lo) + segment * span
        return np.maximum.accumulate(lifted) - segment * span + lo
    return pd.Series(values).groupby(segment).cummax().to_numpy()


# --- delivery health --------------------------------------------------------------------------------

def _class_order(cls: np.ndarray, n_cls: int, f: np.ndarray, l: np.ndarray) -> np.ndarray:
    """The order of rows by (class, f, l). A class's batches mostly come in offset order
    already, so: a radix sort by class, then a stable (run-aware) sort by (class, f), which
    is the answer unless rows equal in (class, f) are out of order in l."""
    f_lo, f_span = int(f.min()), int(f.max()) - int(f.min()) + 1
    if n_cls * f_span >= (1 << 62):
        return np.lexsort((l, f, cls))
    packed = cls * f_span + (f - f_lo)
    if n_cls >= 1 << 16:
        return np.lexsort((l, packed))
    by_class = np.argsort(cls.astype(np.uint16), kind="stable")
    order = by_class[np.argsort(packed[by_class], kind="stable")]
    p, last = packed[order], l[order]
    if np.any((p[1:] == p[:-1]) & (last[1:] < last[:-1])):
        return np.lexsort((l, packed))
    return order


def _health(rows: _Rows, delivery_count_limit: int) -> Iterator[pa.RecordBatch]:
    t = rows.t
    if not t.num_rows:
        return
    lists = t["state_batches"].combine_chunks()
    lengths = pc.list_value_length(lists).fill_null(0).to_numpy(zero_copy_only=False)  # explode skips nulls
    flat = pc.list_flatten(lists)
    s = flat.field("delivery_state").to_numpy()
    live = ~t["tombstone"].to_numpy(zero_copy_only=False)
    terminal = ((s == ACKNOWLEDGED) | (s == ARCHIVED)) & np.repeat(live, lengths)
    if not terminal.any():
        return
    kid = np.repeat(rows.kid, lengths)[terminal]
    f = flat.field("first_offset").to_numpy()[terminal]
    l = flat.field("last_offset").to_numpy()[terminal]
    s = s[terminal].astype(np.int64)
    c = flat.field("delivery_count").to_numpy()[terminal].astype(np.int64)
    # Classes (key, state, count); each class's key, state and count by its id.
    cls, n_cls = _factorize(kid, s, c - c.min())
    first = np.ones(len(cls), dtype=bool)
    if len(cls) > 1:
        first[1:] = cls[1:] > np.maximum.accumulate(cls)[:-1]
    at = np.flatnonzero(first)
    cls_key, cls_state, cls_count = kid[at], s[at], c[at]
    # distinct (class, f, l), ordered by class and then (f, l)
    order = _class_order(cls, n_cls, f, l)
    cls, f, l = cls[order], f[order], l[order]
    keep = np.ones(len(cls), dtype=bool)
    keep[1:] = (cls[1:] != cls[:-1]) | (f[1:] != f[:-1]) | (l[1:] != l[:-1])
    if not keep.all():
        cls, f, l = cls[keep], f[keep], l[keep]
    new_class = np.ones(len(cls), dtype=bool)
    new_class[1:] = cls[1:] != cls[:-1]
    # Islands as the window query finds them: a row starts one unless its first offset is
    # within the largest last offset of the rows before it in its class.
    reach = np.concatenate(([_I64_MIN], _running_max(l, new_class)[:-1]))
    island_starts = np.flatnonzero(new_class | (f > reach))
    size = np.maximum.reduceat(l, island_starts) - np.minimum.reduceat(f, island_starts) + 1
    icls = cls[island_starts]
    ik, is_, ic = cls_key[icls], cls_state[icls], cls_count[icls]
    zero = np.zeros(len(size), dtype=np.int64)
    parts = {
        "acknowledged": np.where(is_ == ACKNOWLEDGED, size, zero),
        "archived_rejected": np.where((is_ == ARCHIVED) & (ic < delivery_count_limit), size, zero),
        "archived_delivery_limit": np.where((is_ == ARCHIVED) & (ic >= delivery_count_limit), size, zero),
        "redelivered": np.where(ic > 1, size, zero),
        "redeliveries": np.where(ic > 1, size * (ic - 1), zero),
    }
    keys = np.unique(ik)
    sums = {}
    for name, v in parts.items():
        total = np.zeros(rows.keys, dtype=np.int64)
        np.add.at(total, ik, v)
        sums[name] = total[keys]
    key_cols = t.select(KEY_COLUMNS).take(pa.array(rows.key_row[keys]))
    yield pa.RecordBatch.from_arrays([*(key_cols[name].combine_chunks() for name in KEY_COLUMNS),
                                      *(pa.array(sums[name], pa.int64()) for name in _HEALTH_SCHEMA.names[4:])],
                                     schema=_HEALTH_SCHEMA)
