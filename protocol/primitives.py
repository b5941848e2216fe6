"""Readers and writers of Kafka's wire primitives, called by the generated codecs.

Writers append to a ``bytearray`` in place; readers take ``(buf, pos)`` and return
``(value, new_pos)``. Fixed-width fields are packed by the generated code itself with
precomputed ``struct.Struct`` objects, so only variable-length types live here.
Every reader checks lengths against the buffer: a malformed request must raise
``DecodeError`` and never allocate more than the frame it came in.
"""

from __future__ import annotations

import re
import struct
from uuid import UUID

from .varint import read_uvarint, write_uvarint

__all__ = [
    "DecodeError", "ZERO_UUID", "read_uvarint", "write_uvarint", "uuid_from_bytes",
    "w_string", "w_nstring", "w_cstring", "w_cnstring",
    "r_string", "r_nstring", "r_cstring", "r_cnstring",
    "w_bytes", "w_nbytes", "w_cbytes", "w_cnbytes",
    "r_bytes", "r_nbytes", "r_cbytes", "r_cnbytes",
    "w_records", "w_crecords", "r_records", "r_nrecords", "r_crecords", "r_cnrecords",
    "w_len", "w_nlen", "w_clen", "w_cnlen", "r_len", "r_nlen", "r_clen", "r_cnlen",
    "w_tags", "skip_tags", "w_int_array", "r_int_array",
]

ZERO_UUID = UUID(int=0)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_pack_i16 = _I16.pack
_pack_i32 = _I32.pack
_unpack_i16 = _I16.unpack_from
_unpack_i32 = _I32.unpack_from
_NULL16 = _pack_i16(-1)
_NULL32 = _pack_i32(-1)


class DecodeError(ValueError):
    """The bytes do not follow the schema (Kafka closes the connection on these)."""


_uuid_cache: dict[bytes, UUID] = {}


def uuid_from_bytes(raw: bytes) -> UUID:
    """Topic ids repeat in every request; caching avoids rebuilding the same UUID objects."""
    u = _uuid_cache.get(raw)
    if u is None:
        if len(_uuid_cache) > 65536:
            _uuid_cache.clear()
        u = _uuid_cache[raw] = UUID(bytes=raw)
    return u


def _slice(buf, pos: int, n: int):
    end = pos + n
    if n < 0 or end > len(buf):
        raise DecodeError(f"length {n} at {pos} runs past the end of a {len(buf)}-byte buffer")
    return buf[pos:end], end


# --- strings -------------------------------------------------------------------------------


def w_string(b: bytearray, s: str) -> None:
    raw = s.encode()
    b += _pack_i16(len(raw))
    b += raw


def w_nstring(b: bytearray, s: str | None) -> None:
    if s is None:
        b += _NULL16
    else:
        w_string(b, s)


def w_cstring(b: bytearray, s: str) -> None:
    raw = s.encode()
    write_uvarint(b, len(raw) + 1)
    b += raw


def w_cnstring(b: bytearray, s: str | None) -> None:
    if s is None:
        b.append(0)
    else:
        w_cstring(b, s)


# An encoded surrogate (ED A0-BF, then a continuation byte if there is one): Java's decoder
# replaces it with one U+FFFD where Python's "replace" gives one per byte; on every other
# malformed sequence the two agree. 0xED is never a continuation byte, so replacing these
# first changes nothing before them.
_ENCODED_SURROGATE = re.compile(rb"\xed[\xa0-\xbf][\x80-\xbf]?")
_REPLACEMENT = "\ufffd".encode()


def _decode_str(raw) -> str:
    """UTF-8, with invalid bytes as U+FFFD rather than an error: Kafka reads strings with
    ``new String(bytes, UTF_8)``, so a client id (or any string) in another encoding is served,
    and a group id hashes to the partition Kafka would pick."""
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError:
        return str(_ENCODED_SURROGATE.sub(_REPLACEMENT, raw), "utf-8", "replace")


def r_nstring(buf, pos: int):
    if pos + 2 > len(buf):
        raise DecodeError("string length truncated")
    (n,) = _unpack_i16(buf, pos)
    if n < 0:  # as Kafka's generated readers: any negative length is null, not only -1
        return None, pos + 2
    raw, pos = _slice(buf, pos + 2, n)
    return _decode_str(raw), pos


def r_string(buf, pos: int):
    s, pos = r_nstring(buf, pos)
    if s is None:
        raise DecodeError("non-nullable string was null")
    return s, pos


def r_cnstring(buf, pos: int):
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    raw, pos = _slice(buf, pos, n - 1)
    return _decode_str(raw), pos


def r_cstring(buf, pos: int):
    s, pos = r_cnstring(buf, pos)
    if s is None:
        raise DecodeError("non-nullable string was null")
    return s, pos


# --- bytes ---------------------------------------------------------------------------------


def w_bytes(b: bytearray, v) -> None:
    b += _pack_i32(len(v))
    b += v


def w_nbytes(b: bytearray, v) -> None:
    if v is None:
        b += _NULL32
    else:
        w_bytes(b, v)


def w_cbytes(b: bytearray, v) -> None:
    write_uvarint(b, len(v) + 1)
    b += v


def w_cnbytes(b: bytearray, v) -> None:
    if v is None:
        b.append(0)
    else:
        w_cbytes(b, v)


def r_nbytes(buf, pos: int):
    if pos + 4 > len(buf):
        raise DecodeError("bytes length truncated")
    (n,) = _unpack_i32(buf, pos)
    if n < 0:
        return None, pos + 4
    raw, pos = _slice(buf, pos + 4, n)
    return bytes(raw), pos


def r_bytes(buf, pos: int):
    v, pos = r_nbytes(buf, pos)
    if v is None:
        raise DecodeError("non-nullable bytes were null")
    return v, pos


def r_cnbytes(buf, pos: int):
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    raw, pos = _slice(buf, pos, n - 1)
    return bytes(raw), pos


def r_cbytes(buf, pos: int):
    v, pos = r_cnbytes(buf, pos)
    if v is None:
        raise DecodeError("non-nullable bytes were null")
    return v, pos


# --- records (zero-copy) -------------------------------------------------------------------
#
# A records value is None, one buffer (bytes / bytearray / memoryview), or a list of buffers
# that are sent back to back. On encode the buffers are handed on in ``parts`` untouched: the
# bytearray being filled is closed off, the record buffers follow, and a fresh bytearray is
# returned for whatever comes next. On decode the value is a memoryview slice of the frame.


def _records_size(v) -> int:
    if isinstance(v, list):
        return sum(map(len, v))
    return len(v)


def _append_records(b: bytearray, parts: list, v) -> bytearray:
    parts.append(b)
    if isinstance(v, list):
        parts.extend(v)
    else:
        parts.append(v)
    return bytearray()


def w_records(b: bytearray, parts: list, v, nullable: bool) -> bytearray:
    if v is None:
        b += _NULL32 if nullable else _pack_i32(0)
        return b
    n = _records_size(v)
    b += _pack_i32(n)
    return _append_records(b, parts, v) if n else b


def w_crecords(b: bytearray, parts: list, v, nullable: bool) -> bytearray:
    if v is None:
        b.append(0 if nullable else 1)
        return b
    n = _records_size(v)
    write_uvarint(b, n + 1)
    return _append_records(b, parts, v) if n else b


def r_nrecords(buf, pos: int):
    if pos + 4 > len(buf):
        raise DecodeError("records length truncated")
    (n,) = _unpack_i32(buf, pos)
    if n < 0:
        return None, pos + 4
    return _slice(memoryview(buf), pos + 4, n)


def r_records(buf, pos: int):
    v, pos = r_nrecords(buf, pos)
    if v is None:
        raise DecodeError("non-nullable records were null")
    return v, pos


def r_cnrecords(buf, pos: int):
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    return _slice(memoryview(buf), pos, n - 1)


def r_crecords(buf, pos: int):
    v, pos = r_cnrecords(buf, pos)
    if v is None:
        raise DecodeError("non-nullable records were null")
    return v, pos


# --- array lengths -------------------------------------------------------------------------
#
# Readers return -1 for a null array and refuse a count larger than the bytes left, so a
# forged count cannot make the decoder loop or allocate beyond the frame.


def w_len(b: bytearray, v) -> None:
    b += _pack_i32(len(v))


def w_nlen(b: bytearray, v) -> None:
    b += _NULL32 if v is None else _pack_i32(len(v))


def w_clen(b: bytearray, v) -> None:
    write_uvarint(b, len(v) + 1)


def w_cnlen(b: bytearray, v) -> None:
    if v is None:
        b.append(0)
    else:
        write_uvarint(b, len(v) + 1)


def _check_count(buf, pos: int, n: int) -> None:
    if n > len(buf) - pos:
        raise DecodeError(f"array count {n} exceeds the {len(buf) - pos} bytes left")


def r_nlen(buf, pos: int):
    if pos + 4 > len(buf):
        raise DecodeError("array length truncated")
    (n,) = _unpack_i32(buf, pos)
    pos += 4
    if n < 0:  # null, whatever the negative length (Kafka's ``if (arrayLength < 0)``)
        return -1, pos
    _check_count(buf, pos, n)
    return n, pos


def r_len(buf, pos: int):
    n, pos = r_nlen(buf, pos)
    if n < 0:
        raise DecodeError("non-nullable array was null")
    return n, pos


def r_cnlen(buf, pos: int):
    # Generated decoders read the usual one-byte length themselves and come here for the rest.
    n, pos = read_uvarint(buf, pos)
    n -= 1
    _check_count(buf, pos, n)
    return n, pos


def r_clen(buf, pos: int):
    n, pos = r_cnlen(buf, pos)
    if n < 0:
        raise DecodeError("non-nullable array was null")
    return n, pos


# --- arrays of fixed-width integers --------------------------------------------------------


def w_int_array(b: bytearray, code: str, v) -> None:
    """Elements only; the generated code writes the length."""
    if v:
        b += struct.pack(f">{len(v)}{code}", *v)


_INT_ARRAYS: dict[tuple[str, int], struct.Struct] = {}


def r_int_array(buf, pos: int, code: str, n: int):
    s = _INT_ARRAYS.get((code, n))
    if s is None:
        s = struct.Struct(f">{n}{code}")
        if n <= 64:  # short arrays (acknowledge types, replica lists) come again and again
            _INT_ARRAYS[(code, n)] = s
    end = pos + s.size
    if end > len(buf):
        raise DecodeError("integer array truncated")
    return list(s.unpack_from(buf, pos)), end


# --- tagged fields -------------------------------------------------------------------------


def w_tags(b: bytearray, tags: list) -> None:
    """``tags`` is a list of ``(tag, encoded bytes)`` in ascending tag order."""
    write_uvarint(b, len(tags))
    for tag, raw in tags:
        write_uvarint(b, tag)
        write_uvarint(b, len(raw))
        b += raw


def skip_tags(buf, pos: int) -> int:
    """Skip a tagged-field section whose tags this version does not know (generated
    decoders step over an empty one themselves)."""
    n, pos = read_uvarint(buf, pos)
    for _ in range(n):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise DecodeError("tagged field runs past the end of the buffer")
    return pos

