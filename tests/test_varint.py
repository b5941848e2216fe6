"""Varint codecs: known encodings, round trips, agreement with kio, and malformed input."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.serial.readers import read_signed_varint, read_signed_varlong, read_unsigned_varint

from protocol.varint import (
    VarintError,
    read_uvarint,
    read_uvarlong,
    read_varint,
    read_varlong,
    uvarint_size,
    varint_size,
    varlong_size,
    write_uvarint,
    write_varint,
    write_varlong,
)

INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
UINT32 = st.integers(0, (1 << 32) - 1)


def encode(writer, v) -> bytes:
    out = bytearray()
    writer(out, v)
    return bytes(out)


@pytest.mark.parametrize(
    "value, encoded",
    [
        (0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"), (-65, "8101"),
        ((1 << 31) - 1, "feffffff0f"), (-(1 << 31), "ffffffff0f"),
    ],
)
def test_zigzag_varint_known_encodings(value, encoded):
    assert encode(write_varint, value).hex() == encoded
    assert read_varint(bytes.fromhex(encoded), 0) == (value, len(encoded) // 2)


def test_varlong_extremes():
    assert encode(write_varlong, -(1 << 63)).hex() == "ff" * 9 + "01"
    assert encode(write_varlong, (1 << 63) - 1).hex() == "fe" + "ff" * 8 + "01"
    for v in (-(1 << 63), (1 << 63) - 1):
        assert read_varlong(encode(write_varlong, v)) == (v, 10)


def test_unsigned_known_encodings():
    assert encode(write_uvarint, 0) == b"\x00"
    assert encode(write_uvarint, 300) == b"\xac\x02"
    assert read_uvarint(b"\xff\xff\xff\xff\x0f") == ((1 << 32) - 1, 5)


@given(st.lists(INT32, max_size=20), st.binary(max_size=3))
def test_varint_roundtrip_sequence_and_kio(values, prefix):
    out = bytearray(prefix)
    for v in values:
        write_varint(out, v)
    raw = bytes(out)
    pos = len(prefix)
    for v in values:
        kio_value, kio_size = read_signed_varint(raw, pos)
        got, new_pos = read_varint(raw, pos)
        assert got == v == kio_value
        assert new_pos - pos == kio_size == varint_size(v)
        pos = new_pos
    assert pos == len(raw)


@given(INT64)
def test_varlong_roundtrip_and_kio(v):
    raw = encode(write_varlong, v)
    assert read_varlong(raw) == (v, len(raw))
    assert read_signed_varlong(raw, 0) == (v, len(raw))
    assert varlong_size(v) == len(raw)


@given(UINT32)
def test_uvarint_roundtrip_and_kio(v):
    raw = encode(write_uvarint, v)
    assert read_uvarint(memoryview(raw)) == (v, len(raw))
    assert read_unsigned_varint(raw, 0) == (v, len(raw))
    assert uvarint_size(v) == len(raw)
    assert read_uvarlong(raw) == (v, len(raw))


@given(st.integers(0, (1 << 64) - 1))
def test_uvarlong_roundtrip(v):
    raw = encode(write_uvarint, v)
    assert read_uvarlong(bytearray(raw)) == (v, len(raw))


@pytest.mark.parametrize("reader", [read_uvarint, read_varint, read_varlong, read_uvarlong])
@pytest.mark.parametrize("raw", [b"", b"\x80", b"\xff\xff", b"\x81\x80\x80"])
def test_truncated_raises(reader, raw):
    with pytest.raises(VarintError):
        reader(raw, 0)


@pytest.mark.parametrize(
    "reader, limit", [(read_uvarint, 5), (read_varint, 5), (read_varlong, 10), (read_uvarlong, 10)]
)
def test_too_long_raises(reader, limit):
    ok = b"\x80" * (limit - 1) + b"\x01"
    reader(ok, 0)
    with pytest.raises(VarintError):
        reader(b"\x80" * limit + b"\x01", 0)


def test_position_past_end_raises():
    with pytest.raises(VarintError):
        read_varint(b"\x01", 5)


@pytest.mark.parametrize(
    "writer, value",
    [(write_varint, 1 << 31), (write_varint, -(1 << 31) - 1), (write_varlong, 1 << 63), (write_uvarint, -1),
     (write_uvarint, 1 << 64)],
)
def test_out_of_range_values_are_refused(writer, value):
    with pytest.raises(ValueError):
        writer(bytearray(), value)


def test_varint_error_is_a_value_error():
    assert issubclass(VarintError, ValueError)
