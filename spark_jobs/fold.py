"""Folding exported state rows into share-partition state, in Spark.

**Latest state.** Exactly what the share coordinator does when it loads a state partition:
``ShareCoordinatorShard.replay`` on every record of a key in offset order, the state batches
merged by the coordinator's combiner. A ShareSnapshot replaces a key's state wholesale (and a
tombstone deletes it), so the records before a key's last snapshot cannot change the result:
Spark drops them first (each key's last snapshot or tombstone offset, aggregated and
broadcast-joined back), hashes the rest by key, and every task replays its rows as one shard
would, in order of key and offset (``mapInArrow``; ``replay_table`` says how it does that
without a record object per row). ``export_scan`` runs the same fold over the export files a
state partition at a time, without the shuffle.

**History.** Lag over time needs, after every record, the state's start offset and
delivery-complete count, not its batches, and replaying every record through the shard costs
tens of microseconds each. The two scalars follow replay's rules, evaluated with window
functions per key in offset order: a snapshot (or tombstone) starts a new segment; within a
segment the start offset is the last one that is not -1, else -1; the delivery-complete count
is the record's own. ``tests/test_spark_fold.py`` checks this against the shard, record by
record, on random histories.

**Delivery health.** What the state batches of all records show: ranges that reached
ACKNOWLEDGED or ARCHIVED with their final delivery count (terminal states never change), merged
across records (snapshots repeat them) by a gaps-and-islands pass per key, state and count.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import ArrayType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

from coordinator.share.combiner import ACKNOWLEDGED, ARCHIVED, AVAILABLE, StateBatch, combine
from coordinator.share.shard import UNINITIALIZED_EPOCH

from .state_rows import KEY_COLUMNS, SNAPSHOT, STATE_BATCH_TYPE

__all__ = ["LATEST_SCHEMA", "latest_state", "state_history", "history_points", "delivery_health", "replay_batches",
           "replay_table"]

LATEST_SCHEMA = StructType([
    StructField("state_partition", IntegerType()),
    StructField("group_id", StringType()),
    StructField("topic_id", StringType()),
    StructField("partition", IntegerType()),
    StructField("last_offset", LongType()),        # offset of the key's last state record
    StructField("last_timestamp", TimestampType()),
    StructField("replayed", LongType()),           # records replayed (from the last snapshot on)
    StructField("snapshot_epoch", IntegerType()),
    StructField("state_epoch", IntegerType()),
    StructField("leader_epoch", IntegerType()),
    StructField("start_offset", LongType()),
    StructField("delivery_complete_count", IntegerType()),
    StructField("state_batches", ArrayType(STATE_BATCH_TYPE)),
    # The in-flight window as the state batches describe it (offsets per delivery state).
    StructField("inflight_available", LongType()),
    StructField("inflight_acknowledged", LongType()),
    StructField("inflight_archived", LongType()),
    StructField("inflight_redelivered", LongType()),  # offsets delivered more than once
    StructField("max_delivery_count", IntegerType()),
])
_LATEST_ARROW = to_arrow_schema(LATEST_SCHEMA, timezone="UTC")

# Records after which a key's state no longer depends on anything before them.
def _resets():
    return (F.col("record_type") == SNAPSHOT) | F.col("tombstone")

_REPLAY_COLUMNS = [*KEY_COLUMNS, "offset", "timestamp", "record_type", "tombstone", "snapshot_epoch", "state_epoch",
                   "leader_epoch", "start_offset", "delivery_complete_count", "create_timestamp", "write_timestamp",
                   "state_batches"]


def latest_state(rows: DataFrame, partitions: int | None = None) -> DataFrame:
    """One row per share-partition with state (``LATEST_SCHEMA``); deleted keys have none."""
    last_reset = (rows.where(_resets()).groupBy(*KEY_COLUMNS).agg(F.max("offset").alias("_from")))
    tail = (rows.select(*_REPLAY_COLUMNS)
            .join(F.broadcast(last_reset), KEY_COLUMNS, "left")
            .where(F.col("_from").isNull() | (F.col("offset") >= F.col("_from")))
            .drop("_from"))
    spread = tail.repartition(partitions, *KEY_COLUMNS) if partitions else tail.repartition(*KEY_COLUMNS)
    return spread.mapInArrow(replay_batches, LATEST_SCHEMA)


def replay_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: the state every key of the partition's rows ends in, replayed as
    one ``ShareCoordinatorShard`` replays them in order of state partition, key and offset
    (``replay_table``)."""
    batches = list(batches)
    if not batches:  # a Spark partition without rows
        return
    table = pa.Table.from_batches(batches)
    if table.num_rows:
        out = replay_table(table)
        if out is not None:
            yield out


def replay_table(table: pa.Table) -> pa.RecordBatch | None:
    """The rows of ``table`` (``_REPLAY_COLUMNS``, every record of each key from its last
    snapshot or tombstone on, in any order) replayed per share-partition key exactly as
    ``ShareCoordinatorShard.replay`` does, sorted by state partition, key and offset; one row
    per key with state (``LATEST_SCHEMA``), or None when no key has any.

    The shard keys its state by (group, topic id, partition): rows of the same key under two
    state partitions continue one state, the first state partition names it. What replay
    does to a key's records, without building a record object per row:

    - a tombstone deletes the state and a ShareSnapshot replaces it (its batches as written),
      so only the records from the key's last one on matter;
    - each ShareUpdate after it sets the delivery-complete count, the start offset and
      leader epoch unless they are -1, and combines its batches into the state pruned at the
      start offset (``combiner.combine``); an update without state before it starts one
      (snapshot epoch from the update, state epoch 0, its own batches combined);
    - ``combine`` keeps, per offset, the batch of highest (delivery count, state) and prunes
      below the start offset, so while the start offset never goes down, combining the
      updates one by one equals combining all their batches at once at the last start
      offset; when it does go down the updates are combined one by one.
    """
    table = table.sort_by([(c, "ascending") for c in [*KEY_COLUMNS, "offset"]]).combine_chunks()
    n = table.num_rows
    col = table.column
    sp = col("state_partition").to_numpy()
    parts = col("partition").to_numpy()
    groups, topics = col("group_id"), col("topic_id")
    tombstone = col("tombstone").to_numpy(zero_copy_only=False)
    reset = tombstone | pc.equal(col("record_type"), SNAPSHOT).to_numpy(zero_copy_only=False)

    def ints(name: str) -> np.ndarray:  # nulls (tombstones, or fields updates lack) read as -1
        return col(name).fill_null(-1).to_numpy()

    snapshot_epoch, state_epoch, leader_epoch = ints("snapshot_epoch"), ints("state_epoch"), ints("leader_epoch")
    start_offset, dcc = ints("start_offset"), ints("delivery_complete_count")
    create_ts, write_ts = ints("create_timestamp"), ints("write_timestamp")
    lists = col("state_batches").chunk(0) if n else None
    bounds = lists.offsets.to_numpy()
    listed = lists.is_valid().to_numpy(zero_copy_only=False)  # a null list holds no batches (as to_record reads it)
    flat = lists.values
    firsts = flat.field("first_offset").to_numpy()
    lasts = flat.field("last_offset").to_numpy()
    states = flat.field("delivery_state").to_numpy()
    counts = flat.field("delivery_count").to_numpy()

    # Runs of rows of one (state partition, key); the shard keys its state by (group, topic
    # id, partition), so runs of the same key under several state partitions continue one
    # state, in state partition order.
    change = np.ones(n, dtype=bool)
    if n > 1:
        change[1:] = ((sp[1:] != sp[:-1]) | (parts[1:] != parts[:-1])
                      | pc.not_equal(groups.slice(1), groups.slice(0, n - 1)).to_numpy(zero_copy_only=False)
                      | pc.not_equal(topics.slice(1), topics.slice(0, n - 1)).to_numpy(zero_copy_only=False))
    run_starts = np.flatnonzero(change)
    run_ends = np.append(run_starts[1:], n)
    group_list = groups.take(pa.array(run_starts)).to_pylist()
    topic_list = topics.take(pa.array(run_starts)).to_pylist()
    runs: dict[tuple, list[tuple[int, int]]] = {}
    for a, b, g, t in zip(run_starts.tolist(), run_ends.tolist(), group_list, topic_list):
        runs.setdefault((g, t, int(parts[a])), []).append((a, b))

    def batches(rows: np.ndarray, below: int | None = None) -> list[StateBatch]:
        """The state batches of ``rows`` (in order), as the records carry them; with
        ``below``, leaving out those ending below it (``combine`` drops them first thing)."""
        if len(rows) and rows[-1] - rows[0] + 1 == len(rows) and listed[rows[0]:rows[-1] + 1].all():
            lo, hi = bounds[rows[0]], bounds[rows[-1] + 1]
            f, la, st, cn = firsts[lo:hi], lasts[lo:hi], states[lo:hi], counts[lo:hi]
            if below is not None:
                keep = la >= below
                f, la, st, cn = f[keep], la[keep], st[keep], cn[keep]
            return list(map(StateBatch._make, zip(f.tolist(), la.tolist(), st.tolist(), cn.tolist())))
        if below is not None:
            return [b for b in batches(rows) if b.last_offset >= below]
        out: list[StateBatch] = []
        for i in rows.tolist():
            if listed[i]:
                lo, hi = bounds[i], bounds[i + 1]
                out.extend(map(StateBatch._make, zip(firsts[lo:hi].tolist(), lasts[lo:hi].tolist(),
                                                     states[lo:hi].tolist(), counts[lo:hi].tolist())))
        return out

    out: dict[str, list] = {f.name: [] for f in LATEST_SCHEMA.fields}
    last_rows = []
    for (group, topic, partition), spans in runs.items():
        rows = np.concatenate([np.arange(a, b) for a, b in spans]) if len(spans) > 1 \
            else np.arange(spans[0][0], spans[0][1])
        resets = np.flatnonzero(reset[rows])
        if not len(resets):  # the first update starts the state
            updates = rows
            state = None
        else:
            r = rows[resets[-1]]
            updates = rows[resets[-1] + 1:]
            if tombstone[r]:
                state = None
            else:
                state = [int(snapshot_epoch[r]), int(state_epoch[r]), int(leader_epoch[r]), int(start_offset[r]),
                         int(dcc[r]), int(create_ts[r]), int(write_ts[r])]
                state_batches = batches(rows[resets[-1]:resets[-1] + 1])
        if len(updates):
            u0 = updates[0]
            if state is None:
                state = [int(snapshot_epoch[u0]), UNINITIALIZED_EPOCH, int(leader_epoch[u0]), int(start_offset[u0]),
                         int(dcc[u0]), 0, 0]
                state_batches = []
                begin_start = begin_leader = None
            else:
                begin_start, begin_leader = state[3], state[2]
            so, le = start_offset[updates], leader_epoch[updates]
            # After each update: its start offset / leader epoch unless -1, else the state's
            # (the update that starts a state takes its own as they are).
            starts = _carry(so, begin_start)
            state[2] = int(_carry(le, begin_leader)[-1])
            state[3] = int(starts[-1])
            state[4] = int(dcc[updates[-1]])
            ranked = np.where(starts == -1, np.iinfo(np.int64).min, starts)
            if len(ranked) < 2 or np.all(ranked[1:] >= ranked[:-1]):
                below = None if state[3] == -1 else state[3]
                if below is not None:
                    state_batches = [b for b in state_batches if b.last_offset >= below]
                state_batches = combine((), state_batches + batches(updates, below), state[3])
            else:
                for u, s in zip(updates.tolist(), starts.tolist()):
                    state_batches = combine(state_batches, batches(np.array([u])), s)
        if state is None:
            continue  # deleted
        avail = acked = archived = redelivered = 0
        max_count = 0
        for b in state_batches:
            size = b.last_offset - b.first_offset + 1
            if b.delivery_state == AVAILABLE:
                avail += size
            elif b.delivery_state == ACKNOWLEDGED:
                acked += size
            elif b.delivery_state == ARCHIVED:
                archived += size
            if b.delivery_count > 1:
                redelivered += size
            max_count = max(max_count, b.delivery_count)
        last_rows.append(int(rows[-1]))
        values = {
            "state_partition": int(sp[rows[0]]), "group_id": group, "topic_id": topic, "partition": partition,
            "replayed": len(rows),
            "snapshot_epoch": state[0], "state_epoch": state[1], "leader_epoch": state[2],
            "start_offset": state[3], "delivery_complete_count": state[4],
            "state_batches": [b._asdict() for b in state_batches],
            "inflight_available": avail, "inflight_acknowledged": acked, "inflight_archived": archived,
            "inflight_redelivered": redelivered, "max_delivery_count": max_count,
        }
        for name, v in values.items():
            out[name].append(v)
    if not last_rows:
        return None
    take = pa.array(last_rows, pa.int64())
    out["last_offset"] = col("offset").take(take)
    out["last_timestamp"] = col("timestamp").take(take)
    return pa.RecordBatch.from_arrays([pa.array(out[f.name], f.type) if isinstance(out[f.name], list)
                                       else out[f.name].combine_chunks().cast(f.type) for f in _LATEST_ARROW],
                                      schema=_LATEST_ARROW)


def _carry(values: np.ndarray, before: int | None) -> np.ndarray:
    """Each value, or where it is -1 the last one that is not (``before`` at first); with
    ``before`` None the first value stands as it is, -1 included."""
    out = values.copy()
    if before is None:
        before = int(values[0])
        keep = values != -1
        keep[0] = True
    else:
        keep = values != -1
    idx = np.where(keep, np.arange(len(values)), -1)
    np.maximum.accumulate(idx, out=idx)
    out = np.where(idx >= 0, values[np.maximum(idx, 0)], before)
    return out


def state_history(rows: DataFrame) -> DataFrame:
    """Per state record: the key, the record's offset and timestamp, and the state's
    ``start_offset`` and ``delivery_complete_count`` right after it (see the module docstring
    for how they follow replay); both are null after a tombstone (the state is gone)."""
    in_order = Window.partitionBy(*KEY_COLUMNS).orderBy("offset").rowsBetween(Window.unboundedPreceding,
                                                                              Window.currentRow)
    segment = F.sum(F.when(_resets(), 1).otherwise(0)).over(in_order)
    in_segment = Window.partitionBy(*KEY_COLUMNS, "_segment").orderBy("offset").rowsBetween(
        Window.unboundedPreceding, Window.currentRow)
    start = F.coalesce(F.last(F.when(F.col("start_offset") != -1, F.col("start_offset")), ignorenulls=True)
                       .over(in_segment), F.lit(-1).cast("long"))
    deleted = F.col("tombstone")
    return (rows.select(*KEY_COLUMNS, "offset", "timestamp", "record_type", "tombstone", "start_offset",
                        "delivery_complete_count")
            .withColumn("_segment", segment)
            .select(*KEY_COLUMNS, "offset", "timestamp",
                    F.when(~deleted, start).alias("start_offset"),
                    F.when(~deleted, F.col("delivery_complete_count")).alias("delivery_complete_count")))


def history_points(history: DataFrame, bucket_ms: int, origin_ms: int) -> DataFrame:
    """The state at the end of each time bucket ``[origin + i*bucket, origin + (i+1)*bucket)``
    in which a key has records: its last record's start offset and delivery-complete count,
    with ``at_ms`` the bucket's end (the time the lag is measured at)."""
    ts_ms = (F.col("timestamp").cast("double") * 1000).cast("long")
    bucket = F.floor((ts_ms - F.lit(origin_ms)) / F.lit(bucket_ms)).cast("long")
    last = F.max_by(F.struct("start_offset", "delivery_complete_count", "offset"), F.col("offset"))
    return (history.withColumn("_bucket", bucket)
            .groupBy(*KEY_COLUMNS, "_bucket").agg(last.alias("s"))
            .select(*KEY_COLUMNS, ((F.col("_bucket") + 1) * F.lit(bucket_ms) + F.lit(origin_ms)).alias("at_ms"),
                    F.col("s.start_offset").alias("start_offset"),
                    F.col("s.delivery_complete_count").alias("delivery_complete_count"),
                    F.col("s.offset").alias("state_offset")))


def delivery_health(rows: DataFrame, delivery_count_limit: int) -> DataFrame:
    """Per key: offsets the state records show acknowledged, archived below the delivery limit
    (rejected, or compaction gaps), archived at the limit, and delivered more than once, with
    the redeliveries of those (count - 1 each)."""
    b = F.col("b")
    terminal = (rows.where(~F.col("tombstone"))
                .select(*KEY_COLUMNS, F.explode("state_batches").alias("b"))
                .select(*KEY_COLUMNS, b.first_offset.alias("f"), b.last_offset.alias("l"),
                        b.delivery_state.cast("int").alias("s"), b.delivery_count.cast("int").alias("c"))
                .where(F.col("s").isin(ACKNOWLEDGED, ARCHIVED))
                .distinct())
    cls = [*KEY_COLUMNS, "s", "c"]
    before = Window.partitionBy(*cls).orderBy("f", "l").rowsBetween(Window.unboundedPreceding, -1)
    upto = Window.partitionBy(*cls).orderBy("f", "l").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    reach = F.max("l").over(before)
    islands = (terminal.withColumn("_new", F.when(reach.isNull() | (F.col("f") > reach), 1).otherwise(0))
               .withColumn("_island", F.sum("_new").over(upto))
               .groupBy(*cls, "_island").agg((F.max("l") - F.min("f") + 1).alias("n")))
    s, c, n = F.col("s"), F.col("c"), F.col("n")
    zero = F.lit(0).cast("long")
    return islands.groupBy(*KEY_COLUMNS).agg(
        F.sum(F.when(s == ACKNOWLEDGED, n).otherwise(zero)).alias("acknowledged"),
        F.sum(F.when((s == ARCHIVED) & (c < delivery_count_limit), n).otherwise(zero)).alias("archived_rejected"),
        F.sum(F.when((s == ARCHIVED) & (c >= delivery_count_limit), n).otherwise(zero))
        .alias("archived_delivery_limit"),
        F.sum(F.when(c > 1, n).otherwise(zero)).alias("redelivered"),
        F.sum(F.when(c > 1, n * (c - 1)).otherwise(zero)).alias("redeliveries"),
    )
