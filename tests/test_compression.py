"""Compression codecs: round trips, interop with independent libraries, Kafka's framing rules,
and bounded, exception-safe decompression."""

import gzip
import os
import struct
import tracemalloc

import cramjam
import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.codec import snappy_decode as kafka_python_snappy_decode

from protocol import compression as C
from protocol.records import CorruptRecordError

CODECS = [C.NONE, C.GZIP, C.SNAPPY, C.LZ4, C.ZSTD]
COMPRESSED = [C.GZIP, C.SNAPPY, C.LZ4, C.ZSTD]
TEXT = b"".join(b"record-%06d:some fairly repetitive payload;" % i for i in range(5000))  # ~230 KB

# Decoders that share no code with ours.
INDEPENDENT_DECODERS = {
    C.GZIP: gzip.decompress,
    C.SNAPPY: kafka_python_snappy_decode,
    C.LZ4: lz4.frame.decompress,
    C.ZSTD: lambda b: zstandard.ZstdDecompressor().decompressobj().decompress(b),
}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [b"", b"x", TEXT, os.urandom(100_000)], ids=["empty", "one", "text", "random"])
def test_roundtrip(codec, data):
    assert C.decompress(codec, C.compress(codec, data)) == data


@pytest.mark.parametrize("codec", COMPRESSED)
def test_compressed_output_decodes_with_independent_libraries(codec):
    z = C.compress(codec, TEXT)
    assert len(z) < len(TEXT) // 4
    assert INDEPENDENT_DECODERS[codec](z) == TEXT


@pytest.mark.parametrize("codec", CODECS)
def test_accepts_memoryview_and_bytearray(codec):
    z = C.compress(codec, memoryview(TEXT))
    assert C.decompress(codec, bytearray(z)) == TEXT
    assert C.decompress(codec, memoryview(b"pad" + z)[3:]) == TEXT


@settings(max_examples=50, deadline=None)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=3000), repeat=st.integers(1, 80))
def test_roundtrip_property(codec, data, repeat):
    payload = data * repeat
    assert C.decompress(codec, C.compress(codec, payload)) == payload


# -- snappy ----------------------------------------------------------------------------------------


def xerial_frame(*chunks: bytes, header: bytes = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)) -> bytes:
    out = header
    for chunk in chunks:
        raw = bytes(cramjam.snappy.compress_raw(chunk))
        out += struct.pack(">i", len(raw)) + raw
    return out


def test_snappy_writes_xerial_framing_like_the_java_producer():
    z = C.compress(C.SNAPPY, TEXT)
    assert z[:16] == b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
    # snappy-java's SnappyOutputStream cuts the input into 32 KiB blocks.
    pos, sizes = 16, []
    while pos < len(z):
        (n,) = struct.unpack_from(">i", z, pos)
        sizes.append(len(snappy.uncompress(z[pos + 4:pos + 4 + n])))
        pos += 4 + n
    assert pos == len(z)
    assert sizes[:-1] == [32 * 1024] * (len(sizes) - 1) and sum(sizes) == len(TEXT)


def test_snappy_decodes_hand_built_xerial_frame():
    frame = xerial_frame(b"hello ", b"xerial " * 100, b"")
    assert C.decompress(C.SNAPPY, frame) == b"hello " + b"xerial " * 100


def test_snappy_decodes_concatenated_xerial_streams():
    frame = xerial_frame(b"first,") + xerial_frame(b"second")
    assert C.decompress(C.SNAPPY, frame) == b"first,second"


def test_snappy_decodes_raw_blocks_like_librdkafka_writes():
    assert C.decompress(C.SNAPPY, snappy.compress(TEXT)) == TEXT
    assert C.decompress(C.SNAPPY, bytes(cramjam.snappy.compress_raw(b"short"))) == b"short"


@pytest.mark.parametrize(
    "frame",
    [
        xerial_frame(b"abc")[:-1],  # chunk cut short
        xerial_frame(b"abc") + b"\x00\x00",  # chunk length truncated
        xerial_frame() + struct.pack(">i", -5) + b"zz",  # negative chunk length
        xerial_frame() + struct.pack(">i", 100) + b"zz",  # chunk longer than the data
        xerial_frame(b"abc") + b"\x82SNA",  # second header truncated
    ],
)
def test_snappy_bad_xerial_frames_raise(frame):
    with pytest.raises(CorruptRecordError):
        C.decompress(C.SNAPPY, frame)


# -- lz4 -------------------------------------------------------------------------------------------


def test_lz4_writes_kafka_frame_layout():
    z = C.compress(C.LZ4, TEXT)
    info = lz4.frame.get_frame_info(z)
    assert info["block_linked"] is False
    assert info["block_size"] == 64 * 1024
    assert not info["content_checksum"] and not info["block_checksum"] and not info["content_size"]
    assert z[:6] == bytes.fromhex("04224d186040")
    assert z.endswith(b"\x00\x00\x00\x00")


def test_lz4_stores_incompressible_blocks_raw():
    data = os.urandom(70_000)
    z = C.compress(C.LZ4, data)
    (first,) = struct.unpack_from("<I", z, 7)
    assert first == 0x80000000 | 65536 and z[11:11 + 65536] == data[:65536]
    assert lz4.frame.decompress(z) == data


@pytest.mark.parametrize(
    "options",
    [
        dict(block_linked=False),
        dict(block_linked=False, content_checksum=True, block_checksum=True),
        dict(block_linked=False, store_size=True, block_size=lz4.frame.BLOCKSIZE_MAX4MB),
    ],
)
def test_lz4_decodes_independent_frames_from_python_lz4(options):
    assert C.decompress(C.LZ4, lz4.frame.compress(TEXT, **options)) == TEXT


def test_lz4_ignores_bytes_after_the_frame_like_kafka():
    assert C.decompress(C.LZ4, C.compress(C.LZ4, b"abc") + b"trailing junk") == b"abc"


def test_lz4_refuses_linked_blocks_as_kafka_does():
    frame = lz4.frame.compress(TEXT, block_linked=True)
    assert lz4.frame.decompress(frame) == TEXT
    with pytest.raises(CorruptRecordError, match="dependent"):
        C.decompress(C.LZ4, frame)


@pytest.mark.parametrize(
    "patch",
    [
        (0, b"\x05"),  # magic
        (4, b"\xa0"),  # version 2
        (4, b"\x61"),  # dictionary id flag
        (5, b"\x41"),  # reserved BD bits
        (5, b"\x30"),  # block size id 3
        (6, b"\x00"),  # header checksum
    ],
)
def test_lz4_bad_headers_raise(patch):
    z = bytearray(C.compress(C.LZ4, b"hello hello hello"))
    at, raw = patch
    z[at:at + len(raw)] = raw
    with pytest.raises(CorruptRecordError):
        C.decompress(C.LZ4, bytes(z))


def test_lz4_block_larger_than_frame_maximum_raises():
    z = bytearray(C.compress(C.LZ4, b"abc"))
    struct.pack_into("<I", z, 7, 65537)
    with pytest.raises(CorruptRecordError, match="exceeds"):
        C.decompress(C.LZ4, bytes(z))


# -- gzip / zstd -----------------------------------------------------------------------------------


def test_gzip_accepts_concatenated_members_like_gzipinputstream():
    assert C.decompress(C.GZIP, gzip.compress(b"one,") + gzip.compress(b"two")) == b"one,two"


def test_zstd_accepts_concatenated_frames_and_frames_without_content_size():
    without_size = zstandard.ZstdCompressor(write_content_size=False).compress(TEXT)
    with_size = zstandard.ZstdCompressor().compress(b"tail")
    assert C.decompress(C.ZSTD, without_size + with_size) == TEXT + b"tail"


# -- failures --------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_data_raises(codec):
    z = C.compress(codec, TEXT)
    for cut in (0, 1, len(z) // 2, len(z) - 1):
        with pytest.raises(CorruptRecordError):
            C.decompress(codec, z[:cut])


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec(codec):
    with pytest.raises(CorruptRecordError):
        C.decompress(codec, b"abc")
    with pytest.raises(ValueError):
        C.compress(codec, b"abc")


@pytest.mark.parametrize("codec", CODECS)
def test_output_limit_is_inclusive(codec):
    z = C.compress(codec, TEXT)
    assert C.decompress(codec, z, max_output=len(TEXT)) == TEXT
    with pytest.raises(CorruptRecordError):
        C.decompress(codec, z, max_output=len(TEXT) - 1)


BOMB = bytes(20 * 1024 * 1024)
BOMBS = {
    C.GZIP: gzip.compress(BOMB),
    C.SNAPPY: C.compress(C.SNAPPY, BOMB),
    C.LZ4: C.compress(C.LZ4, BOMB),
    C.ZSTD: zstandard.ZstdCompressor(write_content_size=False).compress(BOMB),
    "zstd-sized": zstandard.ZstdCompressor().compress(BOMB),
    "raw-snappy": snappy.compress(BOMB),
    "lz4-sized": lz4.frame.compress(BOMB, block_linked=False, store_size=True),
}


@pytest.mark.parametrize("name", list(BOMBS))
def test_decompression_bomb_is_refused_without_allocating_its_size(name):
    codec = {"zstd-sized": C.ZSTD, "raw-snappy": C.SNAPPY, "lz4-sized": C.LZ4}.get(name, name)
    limit = 1024 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError):
            C.decompress(codec, BOMBS[name], max_output=limit)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * limit


@pytest.mark.parametrize(
    "codec, data",
    [
        (C.SNAPPY, b"\xff\xff\xff\x7f" + b"\x00" * 10),  # raw header claiming 256 MiB
        (C.ZSTD, bytes.fromhex("28b52ffd") + b"\xe0" + (1 << 40).to_bytes(8, "little") + b"\x00" * 8),
        (C.GZIP, gzip.compress(b"abc")[:-4] + struct.pack("<I", 0xFFFFFFF0)),  # lying ISIZE
        (C.LZ4, bytes.fromhex("04224d18") + b"\x68\x40" + (1 << 40).to_bytes(8, "little") + b"\x00" * 9),
    ],
)
def test_lying_size_headers_raise_before_allocating(codec, data):
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError):
            C.decompress(codec, data, max_output=256 * 1024 * 1024)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(codec=st.sampled_from(COMPRESSED), data=st.binary(max_size=200), keep_magic=st.booleans())
def test_garbage_only_ever_raises_corrupt_record_error(codec, data, keep_magic):
    if keep_magic:
        data = C.compress(codec, b"")[:8] + data
    try:
        C.decompress(codec, data, max_output=1 << 20)
    except CorruptRecordError:
        pass


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    codec=st.sampled_from(COMPRESSED),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.none() | st.integers(0, 10**6),
)
def test_mutated_streams_only_ever_raise_corrupt_record_error(codec, edits, cut):
    z = bytearray(C.compress(codec, TEXT[:20_000]))
    for at, value in edits:
        z[at % len(z)] = value
    if cut is not None:
        del z[cut % (len(z) + 1):]
    try:
        C.decompress(codec, bytes(z), max_output=1 << 20)
    except CorruptRecordError:
        pass
