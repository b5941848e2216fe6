"""Where each record of a batch starts, from the records' length prefixes alone.

Serving a part of a batch (``batch_subset``) and checking a produced batch's framing both need
only the lengths: runs of records of one length are found a slice at a time, so records of one
size (whose length grows by a byte as the offset and timestamp deltas do) cost a few C-level
scans per batch instead of a Python step per record.
"""

from __future__ import annotations

from .varint import VarintError, read_varint

_FIRST_PROBE = 8  # records compared at once after a change of length
_STEPS = 128  # records decoded one by one when consecutive lengths differ


def record_starts_in(data: bytes, pos: int, count: int) -> list[int] | None:
    """The start of each of the ``count`` records from ``pos``, then the end of ``data``; None
    unless they fill ``data`` exactly (a negative length, a record running past the end, or
    bytes left over)."""
    end = len(data)
    starts: list[int] = []
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
                return None  # the record runs past the end
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
