"""Kafka's variable-length integers.

Two encodings share the same 7-bits-per-byte, least-significant-group-first layout:

* unsigned varints (``UNSIGNED_VARINT`` in the schemas: compact lengths, tagged-field tags), at most
  5 bytes for 32-bit values;
* zig-zag signed varints (``VARINT``, 32-bit, 5 bytes max) and varlongs (``VARLONG``, 64-bit, 10 bytes
  max), used inside record batches.

Readers take ``(buf, pos)`` and return ``(value, next_pos)`` so callers can walk a buffer without
slicing it; they accept anything indexable as ints (bytes, bytearray, memoryview of bytes). Like
Kafka's ``ByteUtils`` they reject a continuation bit on the last allowed byte and drop value bits
above the type's width. Truncated or over-long input raises :class:`VarintError`.

Every reader has a one-byte fast path because small values dominate (lengths, deltas, counts).
"""

from __future__ import annotations

__all__ = [
    "VarintError",
    "read_uvarint",
    "read_uvarlong",
    "read_varint",
    "read_varlong",
    "write_uvarint",
    "write_varint",
    "write_varlong",
    "uvarint_size",
    "varint_size",
    "varlong_size",
]

_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class VarintError(ValueError):
    """A varint is truncated or longer than its type allows."""


def _read_unsigned(buf, pos: int, max_shift: int, mask: int) -> tuple[int, int]:
    """Multi-byte path shared by all readers (the first byte had its continuation bit set)."""
    try:
        value = buf[pos] & 0x7F
        shift = 7
        pos += 1
        while True:
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value & mask, pos
            shift += 7
            if shift > max_shift:
                raise VarintError("varint too long: continuation bit set on its last byte")
    except IndexError:
        raise VarintError("varint truncated") from None


def read_uvarint(buf, pos: int = 0) -> tuple[int, int]:
    """Unsigned 32-bit varint at ``pos`` -> ``(value, next_pos)``."""
    try:
        b = buf[pos]
    except IndexError:
        raise VarintError("varint truncated") from None
    if b < 0x80:
        return b, pos + 1
    return _read_unsigned(buf, pos, 28, _U32)


def read_uvarlong(buf, pos: int = 0) -> tuple[int, int]:
    """Unsigned 64-bit varint at ``pos`` -> ``(value, next_pos)``."""
    try:
        b = buf[pos]
    except IndexError:
        raise VarintError("varint truncated") from None
    if b < 0x80:
        return b, pos + 1
    return _read_unsigned(buf, pos, 63, _U64)


def read_varint(buf, pos: int = 0) -> tuple[int, int]:
    """Zig-zag signed 32-bit varint at ``pos`` -> ``(value, next_pos)``."""
    try:
        b = buf[pos]
    except IndexError:
        raise VarintError("varint truncated") from None
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    u, pos = _read_unsigned(buf, pos, 28, _U32)
    return (u >> 1) ^ -(u & 1), pos


def read_varlong(buf, pos: int = 0) -> tuple[int, int]:
    """Zig-zag signed 64-bit varint at ``pos`` -> ``(value, next_pos)``."""
    try:
        b = buf[pos]
    except IndexError:
        raise VarintError("varint truncated") from None
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    u, pos = _read_unsigned(buf, pos, 63, _U64)
    return (u >> 1) ^ -(u & 1), pos


def write_uvarint(out: bytearray, v: int) -> None:
    """Append unsigned ``v`` (any non-negative int up to 64 bits) to ``out``."""
    if v < 0x80:
        if v < 0:
            raise ValueError(f"unsigned varint cannot hold {v}")
        out.append(v)
        return
    if v > _U64:
        raise ValueError(f"unsigned varint cannot hold {v}")
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def write_varint(out: bytearray, v: int) -> None:
    """Append signed 32-bit ``v`` zig-zag encoded."""
    if not _INT32_MIN <= v <= _INT32_MAX:
        raise ValueError(f"varint out of int32 range: {v}")
    write_uvarint(out, (v << 1) ^ (v >> 31))


def write_varlong(out: bytearray, v: int) -> None:
    """Append signed 64-bit ``v`` zig-zag encoded."""
    if not _INT64_MIN <= v <= _INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {v}")
    write_uvarint(out, (v << 1) ^ (v >> 63))


def uvarint_size(v: int) -> int:
    """Bytes that ``write_uvarint(out, v)`` appends."""
    return (v.bit_length() + 6) // 7 or 1


def varint_size(v: int) -> int:
    """Bytes that ``write_varint(out, v)`` appends."""
    return uvarint_size((v << 1) ^ (v >> 31))


def varlong_size(v: int) -> int:
    """Bytes that ``write_varlong(out, v)`` appends."""
    return uvarint_size((v << 1) ^ (v >> 63))
