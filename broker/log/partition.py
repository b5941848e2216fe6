"""``Log``: one partition's ordered segments, shared by the file and the memory backends.

Appends cost O(batches): every batch header is patched in place (base offset, optionally leader
epoch and LogAppendTime + CRC), its index bookkeeping is done in the same pass, and the whole
request buffer is then written with one call. Reads never decode records: they find the batch
through the sparse index and walk headers from there.
"""

from __future__ import annotations

import logging
import os
import struct
import time
import uuid
from bisect import bisect_right
from typing import Callable

from protocol.records import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    iter_records,
    set_log_append_time,
)
from protocol.varint import VarintError, read_varint, read_varlong

from .config import INT_MAX, LogConfig
from .flush import GroupCommit
from .index import OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE
from .segment import NO_TIMESTAMP, Segment
from .store import (
    READ_ERRORS,
    AppendInfo,
    KafkaStorageError,
    OffsetOutOfRange,
    ReadResult,
    RecordTooLarge,
)
from .throttle import ReportThrottle

log = logging.getLogger(__name__)
WRITE_FAILURE_REPORT_INTERVAL_MS = 60_000

_pack_int64 = struct.Struct(">q").pack_into  # base offset, the first header field
_pack_int32 = struct.Struct(">i").pack_into  # partition leader epoch, at byte 12

TIMESTAMP_SCAN_BYTES = 64 * 1024  # the largest window a timestamp search reads at once
TIMESTAMP_FIRST_SCAN_BYTES = 4 * 1024  # the first: the time index points close to the answer


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Log:
    """A partition log. Single-threaded: call it from the event loop only."""

    def __init__(
        self,
        topic: str,
        partition: int,
        topic_id: uuid.UUID | None,
        config: LogConfig,
        segments: list[Segment],
        *,
        new_segment: Callable[[int], Segment],
        start_offset: int | None = None,
        recovery_point: int | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
        fsync: Callable[[int], None] = os.fsync,
        executor=None,
        directory: str | None = None,
        on_start_offset_changed: Callable[[Log], None] | None = None,
    ) -> None:
        assert segments, "a log always has an active segment"
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.config = config
        self.directory = directory
        self._segments = segments
        segments[-1].roll_jitter_ms = config.roll_jitter_ms()
        self._bases = [s.base_offset for s in segments]
        self._new_segment = new_segment
        self._clock_ms = clock_ms
        self._fsync = fsync
        self._on_start_offset_changed = on_start_offset_changed
        first = segments[0].base_offset
        self.start_offset = first if start_offset is None else max(start_offset, first)
        # The log start when the log was opened: producer state is loaded against it (Kafka loads
        # it at start-up, before DeleteRecords or retention can move the start; kshare lazily).
        self.opened_start_offset = self.start_offset
        end = self.end_offset
        rp = end if recovery_point is None else min(recovery_point, end)
        self._committer = GroupCommit(self._prepare_flush, durable=rp, executor=executor)
        self._flush_requested = end  # offsets below were flushed or a flush was asked for
        # Failed writes (a full disk): reported when they start and when they end, at most once
        # a minute, since a nearly full disk takes small batches and refuses big ones.
        self._write_failures = ReportThrottle(WRITE_FAILURE_REPORT_INTERVAL_MS, clock_ms)
        self._write_failure_reported = False  # and no write succeeded since
        self._corrupt_reads = ReportThrottle(WRITE_FAILURE_REPORT_INTERVAL_MS, clock_ms)
        self._last_flush_ms = clock_ms()
        self._dir_dirty = False
        self._sync_paths: list[str] = []  # files/dirs to fsync with the next flush
        self._closed = False
        # Bytes appended since the log was opened: only grows (``size`` shrinks when retention
        # drops segments), so long polls count new data with it.
        self.appended_bytes = 0

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self.start_offset}, "
            f"end={self.end_offset}, segments={len(self._segments)})"
        )

    # -- offsets and sizes ---------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        """Offsets below this are known to be on disk (fsynced)."""
        return self._committer.durable

    @property
    def size(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> list[Segment]:
        return list(self._segments)

    @property
    def first_segment_base(self) -> int:
        return self._segments[0].base_offset

    @property
    def active_segment_base(self) -> int:
        return self._segments[-1].base_offset

    # -- append --------------------------------------------------------------------------------

    def append(
        self,
        data: bytearray | memoryview,
        headers: list[BatchHeader],
        *,
        log_append_time_ms: int | None = None,
        leader_epoch: int | None = None,
    ) -> AppendInfo:
        """Assign offsets to validated batches (patching ``data`` in place) and write them.

        ``data`` must be writable and hold exactly the batches described by ``headers``.
        """
        if self._closed:
            raise KafkaStorageError(f"log {self.topic}-{self.partition} is closed")
        if self.offline:
            raise KafkaStorageError(f"log {self.topic}-{self.partition} is offline")
        if not headers:
            raise ValueError("nothing to append")
        cfg = self.config
        stamp = log_append_time_ms
        if stamp is None and cfg.log_append_time:
            stamp = self._clock_ms()
        limit = cfg.max_message_bytes
        span = 0
        total = 0
        max_ts = NO_TIMESTAMP
        for h in headers:
            size = h.batch_length + LOG_OVERHEAD
            if size > limit:
                raise RecordTooLarge(f"batch of {size} bytes exceeds max.message.bytes {limit}")
            total += size
            span += h.last_offset_delta + 1
            if h.max_timestamp > max_ts:
                max_ts = h.max_timestamp
        if total != len(data):
            raise ValueError(f"headers describe {total} bytes but data has {len(data)}")
        if stamp is not None:
            max_ts = stamp
        first = self.end_offset
        seg = self._segment_for(total, max_ts, first + span - 1)

        base = seg.base_offset
        seg_pos = seg.size
        seg_max = seg.max_timestamp
        seg_max_offset = seg.offset_of_max_timestamp
        since = seg.bytes_since_index
        interval = cfg.index_interval_bytes
        new_entries = None
        first_batch_ts = None
        offset = first
        pos = 0
        for h in headers:
            _pack_int64(data, pos, offset)
            if leader_epoch is not None:
                _pack_int32(data, pos + 12, leader_epoch)
            if stamp is not None:
                set_log_append_time(data, pos, stamp)
                batch_max = stamp
            else:
                batch_max = h.max_timestamp
            if first_batch_ts is None:
                first_batch_ts = batch_max
            last = offset + h.last_offset_delta
            if batch_max > seg_max:
                seg_max = batch_max
                seg_max_offset = last
            if since > interval:
                if new_entries is None:
                    new_entries = []
                new_entries.append((last - base, seg_pos, seg_max, seg_max_offset - base))
                since = 0
            size = h.batch_length + LOG_OVERHEAD
            since += size
            seg_pos += size
            pos += size
            offset = last + 1

        try:
            seg.data.write(data, seg.size)
        except OSError as e:
            self._undo_partial_write(seg)
            self._write_failed(e)
            raise KafkaStorageError(f"write to {self.topic}-{self.partition} failed: {e}") from e
        if self._write_failure_reported:
            self._write_failure_reported = False
            log.warning("writes to %s-%d succeed again", self.topic, self.partition)

        if seg.size == 0:
            seg.rolling_timestamp = first_batch_ts
        seg.size = seg_pos
        self.appended_bytes += total
        seg.next_offset = offset
        seg.max_timestamp = seg_max
        seg.offset_of_max_timestamp = seg_max_offset
        seg.bytes_since_index = since
        seg.last_modified_ms = self._clock_ms()
        if new_entries:
            for rel, p, ts, ts_rel in new_entries:
                seg.index.append(rel, p)
                seg.time_index.maybe_append(ts, ts_rel)

        needs_flush = offset - self._flush_requested >= cfg.flush_messages
        if needs_flush:
            self._flush_requested = offset
        return AppendInfo(
            first, offset - 1, -1 if stamp is None else stamp, self.start_offset, needs_flush
        )

    def _write_failed(self, error: OSError) -> None:
        count = self._write_failures.occurred()
        if count:
            log.error("write to %s-%d failed (%d append(s) refused since the last report): %s; appends get "
                      "KAFKA_STORAGE_ERROR until one succeeds", self.topic, self.partition, count, error)
            self._write_failure_reported = True

    def _undo_partial_write(self, seg: Segment) -> None:
        """Cut the bytes of a failed write off again. If even that fails (EIO), the file holds
        bytes the log does not account for, which a later append of the same length could turn
        into batches a restart keeps: the log goes offline instead, as Kafka takes the log
        directory offline on any IOException (LogDirFailureChannel); a restart recovers it."""
        try:
            seg.data.truncate(seg.size)
        except OSError as e:
            if self._committer.failure is None:
                self._committer.failure = e
            log.error("%s-%d is offline until a restart: could not undo a partial write: %s",
                      self.topic, self.partition, e)

    def _segment_for(self, size: int, max_ts: int, last_offset: int) -> Segment:
        """The active segment, rolled first if this append must not go into it (Kafka's rules)."""
        seg = self._segments[-1]
        if seg.size == 0:
            return seg
        cfg = self.config
        if seg.rolling_timestamp >= 0:
            waited = max_ts - seg.rolling_timestamp
        else:
            waited = self._clock_ms() - seg.created_ms
        if (
            seg.size > cfg.segment_bytes - size
            or waited > cfg.max_segment_ms - seg.roll_jitter_ms
            or len(seg.index) >= cfg.segment_index_bytes // OFFSET_ENTRY_SIZE
            or len(seg.time_index) >= cfg.segment_index_bytes // TIME_ENTRY_SIZE
            or last_offset - seg.base_offset > INT_MAX
        ):
            seg = self.roll()
        return seg

    def roll(self) -> Segment:
        """Seal the active segment and start a new one at the log end offset."""
        old = self._segments[-1]
        if old.size == 0:
            return old
        try:
            old.seal()
            old.save_indexes()
            seg = self._new_segment(old.next_offset)
            seg.roll_jitter_ms = self.config.roll_jitter_ms()
        except OSError as e:
            # A full disk (or EIO, EMFILE) failed the index files or the new segment: nothing
            # was written, so the old segment stays active and the next append tries again.
            # Kafka's LocalLog.roll turns the IOException into a KafkaStorageException too.
            old.sealed = False
            self._write_failed(e)
            raise KafkaStorageError(f"rolling a segment of {self.topic}-{self.partition} failed: {e}") from e
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self._dir_dirty = True
        return seg

    # -- reads ---------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, min_one: bool = True, headers: bool = True,
             one_segment: bool = False) -> ReadResult:
        """Batches from the one holding ``offset`` (KIP-74: at least one if ``min_one``).

        ``headers=False`` leaves ``batches`` empty (``chunks`` hold the bytes): Fetch only
        sends the bytes, and listing every batch would cost more than reading them; as Kafka's
        file slice, they may end inside a batch (see ``Segment.read``).
        ``one_segment``: stop at the first segment holding a batch at or after ``offset``, as
        Kafka's LocalLog.read does for a Fetch.
        """
        start, end = self.start_offset, self.end_offset
        if offset < start or offset > end:
            raise OffsetOutOfRange(offset, start, end)
        result = ReadResult(start_offset=start, end_offset=end)
        if offset == end:
            return result
        segs = self._segments
        i = bisect_right(self._bases, offset) - 1
        interval = self.config.index_interval_bytes
        budget = max_bytes
        while i < len(segs):
            seg = segs[i]
            i += 1
            if offset >= seg.next_offset:
                continue
            try:
                view, batches, reached_end = seg.read(
                    offset, budget, min_one and not result.size, interval, len(result.chunks), headers
                )
            except READ_ERRORS as e:
                self._read_failed(e)
                raise
            if view is not None and len(view):
                result.chunks.append(view)
                result.size += len(view)
                budget -= len(view)
                result.batches += batches
            if not reached_end or budget <= 0 or (one_segment and view is not None):
                break
            offset = seg.next_offset
        return result

    def _read_failed(self, error: KafkaStorageError | CorruptRecordError) -> None:
        """A segment read came back short or failed: the file no longer holds what was written
        (cut or damaged under the broker). Appends after it would leave a hole, so the log goes
        offline as after a failed flush; a restart's recovery keeps its valid prefix. A batch
        whose header cannot be right is only reported (at most once a minute), as Kafka answers
        CORRUPT_MESSAGE for reads that reach it and serves the rest."""
        if isinstance(error, CorruptRecordError):
            count = self._corrupt_reads.occurred()
            if count:
                log.error("%s-%d: %d read(s) reached a corrupt batch since the last report: %s",
                          self.topic, self.partition, count, error)
        elif self._committer.failure is None:
            self._committer.failure = error
            log.error("%s-%d is offline until a restart: %s", self.topic, self.partition, error)

    # -- timestamps ----------------------------------------------------------------------------

    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the first record at or after ``ts_ms`` (ListOffsets)."""
        try:
            return self._offset_for_timestamp(ts_ms)
        except READ_ERRORS as e:
            self._read_failed(e)
            raise

    def _offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """Kafka's UnifiedLog.searchOffsetInLocalLog: only the first segment whose largest
        timestamp (its last write time if its records have none) reaches ``ts_ms`` is searched,
        from the log start offset on; if none of its records at or after the start does, there
        is no answer, even when a later segment has one (out-of-order timestamps)."""
        start = self.start_offset
        interval = self.config.index_interval_bytes
        for seg in self._segments:
            if seg.largest_timestamp < ts_ms:
                continue
            rel = seg.time_index.lookup(ts_ms)
            cursor = max(start, seg.base_offset + rel + 1 if rel >= 0 else seg.base_offset)
            window = TIMESTAMP_FIRST_SCAN_BYTES
            while cursor < seg.next_offset:
                view, batches, _ = seg.read(cursor, window, True, interval)
                if not batches:
                    break
                for b in batches:
                    h = b.header
                    if h.max_timestamp >= ts_ms:
                        found = _first_record_at_or_after(view[b.pos : b.pos + b.size], h, ts_ms, start)
                        if found is not None:
                            return found
                cursor = batches[-1].last_offset + 1
                window = min(2 * window, TIMESTAMP_SCAN_BYTES)
            return None
        return None

    def max_timestamp(self) -> tuple[int, int]:
        """``(timestamp, offset)`` of the first record with the largest timestamp, or (-1, -1)."""
        best = None
        for seg in self._segments:
            if seg.max_timestamp > (best.max_timestamp if best else NO_TIMESTAMP):
                best = seg
        if best is None:
            return NO_TIMESTAMP, -1
        interval = self.config.index_interval_bytes
        try:
            view, batches, _ = best.read(best.offset_of_max_timestamp, 1, True, interval)
        except READ_ERRORS as e:
            self._read_failed(e)
            raise
        if not batches:
            return NO_TIMESTAMP, -1
        h = batches[0].header
        found = _first_record_at_or_after(view, h, best.max_timestamp, 0)
        return found if found is not None else (h.max_timestamp, h.base_offset)

    # -- deletion ------------------------------------------------------------------------------

    def delete_records_before(self, offset: int) -> None:
        """DeleteRecords: move the log start offset up to ``offset``. As Kafka's
        maybeIncrementLogStartOffset, no segment goes yet: those wholly below the start are
        deleted by the next retention pass, and count for the size, MAX_TIMESTAMP and
        timestamp searches until then."""
        end = self.end_offset
        if offset > end or offset < 0:
            raise OffsetOutOfRange(offset, self.start_offset, end)
        if offset <= self.start_offset:
            return
        self._set_start_offset(offset)

    def apply_retention(self, now_ms: int) -> int:
        """Delete the segments below the log start, then old ones by retention.bytes, then by
        retention.ms: the order of Kafka's ``deleteOldSegments``, which matters when a segment
        is newer than the one after it.

        As Kafka's ``deletableSegments``, the active segment counts too unless it is empty: an
        idle partition's last records expire like any others. Deleting every segment rolls
        first, so the log keeps one empty segment at its end offset, where the start moves.
        The start follows the segments deleted even when that roll fails (a full disk): left
        below the first segment, it was offered by ListOffsets and reads there hit another one.
        """
        cfg = self.config
        deleted = 0
        try:
            deleted += self._drop_segments_below_start()
            if cfg.deletes:
                if cfg.retention_bytes >= 0:
                    excess = self.size - cfg.retention_bytes

                    def over_size(seg: Segment) -> bool:
                        nonlocal excess
                        if excess < seg.size:
                            return False
                        excess -= seg.size
                        return True

                    deleted += self._delete_oldest_while(over_size, "retention.bytes")
                if cfg.retention_ms >= 0:
                    deleted += self._delete_oldest_while(
                        lambda seg: now_ms - seg.largest_timestamp > cfg.retention_ms, "retention.ms")
        finally:
            segs = self._segments
            if segs[0].base_offset > self.start_offset:
                self._set_start_offset(segs[0].base_offset)
        return deleted

    def _delete_oldest_while(self, breached, reason: str) -> int:
        segs = self._segments
        n = 0
        while segs[0].size and breached(segs[0]):
            if len(segs) == 1:
                self.roll()
            self._delete_oldest_segment(reason)
            n += 1
        return n

    def _drop_segments_below_start(self) -> int:
        n = 0
        while len(self._segments) > 1 and self._segments[1].base_offset <= self.start_offset:
            self._delete_oldest_segment("below the log start offset")
            n += 1
        return n

    def _delete_oldest_segment(self, reason: str) -> None:
        seg = self._segments.pop(0)
        self._bases.pop(0)
        log.info(
            "%s-%d: deleting segment %d..%d (%s)",
            self.topic, self.partition, seg.base_offset, seg.next_offset - 1, reason,
        )
        seg.data.delete()

    def _set_start_offset(self, offset: int) -> None:
        self.start_offset = offset
        if self._on_start_offset_changed is not None:
            self._on_start_offset_changed(self)

    # -- durability ----------------------------------------------------------------------------

    async def flush(self, upto: int | None = None) -> None:
        """Return once offsets below ``upto`` (default: everything appended) are fsynced."""
        end = self.end_offset
        target = end if upto is None else min(upto, end)
        force = bool(self._sync_paths) or self._dir_dirty
        if force or target > self._committer.durable:
            await self._committer.wait(target, force=force)

    def needs_sync(self, *paths: str) -> None:
        """Have the next flush also fsync these paths (new files and their directories)."""
        self._sync_paths.extend(p for p in paths if p not in self._sync_paths)

    async def flush_if_needed(self, info: AppendInfo) -> None:
        if info.needs_flush:
            await self.flush(info.last_offset + 1)

    def flush_due(self, now_ms: int) -> bool:
        """Whether the periodic task should flush: flush.ms elapsed, or a rolled segment is dirty."""
        durable = self._committer.durable
        if self._committer.busy or self._closed or durable >= self.end_offset:
            return False
        if len(self._segments) > 1 and self._segments[-1].base_offset > durable:
            return True
        flush_ms = self.config.flush_ms
        return flush_ms is not None and now_ms - self._last_flush_ms >= flush_ms

    @property
    def flush_rounds(self) -> int:
        return self._committer.rounds

    def _prepare_flush(self):
        target = self.end_offset
        durable = self._committer.durable
        if self._closed:
            # Nothing left to sync: the store flushed it before closing it, or it was deleted
            # (its paths gone, or taken by a topic created again). Not a disk failure: an append
            # made before the deletion is answered as made, as Kafka's flush-in-append is.
            self._sync_paths = []
            self._dir_dirty = False
            return target, None
        handles = []
        try:
            for seg in reversed(self._segments):
                fd = seg.data.sync_handle()
                if fd is not None:
                    handles.append(fd)
                if seg.base_offset <= durable:
                    break
            if self._dir_dirty and self.directory is not None:
                handles.append(os.open(self.directory, os.O_RDONLY))
            for path in self._sync_paths:
                handles.append(os.open(path, os.O_RDONLY))
            self._dir_dirty = False
            self._sync_paths = []
        except BaseException:
            for fd in handles:
                os.close(fd)
            raise
        self._last_flush_ms = self._clock_ms()
        self._flush_requested = max(self._flush_requested, target)
        if not handles:
            return target, None
        fsync = self._fsync

        def job() -> None:
            try:
                for fd in handles:
                    fsync(fd)
            finally:
                for fd in handles:
                    os.close(fd)

        return target, job

    def close(self) -> None:
        """Save indexes and release files; appends fail afterwards. Does not fsync (see flush)."""
        if self._closed:
            return
        self._closed = True
        active = self._segments[-1]
        for seg in self._segments:
            if seg is active or not seg.indexes_saved:
                seg.save_indexes()
            seg.data.close()

    def release(self) -> None:
        """Close the files without saving anything (after ``close`` failed to)."""
        self._closed = True
        for seg in self._segments:
            seg.data.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def offline(self) -> bool:
        """A flush or a read failed: the log takes no more writes until a restart."""
        return self._committer.failure is not None


def _first_record_at_or_after(
    batch, header: BatchHeader, ts_ms: int, min_offset: int
) -> tuple[int, int] | None:
    """``(timestamp, offset)`` of the batch's first record with timestamp >= ts and offset >= min.

    LogAppendTime batches give every record the batch's max timestamp. Otherwise an uncompressed
    batch is read only up to the match (record framing, timestamp and offset deltas: as Kafka's
    streaming iterator does); a compressed or malformed one is decoded in full.
    """
    last = header.base_offset + header.last_offset_delta
    if last < min_offset:
        return None
    if header.log_append_time:
        if header.max_timestamp < ts_ms:
            return None
        return header.max_timestamp, max(header.base_offset, min_offset)
    if not header.attributes & COMPRESSION_MASK:
        found = _scan_plain_records(batch, header, ts_ms, min_offset)
        if found is not _MALFORMED:
            return found
    for rec in iter_records(batch):
        if rec.timestamp >= ts_ms and rec.offset >= min_offset:
            return rec.timestamp, rec.offset
    return None


_MALFORMED = object()


def _scan_plain_records(batch, header: BatchHeader, ts_ms: int, min_offset: int):
    """``_first_record_at_or_after`` over an uncompressed batch, decoding only what it needs;
    ``_MALFORMED`` when the framing does not hold (the full decode then reports why)."""
    end = len(batch)
    pos = HEADER_SIZE
    try:
        for _ in range(header.records_count):
            length, body = read_varint(batch, pos)
            pos = body + length
            if length < 0 or pos > end:
                return _MALFORMED
            ts_delta, at = read_varlong(batch, body + 1)  # + 1: the attributes byte
            offset_delta, _ = read_varint(batch, at)
            timestamp, offset = header.base_timestamp + ts_delta, header.base_offset + offset_delta
            if timestamp >= ts_ms and offset >= min_offset:
                return timestamp, offset
    except VarintError:
        return _MALFORMED
    return None
