"""The incremental export of ``__share_group_state`` when the share coordinator prunes it, and
when the export directory is pointed at another cluster.

The share coordinator moves its partitions' log start up to the oldest record a live key still
needs (its latest ShareSnapshot); deleted keys drop out of that, so their tombstones are pruned
too (Kafka's ShareCoordinatorOffsetsManager; kshare's ``ShareCoordinatorShard.last_redundant_offset``).
An export that kept rows from before such a prune must rebuild that state partition from the log
start, or the deleted share-partitions come back in every report.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.test_spark_support import create_topic, produce_state_records, spark, unique  # noqa: F401

pytestmark = pytest.mark.spark

from protocol.client import KafkaClient  # noqa: E402
from protocol.coordinator_records.share_snapshot_key import ShareSnapshotKey  # noqa: E402
from spark_jobs import export as export_mod  # noqa: E402
from spark_jobs.export import COMMIT_FILE, export_share_state, read_export  # noqa: E402
from spark_jobs.kafka_io import Cluster, DataLossError, LogStartMovedError  # noqa: E402
from spark_jobs.offsets import OffsetRange  # noqa: E402
from spark_jobs.report import build_report  # noqa: E402
from tests.raw_client import RawClient  # noqa: E402
from tests.test_delete_records import delete_records, share_offsets  # noqa: E402
from tests.test_share_admin_rpcs import delete_groups  # noqa: E402
from tests.test_share_wire_support import ACCEPT, produce_batches  # noqa: E402
from tests.test_spark_report import Member  # noqa: E402
from tests.test_spark_state import read_csv, snapshot, update  # noqa: E402

STATE_TOPIC = "__share_group_state"


def tombstone(group, tid, p):
    return (ShareSnapshotKey(group, tid, p), None)


def lag_rows(out):
    return {(r["group"], r["topic"], r["partition"]): (r["start_offset"], r["delivery_complete_count"], r["lag"])
            for r in read_csv(out / "lag.csv")}


def keys(spark, export_dir):  # noqa: F811
    """The (group, partition) keys whose latest row is not a tombstone."""
    from spark_jobs.fold import latest_state

    return sorted((r["group_id"], r["partition"]) for r in latest_state(read_export(spark, export_dir)).collect())


def test_a_pruned_tombstone_rebuilds_its_state_partition_from_the_log_start(spark, broker, tmp_path):  # noqa: F811
    data, copy = unique("data"), unique("state-copy")
    ga, gb, gc = unique("ga"), unique("gb"), unique("gc")
    with RawClient(broker.bootstrap) as c:
        tid = create_topic(c, data, 1)
        create_topic(c, copy, 2)
        produce_batches(c, data, [10])
        produce_state_records(c, copy, 0, [snapshot(ga, tid, 0, start=2, dcc=0)])   # 0
        produce_state_records(c, copy, 0, [snapshot(gb, tid, 0, start=3, dcc=0)])   # 1
        produce_state_records(c, copy, 1, [snapshot(gc, tid, 0, start=4, dcc=0)])   # 0
    out = tmp_path / "report"
    r1 = build_report(spark, broker.bootstrap, out, state_topic=copy)
    assert {k[0] for k in lag_rows(out)} == {ga, gb, gc}

    with RawClient(broker.bootstrap) as c:
        produce_state_records(c, copy, 0, [tombstone(ga, tid, 0)])                  # 2: ga deleted
        produce_state_records(c, copy, 0, [snapshot(gb, tid, 0, start=5, dcc=1)])   # 3
        produce_state_records(c, copy, 1, [update(gc, tid, 0, start=6, dcc=0)])     # 1
        # What the coordinator's prune does: gb needs 3 on, ga is deleted.
        assert delete_records(c, (copy, 0, 3)) == [(copy, 0, 0, 3)]
    r2 = build_report(spark, broker.bootstrap, out, state_topic=copy)
    assert lag_rows(out) == {(gb, data, "0"): ("5", "1", "4"), (gc, data, "0"): ("6", "0", "4")}
    assert r1.notes == []
    assert r2.export.rebuilt == {0: 3} and r2.export.skipped_offsets == 1
    assert any("Rebuilt state partition(s) 0 (from offset 3)" in n for n in r2.notes)
    assert "Rebuilt state partition" in (out / "report.html").read_text()
    commit = json.loads((out / "state-export" / COMMIT_FILE).read_text())
    assert commit["floors"] == {"0": 3} and commit["next_offsets"] == {"0": 4, "1": 2}
    # Only partition 0's old rows were dropped: partition 1 still folds run 1's snapshot.
    rows = read_export(spark, out / "state-export").select("state_partition", "offset").collect()
    assert sorted((r[0], r[1]) for r in rows) == [(0, 3), (1, 0), (1, 1)]
    assert len(list((out / "state-export" / "run-00001").glob("*.parquet"))) == 1  # partition 0's file removed
    # The same answer as a fresh export.
    build_report(spark, broker.bootstrap, tmp_path / "fresh", state_topic=copy)
    assert lag_rows(tmp_path / "fresh") == lag_rows(out)

    # Everything of partition 0 pruned (its last key deleted), nothing new to read: still rebuilt.
    with RawClient(broker.bootstrap) as c:
        produce_state_records(c, copy, 0, [tombstone(gb, tid, 0)])                  # 4
        assert delete_records(c, (copy, 0, 5)) == [(copy, 0, 0, 5)]
    r3 = build_report(spark, broker.bootstrap, out, state_topic=copy)
    assert (r3.export.run, r3.export.rebuilt) == (None, {0: 5})
    assert set(lag_rows(out)) == {(gc, data, "0")}


def test_the_coordinators_prune_of_a_deleted_groups_tombstones(spark, broker_factory, tmp_path):  # noqa: F811
    """End to end: a group deleted between two runs, its tombstones pruned by the share
    coordinator's own timer; the rerun reports what DescribeShareGroupOffsets answers."""
    b = broker_factory({"share.coordinator.state.topic.num.partitions": "1",
                        "share.coordinator.state.topic.prune.interval.ms": "200",
                        "share.coordinator.snapshot.update.records.per.snapshot": "0"})
    g1, g2, topic = unique("g1"), unique("g2"), unique("t")
    with RawClient(b.bootstrap) as raw, KafkaClient(b.bootstrap) as client:
        tid = create_topic(raw, topic, 1)
        ms = {g: Member(client, b.bootstrap, g, [topic], [(tid, 0)]) for g in (g1, g2)}
        produce_batches(raw, topic, [10])
        for g, n in ((g1, 4), (g2, 6)):
            ms[g].fetch({(tid, 0): 10})
            ms[g].ack((tid, 0), [(0, n - 1, ACCEPT)])
            ms[g].leave()
    out = tmp_path / "report"
    build_report(spark, b.bootstrap, out)
    assert {k[0] for k in lag_rows(out)} == {g1, g2}
    saved = json.loads((out / "state-export" / COMMIT_FILE).read_text())["next_offsets"]["0"]

    with RawClient(b.bootstrap) as raw, KafkaClient(b.bootstrap) as client:
        assert delete_groups(raw, g1) == {g1: 0}
        m = Member(client, b.bootstrap, g2, [topic], [(tid, 0)])  # g2 moves on: a snapshot after the tombstone
        produce_batches(raw, topic, [5])
        m.fetch({(tid, 0): 5})
        m.ack((tid, 0), [(10, 14, ACCEPT)])
        m.leave()
    deadline = time.monotonic() + 15
    with Cluster(b.bootstrap) as cluster:
        while cluster.offset_bounds(STATE_TOPIC)[0][0] <= saved:
            assert time.monotonic() < deadline, "the share coordinator did not prune"
            time.sleep(0.2)
    r2 = build_report(spark, b.bootstrap, out)
    start, lag = share_offsets(b.bootstrap, g2, topic)
    assert lag_rows(out) == {(g2, topic, "0"): (str(start), "5", str(lag))}
    assert r2.export.rebuilt and r2.notes


def two_snapshots(broker):
    """A copy of a state topic holding snapshots of keys ga and gb of one data topic (offsets
    0 and 1): (copy, data topic id, ga, gb)."""
    data, copy = unique("data"), unique("state-copy")
    ga, gb = unique("ga"), unique("gb")
    with RawClient(broker.bootstrap) as c:
        tid = create_topic(c, data, 1)
        create_topic(c, copy, 1)
        produce_state_records(c, copy, 0, [snapshot(ga, tid, 0, start=0)])          # 0
        produce_state_records(c, copy, 0, [snapshot(gb, tid, 0, start=0)])          # 1
    return copy, tid, ga, gb


def test_a_prune_during_the_read_plans_the_partition_again(spark, broker, tmp_path, monkeypatch):  # noqa: F811
    copy, tid, ga, gb = two_snapshots(broker)
    export_dir = tmp_path / "export"
    export_share_state(spark, broker.bootstrap, export_dir, topic=copy)
    with RawClient(broker.bootstrap) as c:
        produce_state_records(c, copy, 0, [tombstone(ga, tid, 0)])                  # 2
        produce_state_records(c, copy, 0, [snapshot(gb, tid, 0, start=1)])          # 3
    # The coordinator's prune timer fires once the run planned its ranges, before its tasks read.
    real = export_mod._pack
    pruned = []

    def plan_then_prune(*args):
        if not pruned:
            with RawClient(broker.bootstrap) as c:
                pruned.append(delete_records(c, (copy, 0, 3)))
        return real(*args)

    monkeypatch.setattr(export_mod, "_pack", plan_then_prune)
    result = export_share_state(spark, broker.bootstrap, export_dir, topic=copy)
    assert pruned == [[(copy, 0, 0, 3)]]
    assert result.rebuilt == {0: 3} and result.records == 1 and result.next_offsets == {0: 4}
    assert keys(spark, export_dir) == [(gb, 0)]


def test_a_log_start_that_keeps_moving_fails_after_bounded_replans(spark, broker, tmp_path, monkeypatch):  # noqa: F811
    copy = unique("state-copy")
    with RawClient(broker.bootstrap) as c:
        tid = create_topic(c, unique("data"), 1)
        create_topic(c, copy, 1)
        produce_state_records(c, copy, 0, [snapshot(unique("g"), tid, 0, start=0)])
    calls = []

    def always_moved(spark, opts, ranges, tmp, round_=0):  # noqa: F811
        calls.append(round_)
        return {}, {0: 0}

    monkeypatch.setattr(export_mod, "_write_parquet", always_moved)
    with pytest.raises(DataLossError, match="kept moving"):
        export_share_state(spark, broker.bootstrap, tmp_path / "export", topic=copy)
    assert calls == list(range(export_mod.MAX_REPLANS + 1))
    assert not (tmp_path / "export" / COMMIT_FILE).exists()


def test_a_moved_log_start_is_a_data_loss_the_export_can_tell_apart(broker):
    topic = unique("t")
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic, 1)
        produce_batches(c, topic, [3, 3])
        assert delete_records(c, (topic, 0, 3)) == [(topic, 0, 0, 3)]
    with Cluster(broker.bootstrap) as cluster:
        with pytest.raises(LogStartMovedError) as e:
            list(cluster.read_range_raw(OffsetRange(topic, 0, 0, 6)))
        assert isinstance(e.value, DataLossError) and (e.value.offset, e.value.log_start) == (0, 3)
        read = [r.offset for _h, recs in cluster.read_range(OffsetRange(topic, 0, 0, 6), fail_on_data_loss=False)
                for r in recs]
        assert read == [3, 4, 5]  # failOnDataLoss=false: from the log start, as before
        # Past the log end is no moved log start: a plain data loss.
        with pytest.raises(DataLossError) as e:
            list(cluster.read_range_raw(OffsetRange(topic, 0, 7, 9)))
        assert not isinstance(e.value, LogStartMovedError)


def test_another_cluster_starts_a_fresh_export(spark, broker, broker_factory, tmp_path, caplog):  # noqa: F811
    other = broker_factory()
    copy, g_here, g_there = unique("state-copy"), unique("ga"), unique("gb")
    for bs, group, n in ((broker.bootstrap, g_here, 3), (other.bootstrap, g_there, 1)):
        with RawClient(bs) as c:
            tid = create_topic(c, "data-" + copy, 1)
            create_topic(c, copy, 1)
            for i in range(n):
                produce_state_records(c, copy, 0, [snapshot(group, tid, 0, start=i)])
    export_dir = tmp_path / "export"
    first = export_share_state(spark, broker.bootstrap, export_dir, topic=copy)
    with Cluster(broker.bootstrap) as c1, Cluster(other.bootstrap) as c2:
        ids = (c1.cluster_id(), c2.cluster_id())
    assert ids[0] and ids[1] and ids[0] != ids[1] and first.cluster_id == ids[0]
    commit = json.loads((export_dir / COMMIT_FILE).read_text())
    assert commit["cluster_id"] == ids[0] and commit["topic_id"]

    # A commit file from before the cluster id was recorded: kept, and the id recorded.
    for k in ("cluster_id", "topic_id"):
        del commit[k]
    (export_dir / COMMIT_FILE).write_text(json.dumps(commit))
    again = export_share_state(spark, broker.bootstrap, export_dir, topic=copy)
    assert (again.run, again.fresh, again.runs) == (None, None, ["run-00001"])
    assert json.loads((export_dir / COMMIT_FILE).read_text())["cluster_id"] == ids[0]

    with caplog.at_level("WARNING", logger="spark_jobs.export"):
        moved = export_share_state(spark, other.bootstrap, export_dir, topic=copy)
    assert keys(spark, export_dir) == [(g_there, 0)]
    assert [r["start_offset"] for r in read_export(spark, export_dir).collect()] == [0]
    assert moved.fresh and ids[0] in moved.fresh and ids[1] in moved.fresh
    assert any("fresh export" in r.getMessage() for r in caplog.records)
    assert moved.runs == [moved.run] == ["run-00002"] and moved.next_offsets == {0: 1}
    assert not (export_dir / "run-00001").exists()
    assert json.loads((export_dir / COMMIT_FILE).read_text())["cluster_id"] == ids[1]


@pytest.mark.parametrize("prune_to", [1, 2])
def test_a_prune_after_newer_snapshots_reads_the_partition_up_to_its_new_end(
        spark, broker, tmp_path, monkeypatch, prune_to):  # noqa: F811
    """Once the run planned its ranges, the coordinator snapshots both keys again (a cold
    snapshot, or the update count) and prunes: to gb's old snapshot (1), or past both old ones
    (2, the planned end). The state is in the records after the planned end: reading the
    partition again only up to that end would lose ga (and gb)."""
    copy, tid, ga, gb = two_snapshots(broker)
    real = export_mod._pack
    pruned = []

    def plan_then_snapshot_and_prune(*args):
        if not pruned:
            with RawClient(broker.bootstrap) as c:
                produce_state_records(c, copy, 0, [snapshot(ga, tid, 0, start=2, dcc=1, epoch=1)])  # 2
                produce_state_records(c, copy, 0, [snapshot(gb, tid, 0, start=3, dcc=0, epoch=1)])  # 3
                pruned.append(delete_records(c, (copy, 0, prune_to)))
        return real(*args)

    monkeypatch.setattr(export_mod, "_pack", plan_then_snapshot_and_prune)
    export_dir = tmp_path / "export"
    result = export_share_state(spark, broker.bootstrap, export_dir, topic=copy)
    assert pruned == [[(copy, 0, 0, prune_to)]]
    assert keys(spark, export_dir) == sorted([(ga, 0), (gb, 0)])
    assert result.rebuilt == {0: prune_to} and result.next_offsets == {0: 4}
