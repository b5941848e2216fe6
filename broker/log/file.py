"""File log store: Kafka's data-directory layout, start-up recovery and checkpoints.

```
<data dir>/
  .kafka_cleanshutdown               present only between a clean close and the next open
  recovery-point-offset-checkpoint   offsets known to be fsynced, per partition
  log-start-offset-checkpoint        log start offsets above the first segment (DeleteRecords)
  <topic>-<partition>/
    partition.metadata               version + topic id
    00000000000000000000.log         record batches, file named by base offset
    00000000000000000000.index       sparse offset index
    00000000000000000000.timeindex   sparse time index
```

Opening a store loads every partition. Without the clean-shutdown marker, each log is validated
from the segment holding its recovery point on (see ``recovery``); a torn or corrupt tail is
truncated and later segments dropped. With the marker, files are trusted and indexes reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import uuid
from typing import Callable, Iterable, Iterator

from .checkpoint import (
    CLEAN_SHUTDOWN_MARKER,
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    CheckpointError,
    fsync_dir,
    read_offsets_checkpoint,
    read_partition_metadata,
    write_atomically,
    write_clean_shutdown_marker,
    format_partition_metadata,
    write_offsets_checkpoint,
)
from .config import INT_MAX, LogConfig
from .flush import Maintenance
from .index import OffsetIndex, TimeIndex
from .partition import Log, wall_clock_ms
from .recovery import resume_segment, scan_segment
from .segment import FileSegmentData, Segment
from .store import InconsistentTopicId

log = logging.getLogger(__name__)

_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_SEGMENT_NAME = re.compile(r"(\d{20})\.(log|index|timeindex)")
_LEFTOVER_SUFFIXES = (".tmp", ".deleted", ".cleaned", ".swap")
DELETE_DIR_SUFFIX = "-delete"
STRAY_DIR_SUFFIX = "-stray"  # a partition of no known topic, kept for the operator (Kafka 3.7+)
IGNORED_TOPICS = frozenset({"__cluster_metadata"})  # KRaft's metadata log is not ours
# Each flush holds a descriptor or two until its fsync ran, and the fsyncs queue for a few
# threads anyway: flushing every log at once at close could run out of open files.
FINAL_FLUSHES_AT_ONCE = 16


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def renamed_dir_name(topic: str, partition: int, suffix: str) -> str:
    """``<topic>-<partition>.<unique id><suffix>``, the topic cut short so the name fits the
    255 bytes a file name may have: a legal topic name (249 characters) leaves too little room
    for the suffix. Kafka's UnifiedLog.logDirNameWithSuffixCappedLength."""
    tail = f"-{partition}.{uuid.uuid4().hex}{suffix}"
    return topic[: max(0, 255 - len(tail))] + tail


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    topic, sep, part = name.rpartition("-")
    if not sep or not part.isdigit() or not _LEGAL_TOPIC.fullmatch(topic) or topic in (".", ".."):
        return None
    return topic, int(part)


class FileLogStore:
    def __init__(
        self,
        data_dir: str,
        *,
        default_config: LogConfig = LogConfig(),
        config_for: Callable[[str], LogConfig | None] | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
        fsync: Callable[[int], None] = os.fsync,
        executor=None,
        retention_check_interval_ms: int = 300_000,
        checkpoint_interval_ms: int = 60_000,
        initial_task_delay_ms: int = 30_000,
        cleaner_backoff_ms: Callable[[], int | None] = lambda: 15_000,
    ) -> None:
        self.data_dir = os.path.abspath(data_dir)
        self.default_config = default_config
        self._config_for = config_for
        self._clock_ms = clock_ms
        self._fsync = fsync
        self._executor = executor
        self._logs: dict[tuple[str, int], Log] = {}
        self._closed = False
        self._start_offsets_deferred = self._start_offsets_stale = False
        self.was_clean = False
        self.maintenance = Maintenance(
            self.partitions,
            clock_ms=clock_ms,
            checkpoint=self.checkpoint,
            retention_pass=self._one_start_offsets_write,
            retention_check_interval_ms=retention_check_interval_ms,
            checkpoint_interval_ms=checkpoint_interval_ms,
            initial_delay_ms=initial_task_delay_ms,
            cleaner_backoff_ms=cleaner_backoff_ms,
        )
        self._load()

    # -- opening -------------------------------------------------------------------------------

    def _load(self) -> None:
        os.makedirs(self.data_dir, exist_ok=True)
        marker = os.path.join(self.data_dir, CLEAN_SHUTDOWN_MARKER)
        self.was_clean = os.path.exists(marker)
        recovery_points = self._read_checkpoint(RECOVERY_POINT_CHECKPOINT)
        start_offsets = self._read_checkpoint(LOG_START_OFFSET_CHECKPOINT)
        warned = self.was_clean
        for name in sorted(os.listdir(self.data_dir)):
            path = os.path.join(self.data_dir, name)
            if not os.path.isdir(path):
                if name.endswith(".tmp"):
                    os.unlink(path)
                continue
            if name.endswith(DELETE_DIR_SUFFIX):
                log.info("removing partially deleted %s", path)
                shutil.rmtree(path, ignore_errors=True)
                continue
            if name.endswith(STRAY_DIR_SUFFIX):
                log.warning("keeping stray log %s: not served; remove it once its data is not needed", path)
                continue
            tp = parse_partition_dir_name(name)
            if tp is None or tp[0] in IGNORED_TOPICS:
                if tp is None:
                    log.warning("ignoring %s: not a <topic>-<partition> directory", path)
                continue
            if not warned:
                log.warning(
                    "%s: no clean shutdown marker, validating logs from their recovery points",
                    self.data_dir,
                )
                warned = True
            lg = self._load_partition(
                path, tp[0], tp[1], self.was_clean, recovery_points.get(tp), start_offsets.get(tp)
            )
            self._logs[tp] = lg
        if self.was_clean:
            os.unlink(marker)
            fsync_dir(self.data_dir)
        else:  # recovery may have truncated below the old recovery points: never over-claim
            self._write_checkpoints(fsync=True)

    def _read_checkpoint(self, name: str) -> dict[tuple[str, int], int]:
        path = os.path.join(self.data_dir, name)
        try:
            return read_offsets_checkpoint(path)
        except (CheckpointError, UnicodeDecodeError) as e:
            log.warning("ignoring unreadable %s: %s", path, e)
            return {}

    def _config(self, topic: str) -> LogConfig:
        cfg = self._config_for(topic) if self._config_for is not None else None
        return cfg or self.default_config

    def _load_partition(
        self,
        path: str,
        topic: str,
        partition: int,
        clean: bool,
        recovery_point: int | None,
        start_offset: int | None,
    ) -> Log:
        config = self._config(topic)
        interval = config.index_interval_bytes
        try:
            topic_id = read_partition_metadata(path)
        except (CheckpointError, UnicodeDecodeError, ValueError) as e:
            log.warning("%s: unreadable %s: %s", path, PARTITION_METADATA, e)
            topic_id = None
        bases = self._segment_bases(path)
        rp = recovery_point if recovery_point is not None else 0
        # Unclean: trust segments wholly below the recovery point, validate the rest.
        first_to_validate = len(bases)
        if not clean:
            first_to_validate = 0
            for i, base in enumerate(bases):
                if base <= rp:
                    first_to_validate = i
        now = self._clock_ms()
        segments: list[Segment] = []
        for i, base in enumerate(bases):
            data = FileSegmentData(path, base)
            seg = Segment(base, data, now)
            seg.last_modified_ms = data.mtime_ms()
            file_size = data.file_size()
            if file_size > INT_MAX:
                raise ValueError(f"{data.path('.log')} is larger than 2 GiB")
            if i >= first_to_validate:
                error = scan_segment(seg, file_size, interval, validate=True)
            else:
                error = self._load_trusted(seg, file_size, interval, active=i == len(bases) - 1)
            segments.append(seg)
            if error is not None:
                log.warning(
                    "%s: %s at byte %d of %d; truncating the log to offset %d",
                    data.path(".log"), error, seg.size, file_size, seg.next_offset,
                )
                data.truncate(seg.size)
                seg.indexes_saved = False
                if i >= first_to_validate:  # a crash tore the log here: nothing after is valid
                    for later in bases[i + 1 :]:
                        log.warning("%s: dropping segment %020d after the truncation", path, later)
                        FileSegmentData(path, later).delete()
                    break
        for seg in segments[:-1]:
            seg.sealed = True
            if not seg.indexes_saved:
                seg.save_indexes()
        end = segments[-1].next_offset if segments else 0
        if start_offset is not None and start_offset > end:
            log.warning(
                "%s: log start offset %d is past the end %d, starting the log over there",
                path, start_offset, end,
            )
            for seg in segments:
                seg.data.delete()
            segments = []
        if not segments:
            base = start_offset or 0
            segments = [Segment(base, FileSegmentData(path, base, create=True), now)]
        return self._make_log(
            path, topic, partition, topic_id, config, segments, start_offset,
            min(rp, end) if not clean else None,
        )

    def _segment_bases(self, path: str) -> list[int]:
        logs, others = set(), []
        for name in os.listdir(path):
            full = os.path.join(path, name)
            if name.endswith(_LEFTOVER_SUFFIXES):
                log.info("removing leftover %s", full)
                os.unlink(full)
                continue
            m = _SEGMENT_NAME.fullmatch(name)
            if m is None:
                continue
            if m.group(2) == "log":
                logs.add(int(m.group(1)))
            else:
                others.append((int(m.group(1)), full))
        for base, full in others:
            if base not in logs:
                log.info("removing index without a segment %s", full)
                os.unlink(full)
        return sorted(logs)

    @staticmethod
    def _load_trusted(seg: Segment, file_size: int, interval: int, *, active: bool) -> str | None:
        """Reuse saved indexes when sane (walking only the tail); otherwise rescan headers.

        A segment without its offset index file is validated instead, as Kafka's
        LogLoader.loadSegmentFiles recovers it (the caller truncates it at the first invalid
        batch, and keeps the segments after it)."""
        raw_index, raw_time = seg.data.load_indexes(remember=active)
        if raw_index is None:
            log.error("Could not find offset index file corresponding to log file %s, recovering segment and "
                      "rebuilding index files...", seg.data.path(".log"))
            return scan_segment(seg, file_size, interval, validate=True)
        index = OffsetIndex.from_bytes(raw_index, file_size)
        time_index = TimeIndex.from_bytes(raw_time, INT_MAX) if raw_time is not None else None
        if index is not None and time_index is not None:
            error = resume_segment(seg, file_size, interval, index, time_index)
            if error is None:
                seg.indexes_saved = True
                return None
            if error.startswith("tail: "):
                return error[len("tail: ") :]
            log.warning("%s: %s, rebuilding indexes", seg.data.path(".index"), error)
        elif raw_time is not None:
            log.warning("%s: entries that cannot index this segment, rebuilding indexes", seg.data.path(".index"))
        return scan_segment(seg, file_size, interval, validate=False)

    def _make_log(
        self,
        path: str,
        topic: str,
        partition: int,
        topic_id: uuid.UUID | None,
        config: LogConfig,
        segments: list[Segment],
        start_offset: int | None,
        recovery_point: int | None,
    ) -> Log:
        def new_segment(base: int) -> Segment:
            return Segment(base, FileSegmentData(path, base, create=True), self._clock_ms())

        return Log(
            topic,
            partition,
            topic_id,
            config,
            segments,
            new_segment=new_segment,
            start_offset=start_offset,
            recovery_point=recovery_point,
            clock_ms=self._clock_ms,
            fsync=self._fsync,
            executor=self._executor,
            directory=path,
            on_start_offset_changed=self._start_offset_changed,
        )

    # -- LogStore ------------------------------------------------------------------------------

    def create(
        self,
        topic: str,
        partition: int,
        topic_id: uuid.UUID | None = None,
        config: LogConfig | None = None,
    ) -> Log:
        key = (topic, partition)
        existing = self._logs.get(key)
        if existing is not None:
            if topic_id is not None and existing.topic_id not in (None, topic_id):
                raise InconsistentTopicId(
                    f"{topic}-{partition} has topic id {existing.topic_id}, not {topic_id}"
                )
            if existing.topic_id is None and topic_id is not None:
                existing.topic_id = topic_id
                self._write_partition_metadata(existing, topic_id)
            if config is not None:
                existing.config = config
            return existing
        if not _LEGAL_TOPIC.fullmatch(topic) or topic in (".", "..") or partition < 0:
            raise ValueError(f"illegal topic partition {topic!r} {partition}")
        path = os.path.join(self.data_dir, partition_dir_name(topic, partition))
        config = config or self._config(topic)
        if os.path.isdir(path):  # not loaded at open (e.g. created behind our back): validate
            lg = self._load_partition(path, topic, partition, False, None, None)
            lg.config = config
        else:
            os.mkdir(path)
            now = self._clock_ms()
            seg = Segment(0, FileSegmentData(path, 0, create=True), now)
            lg = self._make_log(path, topic, partition, None, config, [seg], None, 0)
        if topic_id is not None and lg.topic_id != topic_id:
            if lg.topic_id is not None:
                raise InconsistentTopicId(f"{path} belongs to topic id {lg.topic_id}")
            lg.topic_id = topic_id
            self._write_partition_metadata(lg, topic_id)
        lg.needs_sync(path, self.data_dir)
        self._logs[key] = lg
        return lg

    @staticmethod
    def _write_partition_metadata(lg: Log, topic_id: uuid.UUID) -> None:
        """Written now, fsynced with the log's next flush (or at close) like its first segment."""
        assert lg.directory is not None
        path = os.path.join(lg.directory, PARTITION_METADATA)
        write_atomically(path, format_partition_metadata(topic_id), fsync=False)
        lg.needs_sync(path, lg.directory)

    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def delete(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Close and remove the partitions' directories (each renamed to ``*-delete`` first).

        The checkpoints, which list every partition, are rewritten once for them all: once per
        partition made deleting many topics O(partitions^2)."""
        for topic, partition in partitions:
            lg = self._logs.pop((topic, partition), None)
            path = os.path.join(self.data_dir, partition_dir_name(topic, partition))
            if lg is not None:
                lg.close()
            if os.path.isdir(path):
                tomb = os.path.join(self.data_dir, renamed_dir_name(topic, partition, DELETE_DIR_SUFFIX))
                os.rename(path, tomb)
                shutil.rmtree(tomb, ignore_errors=True)
        self._write_checkpoints_after_removal()

    def mark_stray(self, topic: str, partition: int) -> str | None:
        lg = self._logs.pop((topic, partition), None)
        if lg is not None:
            lg.close()
        path = os.path.join(self.data_dir, partition_dir_name(topic, partition))
        if not os.path.isdir(path):
            return None
        kept = os.path.join(self.data_dir, renamed_dir_name(topic, partition, STRAY_DIR_SUFFIX))
        os.rename(path, kept)
        fsync_dir(self.data_dir)
        self._write_checkpoints_after_removal()
        return kept

    def partitions(self) -> Iterable[Log]:
        return list(self._logs.values())

    def update_config(self, topic: str, config: LogConfig) -> None:
        for (t, _), lg in self._logs.items():
            if t == topic:
                lg.config = config

    # -- checkpoints, background work, shutdown ------------------------------------------------

    def _start_offset_changed(self, _log: Log) -> None:
        if self._start_offsets_deferred:
            self._start_offsets_stale = True
        else:
            self._write_start_offsets(fsync=False)

    @contextlib.contextmanager
    def _one_start_offsets_write(self) -> Iterator[None]:
        """Write the start-offset checkpoint (which lists every partition) once for a retention
        pass: once per moved start made a pass over thousands of partitions O(partitions^2).

        Retention moves a start to a segment's base, which the checkpoint does not list, so a
        crash before the write only leaves an entry below the new base, which loading ignores."""
        self._start_offsets_deferred, self._start_offsets_stale = True, False
        try:
            yield
        finally:
            self._start_offsets_deferred = False
            if self._start_offsets_stale:
                self._write_start_offsets(fsync=False)

    def _write_start_offsets(self, *, fsync: bool) -> None:
        offsets = {
            (lg.topic, lg.partition): lg.start_offset
            for lg in self._logs.values()
            if lg.start_offset > lg.first_segment_base
        }
        path = os.path.join(self.data_dir, LOG_START_OFFSET_CHECKPOINT)
        write_offsets_checkpoint(path, offsets, fsync=fsync)

    def _write_checkpoints(self, *, fsync: bool) -> None:
        """Both checkpoint files, written from the event loop only (never concurrently)."""
        offsets = {(lg.topic, lg.partition): lg.recovery_point for lg in self._logs.values()}
        path = os.path.join(self.data_dir, RECOVERY_POINT_CHECKPOINT)
        write_offsets_checkpoint(path, offsets, fsync=fsync)
        self._write_start_offsets(fsync=fsync)

    def _write_checkpoints_after_removal(self) -> None:
        """The checkpoints without partitions just removed. Best effort: the removal is done,
        and an entry of a partition that has no directory is ignored at the next start, so a
        write the disk refuses must not fail the deletion half-way (its listeners not told);
        the periodic checkpoint writes them again. (Kafka's LogManager checkpoints after a
        deletion too, and takes the directory offline if that fails.)"""
        try:
            self._write_checkpoints(fsync=False)
        except OSError as e:
            log.error("%s: cannot write the checkpoints after removing partitions: %s", self.data_dir, e)

    async def checkpoint(self) -> None:
        """Periodic: record recovery points so an unclean restart validates less.

        Not fsynced: the values only ever claim data that was fsynced, and a checkpoint lost to
        a power failure merely makes recovery start earlier.
        """
        self._write_checkpoints(fsync=False)

    def start(self) -> None:
        """Start the background task (flush.ms, flushing rolled segments, retention, checkpoints)."""
        self.maintenance.start()

    async def stop(self) -> None:
        await self.maintenance.stop()

    async def close(self) -> None:
        """Graceful shutdown: fsync everything, save indexes and checkpoints, mark clean."""
        if self._closed:
            return
        self._closed = True
        await self.stop()
        logs = list(self._logs.values())
        results = []
        for i in range(0, len(logs), FINAL_FLUSHES_AT_ONCE):
            chunk = logs[i : i + FINAL_FLUSHES_AT_ONCE]
            results += await asyncio.gather(*(lg.flush() for lg in chunk), return_exceptions=True)
        clean = True
        for lg, res in zip(logs, results):
            try:
                lg.close()
            except OSError as e:  # its indexes (a full disk): the next start rebuilds them
                log.error("%s-%d: closing failed: %s", lg.topic, lg.partition, e)
                lg.release()
                clean = False
            if isinstance(res, BaseException):
                log.error("%s-%d: final flush failed: %r", lg.topic, lg.partition, res)
                clean = False
        self._write_checkpoints(fsync=True)
        if clean:
            write_clean_shutdown_marker(self.data_dir)
        else:
            log.error("%s: not marking a clean shutdown after failed flushes", self.data_dir)
