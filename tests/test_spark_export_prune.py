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

import pytest

from tests.test_spark_support import create_topic, produce_state_records, spark, unique  # noqa: F401

pytestmark = pytest.mark.spark

from protocol.coordinator_records.share_snapshot_key import ShareSnapshotKey  # noqa: E402
from spark_jobs.export import COMMIT_FILE, read_export  # noqa: E402
from spark_jobs.report import build_report  # noqa: E402
from tests.raw_client import RawClient  # noqa: E402
from tests.test_delete_records import delete_records  # noqa: E402
from tests.test_share_wire_support import produce_batches  # noqa: E402
from tests.test_spark_state import read_csv, snapshot, update  # noqa: E402


def tombstone(group, tid, p):
    return (ShareSnapshotKey(group, tid, p), None)


def lag_rows(out):
    return {(r["group"], r["topic"], r["partition"]): (r["start_offset"], r["delivery_complete_count"], r["lag"])
            for r in read_csv(out / "lag.csv")}


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
