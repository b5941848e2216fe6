"""File backend: on-disk formats, restart, and start-up recovery of torn or corrupt tails."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from broker.log.checkpoint import (
    CLEAN_SHUTDOWN_MARKER,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    parse_offsets_checkpoint,
    topic_id_from_str,
    topic_id_to_str,
)
from broker.log.config import LogConfig
from broker.log.file import FileLogStore
from protocol.records import check_batches, walk_headers

from .test_log_support import TOPIC_ID, FakeClock, append, joined, make_batch, stored_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def open_file_store(path, **config) -> FileLogStore:
    return FileLogStore(str(path), default_config=LogConfig(**config), clock_ms=FakeClock())


def close(store) -> None:
    asyncio.run(store.close())


def seg_path(data_dir, name, base=0, suffix=".log"):
    return os.path.join(str(data_dir), name, f"{base:020d}{suffix}")


def fill(log, n, **kw):
    for i in range(n):
        append(log, make_batch(1 + i % 3, value_size=30 + i, tag=i, ts=1000 + i), **kw)


# -- formats -----------------------------------------------------------------------------------


def test_topic_id_text_is_kafkas_uuid_to_string():
    # Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, no padding
    u = uuid.UUID(bytes=bytes(range(16)))
    assert topic_id_to_str(u) == "AAECAwQFBgcICQoLDA0ODw"
    assert topic_id_from_str("AAECAwQFBgcICQoLDA0ODw") == u
    assert topic_id_to_str(uuid.UUID(bytes=b"\xff" * 16)) == "_____________________w"


def test_on_disk_layout(tmp_path):
    store = open_file_store(tmp_path, segment_bytes=600, index_interval_bytes=100)
    log = store.create("__share_group_state", 7, TOPIC_ID, None)
    fill(log, 20)
    log.delete_records_before(3)
    close(store)
    pdir = tmp_path / "__share_group_state-7"
    with open(pdir / "partition.metadata", "rb") as f:
        assert f.read() == b"version: 0\ntopic_id: " + topic_id_to_str(TOPIC_ID).encode()
    names = sorted(os.listdir(pdir))
    bases = sorted(int(n[:20]) for n in names if n.endswith(".log"))
    assert len(bases) > 2 and bases[0] == 0
    for base in bases:
        assert f"{base:020d}.index" in names and f"{base:020d}.timeindex" in names
    # each .log holds Kafka batches starting at its base offset; .index entries point at batches
    for base in bases:
        with open(pdir / f"{base:020d}.log", "rb") as f:
            data = f.read()
        headers = [h for _, h in walk_headers(data)]
        assert headers[0].base_offset == base
        assert sum(h.size for h in headers) == len(data)
        check_batches(data)
        with open(pdir / f"{base:020d}.index", "rb") as f:
            raw = f.read()
        assert len(raw) % 8 == 0 and raw
        for rel, pos in struct.iter_unpack(">ii", raw):
            _, h = next(walk_headers(data, pos))
            assert h.last_offset == base + rel
        with open(pdir / f"{base:020d}.timeindex", "rb") as f:
            raw = f.read()
        entries = list(struct.iter_unpack(">qi", raw))
        assert entries and entries == sorted(entries)
        assert entries[-1][0] == max(h.max_timestamp for h in headers)  # sealed with the max
    with open(tmp_path / RECOVERY_POINT_CHECKPOINT) as f:
        text = f.read()
    assert text == f"0\n1\n__share_group_state 7 {log.end_offset}\n"
    with open(tmp_path / LOG_START_OFFSET_CHECKPOINT) as f:
        assert parse_offsets_checkpoint(f.read()) == {("__share_group_state", 7): 3}
    assert (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()


# -- restart -------------------------------------------------------------------------------------


@pytest.mark.parametrize("clean", [True, False])
def test_restart_keeps_data_and_offsets_continue(tmp_path, clean):
    store = open_file_store(tmp_path, segment_bytes=500, index_interval_bytes=64)
    log = store.create("t", 0, TOPIC_ID, None)
    other = store.create("a.b_c", 2, None, None)
    fill(log, 25)
    fill(other, 3)
    log.delete_records_before(4)
    before = stored_model(log)
    end = log.end_offset
    if clean:
        close(store)
    else:  # crash: no flush, no index files for the active segment, no marker
        for lg in store.partitions():
            for seg in lg.segments:
                seg.data.close()
    store = open_file_store(tmp_path, segment_bytes=500, index_interval_bytes=64)
    assert store.was_clean is clean
    assert not (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    log = store.get("t", 0)
    assert log.topic_id == TOPIC_ID
    assert (log.start_offset, log.end_offset) == (4, end)
    assert stored_model(log) == before
    assert store.get("a.b_c", 2).end_offset == other.end_offset
    assert append(log, make_batch(2)).first_offset == end
    assert log.read(end, 1000).batches[0].base_offset == end
    assert log.max_timestamp() == (1024, before[-1][0])
    close(store)


def test_active_segment_indexes_are_saved_again_after_more_appends(tmp_path):
    store = open_file_store(tmp_path, index_interval_bytes=50)
    fill(store.create("t", 0, TOPIC_ID, None), 5)
    close(store)
    store = open_file_store(tmp_path, index_interval_bytes=50)
    log = store.get("t", 0)
    fill(log, 10)
    (seg,) = log.segments
    expected = (seg.index.to_bytes(), len(seg.index))
    close(store)
    with open(seg_path(tmp_path, "t-0", 0, ".index"), "rb") as f:
        assert (f.read(), expected[1]) == expected and expected[1] > 5


def test_a_stop_leaves_the_unchanged_index_files_of_an_idle_partition_alone(tmp_path):
    """A stop saves every active segment's indexes. An idle partition's are the bytes already
    on disk: rewriting them for thousands of partitions took most of such a broker's stop."""
    store = open_file_store(tmp_path, index_interval_bytes=50)
    fill(store.create("idle", 0, TOPIC_ID, None), 5)
    fill(store.create("busy", 0, uuid.uuid4(), None), 5)
    close(store)

    def files(name, suffix):
        st = os.stat(seg_path(tmp_path, name, 0, suffix))
        return st.st_ino, st.st_mtime_ns

    before = {(n, sfx): files(n, sfx) for n in ("idle-0", "busy-0") for sfx in (".index", ".timeindex")}
    store = open_file_store(tmp_path, index_interval_bytes=50)
    busy = store.get("busy", 0)
    fill(busy, 5)
    (seg,) = busy.segments
    expected = seg.index.to_bytes()
    ends = [store.get(n, 0).end_offset for n in ("idle", "busy")]
    close(store)
    assert files("idle-0", ".index") == before[("idle-0", ".index")]
    assert files("idle-0", ".timeindex") == before[("idle-0", ".timeindex")]
    assert files("busy-0", ".index") != before[("busy-0", ".index")]
    with open(seg_path(tmp_path, "busy-0", 0, ".index"), "rb") as f:
        assert f.read() == expected
    store = open_file_store(tmp_path, index_interval_bytes=50)
    assert store.was_clean
    assert [store.get(n, 0).end_offset for n in ("idle", "busy")] == ends
    close(store)


def test_a_start_keeps_the_index_digest_of_the_active_segment_only(tmp_path):
    """The digest that lets a stop skip unchanged index files is kept for the segment a stop
    saves; hashing every sealed segment's indexes (megabytes each) would slow the start."""
    store = open_file_store(tmp_path, index_interval_bytes=50, segment_bytes=300)
    fill(store.create("t", 0, TOPIC_ID, None), 10)
    close(store)
    store = open_file_store(tmp_path, index_interval_bytes=50, segment_bytes=300)
    kept = [seg.data._on_disk is not None for seg in store.get("t", 0).segments]
    assert len(kept) > 1 and kept == [False] * (len(kept) - 1) + [True]
    close(store)


def test_missing_or_garbled_indexes_are_rebuilt(tmp_path, caplog):
    store = open_file_store(tmp_path, segment_bytes=800, index_interval_bytes=50)
    log = store.create("t", 0, TOPIC_ID, None)
    fill(log, 30)
    before = stored_model(log)
    segs = [s.base_offset for s in log.segments]
    close(store)
    os.unlink(seg_path(tmp_path, "t-0", segs[0], ".index"))
    with open(seg_path(tmp_path, "t-0", segs[1], ".index"), "r+b") as f:
        f.write(struct.pack(">ii", 5, 3))  # entry pointing into the middle of a batch
    with open(seg_path(tmp_path, "t-0", segs[2], ".timeindex"), "ab") as f:
        f.write(b"\x00" * 5)  # not a whole entry
    caplog.set_level(logging.WARNING, logger="broker.log.file")
    store = open_file_store(tmp_path, segment_bytes=800, index_interval_bytes=50)
    log = store.get("t", 0)
    assert stored_model(log) == before
    rebuilt = [r.getMessage().split(":")[0] for r in caplog.records if "rebuilding indexes" in r.getMessage()]
    assert rebuilt == [seg_path(tmp_path, "t-0", base, ".index") for base in segs[1:3]]  # a missing one is quiet
    for seg in log.segments:
        raw = seg.data.read(0, seg.size)
        for rel, pos in zip(seg.index.offsets, seg.index.positions):
            _, h = next(walk_headers(raw, pos))
            assert h.last_offset == seg.base_offset + rel
    close(store)


# -- torn and corrupt tails ----------------------------------------------------------------------


def _damage_cut_mid_batch(path, last_size):
    size = os.path.getsize(path)
    os.truncate(path, size - last_size // 2)


def _damage_garbage(path, last_size):
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x00\x40garbage" + os.urandom(50))


def _damage_flip_byte(path, last_size):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size - 3)
        b = f.read(1)
        f.seek(size - 3)
        f.write(bytes([b[0] ^ 0x01]))


@pytest.mark.parametrize(
    "damage, lost",
    [(_damage_cut_mid_batch, 1), (_damage_garbage, 0), (_damage_flip_byte, 1)],
)
def test_torn_tail_is_truncated_after_unclean_shutdown(tmp_path, caplog, damage, lost):
    store = open_file_store(tmp_path)
    log = store.create("t", 0, TOPIC_ID, None)
    for i in range(10):
        append(log, make_batch(2, tag=i, value_size=20))
    before = stored_model(log)
    close(store)
    os.unlink(tmp_path / CLEAN_SHUTDOWN_MARKER)
    damage(seg_path(tmp_path, "t-0"), len(before[-1][2]))

    with caplog.at_level(logging.WARNING, logger="broker.log"):
        store = open_file_store(tmp_path)
    assert any("truncating" in r.message for r in caplog.records)
    log = store.get("t", 0)
    kept = before[: len(before) - lost]
    assert stored_model(log) == kept
    assert os.path.getsize(seg_path(tmp_path, "t-0")) == sum(len(b) for _, _, b in kept)
    next_offset = kept[-1][1] + 1
    assert log.end_offset == next_offset
    assert append(log, make_batch(1)).first_offset == next_offset
    check_batches(joined(log.read(0, 1 << 20)))
    close(store)


def test_clean_shutdown_still_copes_with_a_cut_last_batch(tmp_path):
    store = open_file_store(tmp_path)
    log = store.create("t", 0, TOPIC_ID, None)
    fill(log, 5)
    before = stored_model(log)
    close(store)
    _damage_cut_mid_batch(seg_path(tmp_path, "t-0"), len(before[-1][2]))
    store = open_file_store(tmp_path)
    assert store.was_clean
    assert stored_model(store.get("t", 0)) == before[:-1]
    close(store)


def test_corruption_in_an_unflushed_middle_segment_drops_what_follows(tmp_path):
    store = open_file_store(tmp_path, segment_bytes=400)
    log = store.create("t", 0, TOPIC_ID, None)
    fill(log, 20)
    segs = [s.base_offset for s in log.segments]
    assert len(segs) >= 4
    before = stored_model(log)
    # crash without any flush: the recovery point is 0, every segment is validated
    for seg in log.segments:
        seg.data.close()
    victim = seg_path(tmp_path, "t-0", segs[1])
    with open(victim, "r+b") as f:
        f.seek(70)
        b = f.read(1)
        f.seek(70)
        f.write(bytes([b[0] ^ 0xFF]))
    store = open_file_store(tmp_path, segment_bytes=400)
    log = store.get("t", 0)
    assert [s.base_offset for s in log.segments] == segs[:2]
    assert log.end_offset == segs[1]  # the first batch of segment 2 was the damaged one
    assert stored_model(log) == [m for m in before if m[1] < segs[1]]
    assert not os.path.exists(seg_path(tmp_path, "t-0", segs[2]))
    close(store)


def test_recovery_trusts_segments_below_the_recovery_point(tmp_path):
    store = open_file_store(tmp_path, segment_bytes=400)
    log = store.create("t", 0, TOPIC_ID, None)
    fill(log, 20)
    asyncio.run(log.flush())
    asyncio.run(store.checkpoint())
    segs = [s.base_offset for s in log.segments]
    for seg in log.segments:
        seg.data.close()
    with open(seg_path(tmp_path, "t-0", segs[0], ".index"), "ab") as f:
        f.write(b"\x00" * 3)  # forces a rebuild, no validation
    with open(seg_path(tmp_path, "t-0", segs[0]), "r+b") as f:
        f.seek(70)
        f.write(b"\xff")  # a CRC error nobody looks for: below the recovery point
    size = os.path.getsize(seg_path(tmp_path, "t-0", segs[0]))
    store = open_file_store(tmp_path, segment_bytes=400)
    log = store.get("t", 0)
    assert [s.base_offset for s in log.segments] == segs
    assert os.path.getsize(seg_path(tmp_path, "t-0", segs[0])) == size
    close(store)


@pytest.mark.parametrize("victim", [0, 1])
@pytest.mark.parametrize("clean", [True, False])
def test_a_segment_without_its_offset_index_is_recovered(tmp_path, caplog, clean, victim):
    """Kafka's LogLoader.loadSegmentFiles recovers (validates, truncating at the first invalid
    batch) a segment whose offset index file is missing, even after a clean shutdown or below
    the recovery point; unlike recovery after a crash, the segments after it stay."""
    store = open_file_store(tmp_path, segment_bytes=400)
    log = store.create("t", 0, TOPIC_ID, None)
    fill(log, 20)
    asyncio.run(log.flush())
    segs = [s.base_offset for s in log.segments]
    before = stored_model(log)
    close(store)
    if not clean:
        os.unlink(tmp_path / CLEAN_SHUTDOWN_MARKER)  # the recovery point is the log end
    os.unlink(seg_path(tmp_path, "t-0", segs[victim], ".index"))
    with open(seg_path(tmp_path, "t-0", segs[victim]), "r+b") as f:
        f.seek(70)  # in the segment's first batch
        b = f.read(1)
        f.seek(70)
        f.write(bytes([b[0] ^ 0xFF]))
    with caplog.at_level(logging.WARNING, logger="broker.log.file"):
        store = open_file_store(tmp_path, segment_bytes=400)
    log = store.get("t", 0)
    assert [s.base_offset for s in log.segments] == segs
    assert os.path.getsize(seg_path(tmp_path, "t-0", segs[victim])) == 0
    assert stored_model(log) == [m for m in before if not segs[victim] <= m[1] < segs[victim + 1]]
    assert log.end_offset == before[-1][1] + 1
    assert any("Could not find offset index file" in r.getMessage() and r.levelno == logging.ERROR
               for r in caplog.records)
    close(store)


# -- deletion ------------------------------------------------------------------------------------


def test_delete_removes_the_directory_and_leftovers_are_cleaned(tmp_path):
    store = open_file_store(tmp_path)
    fill(store.create("gone", 0, TOPIC_ID, None), 3)
    fill(store.create("kept", 0, TOPIC_ID, None), 3)
    store.delete([("gone", 0)])
    assert not (tmp_path / "gone-0").exists()
    assert not [n for n in os.listdir(tmp_path) if n.endswith("-delete")]
    # a deletion interrupted by a crash leaves a *-delete directory: removed at start-up
    half = tmp_path / "kept-1.0123456789abcdef-delete"
    half.mkdir()
    (half / "00000000000000000000.log").write_bytes(b"junk")
    (tmp_path / "not a partition").mkdir()
    close(store)
    store = open_file_store(tmp_path)
    assert not half.exists()
    assert [(lg.topic, lg.partition) for lg in store.partitions()] == [("kept", 0)]
    assert store.get("kept", 0).end_offset == 6
    close(store)


def test_deleting_many_partitions_rewrites_the_checkpoints_once(tmp_path, monkeypatch):
    """The checkpoints list every partition: rewriting them per deleted partition made deleting
    hundreds of topics O(partitions^2)."""
    store = open_file_store(tmp_path)
    for topic in ("a", "b", "kept"):
        for p in range(3):
            fill(store.create(topic, p, TOPIC_ID, None), 2)
    writes = []
    real = store._write_checkpoints
    monkeypatch.setattr(store, "_write_checkpoints", lambda **kw: writes.append(kw) or real(**kw))
    store.delete((t, p) for t in ("a", "b") for p in range(3))
    assert len(writes) == 1
    assert sorted(n for n in os.listdir(tmp_path) if n[0] in "abk" and "-" in n) == ["kept-0", "kept-1", "kept-2"]
    listed = (tmp_path / RECOVERY_POINT_CHECKPOINT).read_text().split("\n")
    assert listed[1] == "3" and sorted(line.split()[0] for line in listed[2:5]) == ["kept"] * 3
    close(store)


def test_segments_deleted_by_retention_are_removed_from_disk(tmp_path):
    store = open_file_store(tmp_path, segment_bytes=1, retention_ms=10)
    log = store.create("t", 0, TOPIC_ID, None)
    fill(log, 4)
    end = log.end_offset
    assert log.apply_retention(10**9) == 4  # the active segment too, after a roll to an empty one
    names = sorted(os.listdir(tmp_path / "t-0"))
    assert [n for n in names if n.endswith(".log")] == [f"{end:020d}.log"]
    assert not [n for n in names if n.endswith("index") and not n.startswith(f"{end:020d}")]
    close(store)
    store = open_file_store(tmp_path)
    assert (store.get("t", 0).start_offset, store.get("t", 0).end_offset) == (end, end)
    close(store)


# -- kill -9 -------------------------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import asyncio, sys, uuid
    from broker.log.config import LogConfig
    from broker.log.file import FileLogStore
    from protocol.records import build_batch, check_batches

    async def main():
        store = FileLogStore(sys.argv[1], default_config=LogConfig(flush_messages=1, segment_bytes=3000))
        log = store.create("t", 0, uuid.UUID(int=1), None)
        i = 0
        while True:
            buf = bytearray(build_batch([(None, b"value-%d" % i, [])] * (1 + i % 3), timestamp_ms=i))
            info = log.append(buf, check_batches(buf))
            await log.flush_if_needed(info)
            assert info.needs_flush
            print(info.first_offset, info.last_offset, i, flush=True)
            i += 1

    asyncio.run(main())
    """
)


def test_acknowledged_appends_survive_kill_9(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        stdout=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    acked = []
    deadline = time.monotonic() + 3
    try:
        while len(acked) < 400 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acked.append(tuple(map(int, line.split())))
    finally:
        proc.send_signal(signal.SIGKILL)
        rest = proc.communicate(timeout=10)[0]
    acked += [tuple(map(int, line.split())) for line in rest.splitlines() if line.count(b" ") == 2]
    assert len(acked) > 10, "child did not acknowledge appends"
    store = open_file_store(tmp_path)
    assert not store.was_clean
    log = store.get("t", 0)
    assert log.end_offset >= acked[-1][1] + 1
    assert len(log.segments) > 1 or len(acked) < 100  # rolls happened while appending
    for first, last, i in acked:
        res = log.read(first, 1)
        (h,) = check_batches(bytes(res.chunks[0]))
        assert (h.base_offset, h.last_offset, h.max_timestamp) == (first, last, i)
    close(store)


# -- the validating scan's inline checks ---------------------------------------------------------


def _scan_stops_at(buf: bytes) -> str | None:
    from broker.log.recovery import _iter_batches, _Stop
    from broker.log.segment import MemorySegmentData

    data = MemorySegmentData()
    data.write(buf, 0)
    stop = _Stop()
    list(_iter_batches(data, 0, len(buf), True, stop))
    return stop.error


@pytest.mark.parametrize("field, value", [
    (16, 1), (16, 3), (17, 0), (22, 0x07), (22, 0x20), (23, 0xFF), (26, 0x00), (57, 0x80), (60, 0x09),
    (40, 0x55), (61, 0x00),
])
def test_the_validating_scan_refuses_exactly_what_check_batch_refuses(field, value):
    """Recovery checks batches inline and asks check_batch only for the error of a bad one:
    a damaged byte anywhere gives the verdict (and message) of check_batch."""
    from protocol.records import CorruptRecordError, check_batch, set_crc

    good = bytes(make_batch(3, tag=1, value_size=20))
    for recrc in (False, True):  # damage the CRC too, or repair it to reach the later checks
        bad = bytearray(good)
        bad[field] = value
        if recrc:
            set_crc(bad, 0)
        try:
            check_batch(bytes(bad))
            expected = None
        except CorruptRecordError as e:
            expected = str(e)
        assert _scan_stops_at(bytes(bad)) == expected
    assert _scan_stops_at(good) is None
