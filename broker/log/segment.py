"""One log segment: its bytes (in a file or in memory) plus the metadata kept beside them.

``Segment`` is backend-neutral: it knows offsets, sizes, timestamps and the sparse indexes, and
reads batches through a ``SegmentData`` (``FileSegmentData`` = one fd used with pwrite/pread,
``MemorySegmentData`` = a list of chunks). Appends are done by ``partition.Log``, which patches
the batches and updates the segment's bookkeeping in the same pass, so each batch is visited once.
"""

from __future__ import annotations

import hashlib
import os
from bisect import bisect_right
from typing import Protocol

from protocol.records import (
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    parse_header,
    walk_headers,
)

from .index import OffsetIndex, TimeIndex
from .store import KafkaStorageError, ReadBatch

NO_TIMESTAMP = -1


class SegmentData(Protocol):
    """The bytes of one segment."""

    persistent: bool  # whether indexes are worth saving beside the bytes

    def write(self, data, position: int) -> None: ...

    def read(self, position: int, size: int) -> bytes: ...

    def truncate(self, size: int) -> None: ...

    def sync_handle(self) -> int | None:
        """An fd the caller owns (must close) to fsync off the event loop; None if nothing to sync."""
        ...

    def save_indexes(self, offset_index: bytes, time_index: bytes) -> None: ...

    def close(self) -> None: ...

    def delete(self) -> None: ...


class MemorySegmentData:
    """Appended buffers kept as a list of immutable chunks (no regrowing of one big buffer)."""

    __slots__ = ("chunks", "starts", "size")
    persistent = False

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.starts: list[int] = []
        self.size = 0

    def write(self, data, position: int) -> None:
        assert position == self.size
        self.chunks.append(bytes(data))
        self.starts.append(position)
        self.size += len(data)

    def read(self, position: int, size: int) -> bytes:
        end = min(position + size, self.size)
        i = max(bisect_right(self.starts, position) - 1, 0)
        parts = []
        while i < len(self.chunks) and self.starts[i] < end:
            first = self.starts[i]
            parts.append(memoryview(self.chunks[i])[max(position - first, 0) : end - first])
            i += 1
        return b"".join(parts)

    def truncate(self, size: int) -> None:
        while self.chunks and self.starts[-1] >= size:
            self.chunks.pop()
            self.starts.pop()
        if self.chunks:
            last = self.chunks[-1]
            self.chunks[-1] = last[: size - self.starts[-1]]
        self.size = min(self.size, size)

    def sync_handle(self) -> int | None:
        return None

    def save_indexes(self, offset_index: bytes, time_index: bytes) -> None:
        pass

    def close(self) -> None:
        pass

    def delete(self) -> None:
        self.chunks, self.starts, self.size = [], [], 0


def _digest(offset_index: bytes, time_index: bytes) -> bytes:
    """Both files' bytes, hashed together; the first one's length tells two splits apart."""
    h = hashlib.blake2b(offset_index, digest_size=16)
    h.update(time_index)
    return h.digest() + len(offset_index).to_bytes(8, "big")


class FileSegmentData:
    """``<dir>/%020d.log`` opened once; written with pwrite, read with pread (no shared cursor)."""

    __slots__ = ("dir", "base_offset", "fd", "closed", "_on_disk")
    persistent = True

    def __init__(self, directory: str, base_offset: int, *, create: bool = False) -> None:
        self.dir = directory
        self.base_offset = base_offset
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self.fd = os.open(self.path(".log"), flags, 0o644)
        self.closed = False
        # A digest of the .index and .timeindex bytes this process last read or wrote.
        self._on_disk: bytes | None = None

    def path(self, suffix: str) -> str:
        return os.path.join(self.dir, f"{self.base_offset:020d}{suffix}")

    def file_size(self) -> int:
        return os.fstat(self.fd).st_size

    def mtime_ms(self) -> int:
        return int(os.fstat(self.fd).st_mtime * 1000)

    def write(self, data, position: int) -> None:
        view = memoryview(data)
        total = len(view)
        done = 0
        while done < total:
            done += os.pwrite(self.fd, view[done:] if done else view, position + done)

    def read(self, position: int, size: int) -> bytes:
        """Exactly ``size`` bytes: callers only ask for bytes the log wrote, so fewer mean the
        file was cut under the broker, which no reader may take for the end of the data."""
        try:
            data = os.pread(self.fd, size, position)
        except OSError as e:
            raise KafkaStorageError(f"{self.path('.log')}: read failed: {e}") from e
        if len(data) < size:
            raise KafkaStorageError(
                f"{self.path('.log')}: {len(data)} of {size} bytes at position {position}: "
                "the file is shorter than the data written to it"
            )
        return data

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)

    def sync_handle(self) -> int | None:
        return None if self.closed else os.dup(self.fd)

    def save_indexes(self, offset_index: bytes, time_index: bytes) -> None:
        """Replace ``.index`` / ``.timeindex`` atomically (a torn index must never look valid).

        A file that already holds these bytes is left alone: a stop saves every active
        segment's indexes, and rewriting the unchanged ones of idle partitions took most of
        the stop of a broker with thousands of them."""
        digest = _digest(offset_index, time_index)
        if digest == self._on_disk:
            return
        self._on_disk = None  # until both files are written
        for suffix, raw in ((".index", offset_index), (".timeindex", time_index)):
            final = self.path(suffix)
            tmp = final + ".tmp"
            with open(tmp, "wb") as f:
                f.write(raw)
            os.replace(tmp, final)
        self._on_disk = digest

    def load_indexes(self, *, remember: bool = False) -> tuple[bytes | None, bytes | None]:
        """Both files' bytes (None if missing). ``remember``: keep their digest, so that a save
        of the same bytes is skipped; only worth it for the segment that will be saved again
        (the active one): a sealed segment's multi-megabyte indexes are never rewritten."""
        out = []
        for suffix in (".index", ".timeindex"):
            try:
                with open(self.path(suffix), "rb") as f:
                    out.append(f.read())
            except FileNotFoundError:
                out.append(None)
        offset_index, time_index = out
        if remember and offset_index is not None and time_index is not None:
            self._on_disk = _digest(offset_index, time_index)
        return offset_index, time_index

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)

    def delete(self) -> None:
        self.close()
        self._on_disk = None
        for suffix in (".log", ".index", ".timeindex"):
            try:
                os.unlink(self.path(suffix))
            except FileNotFoundError:
                pass


class Segment:
    __slots__ = (
        "base_offset",
        "data",
        "size",
        "next_offset",
        "max_timestamp",
        "offset_of_max_timestamp",
        "rolling_timestamp",
        "roll_jitter_ms",
        "created_ms",
        "last_modified_ms",
        "index",
        "time_index",
        "bytes_since_index",
        "sealed",
        "indexes_saved",
    )

    def __init__(self, base_offset: int, data: SegmentData, created_ms: int) -> None:
        self.base_offset = base_offset
        self.data = data
        self.size = 0
        self.next_offset = base_offset  # last offset + 1
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1  # last offset of the first batch with max_timestamp
        self.rolling_timestamp = NO_TIMESTAMP  # first batch's max timestamp (segment.ms rolls)
        self.roll_jitter_ms = 0  # rolled this much before segment.ms (segment.jitter.ms)
        self.created_ms = created_ms
        self.last_modified_ms = created_ms
        self.index = OffsetIndex()
        self.time_index = TimeIndex()
        self.bytes_since_index = 0
        self.sealed = False
        self.indexes_saved = False

    def __repr__(self) -> str:
        return f"Segment(base={self.base_offset}, next={self.next_offset}, size={self.size})"

    @property
    def largest_timestamp(self) -> int:
        """What time retention compares: the max record timestamp, or the last write time."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.last_modified_ms

    def seal(self) -> None:
        """No more appends: close the time index with the segment's max (as Kafka does on roll)."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(
                self.max_timestamp, self.offset_of_max_timestamp - self.base_offset
            )
        self.sealed = True

    def save_indexes(self) -> None:
        if not self.data.persistent:
            self.indexes_saved = self.sealed
            return
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(
                self.max_timestamp, self.offset_of_max_timestamp - self.base_offset
            )
        self.data.save_indexes(self.index.to_bytes(), self.time_index.to_bytes())
        self.indexes_saved = self.sealed

    # -- reads ---------------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, min_one: bool, index_interval: int, chunk: int = 0,
        headers: bool = True,
    ) -> tuple[memoryview | None, list[ReadBatch], bool]:
        """Batches from the one holding ``offset`` within ``max_bytes`` (whole, with ``headers``).

        Returns ``(buffer, batches, reached_end)``: each ``ReadBatch`` carries ``chunk`` and its
        position in the buffer; ``reached_end`` says the segment's last batch was included, so
        a caller may continue with the next segment. Without ``headers`` the batches are not
        listed (Fetch only sends the bytes) and, as Kafka's LogSegment.read slices the file, the
        bytes after the first batch end where ``max_bytes`` does, maybe inside a batch.
        """
        end = self.size
        pos = self.index.lookup(offset - self.base_offset)
        window = max(max_bytes, 0) + index_interval + HEADER_SIZE
        # 1. Locate the first batch whose last offset >= offset, walking headers from `pos`.
        while True:
            if pos >= end:
                return None, [], True
            buf = self.data.read(pos, min(end - pos, window))
            q = 0
            found = None
            for p, h in walk_headers(buf):
                if h.base_offset + h.last_offset_delta >= offset:
                    found = p, h
                    break
                q = p + h.size
            if found is not None:
                break
            if q == 0:  # the batch at `pos` is larger than the window (or damaged): judge it by its header
                h = parse_header(buf)
                if h.size < HEADER_SIZE or pos + h.size > end:
                    raise CorruptRecordError(
                        f"segment {self.base_offset}: a batch of {h.size} bytes at position {pos} of {end}"
                    )
                if h.base_offset + h.last_offset_delta >= offset:
                    found = 0, h
                    break
                q = h.size
            pos += q
        p, first = found
        abs_pos = pos + p
        # 2. Collect whole batches from there within the budget.
        if first.size > max_bytes:
            if not min_one:
                return None, [], False
            if p + first.size <= len(buf):
                view = memoryview(buf)[p : p + first.size]
            else:
                view = memoryview(self.data.read(abs_pos, first.size))
            return view, [ReadBatch(chunk, 0, first)] if headers else [], abs_pos + first.size >= end
        want = min(max_bytes, end - abs_pos)
        if p + want > len(buf):
            buf = self.data.read(abs_pos, want)
            p = 0
        if not headers:  # Kafka's LogSegment.read: a file slice, which may end inside a batch
            return memoryview(buf)[p : p + want], [], abs_pos + want >= end
        # walk_headers, inlined: this loop runs once per batch of every fetch
        batches = []
        add = batches.append
        unpack = HEADER.unpack_from
        make = BatchHeader._make
        limit = p + want
        q = p
        while limit - q >= HEADER_SIZE:
            fields = unpack(buf, q)
            size = fields[1] + LOG_OVERHEAD
            if size < HEADER_SIZE or q + size > limit:
                break
            add(ReadBatch(chunk, q - p, make(fields)))
            q += size
        return memoryview(buf)[p:q], batches, abs_pos + (q - p) >= end

