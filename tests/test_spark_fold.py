"""The Spark fold against the share coordinator itself: on random histories of snapshots,
updates (with and without start offsets and counts) and tombstones, ``latest_state`` equals
``ShareCoordinatorShard.replay`` of every record, and ``state_history`` equals the shard's
start offset and delivery-complete count after each record. Plus delivery health on a small
hand-made history."""

from __future__ import annotations

import pytest

import random
import uuid

import pyarrow as pa

from tests.test_spark_support import spark  # noqa: F401

pytestmark = pytest.mark.spark

from coordinator.share.shard import SharePartitionKey, ShareCoordinatorShard  # noqa: E402
from protocol import coordinator_serde  # noqa: E402
from protocol.coordinator_records.share_snapshot_key import ShareSnapshotKey  # noqa: E402
from protocol.coordinator_records.share_snapshot_value import ShareSnapshotValue  # noqa: E402
from protocol.coordinator_records.share_snapshot_value import StateBatch as SB  # noqa: E402
from protocol.coordinator_records.share_update_key import ShareUpdateKey  # noqa: E402
from protocol.coordinator_records.share_update_value import ShareUpdateValue  # noqa: E402
from protocol.coordinator_records.share_update_value import StateBatch as UB  # noqa: E402
from protocol.records import Record  # noqa: E402
from protocol.uuids import uuid_to_str  # noqa: E402
from spark_jobs.fold import delivery_health, latest_state, state_history  # noqa: E402
from spark_jobs.state_rows import STATE_SCHEMA, StateRowBuilder  # noqa: E402

STATES = (0, 2, 4)


def random_batches(rng: random.Random, base: int) -> list[tuple[int, int, int, int]]:
    out = []
    for _ in range(rng.randint(0, 3)):
        first = base + rng.randint(-5, 30)
        out.append((first, first + rng.randint(0, 6), rng.choice(STATES), rng.randint(0, 6)))
    return out


def random_history(rng: random.Random, group: str, tid: uuid.UUID, partition: int, n: int) -> list[tuple]:
    """(key, value) records of one share-partition, as a coordinator (or a pruned log) could hold."""
    out = []
    start = rng.randint(-1, 10)
    for i in range(n):
        kind = rng.random()
        if kind < 0.2 or (i == 0 and kind < 0.6):
            start = rng.choice([-1, start + rng.randint(0, 10), rng.randint(0, 50)])
            out.append((ShareSnapshotKey(group, tid, partition), ShareSnapshotValue(
                snapshot_epoch=i, state_epoch=rng.randint(0, 3), leader_epoch=rng.randint(0, 3), start_offset=start,
                delivery_complete_count=rng.choice([-1, rng.randint(0, 9)]), create_timestamp=i,
                write_timestamp=i, state_batches=[SB(*b) for b in random_batches(rng, max(start, 0))])))
        elif kind < 0.27:
            out.append((ShareSnapshotKey(group, tid, partition), None))
        else:
            moved = rng.random() < 0.4
            if moved:
                start = max(start, 0) + rng.randint(0, 8)
            out.append((ShareUpdateKey(group, tid, partition), ShareUpdateValue(
                snapshot_epoch=i, leader_epoch=rng.choice([-1, rng.randint(0, 3)]),
                start_offset=start if moved else -1, delivery_complete_count=rng.choice([-1, rng.randint(0, 9)]),
                state_batches=[UB(*b) for b in random_batches(rng, max(start, 0))])))
    return out


def build(seed: int, keys: int = 60):
    """Random histories interleaved over three state partitions: (rows table, records per
    state partition in offset order)."""
    rng = random.Random(seed)
    tid = uuid.UUID(int=rng.getrandbits(128))
    per_partition: dict[int, list] = {0: [], 1: [], 2: []}
    for k in range(keys):
        history = random_history(rng, f"g{k % 4}", tid, k, rng.randint(1, 25))
        sp = k % 3
        for rec in history:  # interleave keys: insert at random positions, keeping each key's order
            per_partition[sp].insert(rng.randint(len(per_partition[sp]) // 2, len(per_partition[sp])), rec)
    rows = StateRowBuilder()
    for sp, records in per_partition.items():
        rows.add(sp, [Record(off, 1_700_000_000_000 + off, coordinator_serde.encode_key(k),
                             coordinator_serde.encode_value(v), []) for off, (k, v) in enumerate(records)])
    return pa.Table.from_batches([rows.take()]), per_partition


def replay(per_partition):
    """The shard's state after every record, and at the end, per share-partition key."""
    after: dict[tuple, tuple] = {}
    final = {}
    for sp, records in per_partition.items():
        shard = ShareCoordinatorShard()
        for off, (k, v) in enumerate(records):
            shard.replay(off, k, v)
            key = SharePartitionKey(k.group_id, k.topic_id, k.partition)
            st = shard.state(key)
            after[(sp, off)] = (None, None) if st is None else (st.start_offset, st.delivery_complete_count)
        for key, entry in shard.entries().items():
            final[(sp, key.group_id, uuid_to_str(key.topic_id), key.partition)] = entry.state
    return after, final


def test_latest_state_and_history_follow_the_shards_replay(spark):  # noqa: F811
    tables, expected_after, expected_final = [], {}, {}
    for seed in range(4):
        table, per_partition = build(seed)
        tables.append(table)
        after, final = replay(per_partition)
        expected_after.update({(seed, *k): v for k, v in after.items()})
        expected_final.update({(seed, *k): v for k, v in final.items()})
    # Each seed's histories in their own groups, so the four runs do not mix.
    rows = spark.createDataFrame(pa.concat_tables([
        t.set_column(t.schema.get_field_index("group_id"), "group_id",
                     pa.compute.binary_join_element_wise(pa.scalar(f"s{i}-"), t["group_id"], ""))
        for i, t in enumerate(tables)]), schema=STATE_SCHEMA)

    got = {}
    for r in latest_state(rows, partitions=3).collect():
        seed, group = r["group_id"].split("-", 1)
        got[(int(seed[1:]), r["state_partition"], group, r["topic_id"], r["partition"])] = r
    assert set(got) == set(expected_final)
    for key, st in expected_final.items():
        r = got[key]
        assert (r["snapshot_epoch"], r["state_epoch"], r["leader_epoch"], r["start_offset"],
                r["delivery_complete_count"]) == (st.snapshot_epoch, st.state_epoch, st.leader_epoch,
                                                  st.start_offset, st.delivery_complete_count), key
        assert [tuple(b) for b in r["state_batches"]] == [tuple(b) for b in st.state_batches], key

    history = {(int(r["group_id"].split("-", 1)[0][1:]), r["state_partition"], r["offset"]):
               (r["start_offset"], r["delivery_complete_count"]) for r in state_history(rows).collect()}
    assert history == expected_after


def test_delivery_health_merges_what_every_record_shows(spark):  # noqa: F811
    tid = uuid.uuid4()
    g = "health"
    records = [
        (ShareSnapshotKey(g, tid, 0), ShareSnapshotValue(start_offset=0, delivery_complete_count=0, state_batches=[
            SB(0, 4, 2, 1)])),                              # 0-4 acknowledged at the first delivery
        (ShareUpdateKey(g, tid, 0), ShareUpdateValue(start_offset=-1, delivery_complete_count=7, state_batches=[
            UB(5, 5, 4, 2), UB(6, 6, 4, 5), UB(7, 9, 0, 3)])),  # 5 rejected, 6 at the limit, 7-9 retried
        (ShareSnapshotKey(g, tid, 0), ShareSnapshotValue(start_offset=3, delivery_complete_count=4, state_batches=[
            SB(3, 4, 2, 1), SB(5, 5, 4, 2), SB(6, 6, 4, 5), SB(7, 9, 2, 3)])),  # repeats, and 7-9 acknowledged
    ]
    rows = StateRowBuilder()
    rows.add(0, [Record(i, 0, coordinator_serde.encode_key(k), coordinator_serde.encode_value(v), [])
                 for i, (k, v) in enumerate(records)])
    df = spark.createDataFrame(pa.Table.from_batches([rows.take()]), schema=STATE_SCHEMA)
    (h,) = delivery_health(df, 5).collect()
    assert (h["acknowledged"], h["archived_rejected"], h["archived_delivery_limit"], h["redelivered"],
            h["redeliveries"]) == (8, 1, 1, 5, 1 + 4 + 3 * 2)


def test_latest_state_with_more_spark_partitions_than_keys(spark):  # noqa: F811
    """Spark partitions without rows (here three of four) replay nothing."""
    tid = uuid.uuid4()
    rows = StateRowBuilder()
    key = coordinator_serde.encode_key(ShareSnapshotKey("few", tid, 0))
    value = coordinator_serde.encode_value(ShareSnapshotValue(start_offset=5, delivery_complete_count=1,
                                                              state_batches=[]))
    rows.add(0, [Record(0, 0, key, value, [])])
    df = spark.createDataFrame(pa.Table.from_batches([rows.take()]), schema=STATE_SCHEMA)
    assert [(r["group_id"], r["start_offset"]) for r in latest_state(df, partitions=4).collect()] == [("few", 5)]


def _tuples(df, columns):
    """A pandas frame's rows as sorted tuples of plain values (NaN and None alike)."""
    def plain(v):
        if isinstance(v, (list, tuple)) or hasattr(v, "tolist"):
            return tuple(plain(x) for x in (v.tolist() if hasattr(v, "tolist") else v))
        if isinstance(v, dict):
            return tuple(plain(x) for x in v.values())
        if hasattr(v, "asDict"):
            return tuple(plain(x) for x in v)
        return None if v is None or v != v else v
    return sorted((tuple(plain(r[c]) for c in columns) for r in df.to_dict("records")), key=repr)


def test_export_scan_equals_the_dataframe_fold(spark, tmp_path):  # noqa: F811
    """``ExportScan.fold`` (numpy over the export files, a state partition per task) gives what
    ``latest_state``, ``history_points`` and ``delivery_health`` give on the same rows."""
    import json

    import pyarrow.parquet as pq

    from spark_jobs.export import COMMIT_FILE
    from spark_jobs.export_scan import ExportScan
    from spark_jobs.fold import history_points

    table, _ = build(11, keys=30)
    run = tmp_path / "run-00001"
    run.mkdir()
    for sp in range(3):
        part = table.filter(pa.compute.equal(table["state_partition"], sp))
        pq.write_table(part, run / f"part-{sp:05d}-0.parquet", row_group_size=max(1, part.num_rows // 3))
    (tmp_path / COMMIT_FILE).write_text(json.dumps({"topic": "t", "runs": [run.name], "next_offsets": {}}))
    rows = spark.createDataFrame(table, schema=STATE_SCHEMA)
    bucket_ms, origin_ms = 7, 1_700_000_000_000

    got = ExportScan(spark, tmp_path).fold(history=(bucket_ms, origin_ms), delivery_count_limit=3)
    keys = ["state_partition", "group_id", "topic_id", "partition"]
    latest = [*keys, "snapshot_epoch", "state_epoch", "leader_epoch", "start_offset", "delivery_complete_count",
              "state_batches", "inflight_available", "inflight_acknowledged", "inflight_archived",
              "inflight_redelivered", "max_delivery_count", "last_offset"]
    assert _tuples(got["latest"], latest) == _tuples(latest_state(rows).toPandas(), latest)
    points = [*keys, "at_ms", "start_offset", "delivery_complete_count", "state_offset"]
    want = history_points(state_history(rows), bucket_ms, origin_ms).toPandas()
    assert len(want) > len(got["latest"])  # several buckets per key
    assert _tuples(got["points"], points) == _tuples(want, points)
    health = [*keys, "acknowledged", "archived_rejected", "archived_delivery_limit", "redelivered", "redeliveries"]
    want = delivery_health(rows, 3).toPandas()
    assert want["archived_delivery_limit"].sum() and want["redelivered"].sum()
    assert _tuples(got["health"], health) == _tuples(want, health)
