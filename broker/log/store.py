"""The log store's interface: what produce, fetch, share-fetch and the coordinators rely on.

Two backends implement it: ``broker.log.file.FileLogStore`` (Kafka's on-disk layout) and
``broker.log.memory.MemoryLogStore`` (tests). Both share ``broker.log.partition.Log``, so the
semantics (offsets, rolls, retention, reads) are identical and only the bytes' home differs.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Protocol, runtime_checkable

from protocol.errors import ErrorCode
from protocol.records import BatchHeader, CorruptRecordError

from .config import LogConfig

NO_TIMESTAMP = -1


class LogError(Exception):
    """Base of the errors the log store raises; each maps to one Kafka error code."""


class OffsetOutOfRange(LogError):
    """OFFSET_OUT_OF_RANGE: the offset is below the log start or above the log end."""

    def __init__(self, offset: int, start_offset: int, end_offset: int):
        super().__init__(f"offset {offset} outside [{start_offset}, {end_offset}]")
        self.offset = offset
        self.start_offset = start_offset
        self.end_offset = end_offset


class RecordTooLarge(LogError):
    """MESSAGE_TOO_LARGE: a batch is bigger than max.message.bytes."""


class KafkaStorageError(LogError):
    """KAFKA_STORAGE_ERROR: a write, fsync or read failed; the log refuses further appends."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


# What a read of a damaged log raises; ``error_code`` is the answer for that partition.
READ_ERRORS = (KafkaStorageError, CorruptRecordError)


class InconsistentTopicId(LogError):
    """INCONSISTENT_TOPIC_ID: the partition exists on disk under another topic id."""


@dataclass(frozen=True, slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 unless the batches were stamped with LogAppendTime
    start_offset: int  # log start offset after the append (ProduceResponse.logStartOffset)
    needs_flush: bool = False  # flush.messages reached: await log.flush(last_offset + 1) before acking


class ReadBatch(NamedTuple):
    """Where one batch of a ``ReadResult`` lives: ``chunks[chunk][pos:pos + header.size]``."""

    chunk: int
    pos: int
    header: BatchHeader

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        return self.header.base_offset + self.header.last_offset_delta

    @property
    def size(self) -> int:
        return self.header.batch_length + 12


@dataclass(slots=True)
class ReadResult:
    """Raw batches, in offset order, as a list of buffers to be written out without joining (a
    Fetch's last one may be cut: ``Log.read`` with ``headers=False``)."""

    chunks: list = field(default_factory=list)  # bytes | memoryview, one per segment touched
    size: int = 0
    batches: list[ReadBatch] = field(default_factory=list)
    start_offset: int = 0  # log start offset when read
    end_offset: int = 0  # log end offset (= high watermark) when read

    @property
    def next_offset(self) -> int | None:
        """The offset after the last batch returned (None if nothing was returned)."""
        return self.batches[-1].last_offset + 1 if self.batches else None

    def views(self, first: int = 0, stop: int | None = None) -> list[memoryview]:
        """Buffers holding ``batches[first:stop]``, one slice per chunk (zero-copy)."""
        sel = self.batches[first:stop]
        out: list[memoryview] = []
        i = 0
        while i < len(sel):
            chunk = sel[i].chunk
            start = sel[i].pos
            j = i
            while j + 1 < len(sel) and sel[j + 1].chunk == chunk:
                j += 1
            end = sel[j].pos + sel[j].size
            out.append(memoryview(self.chunks[chunk])[start:end])
            i = j + 1
        return out


@runtime_checkable
class PartitionLog(Protocol):
    topic: str
    partition: int
    topic_id: uuid.UUID | None
    config: LogConfig

    @property
    def start_offset(self) -> int: ...

    @property
    def end_offset(self) -> int: ...

    @property
    def size(self) -> int: ...

    appended_bytes: int  # bytes appended since opened; never shrinks

    def append(
        self,
        data: bytearray | memoryview,
        headers: list[BatchHeader],
        *,
        log_append_time_ms: int | None = None,
        leader_epoch: int | None = None,
    ) -> AppendInfo: ...

    def read(
        self, offset: int, max_bytes: int, *, min_one: bool = True, headers: bool = True
    ) -> ReadResult: ...

    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None: ...

    def max_timestamp(self) -> tuple[int, int]: ...

    def delete_records_before(self, offset: int) -> None: ...

    def apply_retention(self, now_ms: int) -> int: ...

    async def flush(self, upto: int | None = None) -> None: ...

    async def flush_if_needed(self, info: AppendInfo) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class LogStore(Protocol):
    def create(
        self, topic: str, partition: int, topic_id: uuid.UUID | None, config: LogConfig
    ) -> PartitionLog: ...

    def get(self, topic: str, partition: int) -> PartitionLog | None: ...

    def delete(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Close and remove these (topic, partition) logs: a topic's, or several topics'."""
        ...

    def mark_stray(self, topic: str, partition: int) -> str | None:
        """Stop serving a partition that belongs to no known topic but keep its data (Kafka's
        ``-stray`` directories); returns where it is kept, if anywhere."""
        ...

    def partitions(self) -> Iterable[PartitionLog]: ...

    def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def close(self) -> None: ...
