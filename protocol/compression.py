"""Record-batch compression codecs, by the id Kafka stores in the batch attributes (bits 0-2).

Formats, as Apache Kafka's Java clients and broker write and read them (all through ``cramjam``):

* 1 gzip: RFC 1952. Several concatenated members are accepted, as ``GZIPInputStream`` does.
* 2 snappy: Kafka's Java code goes through snappy-java's ``SnappyOutputStream``, the *xerial* framing:
  ``\\x82SNAPPY\\x00``, int32 version, int32 compatible version, then ``[int32 length][raw snappy
  block]`` chunks of at most 32 KiB of input each. librdkafka writes one *raw* snappy block instead.
  Readers take both (snappy-java falls back to raw when the magic is absent), so :func:`decompress`
  does too, and :func:`compress` writes xerial framing like the Java broker and clients.
* 3 lz4: the LZ4 *frame* format. Kafka's ``Lz4BlockInputStream`` refuses linked blocks, dictionary
  ids and reserved bits, and reads a single frame; we refuse the same so we never accept a batch that
  Java consumers cannot read. We write what ``Lz4BlockOutputStream`` writes: independent 64 KiB
  blocks, no block or content checksum, incompressible blocks stored raw. (Magic v0 batches once
  had a broken header checksum; that quirk only exists for magic 0, never for v2 batches.)
* 4 zstd: standard frames (several concatenated frames accepted).

Decompression never allocates more than ``max_output`` bytes: the output buffer is sized from the
format's own length fields where it has them, grown geometrically otherwise, and the codecs stop
at the end of the buffer instead of growing it. Every failure, including a result that would be
too large, raises :class:`~protocol.records.CorruptRecordError` (Kafka's CORRUPT_MESSAGE).
"""

from __future__ import annotations

import struct

import cramjam

__all__ = [
    "NONE",
    "GZIP",
    "SNAPPY",
    "LZ4",
    "ZSTD",
    "CODEC_NAMES",
    "DEFAULT_MAX_OUTPUT",
    "compress",
    "decompress",
]

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

# A batch is at most max.message.bytes (1 MiB by default) compressed; 64 MiB leaves room for
# highly compressible payloads while bounding what one hostile batch can make us allocate.
DEFAULT_MAX_OUTPUT = 64 * 1024 * 1024

_BE_I32 = struct.Struct(">i")
_LE_U32 = struct.Struct("<I")


def _corrupt(message: str) -> Exception:
    # Imported lazily: records.py imports this module for its codecs.
    from .records import CorruptRecordError

    return CorruptRecordError(message)


def compress(codec: int, data, level: int | None = None) -> bytes:
    """Compress ``data`` the way Kafka's Java producer does for ``codec``."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        return _lz4_frame_compress(data, level)
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data, level=level))
    raise ValueError(f"unknown compression codec {codec}")


def decompress(codec: int, data, max_output: int = DEFAULT_MAX_OUTPUT) -> bytes:
    """Decompress ``data``; raise ``CorruptRecordError`` if it is invalid or inflates past ``max_output``."""
    try:
        if codec == NONE:
            if len(data) > max_output:
                raise _corrupt(f"{len(data)} bytes exceed the {max_output}-byte limit")
            return bytes(data)
        if codec == GZIP:
            return _gzip_decompress(data, max_output)
        if codec == SNAPPY:
            return _snappy_decompress(memoryview(data), max_output)
        if codec == LZ4:
            return _lz4_frame_decompress(memoryview(data), max_output)
        if codec == ZSTD:
            return _zstd_decompress(data, max_output)
    except Exception as e:
        from .records import CorruptRecordError

        if isinstance(e, CorruptRecordError):
            raise
        raise _corrupt(f"invalid {CODEC_NAMES[codec]} data: {e}") from None
    raise _corrupt(f"unknown compression codec {codec}")


# -- generic bounded decompression -----------------------------------------------------------------

_TOO_SMALL = "failed to write whole buffer"  # cramjam's message when the output buffer is full

# Largest output per input byte each format can produce; caps the first buffer so that a header
# lying about its size cannot make us allocate far more than the data could ever inflate to.
_GZIP_MAX_RATIO = 1032
_SNAPPY_MAX_RATIO = 22
_LZ4_MAX_RATIO = 256
_ZSTD_FIRST_GUESS_RATIO = 64  # zstd has no useful bound (zeros compress ~30000:1); we grow instead


def _bounded(module, data, max_output: int, first_size: int, claimed: int | None = None) -> bytes:
    """Decompress into a fixed buffer, growing it (x4) up to ``max_output`` while it is too small.

    ``claimed`` is a size the data states and the codec verifies (zstd frame content size, gzip
    ISIZE, lz4 content size): a claim above ``max_output`` is rejected before any work.
    """
    if claimed is not None and claimed > max_output:
        raise _corrupt(f"data claims {claimed} decompressed bytes, over the {max_output}-byte limit")
    size = max(0, min(first_size, max_output))
    while True:
        out = bytearray(size)
        try:
            n = module.decompress_into(data, out)
        except cramjam.DecompressionError as e:
            if _TOO_SMALL not in str(e):
                raise
            if size >= max_output:
                raise _corrupt(f"decompressed size exceeds the {max_output}-byte limit") from None
            size = min(max_output, max(4 * size, 64 * 1024))
            continue
        return bytes(memoryview(out)[:n])


def _gzip_decompress(data, max_output: int) -> bytes:
    # ISIZE (last 4 bytes) is the last member's size mod 2**32: exact for the single-member streams
    # clients write, and never more than the total for concatenated members.
    claimed = _LE_U32.unpack_from(data, len(data) - 4)[0] if len(data) >= 18 else None
    first = min(claimed if claimed is not None else 4 * len(data), _GZIP_MAX_RATIO * len(data)) + 1024
    return _bounded(cramjam.gzip, data, max_output, first, claimed)


def _zstd_decompress(data, max_output: int) -> bytes:
    claimed = _zstd_content_size(data)
    first = min(claimed if claimed is not None else 4 * len(data), _ZSTD_FIRST_GUESS_RATIO * len(data))
    return _bounded(cramjam.zstd, data, max_output, first + 1024, claimed)


def _zstd_content_size(data) -> int | None:
    """Frame_Content_Size of the first frame, when the frame header carries it."""
    if len(data) < 6 or _LE_U32.unpack_from(data, 0)[0] != 0xFD2FB528:
        return None
    fhd = data[4]
    fcs_flag, single_segment, dict_id_flag = fhd >> 6, (fhd >> 5) & 1, fhd & 3
    fcs_size = (single_segment, 2, 4, 8)[fcs_flag]
    if not fcs_size:
        return None
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_id_flag]
    if pos + fcs_size > len(data):
        return None
    value = int.from_bytes(data[pos:pos + fcs_size], "little")
    return value + 256 if fcs_size == 2 else value


# -- snappy (raw or xerial-framed) -----------------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_HEADER_SIZE = len(_XERIAL_HEADER)  # 16
_XERIAL_MAGIC_HEAD = _BE_I32.unpack(_XERIAL_MAGIC[:4])[0]  # a chunk "length" that starts a new stream
_XERIAL_BLOCK_SIZE = 32 * 1024  # snappy-java's SnappyOutputStream default


def _xerial_compress(data) -> bytes:
    view = memoryview(data)
    out = bytearray(_XERIAL_HEADER)
    for start in range(0, len(view), _XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start:start + _XERIAL_BLOCK_SIZE])
        out += _BE_I32.pack(len(block))
        out += block
    return bytes(out)


def _snappy_decompress(view: memoryview, max_output: int) -> bytes:
    if len(view) < _XERIAL_HEADER_SIZE or view[:8] != _XERIAL_MAGIC:
        return _snappy_raw([view], max_output)
    chunks = []
    pos, end = _XERIAL_HEADER_SIZE, len(view)
    while pos < end:
        if end - pos < 4:
            raise _corrupt("xerial snappy chunk length truncated")
        length = _BE_I32.unpack_from(view, pos)[0]
        pos += 4
        if length == _XERIAL_MAGIC_HEAD:
            # snappy-java accepts concatenated streams: skip the rest of the next header.
            if end - pos < _XERIAL_HEADER_SIZE - 4:
                raise _corrupt("xerial snappy header truncated")
            pos += _XERIAL_HEADER_SIZE - 4
            continue
        if length < 0 or length > end - pos:
            raise _corrupt(f"xerial snappy chunk of {length} bytes overruns the data")
        chunks.append(view[pos:pos + length])
        pos += length
    return _snappy_raw(chunks, max_output)


def _snappy_raw(blocks: list[memoryview], max_output: int) -> bytes:
    """Raw snappy blocks state their exact output size up front: check the total, then inflate."""
    sizes = [cramjam.snappy.decompress_raw_len(block) for block in blocks]
    total = sum(sizes)
    if total > max_output:
        raise _corrupt(f"snappy data claims {total} bytes, over the {max_output}-byte limit")
    if total > _SNAPPY_MAX_RATIO * sum(len(block) for block in blocks) + 64:
        raise _corrupt(f"snappy data claims {total} bytes, more than its size allows")
    out = bytearray(total)
    view = memoryview(out)
    pos = 0
    for block, size in zip(blocks, sizes):
        if cramjam.snappy.decompress_raw_into(block, view[pos:pos + size]) != size:
            raise _corrupt("snappy block shorter than its stated length")
        pos += size
    return bytes(out)


# -- lz4 frame --------------------------------------------------------------------------------------

_LZ4_MAGIC = 0x184D2204
_LZ4_FLG = 0x60  # version 01, independent blocks, no checksums, no content size, no dictionary
_LZ4_BD = 0x40  # 64 KiB maximum block size, as Kafka's Lz4BlockOutputStream uses
_LZ4_BLOCK_SIZE = 64 * 1024
_LZ4_UNCOMPRESSED = 0x80000000
_LZ4_MAX_BLOCK = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}


def _xxh32_short(data: bytes, seed: int = 0) -> int:
    """XXH32 of fewer than 16 bytes (the frame descriptor), enough for the header checksum."""
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    m = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & m

    assert len(data) < 16
    h = (seed + p5 + len(data)) & m
    i = 0
    while i + 4 <= len(data):
        h = rotl((h + int.from_bytes(data[i:i + 4], "little") * p3) & m, 17) * p4 & m
        i += 4
    for b in data[i:]:
        h = rotl((h + b * p5) & m, 11) * p1 & m
    h = ((h ^ (h >> 15)) * p2) & m
    h = ((h ^ (h >> 13)) * p3) & m
    return h ^ (h >> 16)


_LZ4_HEADER = (
    _LE_U32.pack(_LZ4_MAGIC)
    + bytes((_LZ4_FLG, _LZ4_BD, (_xxh32_short(bytes((_LZ4_FLG, _LZ4_BD))) >> 8) & 0xFF))
)


def _lz4_frame_compress(data, level: int | None) -> bytes:
    view = memoryview(data)
    out = bytearray(_LZ4_HEADER)
    for start in range(0, len(view), _LZ4_BLOCK_SIZE):
        chunk = view[start:start + _LZ4_BLOCK_SIZE]
        block = cramjam.lz4.compress_block(chunk, compression=level, store_size=False)
        if len(block) < len(chunk):
            out += _LE_U32.pack(len(block))
            out += block
        else:
            out += _LE_U32.pack(len(chunk) | _LZ4_UNCOMPRESSED)
            out += chunk
    out += b"\x00\x00\x00\x00"  # end mark
    return bytes(out)


def _lz4_frame_decompress(view: memoryview, max_output: int) -> bytes:
    """Check the frame against Kafka's reader rules and bound its output, then let lz4 inflate it."""
    end = len(view)
    if end < 7 or _LE_U32.unpack_from(view, 0)[0] != _LZ4_MAGIC:
        raise _corrupt("not an lz4 frame (bad magic)")
    flg, bd = view[4], view[5]
    if flg >> 6 != 1:
        raise _corrupt(f"lz4 frame version {flg >> 6} is unsupported")
    if flg & 0x03:
        raise _corrupt("lz4 frame reserved bits or dictionary id set")
    if not flg & 0x20:
        raise _corrupt("lz4 frame with dependent blocks is unsupported")
    if bd & 0x8F or (bd >> 4) not in _LZ4_MAX_BLOCK:
        raise _corrupt(f"lz4 frame block descriptor {bd:#x} is invalid")
    max_block = _LZ4_MAX_BLOCK[bd >> 4]
    block_checksum, has_content_size, content_checksum = flg & 0x10, flg & 0x08, flg & 0x04
    pos = 6
    content_size = None
    if has_content_size:
        if end < pos + 8:
            raise _corrupt("lz4 frame header truncated")
        content_size = int.from_bytes(view[pos:pos + 8], "little")
        pos += 8
    pos += 1  # header checksum, verified by the decoder
    bound = 0
    while True:
        if end - pos < 4:
            raise _corrupt("lz4 frame truncated")
        word = _LE_U32.unpack_from(view, pos)[0]
        pos += 4
        if word == 0:
            break
        size = word & ~_LZ4_UNCOMPRESSED
        if size > max_block:
            raise _corrupt(f"lz4 block size {size} exceeds the frame maximum {max_block}")
        bound += size if word & _LZ4_UNCOMPRESSED else max_block
        pos += size + (4 if block_checksum else 0)
    if content_checksum:
        pos += 4
    if pos > end:
        raise _corrupt("lz4 frame truncated")
    # Bytes after the end mark are ignored, as Kafka's reader ignores them.
    frame = view[:pos]
    first = min(bound if content_size is None else content_size, _LZ4_MAX_RATIO * pos + 1024)
    return _bounded(cramjam.lz4, frame, max_output, first, content_size)
