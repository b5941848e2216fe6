"""Flush policy: group-committed fsync off the event loop, flush.messages, flush.ms, failures;
and damage that reads find in the files."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import struct
import threading
from concurrent.futures import Executor, Future

import pytest

from broker.log import segment
from broker.log.config import LogConfig
from broker.log.file import FINAL_FLUSHES_AT_ONCE, FileLogStore
from broker.log.store import KafkaStorageError, OffsetOutOfRange
from protocol.records import CorruptRecordError

from .test_log_support import TOPIC_ID, FakeClock, append, make_batch, stored_model


class CountingFsync:
    """Injectable fsync: counts calls, can hold them on a gate, can fail."""

    def __init__(self) -> None:
        self.calls = 0
        self.started = threading.Event()
        self.gate: threading.Event | None = None
        self.error: OSError | None = None
        self.lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        os.fstat(fd)  # the fd must be open and valid while we use it
        with self.lock:
            self.calls += 1
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(10)
        if self.error is not None:
            raise self.error


def make(tmp_path, fsync, clock=None, executor=None, **config):
    return FileLogStore(
        str(tmp_path), default_config=LogConfig(**config), clock_ms=clock or FakeClock(), fsync=fsync,
        executor=executor,
    )


async def test_concurrent_waiters_share_one_fsync(tmp_path):
    fsync = CountingFsync()
    store = make(tmp_path, fsync)
    log = store.create("t", 0, TOPIC_ID, None)
    append(log, make_batch(1))
    await log.flush()  # first flush also syncs the new files and directories
    assert log.recovery_point == 1
    first = fsync.calls
    assert first >= 1

    for i in range(5):
        append(log, make_batch(2, tag=i))
    fsync.calls = 0
    rounds = log.flush_rounds
    await asyncio.gather(*(log.flush() for _ in range(8)))
    assert fsync.calls == 1  # one segment, one fsync, eight waiters
    assert log.flush_rounds == rounds + 1
    assert log.recovery_point == log.end_offset == 11
    await log.flush()  # nothing new: no fsync at all
    assert fsync.calls == 1
    await store.close()


async def test_waiters_arriving_during_an_fsync_share_the_next_one(tmp_path):
    fsync = CountingFsync()
    store = make(tmp_path, fsync)
    log = store.create("t", 0, TOPIC_ID, None)
    append(log, make_batch(1))
    await log.flush()
    fsync.calls = 0
    fsync.started.clear()
    fsync.gate = threading.Event()
    loop = asyncio.get_running_loop()

    append(log, make_batch(1))
    first = asyncio.ensure_future(log.flush())
    await loop.run_in_executor(None, fsync.started.wait)  # the first fsync is now running
    append(log, make_batch(1))  # written after the first fsync's snapshot
    late = [asyncio.ensure_future(log.flush()) for _ in range(5)]
    assert not first.done() and fsync.calls == 1
    fsync.gate.set()
    await asyncio.gather(first, *late)
    assert fsync.calls == 2  # the five late waiters shared a single second fsync
    assert log.recovery_point == 3
    await store.close()


async def test_flush_messages_asks_for_a_flush_every_n_offsets(tmp_path):
    fsync = CountingFsync()
    store = make(tmp_path, fsync, flush_messages=3)
    log = store.create("t", 0, TOPIC_ID, None)
    needs = []
    for _ in range(7):
        info = append(log, make_batch(1))
        needs.append(info.needs_flush)
        await log.flush_if_needed(info)
    assert needs == [False, False, True, False, False, True, False]
    assert log.recovery_point == 6
    info = append(log, make_batch(5))  # one append spanning the interval
    assert info.needs_flush
    await store.close()


async def test_default_policy_never_fsyncs_until_close(tmp_path):
    fsync = CountingFsync()
    store = make(tmp_path, fsync)
    log = store.create("t", 0, TOPIC_ID, None)
    for _ in range(50):
        assert not append(log, make_batch(1)).needs_flush
    assert fsync.calls == 0
    await store.close()
    assert fsync.calls >= 1 and log.recovery_point == 50


async def test_periodic_flush_ms_and_rolled_segments(tmp_path):
    fsync = CountingFsync()
    clock = FakeClock(1_000_000)
    store = make(tmp_path, fsync, clock, flush_ms=100)
    timed = store.create("timed", 0, TOPIC_ID, None)
    rolled = store.create("rolled", 0, TOPIC_ID, LogConfig(segment_bytes=1))
    quiet = store.create("quiet", 0, TOPIC_ID, LogConfig())
    append(timed, make_batch(1))
    append(quiet, make_batch(1))
    append(rolled, make_batch(1))
    assert not any(lg.flush_due(clock.now) for lg in store.partitions())
    append(rolled, make_batch(1))  # rolls: Kafka flushes the segment that became inactive
    assert rolled.flush_due(clock.now)
    await store.maintenance.run_once(clock.now)
    assert (timed.recovery_point, rolled.recovery_point, quiet.recovery_point) == (0, 2, 0)
    clock.now += 100
    await store.maintenance.run_once(clock.now)
    assert (timed.recovery_point, quiet.recovery_point) == (1, 0)
    await store.close()


async def test_maintenance_runs_retention_and_checkpoints(tmp_path):
    fsync = CountingFsync()
    clock = FakeClock(1_000_000)
    store = FileLogStore(
        str(tmp_path),
        default_config=LogConfig(segment_bytes=1, retention_ms=1000),
        clock_ms=clock,
        fsync=fsync,
        retention_check_interval_ms=500,
        checkpoint_interval_ms=500,
        initial_task_delay_ms=500,
    )
    log = store.create("t", 0, TOPIC_ID, None)
    for _ in range(3):
        append(log, make_batch(1, ts=1000))
    await store.maintenance.run_once(clock.now)  # arms the timers
    assert log.start_offset == 0
    clock.now += 500
    await store.maintenance.run_once(clock.now)
    assert log.start_offset == 3  # every record expired, the active segment's too
    with open(tmp_path / "recovery-point-offset-checkpoint") as f:
        assert f.read() == "0\n1\nt 0 3\n"  # rolled segments were flushed first
    await store.close()


async def test_first_retention_check_and_checkpoint_come_after_the_initial_delay(tmp_path):
    """As Kafka's LogManager schedules them: log.initial.task.delay.ms (30 s) after the start,
    then every interval, so a restart does not keep expired data for a whole interval."""
    clock = FakeClock(1_000_000)
    store = FileLogStore(str(tmp_path), default_config=LogConfig(segment_bytes=1, retention_ms=1000),
                         clock_ms=clock, fsync=CountingFsync(), retention_check_interval_ms=300_000,
                         checkpoint_interval_ms=60_000)
    log = store.create("t", 0, TOPIC_ID, None)
    append(log, make_batch(1, ts=1000))
    checkpoint = tmp_path / "recovery-point-offset-checkpoint"
    await store.maintenance.run_once(clock.now)  # the start
    clock.now += 29_999
    await store.maintenance.run_once(clock.now)
    assert log.start_offset == 0 and "t 0" not in checkpoint.read_text()
    clock.now += 1
    await store.maintenance.run_once(clock.now)
    assert log.start_offset == 1 and "t 0" in checkpoint.read_text()
    append(log, make_batch(1, ts=1000))
    clock.now += 299_999
    await store.maintenance.run_once(clock.now)
    assert log.start_offset == 1  # then every log.retention.check.interval.ms
    clock.now += 1
    await store.maintenance.run_once(clock.now)
    assert log.start_offset == 2
    await store.close()


async def test_compacted_topics_retention_runs_at_the_log_cleaner_backoff(tmp_path):
    """Kafka's LogManager.cleanupLogs leaves compacted topics to the log cleaner thread
    (LogCleaner.cleanFilthiestLog: deleteOldSegments on them at its start, then every
    log.cleaner.backoff.ms); with log.cleaner.enable=false they get no retention at all."""
    for enabled in (True, False):
        clock = FakeClock(1_000_000)
        backoff = (lambda: 15_000) if enabled else (lambda: None)
        store = FileLogStore(str(tmp_path / str(enabled)), default_config=LogConfig(segment_bytes=1, retention_ms=1000),
                             clock_ms=clock, fsync=CountingFsync(), cleaner_backoff_ms=backoff)
        both = store.create("both", 0, TOPIC_ID, LogConfig(segment_bytes=1, retention_ms=1000,
                                                           cleanup_policy="compact,delete"))
        plain = store.create("plain", 0, TOPIC_ID, None)
        for lg in (both, plain):
            append(lg, make_batch(1, ts=1000))
        await store.maintenance.run_once(clock.now)  # the start
        assert (both.start_offset, plain.start_offset) == ((1, 0) if enabled else (0, 0))
        for lg in (both, plain):
            append(lg, make_batch(1, ts=1000))
        clock.now += 14_999
        await store.maintenance.run_once(clock.now)
        assert (both.start_offset, plain.start_offset) == ((1, 0) if enabled else (0, 0))
        clock.now += 1
        await store.maintenance.run_once(clock.now)
        assert (both.start_offset, plain.start_offset) == ((2, 0) if enabled else (0, 0))
        clock.now += 15_000  # 30 s: the first retention check, for the delete-only topic
        await store.maintenance.run_once(clock.now)
        assert (both.start_offset, plain.start_offset) == ((2, 2) if enabled else (0, 2))
        await store.close()


async def test_background_task_starts_and_stops(tmp_path):
    store = make(tmp_path, CountingFsync())
    store.start()
    store.start()  # idempotent
    await store.stop()
    await store.close()


async def test_failed_fsync_takes_the_log_offline(tmp_path, caplog):
    fsync = CountingFsync()
    store = make(tmp_path, fsync)
    log = store.create("t", 0, TOPIC_ID, None)
    append(log, make_batch(1))
    fsync.error = OSError(5, "EIO")
    assert not log.offline
    with pytest.raises(KafkaStorageError):
        await log.flush()
    assert log.offline
    with pytest.raises(KafkaStorageError):
        append(log, make_batch(1))
    with pytest.raises(KafkaStorageError):
        await log.flush()
    await store.close()  # does not hang; no clean-shutdown marker after a failed flush
    assert not (tmp_path / ".kafka_cleanshutdown").exists()


async def test_a_segment_cut_under_the_broker_takes_the_log_offline(tmp_path, caplog):
    """A segment file shorter than what was written to it (cut by hand, a damaged disk) is
    never read as if the data ended there: the reads that reach the missing bytes raise
    KafkaStorageError, the log refuses appends (they would leave a hole in the file), and it
    is logged once. A restart recovers the whole batches before the cut."""
    store = make(tmp_path, CountingFsync())
    log = store.create("t", 0, TOPIC_ID, None)
    for i in range(4):
        append(log, make_batch(10, value_size=100, ts=1000 + i))
    first = log.read(0, 1, min_one=True).size  # the first batch's bytes
    with open(tmp_path / "t-0" / "00000000000000000000.log", "r+b") as f:
        f.truncate(2 * first + 50)  # the third batch is cut, the fourth gone
    assert not log.offline
    with caplog.at_level(logging.ERROR, logger="broker.log.partition"):
        with pytest.raises(KafkaStorageError, match="shorter than the data written"):
            log.read(0, 1 << 20)
        assert log.offline
        with pytest.raises(KafkaStorageError):
            log.offset_for_timestamp(1003)
        with pytest.raises(KafkaStorageError):
            log.max_timestamp()
        with pytest.raises(KafkaStorageError):
            append(log, make_batch(1))
    assert sum("offline until a restart" in r.getMessage() for r in caplog.records) == 1
    await store.close()
    assert not (tmp_path / ".kafka_cleanshutdown").exists()

    store = make(tmp_path, CountingFsync())
    log = store.get("t", 0)
    assert (log.start_offset, log.end_offset) == (0, 20)
    assert [(first, last) for first, last, _ in stored_model(log)] == [(0, 9), (10, 19)]
    await store.close()


@pytest.mark.parametrize("batch_length", [5, -12, -100, 2**31 - 1000])
async def test_a_batch_with_an_impossible_length_is_corrupt_not_the_end_of_the_log(tmp_path, caplog, batch_length):
    """A damaged length field in the middle of a segment used to read as "no more records":
    consumers stopped there without a word. Reads that reach it now raise CorruptRecordError
    (Kafka's CORRUPT_MESSAGE), reported once a minute; the batches before it still read, the
    log stays online and takes appends."""
    store = make(tmp_path, CountingFsync())
    log = store.create("t", 0, TOPIC_ID, None)
    for _ in range(6):
        append(log, make_batch(3, value_size=50))
    size = log.read(0, 1, min_one=True).size
    with open(tmp_path / "t-0" / "00000000000000000000.log", "r+b") as f:
        f.seek(2 * size + 8)  # the third batch's length
        f.write(struct.pack(">i", batch_length))
    assert [(b.base_offset, b.last_offset) for b in log.read(0, 1 << 20).batches] == [(0, 2), (3, 5)]
    with caplog.at_level(logging.ERROR, logger="broker.log.partition"):
        for _ in range(3):
            with pytest.raises(CorruptRecordError):
                log.read(6, 1 << 20)
            with pytest.raises(CorruptRecordError):
                log.read(6, 1 << 20, headers=False)  # Fetch's way
    assert sum("read(s) reached a corrupt batch" in r.getMessage() for r in caplog.records) == 1
    assert not log.offline
    assert append(log, make_batch(1)).first_offset == 18
    await store.close()


async def test_a_full_disk_refuses_appends_without_tearing_the_log(tmp_path, caplog, monkeypatch):
    """A write that fails part-way (ENOSPC after some bytes) is cut off again: the log keeps its
    offsets and bytes, appends get KafkaStorageError and succeed again, at the next offset, once
    the disk has room. Unlike a failed fsync, nothing acknowledged went missing, so the log stays
    online. The trouble is logged when it starts and ends, at most once a minute (a nearly full
    disk takes small batches and refuses big ones)."""
    clock = FakeClock()
    store = make(tmp_path, CountingFsync(), clock)
    log = store.create("t", 0, TOPIC_ID, None)
    append(log, make_batch(2, tag=1))
    before = stored_model(log)
    real_pwrite = segment.os.pwrite

    def half_then_full(fd, data, position):
        if len(data) > 8:
            return real_pwrite(fd, bytes(data)[: len(data) // 2], position)
        raise OSError(errno.ENOSPC, "No space left on device")

    def disk_full(full: bool) -> None:
        monkeypatch.setattr(segment.os, "pwrite", half_then_full if full else real_pwrite)

    def refused(times: int) -> None:
        for _ in range(times):
            with pytest.raises(KafkaStorageError, match="No space left"):
                append(log, make_batch(3, tag=2))

    def reports() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]

    caplog.set_level(logging.INFO, logger="broker.log.partition")
    disk_full(True)
    refused(3)
    assert (log.end_offset, stored_model(log)) == (2, before)
    assert (tmp_path / "t-0" / f"{0:020d}.log").stat().st_size == len(before[0][2])
    disk_full(False)
    assert append(log, make_batch(3, tag=3)).first_offset == 2
    assert [(base, last) for base, last, _ in stored_model(log)] == [(0, 1), (2, 4)]
    first_error = "write to t-0 failed (1 append(s) refused since the last report): [Errno 28] No space left"
    assert [m[:len(first_error)] for m in reports()] == [first_error, "writes to t-0 succeed again"]

    disk_full(True)  # flapping within the minute: counted, not logged
    refused(1)
    disk_full(False)
    append(log, make_batch(1))
    assert len(reports()) == 2
    clock.now += 60_000
    disk_full(True)
    refused(1)
    disk_full(False)
    append(log, make_batch(1))
    later = reports()[2:]
    assert later[0].startswith("write to t-0 failed (4 append(s) refused") and later[1:] == [
        "writes to t-0 succeed again"]
    await log.flush()
    await store.close()


async def test_a_flush_that_cannot_open_its_files_fails_alone_and_the_next_one_syncs(tmp_path, monkeypatch, caplog):
    """Out of file descriptors (a connection storm under a low ``ulimit -n``), a flush cannot
    even start: nothing was synced or lost, so that flush fails and the log stays online, unlike
    after a failed fsync."""
    fsync = CountingFsync()
    store = make(tmp_path, fsync)
    log = store.create("t", 0, TOPIC_ID, None)
    append(log, make_batch(1))
    await log.flush()
    append(log, make_batch(2))
    real_dup = segment.os.dup

    def no_descriptors(fd):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(segment.os, "dup", no_descriptors)
    calls = fsync.calls
    with pytest.raises(KafkaStorageError, match="could not start"):
        await log.flush()
    assert (fsync.calls, log.recovery_point) == (calls, 1)
    assert "a later one retries" in caplog.text and "offline" not in caplog.text
    append(log, make_batch(1))  # still online
    monkeypatch.setattr(segment.os, "dup", real_dup)
    await log.flush()
    assert log.recovery_point == 4
    await store.close()
    assert (tmp_path / ".kafka_cleanshutdown").exists()


class HeldExecutor(Executor):
    """Runs nothing until ``release``: every flush job submitted so far waits, holding its files."""

    def __init__(self) -> None:
        self.jobs: list = []

    def submit(self, fn, *args):
        future = Future()
        self.jobs.append((future, fn, args))
        return future

    def release(self) -> None:
        jobs, self.jobs = self.jobs, []
        for future, fn, args in jobs:
            future.set_result(fn(*args))


async def test_close_flushes_a_bounded_number_of_logs_at_once(tmp_path):
    """Each flush holds a duplicated descriptor until its fsync ran; closing a store of many
    logs flushes them in rounds, so a modest ``ulimit -n`` is not exhausted at shutdown."""
    executor = HeldExecutor()
    store = make(tmp_path, CountingFsync(), executor=executor)
    for p in range(3 * FINAL_FLUSHES_AT_ONCE):
        append(store.create("t", p, TOPIC_ID, None), make_batch(1))
    closing = asyncio.ensure_future(store.close())
    rounds = []
    while not closing.done():
        seen, quiet = len(executor.jobs), 0
        while quiet < 3 and not closing.done():  # until no more flushes start without a release
            await asyncio.sleep(0)
            quiet, seen = (quiet + 1, seen) if len(executor.jobs) == seen else (0, len(executor.jobs))
        if executor.jobs:
            rounds.append(len(executor.jobs))
        executor.release()
    await closing
    assert rounds == [FINAL_FLUSHES_AT_ONCE] * 3
    assert (tmp_path / ".kafka_cleanshutdown").exists()


async def test_a_retention_pass_writes_the_start_offset_checkpoint_once(tmp_path, monkeypatch):
    """Once per pass, not per moved start: that checkpoint lists every partition, so writing it
    per moved start made a pass over thousands of partitions O(partitions^2). A start moved
    outside a pass (DeleteRecords) is still written at once."""
    clock = FakeClock(1_000_000)
    store = FileLogStore(str(tmp_path), default_config=LogConfig(segment_bytes=1, retention_ms=1000),
                         clock_ms=clock, fsync=CountingFsync(), retention_check_interval_ms=500,
                         initial_task_delay_ms=500)
    logs = [store.create(f"t{i}", 0, TOPIC_ID, None) for i in range(4)]
    for lg in logs:
        for _ in range(3):
            append(lg, make_batch(1, ts=1000))
    logs[0].delete_records_before(1)  # listed: a start inside the first segment
    checkpoint = tmp_path / "log-start-offset-checkpoint"
    assert checkpoint.read_text() == "0\n1\nt0 0 1\n"
    writes = []
    real = store._write_start_offsets
    monkeypatch.setattr(store, "_write_start_offsets", lambda **kw: writes.append(kw) or real(**kw))
    await store.maintenance.run_once(clock.now)  # arms the timers
    clock.now += 500
    await store.maintenance.run_once(clock.now)
    # one write by the pass, one by the periodic checkpoint of the same step
    assert [lg.start_offset for lg in logs] == [3] * 4 and len(writes) == 2
    assert checkpoint.read_text() == "0\n0\n"  # every start is a segment base now
    append(logs[1], make_batch(1, ts=1000))
    logs[1].delete_records_before(4)
    assert len(writes) == 3 and checkpoint.read_text() == "0\n1\nt1 0 4\n"
    await store.close()


@pytest.mark.parametrize("failing", ["new segment", "index file"])
async def test_a_roll_the_disk_refuses_fails_the_append_and_the_next_one_rolls(tmp_path, monkeypatch, failing):
    """A full disk can refuse the roll rather than the write: the new segment's ``.log`` (its
    create) or the old segment's ``.index``/``.timeindex``. The append used to raise that
    OSError, which closed the producer's connection without an answer; as Kafka's LocalLog.roll
    it is a KafkaStorageError (Produce answers KAFKA_STORAGE_ERROR), nothing is written, the
    log stays online and the next append rolls once there is room."""
    store = make(tmp_path, CountingFsync(), segment_bytes=1024)
    log = store.create("t", 0, TOPIC_ID, None)
    append(log, make_batch(1, value_size=600, tag=1))
    before = stored_model(log)
    real_open, real_builtin_open = segment.os.open, open

    def no_new_segment(path, flags, *args):
        if flags & os.O_CREAT:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, flags, *args)

    def no_index_file(path, mode="r", *args, **kw):
        if "w" in mode:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_builtin_open(path, mode, *args, **kw)

    if failing == "new segment":
        monkeypatch.setattr(segment.os, "open", no_new_segment)
    else:
        monkeypatch.setattr(segment, "open", no_index_file, raising=False)
    for _ in range(2):
        with pytest.raises(KafkaStorageError, match="No space left"):
            append(log, make_batch(1, value_size=600, tag=2))
    assert (log.end_offset, stored_model(log), len(log.segments)) == (1, before, 1)
    assert not log.offline and not log.segments[-1].sealed
    monkeypatch.undo()
    assert append(log, make_batch(1, value_size=600, tag=3)).first_offset == 1
    assert [s.base_offset for s in log.segments] == [0, 1]
    await log.flush()
    await store.close()
    store = make(tmp_path, CountingFsync(), segment_bytes=1024)
    assert [(first, last) for first, last, _ in stored_model(store.get("t", 0))] == [(0, 0), (1, 1)]
    await store.close()


async def test_a_retention_pass_whose_roll_the_disk_refuses_still_moves_the_start(tmp_path, monkeypatch):
    """Retention deleted the older segments, then the roll before deleting the expired active
    one failed (a full disk): the log start stayed on a deleted offset, so ListOffsets offered it
    and a read there landed in the last segment. It follows the deleted segments now."""
    clock = FakeClock(1_000_000)
    store = FileLogStore(str(tmp_path), default_config=LogConfig(segment_ms=1, retention_ms=1000),
                         clock_ms=clock, fsync=CountingFsync())
    log = store.create("t", 0, TOPIC_ID, None)
    for ts in (1000, 2000, 3000):
        append(log, make_batch(1, ts=ts))
    assert [s.base_offset for s in log.segments] == [0, 1, 2]
    real_open = segment.os.open

    def no_new_segment(path, flags, *args):
        if flags & os.O_CREAT and path.endswith(".log"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, flags, *args)

    monkeypatch.setattr(segment.os, "open", no_new_segment)
    with pytest.raises(KafkaStorageError, match="No space left"):
        log.apply_retention(clock.now)
    monkeypatch.undo()
    assert [s.base_offset for s in log.segments] == [2] and log.start_offset == 2
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 1000)
    assert log.apply_retention(clock.now) == 1 and log.start_offset == log.end_offset == 3
    await store.close()


async def test_a_close_whose_index_write_the_disk_refuses_closes_every_other_log(tmp_path, monkeypatch, caplog):
    """Saving one log's indexes at close failing (a full disk) used to raise out of the store's
    close: the logs after it were left open with their indexes unsaved and the checkpoints
    unwritten. The close now goes on with the others, logs the failure and does not mark a
    clean shutdown, so the next start validates the log and rebuilds its indexes."""
    store = make(tmp_path, CountingFsync())
    logs = [store.create(name, 0, TOPIC_ID, None) for name in ("a", "b")]
    for lg in logs:
        append(lg, make_batch(3, tag=1))
        append(lg, make_batch(2, tag=2))
    real_builtin_open = open

    def full(path, mode="r", *args, **kw):
        if "w" in mode and os.path.basename(os.path.dirname(path)) == "a-0":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_builtin_open(path, mode, *args, **kw)

    monkeypatch.setattr(segment, "open", full, raising=False)
    await store.close()
    monkeypatch.undo()
    assert "a-0: closing failed: [Errno 28] No space left on device" in caplog.text
    assert all(lg.closed for lg in logs) and all(s.data.closed for lg in logs for s in lg.segments)
    assert (tmp_path / "b-0" / f"{0:020d}.index").exists()
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    assert "b 0 5" in (tmp_path / "recovery-point-offset-checkpoint").read_text()
    store = make(tmp_path, CountingFsync())
    assert [store.get(name, 0).end_offset for name in ("a", "b")] == [5, 5]
    assert [(first, last) for first, last, _ in stored_model(store.get("a", 0))] == [(0, 2), (3, 4)]
    await store.close()
    assert (tmp_path / ".kafka_cleanshutdown").exists()


async def test_a_partial_write_that_cannot_be_cut_off_takes_the_log_offline(tmp_path, monkeypatch, caplog):
    """A write that fails part-way is cut off again; when the cut fails too (EIO), the file
    holds bytes the log does not account for, and a later append of the same length could
    leave them as batches a restart would keep. The log goes offline instead (it used to go on
    taking appends), and a restart recovers the acknowledged batches and drops the torn ones."""
    store = make(tmp_path, CountingFsync())
    log = store.create("t", 0, TOPIC_ID, None)
    append(log, make_batch(2, tag=1))
    before = stored_model(log)
    real_pwrite = segment.os.pwrite

    def half(fd, data, position):
        real_pwrite(fd, bytes(data)[: len(data) // 2], position)
        raise OSError(errno.EIO, "Input/output error")

    def no_truncate(fd, size):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(segment.os, "pwrite", half)
    monkeypatch.setattr(segment.os, "ftruncate", no_truncate)
    with pytest.raises(KafkaStorageError, match="Input/output error"):
        append(log, make_batch(3, tag=2))
    monkeypatch.undo()
    assert log.offline and "t-0 is offline until a restart: could not undo a partial write" in caplog.text
    with pytest.raises(KafkaStorageError):
        append(log, make_batch(3, tag=2))
    assert log.read(0, 1 << 20).size == len(before[0][2])  # what was acknowledged still reads
    await store.close()
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    store = make(tmp_path, CountingFsync())
    assert stored_model(store.get("t", 0)) == before
    await store.close()
