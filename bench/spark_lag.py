"""Spark lag report at 10,000,000 share-state records: ``kshare-lag-report``'s export + report
on local[2] against the same fold in one Python process, and how the Spark job scales.

Workload. A broker subprocess (127.0.0.1, a temporary data directory) holds ``--groups`` share
groups consuming ``--topics`` topics of ``--partitions`` partitions each, every group every
topic: groups x topics x partitions share-partitions (3,000 by default). Their state history,
``--records`` records (10,000,000 by default), is generated in Kafka's exact format and written
into ``__share_group_state`` with the broker's own log code (``broker.log.FileLogStore``) while
the broker is down (clients may not produce to the state topic). What the history holds is what
the share coordinator writes (``coordinator/share/shard.py``):

- each share-partition starts with the InitializeShareGroupState snapshot (start offset -1),
  then gets WriteShareGroupState v1 updates: four consumers hold acquired chunks of 1-10
  records; each write acknowledges one chunk (85% accepted, 10% partly released, 5% rejected;
  released records are redelivered later with a higher delivery count, archived at the limit
  of 5), moves the start offset to the first record not yet delivered for good and carries
  the DeliveryCompleteCount; its state batches are the request's, pruned below the start
  offset as the coordinator does (combine), so an update holds 0-3 of them;
- every 501st write of a share-partition is a full ShareSnapshot instead (``share.coordinator
  .snapshot.update.records.per.snapshot`` = 500), with snapshot epoch + 1 and the combined state;
- the leader epoch moves now and then; records go to the state partition Kafka's routing picks
  (``coordinator/share/routing.py``), a batch per persister request (1-8 share-partitions of
  one group), with CreateTime timestamps increasing over the last two hours;
- the data topics are written the same way with log end offsets a little past what every group
  has consumed (records timestamped over the same two hours), so each share-partition's lag
  (log end offset - start offset - delivery-complete count) is known to the generator.

The broker is then started (it loads the state topic and replays every key in the background;
the measurement waits for both) with pruning off, so every run reads the same 10M records.

Measured, each the median of ``--runs`` (the runs of one kind alternate with the other kinds,
so a noisy neighbour hits all of them alike):

- *spark*: ``spark_jobs.report.build_report`` (what ``kshare-lag-report`` runs) on
  ``--master`` (local[2]) from an empty output directory: export of every state record to
  Parquet over the Kafka protocol, latest state per share-partition, lag history, delivery
  health, log end offsets, lag.csv / lag.parquet / report.html. The SparkSession is started
  before (its start-up is reported separately). Then *spark rerun*: the same call again on the
  same directory (nothing new to export; the fold and the rest run again over the export).
- *single process*: one Python process reads ``__share_group_state`` over the Kafka protocol
  (Fetch, ``spark_jobs.kafka_io.Cluster``) and folds it exactly as the share coordinator loads
  a partition at start-up: ``coordinator.share.loader.PartitionLoader`` (one pass over record
  keys, keeping each key's records from its latest snapshot on) fed with the fetched bytes,
  then ``ShareCoordinatorShard.load`` + ``entries()`` (the shard's own replay of those
  records), then ListOffsets and the same lag formula (``spark_jobs.lag.lag_table``).
- every run checks that Spark's lag.parquet, the single process and the generator agree on
  every share-partition's start offset, delivery-complete count and lag (and the single
  process's state batches equal the generator's).
- *scaling* (``--scaling``): the Spark report with local[1] and local[2], and with the input
  split size (``maxOffsetsPerSplit``) and state-topic partition count varied; a different
  partition count means a second data set (``--scaling-state-partitions``) of the same size.

    .venv/bin/python bench/spark_lag.py [--records 10000000] [--runs 3] [--scaling]

Prints the machine (nproc, CPU model), Python / PySpark / Java versions, every run and the
medians. Everything runs in a temporary directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crc32c import crc32c  # noqa: E402

from coordinator.share.combiner import ACKNOWLEDGED, ARCHIVED, AVAILABLE, StateBatch, combine  # noqa: E402
from coordinator.share.routing import partition_for  # noqa: E402
from protocol import coordinator_serde  # noqa: E402
from protocol.coordinator_records.share_snapshot_key import ShareSnapshotKey  # noqa: E402
from protocol.coordinator_records.share_snapshot_value import ShareSnapshotValue  # noqa: E402
from protocol.coordinator_records.share_snapshot_value import StateBatch as SnapshotBatch  # noqa: E402
from protocol.coordinator_records.share_update_key import ShareUpdateKey  # noqa: E402
from protocol.coordinator_records.share_update_value import ShareUpdateValue  # noqa: E402
from protocol.coordinator_records.share_update_value import StateBatch as UpdateBatch  # noqa: E402
from protocol.records import HEADER, build_batch, walk_headers  # noqa: E402
from protocol.varint import write_varint  # noqa: E402

STATE_TOPIC = "__share_group_state"
RECORDS_PER_SNAPSHOT = 500          # share.coordinator.snapshot.update.records.per.snapshot
DELIVERY_COUNT_LIMIT = 5            # group.share.delivery.count.limit
CONSUMERS = 6                       # acquired chunks in flight per share-partition
SPAN_MS = 2 * 3600 * 1000           # the history's time span, ending a minute ago
DATA_BATCH_RECORDS = 100            # records per data-topic batch (a producer batch)

# --- Kafka's bytes, written directly ------------------------------------------------------------

_VERSION0 = b"\x00\x00"
_UPDATE_HEAD = struct.Struct(">hiiq")          # version, snapshot epoch, leader epoch, start offset
_SNAPSHOT_HEAD = struct.Struct(">hiiiqqq")     # version, snapshot/state/leader epoch, start, create, write
_BATCH = struct.Struct(">qqbhx")               # a state batch + its empty tagged fields
_DCC = struct.Struct(">BBBi")                  # one tagged field: tag 0, size 4, the count


def _state_batches(batches) -> bytes:
    n = len(batches)
    head = bytes((n + 1,)) if n < 127 else _uvarint(n + 1)
    return head + b"".join([_BATCH.pack(*b) for b in batches])


def _uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _tags(dcc: int) -> bytes:
    return b"\x00" if dcc == -1 else _DCC.pack(1, 0, 4, dcc)


def encode_update(snapshot_epoch, leader_epoch, start, dcc, batches) -> bytes:
    return _UPDATE_HEAD.pack(0, snapshot_epoch, leader_epoch, start) + _state_batches(batches) + _tags(dcc)


def encode_snapshot(snapshot_epoch, state_epoch, leader_epoch, start, dcc, create_ts, write_ts, batches) -> bytes:
    return (_SNAPSHOT_HEAD.pack(0, snapshot_epoch, state_epoch, leader_epoch, start, create_ts, write_ts)
            + _state_batches(batches) + _tags(dcc))


def _varint(v: int) -> bytes:
    out = bytearray()
    write_varint(out, v)
    return bytes(out)


_VARINTS = [_varint(i) for i in range(4096)]


def encode_batch(records: list[tuple[bytes, bytes]], timestamp_ms: int) -> bytes:
    """One v2 batch as the share coordinator's journal writes it (``build_batch``: CreateTime
    = now on every record, producer id/epoch -1, base sequence 0, no compression)."""
    parts = []
    for i, (key, value) in enumerate(records):
        n = len(value)
        body = b"".join((b"\x00\x00", _VARINTS[i], _VARINTS[len(key)], key,
                         _VARINTS[n] if n < 4096 else _varint(n), value, b"\x00"))
        n = len(body)
        parts.append(_VARINTS[n] if n < 4096 else _varint(n))
        parts.append(body)
    return _finish_batch(b"".join(parts), len(records), timestamp_ms, timestamp_ms, base_sequence=0)


def _finish_batch(payload: bytes, count: int, base_ts: int, max_ts: int, *, base_sequence: int) -> bytes:
    out = bytearray(HEADER.size)
    out += payload
    HEADER.pack_into(out, 0, 0, len(out) - 12, -1, 2, 0, 0, count - 1, base_ts, max_ts, -1, -1, base_sequence,
                     count)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


# --- the share-partitions' histories -----------------------------------------------------------

def canonical(batches, start: int) -> list[tuple]:
    """``combine((), batches, start)`` for non-overlapping batches: pruned below the start
    offset, sorted, neighbours with the same state and count joined."""
    if len(batches) == 1:
        f, l, s, c = batches[0]
        if start == -1 or f >= start:
            return batches
        return [] if l < start else [(start, l, s, c)]
    out: list[list] = []
    for f, l, s, c in sorted(batches):
        if start != -1:
            if l < start:
                continue
            if f < start:
                f = start
        if out and out[-1][1] == f - 1 and out[-1][2] == s and out[-1][3] == c:
            out[-1][1] = l
        else:
            out.append([f, l, s, c])
    return [tuple(b) for b in out]


class Key:
    """One share-partition as its share-partition leader and the coordinator see it."""

    __slots__ = ("gi", "ti", "p", "snap_key", "update_key", "inited", "end", "outstanding", "released",
                 "state", "start", "dcc", "leader", "snapshot_epoch", "updates", "create_ts", "records",
                 "stats")

    def __init__(self, gi, ti, p, snap_key, update_key):
        self.gi, self.ti, self.p = gi, ti, p
        self.snap_key, self.update_key = snap_key, update_key
        self.inited = False
        self.end = 0                  # next offset never delivered
        self.outstanding: list = []   # acquired chunks [first, last, delivery count]
        self.released: list = []      # released ranges waiting for redelivery [first, last, count]
        self.state: list = []         # the persisted state batches (canonical)
        self.start = -1
        self.dcc = -1
        self.leader = 0
        self.snapshot_epoch = 0
        self.updates = 0              # updates since the last snapshot
        self.create_ts = 0
        self.records = 0
        self.stats = [0, 0, 0]  # snapshots, updates, state batches in updates

    def write(self, rnd, ts: int) -> tuple[bytes, bytes]:
        """The next record the coordinator writes for this share-partition: (key, value).
        ``rnd``: a ``random.Random().random``."""
        self.records += 1
        if not self.inited:  # InitializeShareGroupState: snapshot epoch 0, start offset -1, count -1
            self.inited = True
            self.create_ts = ts
            self.stats[0] += 1
            while len(self.outstanding) < CONSUMERS:
                self._acquire(rnd)
            return self.snap_key, encode_snapshot(0, 0, 0, -1, -1, ts, ts, [])
        # One consumer acknowledges its chunk.
        outstanding = self.outstanding
        f, l, c = outstanding.pop(int(rnd() * len(outstanding)))
        r = rnd()
        if r < 0.80:
            new = [(f, l, ACKNOWLEDGED, c)]
        elif r < 0.95 and l > f and c < DELIVERY_COUNT_LIMIT:
            cut = f + int(rnd() * (l - f))
            new = [(f, cut, ACKNOWLEDGED, c), (cut + 1, l, AVAILABLE, c)]
            self.released.append((cut + 1, l, c))
        else:
            new = [(f, l, ARCHIVED, c)]
        self._acquire(rnd)
        if rnd() < 0.0005:
            self.leader += 1  # the partition's leadership moved
        # The persisted state: the acknowledged range replaces what the state had there (a
        # redelivered range was AVAILABLE with a lower delivery count; a new one was not there).
        if c > 1:
            kept = []
            for b in self.state:
                if b[1] < f or b[0] > l:
                    kept.append(b)
                    continue
                if b[0] < f:
                    kept.append((b[0], f - 1, b[2], b[3]))
                if b[1] > l:
                    kept.append((l + 1, b[1], b[2], b[3]))
        else:
            kept = self.state
        start = self.end
        for o in outstanding:
            if o[0] < start:
                start = o[0]
        for o in self.released:
            if o[0] < start:
                start = o[0]
        self.start = start
        self.state = state = canonical(kept + new, start)
        dcc = 0
        for b in state:
            if b[2] != AVAILABLE:
                dcc += b[1] - b[0] + 1
        self.dcc = dcc
        if self.updates >= RECORDS_PER_SNAPSHOT:
            self.updates = 0
            self.snapshot_epoch += 1
            self.stats[0] += 1
            return self.snap_key, encode_snapshot(self.snapshot_epoch, 0, self.leader, start, dcc,
                                                  self.create_ts, ts, state)
        self.updates += 1
        written = canonical(new, start)
        self.stats[1] += 1
        self.stats[2] += len(written)
        return self.update_key, encode_update(self.snapshot_epoch, self.leader, start, dcc, written)

    def _acquire(self, rnd) -> None:
        """The freed consumer acquires: a released range again (count + 1) or new records."""
        if self.released and rnd() < 0.5:
            f, l, c = self.released.pop(0)
            self.outstanding.append((f, l, c + 1))
        else:
            m = 1 + int(rnd() * 10)
            self.outstanding.append((self.end, self.end + m - 1, 1))
            self.end += m


def generate_partition(job: tuple) -> tuple:
    """Worker: the history of one state partition, ``count`` records, as record batches.

    Returns (state partition, batch bytes, per-key final state) where the final state is
    (group index, topic index, partition, end, start, dcc, state batches, records)."""
    sp, keys, count, t0_ms, seed = job
    rng = random.Random(seed)
    by_group: dict[int, list[Key]] = {}
    for gi, ti, p, group, tid in keys:
        snap_key = coordinator_serde.encode_key(ShareSnapshotKey(group, tid, p))
        update_key = coordinator_serde.encode_key(ShareUpdateKey(group, tid, p))
        by_group.setdefault(gi, []).append(Key(gi, ti, p, snap_key, update_key))
    groups = list(by_group.values())
    out = []
    written = 0
    rnd = rng.random
    while written < count:
        members = groups[int(rnd() * len(groups))]
        n = min(1 + int(rnd() * 8), len(members), count - written)
        ts = t0_ms + (written * SPAN_MS) // count
        records = [k.write(rnd, ts) for k in rng.sample(members, n)]
        out.append(encode_batch(records, ts))
        written += n
    final = [(k.gi, k.ti, k.p, k.end, k.start, k.dcc, k.state, k.records)
             for ks in groups for k in ks]
    stats = [sum(k.stats[i] for ks in groups for k in ks) for i in range(3)]
    return sp, b"".join(out), final, stats


def check_encoders(rng: random.Random) -> None:
    """Our direct encoding against the coordinator's (``coordinator_serde`` + ``build_batch``)."""
    import uuid
    tid = uuid.UUID(int=rng.getrandbits(128))
    for _ in range(200):
        batches = [(rng.randint(0, 1 << 40), rng.randint(0, 1 << 40), rng.choice((0, 2, 4)), rng.randint(1, 5))
                   for _ in range(rng.randint(0, 4))]
        dcc = rng.choice((-1, rng.randint(0, 1 << 20)))
        args = (rng.randint(0, 99), rng.randint(0, 9), rng.randint(-1, 1 << 40))
        assert encode_update(*args, dcc, batches) == coordinator_serde.encode_value(ShareUpdateValue(
            snapshot_epoch=args[0], leader_epoch=args[1], start_offset=args[2], delivery_complete_count=dcc,
            state_batches=[UpdateBatch(*b) for b in batches]))
        assert encode_snapshot(args[0], 3, args[1], args[2], dcc, 17, 99, batches) == \
            coordinator_serde.encode_value(ShareSnapshotValue(
                snapshot_epoch=args[0], state_epoch=3, leader_epoch=args[1], start_offset=args[2],
                delivery_complete_count=dcc, create_timestamp=17, write_timestamp=99,
                state_batches=[SnapshotBatch(*b) for b in batches]))
        nb = [(rng.randint(0, 60), rng.randint(0, 3)) for _ in range(rng.randint(0, 5))]
        flat, pos = [], 0
        for gap, size in nb:  # non-overlapping batches
            flat.append((pos + gap, pos + gap + size, rng.choice((0, 2, 4)), rng.randint(1, 2)))
            pos += gap + size + 1
        start = rng.choice((-1, rng.randint(0, pos + 1)))
        assert canonical(flat, start) == [tuple(b) for b in combine((), [StateBatch(*b) for b in flat], start)]
    for n in (1, 3, 8):
        recs = [(coordinator_serde.encode_key(ShareUpdateKey(f"g{i}", tid, i)), b"v" * (i * 50)) for i in range(n)]
        ts = 1_700_000_000_000 + n
        assert encode_batch(recs, ts) == build_batch([(k, v, None) for k, v in recs], producer_id=-1,
                                                     producer_epoch=-1, base_sequence=0, timestamp_ms=ts)


def encode_data_batches(log_end: int, t0_ms: int) -> tuple[bytes, int]:
    """A data partition's records ``[0, log_end)``: batches of ``DATA_BATCH_RECORDS`` one-byte
    records, timestamped evenly over the history's span (as a producer would have written
    them); returns (bytes, batches)."""
    out = []
    bodies: dict[int, bytes] = {}
    n_batches = 0
    for first in range(0, log_end, DATA_BATCH_RECORDS):
        n = min(DATA_BATCH_RECORDS, log_end - first)
        body = bodies.get(n)
        if body is None:
            parts = []
            for i in range(n):
                rec = b"\x00\x00" + _VARINTS[i] + b"\x01" + _VARINTS[1] + b"x\x00"  # null key, value "x"
                parts.append(_VARINTS[len(rec)] + rec)
            body = bodies[n] = b"".join(parts)
        ts = t0_ms + (first * SPAN_MS) // max(1, log_end)
        out.append(_finish_batch(body, n, ts, ts, base_sequence=-1))
        n_batches += 1
    return b"".join(out), n_batches


# --- the data set on disk, and the broker serving it --------------------------------------------

class DataSet:
    """A broker data directory holding the generated history, and what the generator knows."""

    def __init__(self, data_dir: Path, state_partitions: int, records: int) -> None:
        self.data_dir = data_dir
        self.state_partitions = state_partitions
        self.records = records
        self.topics: dict[str, object] = {}      # name -> topic id
        self.expected: dict[tuple, tuple] = {}   # (group, topic, partition) -> (start, dcc, lag, batches)
        self.log_ends: dict[tuple, int] = {}     # (topic, partition) -> log end offset
        self.state_bytes = 0
        self.generate_s = 0.0
        self.batches = 0
        self.stats = [0, 0, 0]                   # snapshots, updates, state batches in updates


def broker_overrides(state_partitions: int) -> dict[str, str]:
    return {
        "share.coordinator.state.topic.num.partitions": str(state_partitions),
        # Pruning off: every run must read the same records (the default would delete what
        # the coordinator no longer needs, e.g. at the first interval during a run).
        "share.coordinator.state.topic.prune.interval.ms": str((1 << 31) - 1),
    }


def build_data_set(tmp: Path, args, state_partitions: int) -> DataSet:
    import asyncio
    import json

    from broker.config import BrokerConfig
    from broker.log import FileLogStore, LogConfig
    from protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
    from protocol.uuids import uuid_from_str
    from tests.broker_process import BrokerProcess
    from tests.raw_client import RawClient

    data = tmp / f"data-{state_partitions}"
    ds = DataSet(data, state_partitions, args.records)
    overrides = broker_overrides(state_partitions)
    b = BrokerProcess(data, overrides, log_level="INFO")
    try:
        b.start()  # creates __share_group_state (empty)
        names = [f"bench-topic-{i}" for i in range(args.topics)]
        with RawClient(b.bootstrap, timeout_s=60) as c:
            resp = c.request(19, 7, CreateTopicsRequest(topics=[
                CreatableTopic(name=n, num_partitions=args.partitions, replication_factor=1) for n in names],
                timeout_ms=30000))
            for t in resp.topics:
                assert t.error_code == 0, (t.name, t.error_code, t.error_message)
                ds.topics[t.name] = t.topic_id
        assert b.stop() == 0
    finally:
        b.kill()

    groups = [f"bench-group-{i}" for i in range(args.groups)]
    tids = [ds.topics[n] for n in names]
    by_sp: dict[int, list] = {}
    for gi, g in enumerate(groups):
        for ti, tid in enumerate(tids):
            for p in range(args.partitions):
                by_sp.setdefault(partition_for(g, tid, p, state_partitions), []).append((gi, ti, p, g, tid))
    n_keys = len(groups) * len(tids) * args.partitions
    counts, left = {}, args.records
    sps = sorted(by_sp)
    for i, sp in enumerate(sps):  # records in proportion to the share-partitions each partition owns
        counts[sp] = left if i == len(sps) - 1 else round(args.records * len(by_sp[sp]) / n_keys)
        left -= counts[sp]
    t0_ms = (int(time.time() * 1000) // 1000) * 1000 - SPAN_MS - 60_000
    jobs = [(sp, by_sp[sp], counts[sp], t0_ms, args.seed * 1_000_003 + sp) for sp in sps]

    props = {"log.dirs": str(data), **overrides}
    raw = BrokerConfig(props).raw_properties()
    registry = json.loads((data / "kshare-topics.json").read_text())["topics"]
    store = FileLogStore(str(data), default_config=LogConfig.from_properties(raw, {}))
    for name, t in registry.items():  # what the broker's TopicRegistry does at start-up
        for p in range(int(t["partitions"])):
            lg = store.create(name, p, uuid_from_str(t["id"]), LogConfig.from_properties(raw, t.get("configs", {})))
            assert lg.end_offset == 0, (name, p, lg.end_offset)

    def append(lg, blob: bytes) -> None:
        """Append whole batches, a few MiB at a time, as the broker's appends do (leader epoch 0)."""
        pos, end = 0, len(blob)
        while pos < end:
            headers, stop = [], pos
            for q, h in walk_headers(blob, pos):
                if stop - pos >= 4 << 20:
                    break
                headers.append(h)
                stop = q + h.size
            lg.append(bytearray(blob[pos:stop]), headers, leader_epoch=0)
            pos = stop

    t = time.perf_counter()
    ends: dict[tuple, int] = {}
    finals = []
    workers = max(1, min(args.gen_workers, len(jobs)))
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        for sp, blob, final, stats in pool.imap_unordered(generate_partition, jobs):
            for i in range(3):
                ds.stats[i] += stats[i]
            append(store.get(STATE_TOPIC, sp), blob)
            ds.state_bytes += len(blob)
            ds.batches += sum(1 for _ in walk_headers(blob))
            finals.extend(final)
    rng = random.Random(args.seed)
    for gi, ti, p, end, start, dcc, state, records in finals:
        ends[(ti, p)] = max(ends.get((ti, p), 0), end)
    for (ti, p), end in sorted(ends.items()):
        leo = end + rng.randint(0, 2000)  # a backlog no group has been delivered yet
        ds.log_ends[(names[ti], p)] = leo
        blob, _ = encode_data_batches(leo, t0_ms)
        append(store.get(names[ti], p), blob)
    for gi, ti, p, end, start, dcc, state, records in finals:
        leo = ds.log_ends[(names[ti], p)]
        ds.expected[(groups[gi], names[ti], p)] = (start, dcc, leo - start - dcc, [tuple(b) for b in state])
    asyncio.run(store.close())
    ds.generate_s = time.perf_counter() - t
    return ds


def wait_for_log(b, text: str, timeout_s: float, after: int = 0) -> str:
    """The first broker log line holding ``text`` after character ``after`` of the log."""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = [ln for ln in b.log()[after:].splitlines() if text in ln]
        if lines:
            return lines[-1]
        if not b.alive():
            raise RuntimeError(f"broker exited; log:\n{b.log()[-5000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {text!r} in the broker log after {timeout_s} s")
        time.sleep(0.5)


def start_broker(ds: DataSet):
    """The broker on the data set, once it has loaded the state topic and replayed every key
    in the background (so that no load work overlaps a measurement)."""
    from tests.broker_process import BrokerProcess

    b = BrokerProcess(ds.data_dir, broker_overrides(ds.state_partitions), log_level="INFO")
    after = len(b.log())  # the log file goes on from the broker that created the topics
    t = time.perf_counter()
    b.start(timeout_s=900)
    loaded = wait_for_log(b, f"loaded {STATE_TOPIC}", 900, after)
    replayed = wait_for_log(b, "loaded key(s) in the background", 1800, after)
    return b, time.perf_counter() - t, loaded.split(": ", 1)[-1], replayed.split(": ", 1)[-1]


# --- the single-process fold -------------------------------------------------------------------

class _Fetched:
    """One fetched state partition, shaped like the ``PartitionLog`` the coordinator's loader
    reads: one segment holding every batch."""

    class _Index:
        @staticmethod
        def lookup(_relative: int) -> int:
            return 0

    class _Data:
        def __init__(self, buf: bytes) -> None:
            self.buf = buf

        def read(self, pos: int, size: int) -> bytes:
            return self.buf[pos:pos + size]

    class _Segment:
        def __init__(self, buf: bytes, base: int, end: int) -> None:
            self.base_offset, self.next_offset, self.size = base, end, len(buf)
            self.index = _Fetched._Index()
            self.data = _Fetched._Data(buf)

    def __init__(self, buf: bytes, start: int, end: int, base: int) -> None:
        self.start_offset, self.end_offset = start, end
        self.segments = [self._Segment(buf, base, end)]


def single_process_fold(bootstrap: str):
    """Fetch ``__share_group_state`` and fold it as the share coordinator loads a partition;
    returns ({(group, topic, partition): (start, dcc, lag, batches)}, seconds, phase seconds)."""
    import pandas as pd

    from coordinator.share.loader import PartitionLoader
    from coordinator.share.shard import ShareCoordinatorShard
    from protocol.errors import KafkaError
    from protocol.uuids import uuid_to_str
    from spark_jobs.kafka_io import LATEST_TIMESTAMP, Cluster
    from spark_jobs.lag import lag_table

    t0 = time.perf_counter()
    fetch_s = fold_s = 0.0
    rows = []
    with Cluster(bootstrap) as cluster:
        earliest, latest = cluster.offset_bounds(STATE_TOPIC)
        for sp in sorted(latest):
            t = time.perf_counter()
            chunks, offset, base = [], earliest[sp], None
            while offset < latest[sp]:
                p = cluster.fetch_once(STATE_TOPIC, sp, offset, 8 << 20)
                if p.error_code:
                    raise KafkaError(p.error_code, f"Fetch {STATE_TOPIC}-{sp} at {offset}")
                raw = bytes(p.records)
                stop = 0
                for pos, h in walk_headers(raw):
                    if base is None:
                        base = h.base_offset
                    stop = pos + h.size
                    offset = h.last_offset + 1
                assert stop, f"no complete batch at {STATE_TOPIC}-{sp} offset {offset}"
                chunks.append(raw[:stop])
            buf = b"".join(chunks)
            t2 = time.perf_counter()
            fetch_s += t2 - t
            if base is None:
                continue
            loader = PartitionLoader(_Fetched(buf, earliest[sp], latest[sp], base))
            while loader.step():
                pass
            loaded, last_offset = loader.result()
            shard = ShareCoordinatorShard()
            shard.load(loaded, last_offset)
            for key, entry in shard.entries().items():
                st = entry.state
                rows.append({"group_id": key.group_id, "topic_id": uuid_to_str(key.topic_id),
                             "partition": key.partition, "start_offset": st.start_offset,
                             "delivery_complete_count": st.delivery_complete_count,
                             "leader_epoch": st.leader_epoch, "state_epoch": st.state_epoch,
                             "batches": [tuple(b) for b in st.state_batches]})
            fold_s += time.perf_counter() - t2
        t = time.perf_counter()
        names = {uuid_to_str(tid): name for tid, name in cluster.topic_names_by_id().items()}
        wanted = {(names[r["topic_id"]], r["partition"]) for r in rows if r["topic_id"] in names}
        leo = cluster.list_offsets({tp: LATEST_TIMESTAMP for tp in wanted}) if wanted else {}
    latest_df = pd.DataFrame(rows)
    table = lag_table(latest_df, names, leo)
    batches = {(r["group_id"], names.get(r["topic_id"], r["topic_id"]), r["partition"]): r["batches"] for r in rows}
    out = {(r.group, r.topic, int(r.partition)): (int(r.start_offset), int(r.delivery_complete_count),
                                                   None if pd.isna(r.lag) else int(r.lag),
                                                   batches[(r.group, r.topic, int(r.partition))])
           for r in table.itertuples(index=False)}
    lag_s = time.perf_counter() - t
    return out, time.perf_counter() - t0, {"fetch": fetch_s, "fold": fold_s, "lag": lag_s}


# --- the Spark report --------------------------------------------------------------------------

class PhaseTimer:
    """Stands in for ``spark_jobs.progress.Progress``: remembers when each phase started."""

    def __init__(self) -> None:
        self.marks: list[tuple[str, float]] = []

    def step(self, phase: str) -> None:
        self.marks.append((phase, time.perf_counter()))

    def phases(self, end: float) -> dict[str, float]:
        out = {}
        for (name, t), (_, t2) in zip(self.marks, [*self.marks[1:], ("end", end)]):
            out[name.split(" ")[0]] = t2 - t
        return out


def spark_report(spark, bootstrap: str, out: Path, *, max_offsets_per_split: int | None = None):
    """``build_report`` as ``kshare-lag-report`` runs it; returns (seconds, phases, result)."""
    from spark_jobs.report import build_report

    timer = PhaseTimer()
    t = time.perf_counter()
    result = build_report(spark, bootstrap, out, progress=timer, max_offsets_per_split=max_offsets_per_split)
    end = time.perf_counter()
    return end - t, timer.phases(end), result


def spark_lag_rows(out: Path) -> dict[tuple, tuple]:
    import pandas as pd

    table = pd.read_parquet(out / "lag.parquet")
    return {(r.group, r.topic, int(r.partition)): (int(r.start_offset), int(r.delivery_complete_count),
                                                    None if pd.isna(r.lag) else int(r.lag))
            for r in table.itertuples(index=False)}


def check_agree(name: str, got: dict, expected: dict, *, batches: bool) -> None:
    """Every share-partition's (start offset, delivery-complete count, lag) as the generator
    wrote it (and, when ``batches``, the state batches)."""
    assert set(got) == set(expected), f"{name}: {len(set(got) ^ set(expected))} share-partitions differ"
    width = 4 if batches else 3
    bad = [k for k, v in expected.items() if tuple(got[k][:width]) != tuple(v[:width])]
    assert not bad, f"{name}: {len(bad)} share-partitions differ, e.g. {bad[0]}: {got[bad[0]]} != {expected[bad[0]]}"


def new_session(master: str):
    from pyspark.sql import SparkSession

    from spark_jobs.session import spark_session

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    t = time.perf_counter()
    spark = spark_session(master, app_name="kshare-lag-report")
    spark.range(1).count()  # the JVM and a first job, as any first run pays
    return spark, time.perf_counter() - t


# --- where the CPU went ------------------------------------------------------------------------

def _own_processes() -> list[int]:
    """This process's descendants (the Spark JVM and its Python workers, generator pools)."""
    parent = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                parent[int(pid)] = int(stat[stat.rindex(")") + 2:].split()[1])
            except (OSError, ValueError):
                continue
    me, out = os.getpid(), []
    for pid in parent:
        p = parent[pid]
        while p and p != me and p in parent:
            p = parent[p]
        if p == me:
            out.append(pid)
    return out


class CpuMeter:
    """CPU seconds over a run: ours (driver, JVM, Python workers), the broker's, and what
    everything else on the machine took meanwhile (other people's work on a shared box)."""

    def __init__(self, broker_pid: int) -> None:
        from bench._common import busy_cpu_seconds, cpu_seconds

        self._busy, self._cpu, self.broker_pid = busy_cpu_seconds, cpu_seconds, broker_pid

    def _sample(self) -> tuple[dict[int, float], float, float]:
        ours = {0: time.process_time()}
        for pid in _own_processes():
            if pid == self.broker_pid:
                continue  # a child too, but counted on its own
            try:
                ours[pid] = self._cpu(pid)
            except (OSError, ValueError, IndexError):
                pass
        return ours, self._cpu(self.broker_pid), self._busy()

    def __enter__(self) -> CpuMeter:
        self._start = self._sample()
        return self

    def __exit__(self, *exc) -> None:
        (ours0, broker0, busy0), (ours1, broker1, busy1) = self._start, self._sample()
        # Processes that ended meanwhile (idle Python workers) are left out.
        self.ours = sum(c - ours0.get(pid, 0.0) for pid, c in ours1.items())
        self.broker = broker1 - broker0
        self.other = max(0.0, (busy1 - busy0) - self.ours - self.broker)


# --- the benchmark -----------------------------------------------------------------------------

def machine_info() -> list[str]:
    import pyarrow
    import pyspark

    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    mem = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / (1 << 20):.1f} GiB"
    except OSError:
        pass
    return [
        f"machine: nproc {os.cpu_count()} ({len(os.sched_getaffinity(0))} usable), CPU {cpu}, memory {mem}",
        f"Python {platform.python_version()}, PySpark {pyspark.__version__}, pyarrow {pyarrow.__version__}, "
        f"Java: {java[0] if java else '?'}",
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=10_000_000, help="state records (default 10,000,000)")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--topics", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=150, help="partitions per data topic")
    ap.add_argument("--state-partitions", type=int, default=50,
                    help="share.coordinator.state.topic.num.partitions (Kafka's default 50)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scaling", action="store_true", help="also local[1], other split sizes and partition counts")
    ap.add_argument("--scaling-runs", type=int, default=1, help="runs of each scaling configuration")
    ap.add_argument("--split-sizes", default="25000,100000",
                    help="maxOffsetsPerSplit values for --scaling (the default is 1,000,000: one split per "
                         "state partition here)")
    ap.add_argument("--scaling-state-partitions", default="10",
                    help="other state-topic partition counts for --scaling (comma-separated; each a new data set)")
    ap.add_argument("--gen-workers", type=int, default=2, help="processes generating the history")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    for line in machine_info():
        print(line, flush=True)
    check_encoders(random.Random(args.seed))
    n_keys = args.groups * args.topics * args.partitions
    tmp = Path(tempfile.mkdtemp(prefix="kshare-bench-spark-"))
    broker = None
    spark = None
    results: dict[str, list[dict]] = {}  # label -> runs: {"s": seconds, phases..., cpu...}
    info: list[str] = []

    def measured(label: str, fn):
        with CpuMeter(broker.proc.pid) as cpu:
            seconds, phase = fn()
        run = {"s": seconds, **phase, "cpu ours": cpu.ours, "cpu broker": cpu.broker, "cpu other": cpu.other}
        results.setdefault(label, []).append(run)
        print(f"  {label}: {seconds:.1f} s  " + "  ".join(f"{k} {v:.1f}" for k, v in run.items() if k != "s"),
              flush=True)

    def spark_run(label: str, ds: DataSet, *, rerun: bool, split: int | None = None) -> None:
        out = tmp / "report"
        shutil.rmtree(out, ignore_errors=True)

        def once(expect_exported: int):
            seconds, phase, result = spark_report(spark, broker.bootstrap, out, max_offsets_per_split=split)
            assert result.exported == expect_exported and result.state_records == ds.records, \
                (result.exported, result.state_records)
            check_agree(label, spark_lag_rows(out), ds.expected, batches=False)
            return seconds, phase

        measured(label, lambda: once(ds.records))
        if rerun:
            measured(label + " rerun", lambda: once(0))
        shutil.rmtree(out, ignore_errors=True)

    def single_run(label: str, ds: DataSet) -> None:
        def once():
            got, seconds, phase = single_process_fold(broker.bootstrap)
            check_agree(label, got, ds.expected, batches=True)
            return seconds, phase

        measured(label, once)

    def data_set(n_partitions: int) -> DataSet:
        nonlocal broker
        print(f"generating {args.records:,} state records for {n_keys:,} share-partitions "
              f"({args.groups} groups x {args.topics} topics x {args.partitions} partitions) "
              f"over {n_partitions} state partitions", flush=True)
        ds = build_data_set(tmp, args, n_partitions)
        snaps, updates, update_batches = ds.stats
        info.append(f"data set ({n_partitions} state partitions): {ds.records:,} records "
                    f"({snaps:,} ShareSnapshot, {updates:,} ShareUpdate with {update_batches / max(1, updates):.2f} "
                    f"state batches on average), {ds.state_bytes / (1 << 20):,.0f} MiB in {ds.batches:,} batches; "
                    f"data topics: {len(ds.log_ends)} partitions, {sum(ds.log_ends.values()):,} records")
        print(f"  {info[-1]}; generated and written in {ds.generate_s:.1f} s", flush=True)
        broker, start_s, loaded, replayed = start_broker(ds)
        print(f"  broker up in {start_s:.1f} s: {loaded}; {replayed}", flush=True)
        return ds

    try:
        ds = data_set(args.state_partitions)
        spark, session_s = new_session(args.master)
        info.append(f"SparkSession {args.master} start-up (not in the times): {session_s:.1f} s")
        print(f"  {info[-1]}", flush=True)
        spark_key, single_key = f"spark {args.master}", "single process"
        for _ in range(args.runs):  # alternating, so that noise hits both alike
            spark_run(spark_key, ds, rerun=True)
            single_run(single_key, ds)

        if args.scaling:
            other = "local[1]" if args.master != "local[1]" else "local[2]"
            spark, _ = new_session(other)
            for _ in range(args.scaling_runs):
                spark_run(f"spark {other}", ds, rerun=False)
            spark, _ = new_session(args.master)
            for _ in range(args.scaling_runs):  # a fresh JVM again: one more as the reference
                spark_run(f"spark {args.master} (again)", ds, rerun=False)
                for split in [int(x) for x in args.split_sizes.split(",") if x.strip()]:
                    spark_run(f"spark {args.master} maxOffsetsPerSplit {split:,}", ds, rerun=False, split=split)
            for n in [int(x) for x in args.scaling_state_partitions.split(",") if x.strip()]:
                broker.kill()
                shutil.rmtree(ds.data_dir, ignore_errors=True)
                ds = data_set(n)
                for _ in range(args.scaling_runs):
                    spark_run(f"spark {args.master}, {n} state partitions", ds, rerun=False)
                    single_run(f"single process, {n} state partitions", ds)
    finally:
        if broker is not None:
            broker.kill()
        if spark is not None:
            spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print()
    for line in machine_info():
        print(line)
    print(f"{args.records:,} state records, {n_keys:,} share-partitions, state topic {args.state_partitions} "
          f"partitions; every run agreed with the generator on every share-partition's lag")
    for line in info:
        print(line)
    width = max(len(k) for k in results)
    print(f"{'':<{width}}  {'median':>7}   runs (s)")
    for name, runs in results.items():
        secs = [r["s"] for r in runs]
        print(f"{name:<{width}}  {statistics.median(secs):6.1f}s   {', '.join(f'{v:.1f}' for v in secs)}")
    print("median phases and CPU seconds (ours = driver + JVM + Python workers; other = the rest of the machine):")
    for name, runs in results.items():
        keys = [k for k in runs[0] if k != "s"]
        print(f"  {name}: " + ", ".join(f"{k} {statistics.median(r[k] for r in runs):.1f}" for k in keys))
    if spark_key in results and single_key in results:
        ratios = [b["s"] / a["s"] for a, b in zip(results[spark_key], results[single_key])]
        print(f"single process / spark {args.master}, side by side per run: "
              f"{', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
