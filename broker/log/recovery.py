"""Rebuild a segment's metadata and indexes from its bytes, validating them after a crash.

After an unclean shutdown every segment from the recovery point on is read batch by batch with
``check_batch`` (magic, lengths, CRC-32C) and must carry increasing offsets; the first bad or
incomplete batch ends the segment (the caller truncates there and drops later segments). After a
clean shutdown the bytes are trusted and only headers are walked, from the last index entry if
the saved indexes look sane, which still catches a batch cut short at the very end.
"""

from __future__ import annotations

import logging

from crc32c import crc32c

from protocol.compression import ZSTD
from protocol.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    check_batch,
    parse_header,
)

from .config import INT_MAX
from .index import OffsetIndex, TimeIndex
from .segment import NO_TIMESTAMP, Segment

log = logging.getLogger(__name__)

SCAN_CHUNK = 4 << 20
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD


class _Stop:
    __slots__ = ("pos", "error")

    def __init__(self) -> None:
        self.pos = 0
        self.error: str | None = None


def _iter_batches(data, pos: int, end: int, validate: bool, stop: _Stop):
    """Yield ``(position, header)`` of consecutive batches in ``[pos, end)`` read in chunks.

    Stops at the first batch that is incomplete (or, with ``validate``, invalid) and records
    where and why in ``stop``.
    """
    chunk = SCAN_CHUNK
    unpack = HEADER.unpack_from
    make = BatchHeader._make
    while pos < end:
        buf = data.read(pos, min(chunk, end - pos))
        view = memoryview(buf)
        n = len(buf)
        q = 0
        size = 0
        while n - q >= HEADER_SIZE:
            t = unpack(buf, q)
            length = t[1]
            if length < _MIN_BATCH_LENGTH:
                stop.pos, stop.error = pos + q, f"batch length {length} too small"
                return
            size = length + LOG_OVERHEAD
            if q + size > n:
                break
            # check_batch's checks inline (magic, CRC, codec, counts); a batch failing any
            # of them goes through check_batch itself for its exact error.
            if validate and not (
                t[3] == 2
                and crc32c(view[q + ATTRIBUTES_OFFSET:q + size]) == t[4]
                and t[5] & COMPRESSION_MASK <= ZSTD
                and t[12] >= 0
                and t[6] >= 0
                and (t[5] & CONTROL_FLAG or not t[12] or t[6] >= t[12] - 1)
            ):
                try:
                    check_batch(buf, q)
                except CorruptRecordError as e:
                    stop.pos, stop.error = pos + q, str(e)
                    return
            yield pos + q, make(t)
            q += size
        if q == 0:
            if n < HEADER_SIZE:
                stop.pos, stop.error = pos, f"{n} trailing bytes, less than a batch header"
                return
            if pos + size > end:
                stop.pos, stop.error = pos, f"batch of {size} bytes cut at {end - pos}"
                return
            chunk = max(chunk, size)  # one batch bigger than a chunk: read it whole
        pos += q
    stop.pos = pos


def scan_segment(seg: Segment, end: int, index_interval: int, *, validate: bool) -> str | None:
    """Recompute ``seg``'s size, offsets, timestamps and indexes from bytes ``[0, end)``.

    Returns why the scan stopped before ``end`` (the caller truncates to ``seg.size``), or None.
    """
    seg.index = OffsetIndex()
    seg.time_index = TimeIndex()
    seg.max_timestamp = NO_TIMESTAMP
    seg.offset_of_max_timestamp = -1
    seg.rolling_timestamp = NO_TIMESTAMP
    seg.next_offset = seg.base_offset
    seg.bytes_since_index = 0
    return _scan(seg, 0, end, index_interval, validate)


def resume_segment(
    seg: Segment, end: int, index_interval: int, index: OffsetIndex, time_index: TimeIndex
) -> str | None:
    """Adopt saved indexes and walk only the tail after the last offset index entry.

    Returns a reason if the saved indexes disagree with the bytes (caller does a full scan),
    or ``"tail: ..."`` if the last batch was cut short (``seg.size`` excludes it).
    """
    last = index.last()
    start = last[1] if last else 0
    if last is not None:
        h = parse_header(seg.data.read(start, HEADER_SIZE)) if start + HEADER_SIZE <= end else None
        if h is None or h.magic != 2 or h.base_offset + h.last_offset_delta != seg.base_offset + last[0]:
            return "offset index does not match the segment"
    seg.index = index
    seg.time_index = time_index
    t = time_index.last()
    if t is not None:
        seg.max_timestamp = t[0]
        seg.offset_of_max_timestamp = seg.base_offset + t[1]
    else:
        seg.max_timestamp = NO_TIMESTAMP
        seg.offset_of_max_timestamp = -1
    seg.rolling_timestamp = NO_TIMESTAMP
    if end >= HEADER_SIZE:
        seg.rolling_timestamp = parse_header(seg.data.read(0, HEADER_SIZE)).max_timestamp
    seg.next_offset = seg.base_offset
    seg.bytes_since_index = 0
    error = _scan(seg, start, end, index_interval, validate=False, first_known=start > 0)
    if t is not None and seg.base_offset + t[1] >= seg.next_offset:
        return "time index does not match the segment"
    return None if error is None else "tail: " + error


def _scan(
    seg: Segment, pos: int, end: int, interval: int, validate: bool, first_known: bool = False
) -> str | None:
    base = seg.base_offset
    expected = base
    stop = _Stop()
    stop.pos = pos
    bad = None
    for p, h in _iter_batches(seg.data, pos, end, validate, stop):
        last = h.base_offset + h.last_offset_delta
        if validate and (h.base_offset < expected or last - base > INT_MAX):
            bad = p, f"batch offsets {h.base_offset}..{last} out of order (expected >= {expected})"
            break
        if not first_known:
            seg.rolling_timestamp = h.max_timestamp
            first_known = True
        if h.max_timestamp > seg.max_timestamp:
            seg.max_timestamp = h.max_timestamp
            seg.offset_of_max_timestamp = last
        if seg.bytes_since_index > interval:
            seg.index.append(last - base, p)
            seg.time_index.maybe_append(seg.max_timestamp, seg.offset_of_max_timestamp - base)
            seg.bytes_since_index = 0
        size = h.batch_length + LOG_OVERHEAD
        seg.bytes_since_index += size
        seg.next_offset = expected = last + 1
    if bad is not None:
        seg.size, error = bad
    else:
        seg.size, error = stop.pos, stop.error
    return error
