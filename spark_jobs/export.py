"""Incremental export of ``__share_group_state`` to a Parquet dataset of typed state rows.

Layout of the export directory (a local path)::

    DIR/_kshare_export.json   the commit: topic, committed runs, next offset per state partition
    DIR/run-00001/            Parquet files of one run (rows of ``state_rows.STATE_SCHEMA``)
    DIR/run-00002/ ...

A run reads each state partition from its recorded next offset (or its log start) up to the
log end offset taken when the run starts, writes the rows to a temporary directory, renames it
into place and only then rewrites the JSON file (atomically). A run that dies half-way leaves
no committed rows: its directory is not listed and is removed by the next run, which reads the
same offsets again. Records the share coordinator pruned before they were exported (its log
start moved past the recorded offset) are gone; the run starts at the log start and reports
how many offsets it skipped.

The rows are read as ``spark.read.format("kshare-share-state")`` reads them (the same input
partitions, one Spark task each, decoded column-wise into Arrow), and each task writes its
own Parquet file with pyarrow, so the rows never become JVM rows (see ``_write_parquet``).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from protocol.coordinator_serde import SHARE_GROUP_STATE_TOPIC
from protocol.errors import ErrorCode, KafkaError

from .kafka_io import Cluster
from .source import plan_ranges, read_state_range, source_options
from .state_rows import STATE_ARROW_SCHEMA, STATE_SCHEMA

__all__ = ["COMMIT_FILE", "ExportResult", "export_share_state", "read_export", "committed"]

COMMIT_FILE = "_kshare_export.json"
ROW_GROUP_ROWS = 1 << 17  # rows per Parquet row group of an export file
# Columns with few distinct values, dictionary-encoded; offsets, timestamps and the batches
# are stored plain (cheaper to write, and to read back in Spark's vectorised reader).
_DICTIONARY_COLUMNS = ["state_partition", "record_type", "tombstone", "group_id", "topic_id", "partition",
                       "snapshot_epoch", "state_epoch", "leader_epoch"]


@dataclass
class ExportResult:
    run: str | None                    # the run this call committed, None if nothing was new
    records: int                       # rows it wrote
    next_offsets: dict[int, int]       # state partition -> next offset to export
    skipped_offsets: int = 0           # offsets pruned from the topic before they were exported
    runs: list[str] = field(default_factory=list)  # every committed run


def committed(out_dir: str | os.PathLike) -> dict:
    """The commit file's content ({} before the first run)."""
    path = Path(out_dir) / COMMIT_FILE
    if not path.exists():
        return {}
    return json.loads(path.read_text())


def _commit(out_dir: Path, content: dict) -> None:
    tmp = out_dir / (COMMIT_FILE + ".tmp")
    tmp.write_text(json.dumps(content, indent=1, sort_keys=True))
    os.replace(tmp, out_dir / COMMIT_FILE)


def export_share_state(spark, bootstrap: str, out_dir: str | os.PathLike, *,
                       topic: str = SHARE_GROUP_STATE_TOPIC, max_offsets_per_split: int | None = None,
                       min_partitions: int | None = None) -> ExportResult:
    """Export the state records not exported yet; see the module docstring."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = committed(out) or {"topic": topic, "runs": [], "next_offsets": {}}
    if state["topic"] != topic:
        raise ValueError(f"{out} holds an export of {state['topic']!r}, not {topic!r}")
    runs = list(state["runs"])
    for stale in out.glob("_tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    for d in out.glob("run-*"):
        if d.name not in runs:  # written but never committed
            shutil.rmtree(d, ignore_errors=True)
    next_offsets = {int(p): o for p, o in state["next_offsets"].items()}
    try:
        with Cluster(bootstrap) as cluster:
            earliest, latest = cluster.offset_bounds(topic)
    except KafkaError as e:
        if e.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:  # no share group has stored state yet
            return ExportResult(None, 0, next_offsets, 0, runs)
        raise
    start, skipped = {}, 0
    for p in latest:
        begin = next_offsets.get(p, earliest[p])
        if begin < earliest[p]:
            skipped += earliest[p] - begin
            begin = earliest[p]
        start[p] = min(begin, latest[p])
    if all(start[p] >= latest[p] for p in latest):
        return ExportResult(None, 0, {**next_offsets, **latest}, skipped, runs)
    run = f"run-{len(runs) + 1:05d}"
    tmp = out / f"_tmp-{run}"
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
               "startingOffsets": json.dumps({topic: {str(p): o for p, o in start.items()}}),
               "endingOffsets": json.dumps({topic: {str(p): o for p, o in latest.items()}})}
    if max_offsets_per_split:
        options["maxOffsetsPerSplit"] = str(max_offsets_per_split)
    if min_partitions:
        options["minPartitions"] = str(min_partitions)
    records = _write_parquet(spark, source_options(options), tmp)
    os.replace(tmp, out / run)
    runs.append(run)
    next_offsets.update(latest)
    _commit(out, {"topic": topic, "runs": runs, "next_offsets": {str(p): o for p, o in sorted(next_offsets.items())}})
    return ExportResult(run, records, next_offsets, skipped, runs)


def _write_parquet(spark, opts, tmp: Path) -> int:
    """Read the planned ranges of ``kshare-share-state`` and write their rows to Parquet
    files in ``tmp`` (created; must not exist); returns the rows written.

    The same read as ``spark.read.format("kshare-share-state")...load().write.parquet(tmp)``
    (the same input partitions, the same rows), but each input partition's rows are written
    to their own file with pyarrow from the Arrow batches decoded, so the rows never become
    JVM rows: Spark's Arrow-to-row conversion and row-wise Parquet writer cost ten times the
    decoding. Input partitions smaller than ``maxOffsetsPerSplit`` share a Spark task (a
    task costs tens of milliseconds of scheduling and Python worker round trips), keeping at
    least ``minPartitions`` tasks and one per core. A file is named by its input partition and
    the task attempt; only the files of the attempts Spark reports as done are kept."""
    ranges = plan_ranges(opts)
    tmp.mkdir()
    if not ranges:
        return 0
    tasks = _pack(ranges, opts.max_offsets_per_split,
                  max(opts.min_partitions or 0, spark.sparkContext.defaultParallelism))
    done = (spark.range(len(tasks), numPartitions=len(tasks))
            .mapInArrow(_ParquetTask(opts, ranges, tasks, str(tmp)), "file string, rows long").collect())
    keep = {r["file"] for r in done}
    for f in tmp.iterdir():
        if f.name not in keep:  # a failed attempt's leftovers
            f.unlink()
    return sum(r["rows"] for r in done)


def _pack(ranges, capacity: int, min_tasks: int) -> list[list[int]]:
    """Range indices per task: as many tasks as ``capacity`` offsets each need (and at least
    ``min_tasks``, at most one per range), filled largest range first into the emptiest."""
    total = sum(r.size for r in ranges)
    n = min(len(ranges), max(1, min_tasks, -(-total // max(1, capacity))))
    tasks: list[list[int]] = [[] for _ in range(n)]
    load = [0] * n
    for i in sorted(range(len(ranges)), key=lambda i: -ranges[i].size):
        k = min(range(n), key=load.__getitem__)
        tasks[k].append(i)
        load[k] += ranges[i].size
    return [sorted(t) for t in tasks if t]


class _ParquetTask:
    """``mapInArrow`` body of ``_write_parquet``: for each task index, read and write the
    files of its ranges."""

    def __init__(self, opts, ranges, tasks: list[list[int]], directory: str) -> None:
        self.opts, self.ranges, self.tasks, self.directory = opts, ranges, tasks, directory

    def __call__(self, batches):
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyspark import TaskContext

        ctx = TaskContext.get()
        attempt = ctx.attemptNumber() if ctx is not None else 0
        for batch in batches:
            for i in (i for task in batch.column(0).to_pylist() for i in self.tasks[task]):
                name = f"part-{i:05d}-{attempt}.parquet"
                rows = 0
                with pq.ParquetWriter(os.path.join(self.directory, name), STATE_ARROW_SCHEMA,
                                      use_dictionary=_DICTIONARY_COLUMNS) as w:
                    pending: list = []
                    for b in read_state_range(self.opts, self.ranges[i]):
                        pending.append(b)
                        rows += b.num_rows
                        if sum(x.num_rows for x in pending) >= ROW_GROUP_ROWS:
                            w.write_table(pa.Table.from_batches(pending), row_group_size=ROW_GROUP_ROWS)
                            pending = []
                    if pending:
                        w.write_table(pa.Table.from_batches(pending), row_group_size=ROW_GROUP_ROWS)
                yield pa.RecordBatch.from_pydict({"file": [name], "rows": [rows]})


def read_export(spark, out_dir: str | os.PathLike):
    """The committed rows of an export as one DataFrame (empty before the first run)."""
    out = Path(out_dir)
    runs = committed(out).get("runs", [])
    if not runs:
        return spark.createDataFrame([], STATE_SCHEMA)
    return spark.read.schema(STATE_SCHEMA).parquet(*[str(out / r) for r in runs])
