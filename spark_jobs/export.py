"""Incremental export of ``__share_group_state`` to a Parquet dataset of typed state rows.

Layout of the export directory (a local path)::

    DIR/_kshare_export.json   the commit: topic, cluster id, the state topic's id, committed runs,
                              next offset and floor per state partition
    DIR/run-00001/            Parquet files of one run (rows of ``state_rows.STATE_SCHEMA``;
    DIR/run-00002/ ...        one file per planned range, so per state partition)

A run reads each state partition from its recorded next offset (or its log start) up to the
log end offset taken when the run starts, writes the rows to a temporary directory, renames it
into place and only then rewrites the JSON file (atomically). A run that dies half-way leaves
no committed rows: its directory is not listed and is removed by the next run, which reads the
same offsets again.

The share coordinator prunes its partitions: it moves the log start up to the oldest record a
live key still needs (its latest ShareSnapshot), and a deleted key (its tombstone, written by
DeleteShareGroupState) drops out of that computation, so the tombstone itself goes too. Records
below the log start are therefore redundant for a reader that starts there, but not for one
that kept rows from before: if the log start moved past a partition's recorded next offset,
the tombstones in between may be gone and the rows kept from earlier runs could resurrect
deleted share-partitions. That partition is then rebuilt from the log start: its floor (in the
commit) is set to the log start, and rows of a state partition below its floor are not part of
the export (readers filter them out; the run that moves a floor deletes the files wholly below
it).
Other state partitions keep their rows. The same happens when the log start moves while a run
reads (a fetch answers OFFSET_OUT_OF_RANGE below the new log start): the partition's files of
this run are dropped and it is planned again from the new log start to its log end now (the
snapshots that let the coordinator prune may lie past the planned end), a bounded number of times.
A fetch out of range for any other reason still fails the run (``DataLossError``).

The commit records the cluster id (Metadata's ClusterId) and the state topic's id. A run
against another cluster, or a state topic deleted and created again, starts a fresh export
(the old runs are dropped once the new commit is in place). A commit file without them (written
before they were recorded) is kept, and they are recorded from then on.

The rows are read as ``spark.read.format("kshare-share-state")`` reads them (the same input
partitions, one Spark task each, decoded column-wise into Arrow), and each task writes its
own Parquet file with pyarrow, so the rows never become JVM rows (see ``_write_parquet``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from protocol.coordinator_serde import SHARE_GROUP_STATE_TOPIC
from protocol.errors import ErrorCode, KafkaError
from protocol.uuids import uuid_to_str

from .kafka_io import Cluster, DataLossError, LogStartMovedError
from .offsets import OffsetRange, split_ranges
from .source import read_state_range, source_options
from .state_rows import STATE_ARROW_SCHEMA, STATE_SCHEMA

__all__ = ["COMMIT_FILE", "ExportResult", "export_share_state", "read_export", "committed", "committed_files",
           "floor_filter", "floor_condition", "MAX_REPLANS"]

log = logging.getLogger(__name__)

COMMIT_FILE = "_kshare_export.json"
ROW_GROUP_ROWS = 1 << 17  # rows per Parquet row group of an export file
MAX_REPLANS = 5  # times a run plans a partition again after its log start moved under the read
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
    # state partition -> the log start it was rebuilt from (records between the recorded next
    # offset and the log start were pruned, or the log start moved during the read)
    rebuilt: dict[int, int] = field(default_factory=dict)
    fresh: str | None = None           # why the earlier export was dropped (another cluster / topic)
    cluster_id: str | None = None

    def notes(self) -> list[str]:
        """What a report should tell its reader about this export."""
        out = []
        if self.fresh:
            out.append(f"Started a fresh export: {self.fresh}.")
        if self.rebuilt:
            parts = ", ".join(f"{p} (from offset {o})" for p, o in sorted(self.rebuilt.items()))
            out.append(f"Rebuilt state partition(s) {parts}: the share coordinator pruned records "
                       "that were not exported yet.")
        return out


def committed(out_dir: str | os.PathLike) -> dict:
    """The commit file's content ({} before the first run)."""
    path = Path(out_dir) / COMMIT_FILE
    if not path.exists():
        return {}
    return json.loads(path.read_text())


def _floors(content: dict) -> dict[int, int]:
    return {int(p): int(o) for p, o in content.get("floors", {}).items()}


def _below_floor(path: Path, floors: dict[int, int]) -> bool:
    """Whether the footer shows every row of the file is of one state partition and below its
    floor (unknown: False, and the rows are filtered instead)."""
    md = pq.ParquetFile(path).metadata
    names = md.schema.names
    if md.num_rows == 0:
        return True
    if "state_partition" not in names or "offset" not in names:
        return False
    sp_col, off_col = names.index("state_partition"), names.index("offset")
    sps, top = set(), None
    for i in range(md.num_row_groups):
        sp, off = md.row_group(i).column(sp_col).statistics, md.row_group(i).column(off_col).statistics
        if sp is None or off is None or not sp.has_min_max or not off.has_min_max or sp.min != sp.max:
            return False
        sps.add(sp.min)
        top = off.max if top is None else max(top, off.max)
    return len(sps) == 1 and (p := next(iter(sps))) in floors and top < floors[p]


def committed_files(out_dir: str | os.PathLike, content: dict | None = None) -> list[str]:
    """The Parquet files of the committed runs. Their rows below a floor are left out by
    ``floor_filter`` / ``floor_condition``; files wholly below one were deleted by the run that
    moved it (``_remove_dead``), so readers do not look at footers."""
    out = Path(out_dir)
    content = committed(out) if content is None else content
    return [str(f) for run in content.get("runs", []) for f in sorted((out / run).iterdir())
            if f.suffix == ".parquet" and not f.name.startswith(("_", "."))]


def floor_filter(out_dir: str | os.PathLike, content: dict | None = None):
    """A pyarrow expression keeping the rows at or above their state partition's floor (None
    when there is no floor)."""
    floors = _floors(committed(out_dir) if content is None else content)
    keep = None
    for p, o in sorted(floors.items()):
        cond = ~((pc.field("state_partition") == p) & (pc.field("offset") < o))
        keep = cond if keep is None else keep & cond
    return keep


def floor_condition(out_dir: str | os.PathLike, content: dict | None = None) -> str | None:
    """``floor_filter`` as a Spark SQL condition."""
    floors = _floors(committed(out_dir) if content is None else content)
    if not floors:
        return None
    return " AND ".join(f"NOT (state_partition = {p} AND offset < {o})" for p, o in sorted(floors.items()))


def _commit(out_dir: Path, content: dict) -> None:
    tmp = out_dir / (COMMIT_FILE + ".tmp")
    tmp.write_text(json.dumps(content, indent=1, sort_keys=True))
    os.replace(tmp, out_dir / COMMIT_FILE)


def plan_state_ranges(opts, start: dict[int, int], end: dict[int, int]) -> list[OffsetRange]:
    """The input partitions of ``[start[p], end[p])`` of the state topic."""
    topic = opts.topics[0]
    ranges = [OffsetRange(topic, p, start[p], end[p]) for p in sorted(end)]
    return split_ranges(ranges, opts.max_offsets_per_split, opts.min_partitions)


def export_share_state(spark, bootstrap: str, out_dir: str | os.PathLike, *,
                       topic: str = SHARE_GROUP_STATE_TOPIC, max_offsets_per_split: int | None = None,
                       min_partitions: int | None = None) -> ExportResult:
    """Export the state records not exported yet; see the module docstring."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    previous = committed(out)
    state = previous or {"topic": topic, "runs": [], "next_offsets": {}}
    if state["topic"] != topic:
        raise ValueError(f"{out} holds an export of {state['topic']!r}, not {topic!r}")
    old_runs = list(state["runs"])
    for stale in out.glob("_tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    for d in out.glob("run-*"):
        if d.name not in old_runs:  # written but never committed
            shutil.rmtree(d, ignore_errors=True)
    with Cluster(bootstrap) as cluster:
        cluster_id = cluster.cluster_id()
        try:
            earliest, latest = cluster.offset_bounds(topic)
            tid = cluster.topic(topic).topic_id
            topic_id = uuid_to_str(tid) if tid is not None and tid.int else None  # no ids before Metadata v10
        except KafkaError as e:
            if e.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:  # else: no share group has stored state yet
                raise
            earliest, latest, topic_id = {}, {}, None
        fresh = _why_fresh(state, cluster_id, topic_id)
        if fresh:
            log.warning("%s: %s; starting a fresh export (the rows exported before are dropped)", out, fresh)
            state = {"topic": topic, "runs": [], "next_offsets": {}}
        runs = list(state["runs"])
        next_offsets = {int(p): o for p, o in state["next_offsets"].items()}
        floors = _floors(state)
        start, skipped, rebuilt = {}, 0, {}
        for p in latest:
            begin = next_offsets.get(p, earliest[p])
            if begin < earliest[p]:
                # Pruned before we read them: maybe a tombstone of a key whose rows we kept.
                skipped += earliest[p] - begin
                begin = rebuilt[p] = floors[p] = earliest[p]
            start[p] = min(begin, latest[p])
        end = dict(latest)
        run, records = None, 0
        if any(start[p] < end[p] for p in end):
            run = f"run-{_next_run_number(out, runs):05d}"
            tmp = out / f"_tmp-{run}"
            options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}
            if max_offsets_per_split:
                options["maxOffsetsPerSplit"] = str(max_offsets_per_split)
            if min_partitions:
                options["minPartitions"] = str(min_partitions)
            opts = source_options(options)
            tmp.mkdir()
            written: dict[str, tuple[int, int]] = {}  # file -> (state partition, rows)
            todo = plan_state_ranges(opts, start, end)
            for round_ in range(MAX_REPLANS + 1):
                files, moved = _write_parquet(spark, opts, todo, tmp, round_)
                written.update(files)
                if not moved:
                    break
                if round_ == MAX_REPLANS:
                    raise DataLossError(f"{topic}: the log start of partition(s) {sorted(moved)} kept moving "
                                        f"while {MAX_REPLANS + 1} reads ran")
                # The log start moved under the read: drop what this run has of those
                # partitions and read them again from the new log start.
                for f, (p, _rows) in list(written.items()):
                    if p in moved:
                        (tmp / f).unlink(missing_ok=True)
                        del written[f]
                now, now_end = cluster.offset_bounds(topic)
                log.info("%s: the log start of partition(s) %s moved during the read; reading them again",
                         topic, sorted(moved))
                for p in moved:
                    start[p] = rebuilt[p] = floors[p] = max(now[p], moved[p])
                    # To the log end now: the prune followed snapshots written after the
                    # planned end, and the keys' state is in them.
                    end[p] = max(end[p], now_end[p], start[p])
                todo = plan_state_ranges(opts, {p: start[p] for p in moved}, {p: end[p] for p in moved})
            records = sum(rows for _p, rows in written.values())
            if written:
                os.replace(tmp, out / run)
                runs.append(run)
            else:
                shutil.rmtree(tmp, ignore_errors=True)
                run = None
        next_offsets.update(end)
    content = {"topic": topic, "runs": runs, "next_offsets": {str(p): o for p, o in sorted(next_offsets.items())}}
    if floors:
        content["floors"] = {str(p): o for p, o in sorted(floors.items())}
    cluster_id = cluster_id or state.get("cluster_id")
    topic_id = topic_id or state.get("topic_id")
    if cluster_id:
        content["cluster_id"] = cluster_id
    if topic_id:
        content["topic_id"] = topic_id
    if content != previous:
        _commit(out, content)
    _remove_dead(out, content, old_runs, floors_moved=bool(rebuilt))
    return ExportResult(run, records, next_offsets, skipped, runs, rebuilt, fresh, cluster_id)


def _why_fresh(state: dict, cluster_id: str | None, topic_id: str | None) -> str | None:
    """Why the committed export cannot be continued (None: it can)."""
    if not state.get("runs") and not state.get("next_offsets"):
        return None
    was = state.get("cluster_id")
    if was and cluster_id and was != cluster_id:
        return f"the cluster id is {cluster_id}, the export was made from cluster {was}"
    was = state.get("topic_id")
    if was and topic_id and was != topic_id:
        return f"{state['topic']} has topic id {topic_id}, the export was made from topic id {was}"
    return None


def _next_run_number(out: Path, runs: list[str]) -> int:
    """One above every run directory there is (a fresh export's runs must not reuse a name
    still on disk)."""
    numbers = [int(n[4:]) for n in [*runs, *(d.name for d in out.glob("run-*"))] if n[4:].isdigit()]
    return max(numbers, default=0) + 1


def _remove_dead(out: Path, content: dict, old_runs: list[str], floors_moved: bool) -> None:
    """After a commit: remove the runs it no longer lists and, when a floor moved, the files
    wholly below a floor (readers filter their rows out already; this frees the space and the
    reads; a run that set no floor does not look at the footers)."""
    runs = set(content["runs"])
    for r in old_runs:
        if r not in runs:
            shutil.rmtree(out / r, ignore_errors=True)
    floors = _floors(content)
    if not floors or not floors_moved:
        return
    for r in content["runs"]:
        for f in (out / r).iterdir():
            if f.suffix == ".parquet" and _below_floor(f, floors):
                f.unlink()


def _write_parquet(spark, opts, ranges: list[OffsetRange], tmp: Path,
                   round_: int = 0) -> tuple[dict[str, tuple[int, int]], dict[int, int]]:
    """Read ``ranges`` of ``kshare-share-state`` and write their rows to Parquet files in
    ``tmp`` (which exists); returns ({file name: (state partition, rows)}, {state partition:
    its new log start} for the partitions whose log start moved past a range while it was
    read: their files are incomplete).

    The same read as ``spark.read.format("kshare-share-state")...load().write.parquet(tmp)``
    (the same input partitions, the same rows), but each input partition's rows are written
    to their own file with pyarrow from the Arrow batches decoded, so the rows never become
    JVM rows: Spark's Arrow-to-row conversion and row-wise Parquet writer cost ten times the
    decoding. Input partitions smaller than ``maxOffsetsPerSplit`` share a Spark task (a
    task costs tens of milliseconds of scheduling and Python worker round trips), keeping at
    least ``minPartitions`` tasks and one per core. A file is named by the round, its input
    partition and the task attempt; only the files of the attempts Spark reports as done are
    kept."""
    if not ranges:
        return {}, {}
    tasks = _pack(ranges, opts.max_offsets_per_split,
                  max(opts.min_partitions or 0, spark.sparkContext.defaultParallelism))
    done = (spark.range(len(tasks), numPartitions=len(tasks))
            .mapInArrow(_ParquetTask(opts, ranges, tasks, str(tmp), round_),
                        "file string, range int, rows long, moved long").collect())
    keep = {r["file"] for r in done}
    prefix = f"part-r{round_:02d}-"
    for f in tmp.iterdir():
        if f.name.startswith(prefix) and f.name not in keep:  # a failed attempt's leftovers
            f.unlink()
    files, moved = {}, {}
    for r in done:
        p = ranges[r["range"]].partition
        files[r["file"]] = (p, r["rows"])
        if r["moved"] >= 0:
            moved[p] = max(moved.get(p, -1), r["moved"])
    return files, moved


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

    def __init__(self, opts, ranges, tasks: list[list[int]], directory: str, round_: int = 0) -> None:
        self.opts, self.ranges, self.tasks, self.directory = opts, ranges, tasks, directory
        self.round = round_

    def __call__(self, batches):
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyspark import TaskContext

        ctx = TaskContext.get()
        attempt = ctx.attemptNumber() if ctx is not None else 0
        for batch in batches:
            for i in (i for task in batch.column(0).to_pylist() for i in self.tasks[task]):
                name = f"part-r{self.round:02d}-{i:05d}-{attempt}.parquet"
                rows, moved = 0, -1
                with pq.ParquetWriter(os.path.join(self.directory, name), STATE_ARROW_SCHEMA,
                                      use_dictionary=_DICTIONARY_COLUMNS) as w:
                    pending: list = []
                    try:
                        for b in read_state_range(self.opts, self.ranges[i]):
                            pending.append(b)
                            rows += b.num_rows
                            if sum(x.num_rows for x in pending) >= ROW_GROUP_ROWS:
                                w.write_table(pa.Table.from_batches(pending), row_group_size=ROW_GROUP_ROWS)
                                pending = []
                    except LogStartMovedError as e:  # the driver drops the partition's files and re-plans
                        moved, pending = e.log_start, []
                    if pending:
                        w.write_table(pa.Table.from_batches(pending), row_group_size=ROW_GROUP_ROWS)
                yield pa.RecordBatch.from_pydict({"file": [name], "range": pa.array([i], pa.int32()), "rows": [rows],
                                                  "moved": [moved]})


def read_export(spark, out_dir: str | os.PathLike):
    """The committed rows of an export as one DataFrame (empty before the first run)."""
    out = Path(out_dir)
    content = committed(out)
    files = committed_files(out, content)
    if not files:
        return spark.createDataFrame([], STATE_SCHEMA)
    rows = spark.read.schema(STATE_SCHEMA).parquet(*files)
    cond = floor_condition(out, content)
    return rows.where(cond) if cond else rows
