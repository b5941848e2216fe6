"""Sparse offset and time indexes of one segment, kept in memory and saved in Kafka's file format.

``.index`` holds 8-byte entries (relative offset int32, position int32); ``.timeindex`` holds
12-byte entries (timestamp int64, relative offset int32), all big-endian, so Kafka's
``kafka-dump-log`` reads our files. An offset entry names the *last* offset of the batch that
starts at ``position``; a time entry names the largest timestamp seen so far in the segment and
the last offset of the batch that carried it. Both are appended at the same moments, once every
``index.interval.bytes`` of log.
"""

from __future__ import annotations

import sys
from array import array
from operator import sub
from bisect import bisect_left, bisect_right

OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12
_SWAP = sys.byteorder == "little"


class OffsetIndex:
    __slots__ = ("offsets", "positions")

    def __init__(self) -> None:
        self.offsets = array("i")  # relative to the segment's base offset
        self.positions = array("i")

    def __len__(self) -> int:
        return len(self.offsets)

    def append(self, relative_offset: int, position: int) -> None:
        self.offsets.append(relative_offset)
        self.positions.append(position)

    def lookup(self, relative_offset: int) -> int:
        """Position of a batch at or before the one holding ``relative_offset`` (0 if none)."""
        i = bisect_right(self.offsets, relative_offset) - 1
        return self.positions[i] if i >= 0 else 0

    def last(self) -> tuple[int, int] | None:
        return (self.offsets[-1], self.positions[-1]) if self.offsets else None

    def to_bytes(self) -> bytes:
        n = len(self.offsets)
        flat = array("i", bytes(OFFSET_ENTRY_SIZE * n))
        flat[0::2] = self.offsets
        flat[1::2] = self.positions
        if _SWAP:
            flat.byteswap()
        return flat.tobytes()

    @classmethod
    def from_bytes(cls, raw: bytes, segment_size: int) -> OffsetIndex | None:
        """Parse a ``.index`` file; None if it is not a plausible index of this segment."""
        if len(raw) % OFFSET_ENTRY_SIZE:
            return None
        flat = array("i")
        flat.frombytes(raw)
        if _SWAP:
            flat.byteswap()
        idx = cls()
        idx.offsets = flat[0::2]
        idx.positions = flat[1::2]
        if not _strictly_increasing(idx.offsets) or not _strictly_increasing(idx.positions):
            return None
        if idx.offsets and (idx.offsets[0] < 0 or idx.positions[0] < 0):
            return None
        if idx.positions and idx.positions[-1] >= segment_size:
            return None
        return idx


class TimeIndex:
    __slots__ = ("timestamps", "offsets")

    def __init__(self) -> None:
        self.timestamps = array("q")
        self.offsets = array("i")  # relative to the segment's base offset

    def __len__(self) -> int:
        return len(self.timestamps)

    def maybe_append(self, timestamp: int, relative_offset: int) -> None:
        """Add an entry only when the segment's max timestamp grew (entries stay increasing)."""
        if not self.timestamps or timestamp > self.timestamps[-1]:
            self.timestamps.append(timestamp)
            self.offsets.append(relative_offset)

    def lookup(self, timestamp: int) -> int:
        """Relative offset of the last entry older than ``timestamp``, or -1.

        Every batch up to that offset has a max timestamp below ``timestamp``, so a search
        for the first batch reaching ``timestamp`` may start after it.
        """
        i = bisect_left(self.timestamps, timestamp) - 1
        return self.offsets[i] if i >= 0 else -1

    def last(self) -> tuple[int, int] | None:
        return (self.timestamps[-1], self.offsets[-1]) if self.timestamps else None

    def to_bytes(self) -> bytes:
        # Interleave big-endian int64/int32 pairs with array slicing (C speed): each 12-byte
        # entry is viewed as three int32 words, the timestamp's bytes spanning the first two.
        n = len(self.timestamps)
        ts = array("q", self.timestamps)
        offsets = array("i", self.offsets)
        if _SWAP:
            ts.byteswap()
            offsets.byteswap()
        halves = array("i")
        halves.frombytes(ts.tobytes())
        words = array("i", bytes(TIME_ENTRY_SIZE * n))
        words[0::3] = halves[0::2]
        words[1::3] = halves[1::2]
        words[2::3] = offsets
        return words.tobytes()

    @classmethod
    def from_bytes(cls, raw: bytes, max_relative_offset: int) -> TimeIndex | None:
        """Parse a ``.timeindex`` file; None if implausible for a segment ending at that offset."""
        if len(raw) % TIME_ENTRY_SIZE:
            return None
        words = array("i")
        words.frombytes(raw)
        halves = array("i", bytes(8 * (len(raw) // TIME_ENTRY_SIZE)))
        halves[0::2] = words[0::3]
        halves[1::2] = words[1::3]
        idx = cls()
        idx.timestamps.frombytes(halves.tobytes())
        idx.offsets = words[2::3]
        if _SWAP:
            idx.timestamps.byteswap()
            idx.offsets.byteswap()
        if not _strictly_increasing(idx.timestamps) or not _non_decreasing(idx.offsets):
            return None
        if idx.offsets and (idx.offsets[0] < 0 or idx.offsets[-1] > max_relative_offset):
            return None
        return idx


def _strictly_increasing(a: array) -> bool:
    # for ints, x[i] < x[i+1] for all i  <=>  x[i] - i never decreases (C-speed checks)
    shifted = list(map(sub, a, range(len(a))))
    return shifted == sorted(shifted)


def _non_decreasing(a: array) -> bool:
    values = a.tolist()
    return values == sorted(values)
