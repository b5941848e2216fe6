"""A copy of a record batch that keeps only some of its records, as log compaction leaves them.

A share consumer that releases a few records of a big producer batch gets them back through a
log read that covers the whole batch: 700 released records of a 7,000-record batch, redelivered
in pieces, would carry the full 700 KB each time. KIP-932 clients keep only the acquired offsets
of what they receive, and every Kafka client already reads batches whose records skip offsets
(compacted topics), so the broker may send a copy holding just the wanted records. The header is
kept (base offset, lastOffsetDelta, timestamps, producer fields); batchLength, recordsCount and
the CRC are rewritten.

Only uncompressed, non-control batches whose offset deltas run 0..n-1 are cut; ``record_starts``
returns None for the others, which go out whole.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from .records import (
    COMPRESSION_MASK,
    CONTROL_FLAG,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    set_crc,
)
from .varint import VarintError, read_varint

_BATCH_LENGTH = struct.Struct(">i")
_BATCH_LENGTH_OFFSET = 8
_RECORDS_COUNT = struct.Struct(">i")
_RECORDS_COUNT_OFFSET = 57


def can_cut(header: BatchHeader) -> bool:
    """Whether ``header``'s batch stores record i at offset base + i, uncompressed."""
    return (not header.attributes & (COMPRESSION_MASK | CONTROL_FLAG)
            and header.records_count == header.last_offset_delta + 1)


def record_starts(batch, header: BatchHeader) -> list[int] | None:
    """Byte position of each record of ``batch`` (one whole batch), then the batch's end.

    None if the batch cannot be cut or its records do not fill it exactly. Only the length
    prefixes are read, and runs of records of one length are found a slice at a time: records
    of one size (whose length grows by a byte as the offset and timestamp deltas do) cost a few
    C-level scans per batch instead of a Python step per record.
    """
    if not can_cut(header):
        return None
    count = header.records_count
    data = bytes(batch)  # indexing bytes is faster than indexing a memoryview
    end = len(data)
    starts: list[int] = []
    pos = HEADER_SIZE
    probe = _FIRST_PROBE
    try:
        while len(starts) < count:
            if not probe:  # lengths vary: step record by record for a while
                pos = _step(data, pos, min(_STEPS, count - len(starts)), starts)
                if pos < 0:
                    return None
                probe = _FIRST_PROBE
                continue
            n, after = read_varint(data, pos)
            if n < 0:
                return None
            stride = after - pos + n
            k = min(count - len(starts), probe, (end - pos) // stride)
            if k == 0:
                return None  # the record runs past the batch
            # The records [0, same) from here hold this record's length bytes at pos + i * stride,
            # so each starts where the one before it says it ends.
            same = k
            for j in range(pos, after):
                column = data[j:j + (k - 1) * stride + 1:stride]
                same = min(same, k - len(column.lstrip(column[:1])))
            starts.extend(range(pos, pos + same * stride, stride))
            pos += same * stride
            probe = min(probe * 4, count) if same == k else _FIRST_PROBE if same > 1 else 0
    except (IndexError, VarintError):
        return None
    if pos != end:
        return None
    starts.append(pos)
    return starts


_FIRST_PROBE = 8  # records compared at once after a change of length
_STEPS = 128  # records decoded one by one when consecutive lengths differ


def _step(data: bytes, pos: int, n_records: int, starts: list[int]) -> int:
    """Decode ``n_records`` lengths from ``pos``, appending each start; -1 for a negative one."""
    append = starts.append
    for _ in range(n_records):
        append(pos)
        b = data[pos]
        if b < 0x80:  # the zig-zag length in one byte (records under 64 bytes) or two
            n = b
            pos += 1
        elif data[pos + 1] < 0x80:
            n = (b & 0x7F) | (data[pos + 1] << 7)
            pos += 2
        else:
            n, pos = read_varint(data, pos)
            n = n << 1 if n >= 0 else 1
        if n & 1:
            return -1
        pos += n >> 1
    return pos


def _offset_delta(batch, pos: int) -> int:
    """offsetDelta of the record at ``pos``: after its length, attributes and timestampDelta."""
    while batch[pos] & 0x80:  # length
        pos += 1
    pos += 2  # the length's last byte and the attributes
    while batch[pos] & 0x80:  # timestampDelta
        pos += 1
    return read_varint(batch, pos + 1)[0]


def subset(batch, starts: list[int], base_offset: int, ranges: Sequence[tuple[int, ...]]) -> bytes | None:
    """A copy of ``batch`` with only the records in ``ranges`` ((first, last, ...) offsets,
    ascending; parts outside the batch are ignored). None if a kept record's offsetDelta is not
    its index: producers may write any deltas, and ``record_starts`` does not read them."""
    count = len(starts) - 1
    out = bytearray(batch[:HEADER_SIZE])
    kept = 0
    try:
        for r in ranges:
            a = r[0] - base_offset
            b = r[1] - base_offset + 1
            if a < 0:
                a = 0
            if b > count:
                b = count
            if a >= b:
                continue
            for i in range(a, b):
                if _offset_delta(batch, starts[i]) != i:
                    return None
            out += batch[starts[a]:starts[b]]
            kept += b - a
    except (IndexError, VarintError):
        return None
    _BATCH_LENGTH.pack_into(out, _BATCH_LENGTH_OFFSET, len(out) - LOG_OVERHEAD)
    _RECORDS_COUNT.pack_into(out, _RECORDS_COUNT_OFFSET, kept)
    set_crc(out, 0)
    return bytes(out)
