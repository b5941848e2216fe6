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
from .record_lengths import record_starts_in
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

    None if the batch cannot be cut or its records do not fill it exactly (see
    :func:`protocol.record_lengths.record_starts_in`).
    """
    if not can_cut(header):
        return None
    return record_starts_in(bytes(batch), HEADER_SIZE, header.records_count)


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
