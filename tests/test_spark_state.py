"""Share-state records as typed rows: decoding with and without the tagged DeliveryCompleteCount,
the round trip back to the coordinator's records, and the export and report over hand-built
records produced into a copy of ``__share_group_state`` (clients may not produce to the real
one), including the incremental export."""

from __future__ import annotations

import csv
import json
import random
import time
import uuid

import numpy as np
import pytest

from tests.test_spark_support import create_topic, produce_state_records, spark, unique  # noqa: F401

pytestmark = pytest.mark.spark

from protocol import coordinator_serde  # noqa: E402
from protocol.coordinator_records.share_snapshot_key import ShareSnapshotKey  # noqa: E402
from protocol.coordinator_records.share_snapshot_value import ShareSnapshotValue  # noqa: E402
from protocol.coordinator_records.share_snapshot_value import StateBatch as SB  # noqa: E402
from protocol.coordinator_records.share_update_key import ShareUpdateKey  # noqa: E402
from protocol.coordinator_records.share_update_value import ShareUpdateValue  # noqa: E402
from protocol.coordinator_records.share_update_value import StateBatch as UB  # noqa: E402
from protocol.coordinator_records.consumer_group_metadata_key import ConsumerGroupMetadataKey  # noqa: E402
from protocol.records import Record, build_batch  # noqa: E402
from protocol.uuids import uuid_to_str  # noqa: E402
from spark_jobs.export import COMMIT_FILE, export_share_state, read_export  # noqa: E402
from spark_jobs.report import build_report  # noqa: E402
from spark_jobs.state_rows import StateRowBuilder, _same_keys, to_record  # noqa: E402
from tests.raw_client import RawClient  # noqa: E402
from tests.test_produce_support import batch, produce  # noqa: E402
from tests.test_spark_lag import parse  # noqa: E402

TID = uuid.UUID("0b8c3f0e-6a53-4c1e-9d0a-6f1f2b3c4d5e")
ACK, ARCHIVED = 2, 4


def snapshot(group, tid, p, *, start, dcc=-1, batches=(), epoch=0, state_epoch=1):
    return (ShareSnapshotKey(group, tid, p), ShareSnapshotValue(
        snapshot_epoch=epoch, state_epoch=state_epoch, leader_epoch=3, start_offset=start,
        delivery_complete_count=dcc, create_timestamp=111, write_timestamp=222,
        state_batches=[SB(*b) for b in batches]))


def update(group, tid, p, *, start, dcc=-1, batches=()):
    return (ShareUpdateKey(group, tid, p), ShareUpdateValue(
        snapshot_epoch=0, leader_epoch=4, start_offset=start, delivery_complete_count=dcc,
        state_batches=[UB(*b) for b in batches]))


def raw_records(records, first_offset=0):
    return [Record(first_offset + i, 1_700_000_000_000 + i, coordinator_serde.encode_key(k),
                   coordinator_serde.encode_value(v), []) for i, (k, v) in enumerate(records)]


def test_snapshots_and_updates_decode_with_and_without_the_tagged_count():
    records = [
        snapshot("g", TID, 0, start=5, dcc=3, batches=[(6, 8, ACK, 1)]),
        snapshot("g", TID, 1, start=7),                    # no tagged field: -1
        update("g", TID, 0, start=-1, dcc=4, batches=[(9, 9, ARCHIVED, 5)]),
        update("h", TID, 2, start=2),                      # no tagged field: -1
        (ShareSnapshotKey("g", TID, 1), None),             # tombstone
    ]
    raws = raw_records(records)
    # The tagged field is on the wire exactly when the count is known (Kafka's encoding).
    assert raws[0].value != coordinator_serde.encode_value(snapshot("g", TID, 0, start=5, batches=[(6, 8, ACK, 1)])[1])
    other = Record(99, 0, coordinator_serde.encode_key(ConsumerGroupMetadataKey("x")), b"\x00\x01", [])
    rows = StateRowBuilder()
    rows.add(7, [*raws[:3], other, *raws[3:]])
    assert rows.skipped == 1  # not a share-state record type: ignored, as Kafka's loader does
    table = rows.take().to_pylist()
    assert [(r["record_type"], r["tombstone"], r["group_id"], r["partition"], r["start_offset"],
             r["delivery_complete_count"]) for r in table] == [
        ("ShareSnapshot", False, "g", 0, 5, 3), ("ShareSnapshot", False, "g", 1, 7, -1),
        ("ShareUpdate", False, "g", 0, -1, 4), ("ShareUpdate", False, "h", 2, 2, -1),
        ("ShareSnapshot", True, "g", 1, None, None)]
    first = table[0]
    assert first["topic_id"] == uuid_to_str(TID) and first["state_partition"] == 7 and first["offset"] == 0
    assert (first["snapshot_epoch"], first["state_epoch"], first["leader_epoch"]) == (0, 1, 3)
    assert (first["create_timestamp"], first["write_timestamp"]) == (111, 222)
    assert first["state_batches"] == [{"first_offset": 6, "last_offset": 8, "delivery_state": ACK,
                                       "delivery_count": 1}]
    assert table[2]["state_epoch"] is None and table[2]["create_timestamp"] is None
    assert int(first["timestamp"].timestamp() * 1000) == 1_700_000_000_000
    # Back to the coordinator's records, byte for byte.
    for row, raw in zip(table, raws):
        key, value = to_record(row)
        assert coordinator_serde.encode_key(key) == raw.key
        assert coordinator_serde.encode_value(value) == raw.value


def test_a_value_that_does_not_decode_fails_loudly():
    (good,) = raw_records([update("g", TID, 0, start=1)])
    rows = StateRowBuilder()
    with pytest.raises(Exception, match="offset 0"):
        rows.add(0, [good._replace(value=good.value[:-3])])


def test_same_keys_groups_records_by_their_key_bytes():
    rng = random.Random(5)
    # keys that differ in one byte, in length only (zero padding), and a few long ones
    pool = [b"g", b"g\x00", b"g\x00\x00", b"h", bytes(8), bytes(9), b"x" * 300,
            *(rng.randbytes(rng.randint(1, 40)) for _ in range(30))]
    keys = [rng.choice(pool[:-31] if i % 2 else pool) for i in range(2000)]
    buf = b"".join(keys) + b"!"
    pos = np.cumsum([0, *map(len, keys[:-1])])
    grouped = _same_keys(np.frombuffer(buf, np.uint8), pos, np.array([len(k) for k in keys]))
    assert grouped is None  # a 300-byte key: too long to group in numpy
    short = [k for k in keys if len(k) < 300]
    buf = b"".join(short)  # the last key ends the buffer (no bytes after it to pad with)
    pos = np.cumsum([0, *map(len, short[:-1])])
    codes, firsts = _same_keys(np.frombuffer(buf, np.uint8), pos, np.array([len(k) for k in short]))
    numbered: dict[bytes, int] = {}
    assert codes.tolist() == [numbered.setdefault(k, len(numbered)) for k in short]
    assert [short[i] for i in firsts] == list(numbered)


def test_column_wise_decoding_gives_the_rows_of_the_record_by_record_path():
    rng = random.Random(9)
    tids = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(3)]
    records = []
    for i in range(600):
        g, tid, p = f"group-{rng.randint(0, 12) * 'x'}", rng.choice(tids), rng.randint(0, 40)
        make = snapshot if i % 7 == 0 else update
        records.append(make(g, tid, p, start=i, dcc=rng.choice([-1, i]), batches=[(i, i + 2, ACK, 1)]))
    raws = raw_records(records)
    buf = b"".join(build_batch(raws[i:i + 5], base_offset=i) for i in range(0, len(raws), 5))
    fast, general = StateRowBuilder(), StateRowBuilder()
    fast.add_raw(3, buf, 0, len(buf), 0, len(raws))
    general.add(3, raws)
    assert fast._pieces, "decoded column-wise"
    assert fast.take().to_pylist() == general.take().to_pylist()


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_export_and_report_from_a_copy_of_the_state_topic(spark, broker, tmp_path):  # noqa: F811
    t0 = (int(time.time() * 1000) // 1000 - 600) * 1000
    data, copy = unique("data"), unique("state-copy")
    ga, gb, gc = unique("ga"), unique("gb"), unique("gc")
    with RawClient(broker.bootstrap) as c:
        tid = create_topic(c, data, 2)
        create_topic(c, copy, 3)
        produce(c, data, batch([b"old"] * 10, timestamp_ms=t0 - 10_000), partition=0)
        produce(c, data, batch([b"new"] * 10, timestamp_ms=t0 + 1_500), partition=0)
        produce(c, data, batch([b"old"] * 5, timestamp_ms=t0 - 10_000), partition=1)
        produce_state_records(c, copy, 0, [snapshot(ga, tid, 0, start=0, dcc=0)], timestamp_ms=t0)
        produce_state_records(c, copy, 0, [update(ga, tid, 0, start=4, dcc=4, batches=[
            (5, 6, ACK, 1), (7, 7, ARCHIVED, 5), (8, 8, ARCHIVED, 2)])], timestamp_ms=t0 + 1_000)
        produce_state_records(c, copy, 1, [snapshot(gb, tid, 0, start=2)], timestamp_ms=t0)
        produce_state_records(c, copy, 1, [update(gb, tid, 1, start=1)], timestamp_ms=t0 + 2_000)
        produce_state_records(c, copy, 2, [  # one compressed batch
            snapshot(ga, tid, 1, start=3, dcc=1, batches=[(4, 4, ACK, 1)]),
            snapshot(gc, tid, 0, start=0, dcc=0), (ShareSnapshotKey(gc, tid, 0), None),
        ], compression=4, timestamp_ms=t0 + 3_000)

    out = tmp_path / "report"
    r = build_report(spark, broker.bootstrap, out, state_topic=copy)
    assert (r.exported, r.state_records) == (7, 7)
    lag = {(row["group"], row["topic"], row["partition"]): row for row in read_csv(out / "lag.csv")}
    assert list(read_csv(out / "lag.csv")[0]) == ["group", "topic", "partition", "start_offset", "log_end_offset",
                                                  "delivery_complete_count", "lag"]
    assert set(lag) == {(ga, data, "0"), (ga, data, "1"), (gb, data, "0"), (gb, data, "1")}  # gc was deleted
    assert lag[(ga, data, "0")] | {} == {"group": ga, "topic": data, "partition": "0", "start_offset": "4",
                                         "log_end_offset": "20", "delivery_complete_count": "4", "lag": "12"}
    assert lag[(ga, data, "1")]["lag"] == "1"
    assert (lag[(gb, data, "0")]["delivery_complete_count"], lag[(gb, data, "0")]["lag"]) == ("-1", "")
    assert lag[(gb, data, "1")]["lag"] == ""
    health = {(h["group"], h["partition"]): h for h in read_csv(out / "delivery_health.csv")}
    h = health[(ga, "0")]
    assert (h["acknowledged"], h["archived_rejected"], h["archived_delivery_limit"], h["redelivered"],
            h["redeliveries"]) == ("2", "1", "1", "2", "5")
    # History: the state at the end of each time bucket against the log end offset then.
    history = [row for row in read_csv(out / "lag_history.csv") if row["group"] == ga]
    assert [row["lag"] for row in history] == ["10", "2", "13"]
    assert all(row["lag"] == "" for row in read_csv(out / "lag_history.csv") if row["group"] == gb)
    page = parse((out / "report.html").read_text())
    assert page.external == []
    assert len(page.svgs) == 2  # a chart per group
    assert [len(s["polyline"]) for s in page.svgs] == [1, 0]  # gb has no known lag to draw
    lag_cells = [row for row in page.tables["lag"] if row[0] == data]
    assert ["-", "-"] == [row[-1] for row in lag_cells[2:]]

    # Incremental: a rerun with nothing new exports nothing; a new record is all the next run reads.
    again = export_share_state(spark, broker.bootstrap, out / "state-export", topic=copy)
    assert (again.run, again.records) == (None, 0)
    with RawClient(broker.bootstrap) as c:
        produce_state_records(c, copy, 0, [update(ga, tid, 0, start=10, dcc=0)], timestamp_ms=t0 + 4_000)
    r2 = build_report(spark, broker.bootstrap, out, state_topic=copy)
    assert (r2.exported, r2.state_records) == (1, 8)
    commit = json.loads((out / "state-export" / COMMIT_FILE).read_text())
    assert commit["runs"] == ["run-00001", "run-00002"]
    assert commit["next_offsets"] == {"0": 3, "1": 2, "2": 3}
    new = read_export(spark, out / "state-export").where("offset = 2 and state_partition = 0").collect()
    assert len(new) == 1 and new[0]["start_offset"] == 10
    second = spark.read.parquet(str(out / "state-export" / "run-00002")).collect()
    assert [(x["state_partition"], x["offset"]) for x in second] == [(0, 2)]
    assert {row["partition"]: row["lag"] for row in read_csv(out / "lag.csv") if row["group"] == ga} == \
        {"0": "10", "1": "1"}
