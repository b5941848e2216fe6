"""Record batches v2: building, decoding, Kafka's validation rules and error codes, LogAppendTime,
interop with independent implementations (kafka-python, aiokafka, kio) and corruption handling."""

import struct

import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
from kio.records.readers import read_batch as kio_read_batch

from protocol import compression as C
from protocol.records import (
    ATTRIBUTES_OFFSET,
    CORRUPT_MESSAGE,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    INVALID_RECORD,
    UNSUPPORTED_COMPRESSION_TYPE,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    build_batch,
    check_base_offset,
    check_batch,
    check_batches,
    check_client_batch,
    check_produce_request,
    iter_records,
    parse_header,
    set_base_offset,
    set_crc,
    set_log_append_time,
    validate_records,
)
from protocol.varint import write_varint, write_varlong

CODECS = [C.NONE, C.GZIP, C.SNAPPY, C.LZ4, C.ZSTD]
T0 = 1_700_000_000_000


def sample(n=20, *, ts=T0, codec=C.NONE, **kw) -> bytes:
    recs = [(b"key-%d" % i, b"value-%d " % i * 8, [("h", b"%d" % i)], ts + i) for i in range(n)]
    return build_batch(recs, compression=codec, timestamp_ms=ts, **kw)


def as_tuples(records):
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def recrc(buf: bytearray, pos: int = 0) -> bytearray:
    """Make the CRC match whatever the bytes now say (to reach checks behind the CRC)."""
    set_crc(buf, pos)
    return buf


def patch_header(batch: bytes, **fields) -> bytearray:
    h = parse_header(batch)._replace(**fields)
    buf = bytearray(batch)
    HEADER.pack_into(buf, 0, *h)
    return recrc(buf)


def raw_record(offset_delta, key=b"k", value=b"v", ts_delta=0, headers=(), length_adjust=0) -> bytes:
    body = bytearray(b"\x00")
    write_varlong(body, ts_delta)
    write_varint(body, offset_delta)
    for field in (key, value):
        if field is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(field))
            body += field
    write_varint(body, len(headers))
    for hk, hv in headers:
        write_varint(body, len(hk))
        body += hk
        write_varint(body, len(hv))
        body += hv
    out = bytearray()
    write_varint(out, len(body) + length_adjust)
    return bytes(out + body)


def raw_batch(records: bytes, count: int, last_offset_delta: int, *, attributes=0, base_offset=0,
              producer_id=-1, base_sequence=-1, magic=2) -> bytes:
    buf = bytearray(HEADER_SIZE) + records
    HEADER.pack_into(buf, 0, base_offset, len(buf) - 12, -1, magic, 0, attributes, last_offset_delta,
                     T0, T0, producer_id, 0, base_sequence, count)
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c(bytes(buf[ATTRIBUTES_OFFSET:])))
    return bytes(buf)


# -- building ---------------------------------------------------------------------------------------


def test_header_fields():
    b = build_batch(
        [(b"a", b"1", [], T0 + 5), (None, b"2", [], T0 + 2), (b"c", None, [], T0 + 9)],
        base_offset=100, producer_id=7, producer_epoch=3, base_sequence=42, is_transactional=True,
        partition_leader_epoch=11,
    )
    h = check_batch(b)
    assert h.size == len(b)
    assert (h.base_offset, h.last_offset_delta, h.records_count, h.last_offset) == (100, 2, 3, 102)
    assert (h.base_timestamp, h.max_timestamp) == (T0 + 5, T0 + 9)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (7, 3, 42, 44)
    assert h.partition_leader_epoch == 11 and h.is_transactional and not h.is_control
    assert h.compression == 0 and not h.log_append_time


def test_records_without_timestamp_get_timestamp_ms_and_control_flag():
    b = build_batch([(b"k", b"v", [])], timestamp_ms=T0, is_control=True)
    h = check_batch(b)
    assert h.is_control and (h.base_timestamp, h.max_timestamp) == (T0, T0)
    assert list(iter_records(b)) == [Record(0, T0, b"k", b"v", [])]


def test_empty_batch_is_refused():
    with pytest.raises(ValueError):
        build_batch([])


def test_record_objects_round_trip_with_fresh_offsets():
    records = list(iter_records(sample(5, base_offset=50)))
    again = list(iter_records(build_batch(records, base_offset=7)))
    assert [r._replace(offset=r.offset + 43) for r in again] == records


@pytest.mark.parametrize("codec", CODECS)
def test_compression_attribute_and_decoding(codec):
    b = sample(200, codec=codec)
    h = check_batch(b)
    assert h.compression == codec
    if codec:
        assert len(b) < len(sample(200)) // 2
    assert [r.key for r in iter_records(b)] == [b"key-%d" % i for i in range(200)]


KEYS = st.none() | st.binary(max_size=40)
HEADERS = st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3)
TIMESTAMPS = st.none() | st.integers(-1, 1 << 45)
RECORDS = st.lists(st.tuples(KEYS, KEYS, HEADERS, TIMESTAMPS), min_size=1, max_size=25)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=RECORDS,
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 1 << 40),
    log_append_time=st.booleans(),
    transactional=st.booleans(),
)
def test_build_iter_roundtrip_and_kafka_python_agrees(records, codec, base_offset, log_append_time, transactional):
    now = T0 + 123
    b = build_batch(records, base_offset=base_offset, compression=codec, timestamp_ms=now,
                    timestamp_type=int(log_append_time), is_transactional=transactional,
                    producer_id=5 if transactional else -1, producer_epoch=0,
                    base_sequence=0 if transactional else -1)
    h = check_batch(b)
    timestamps = [now if ts is None else ts for *_, ts in records]
    expected = [
        (base_offset + i, now if log_append_time else timestamps[i], key, value, headers)
        for i, (key, value, headers, _) in enumerate(records)
    ]
    assert as_tuples(iter_records(b)) == expected
    assert h.max_timestamp == (now if log_append_time else max(timestamps))
    assert h.base_timestamp == timestamps[0]
    assert h.is_transactional == transactional and h.log_append_time == log_append_time
    kp = KpBatch(b)
    assert kp.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in kp] == expected


# -- interop ----------------------------------------------------------------------------------------


def test_uncompressed_batches_decode_with_kio():
    b = sample(30)
    batch, size = kio_read_batch(b, 0)
    assert size == len(b) and batch.crc == parse_header(b).crc
    ours = list(iter_records(b))
    assert [(r.offset, r.key, r.value, [(h.key.decode(), h.value) for h in r.headers]) for r in batch.records] == [
        (r.offset, r.key, r.value, r.headers) for r in ours
    ]
    assert [int(r.timestamp.timestamp()) for r in batch.records] == [r.timestamp // 1000 for r in ours]


@pytest.mark.parametrize("codec", CODECS)
def test_our_batches_decode_with_aiokafka(codec):
    b = sample(100, codec=codec)
    theirs = AioBatch(b)
    assert theirs.validate_crc() and theirs.compression_type == codec
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs] == as_tuples(iter_records(b))


def producer_records(n=100):
    return [(i, T0 + 3 * i, b"key-%d" % (i % 7) if i % 5 else None, b"payload %d " % i * 10,
             [("trace", b"%d" % i)] if i % 2 else []) for i in range(n)]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_built_batches_decode_with_ours(codec):
    builder = KpBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for offset, ts, key, value, headers in producer_records():
        builder.append(offset, timestamp=ts, key=key, value=value, headers=headers)
    b = bytes(builder.build())
    h = check_produce_records(b, 9)
    assert h.compression == codec
    assert as_tuples(iter_records(b)) == producer_records()
    assert validate_records(b) == h


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_built_batches_decode_with_ours(codec):
    builder = AioBuilder(2, codec, False, -1, -1, -1, 1 << 20)
    for offset, ts, key, value, headers in producer_records():
        builder.append(offset, timestamp=ts, key=key, value=value, headers=headers)
    b = bytes(builder.build())
    assert check_produce_records(b, 9).compression == codec
    assert as_tuples(iter_records(b)) == producer_records()


# -- LogAppendTime ----------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_set_log_append_time(codec):
    b = bytearray(sample(5, codec=codec))
    before = parse_header(b)
    set_log_append_time(b, 0, T0 + 999)
    h = check_batch(b)  # CRC recomputed
    assert h.log_append_time and h.max_timestamp == T0 + 999
    assert h.base_timestamp == before.base_timestamp  # Kafka leaves it alone
    assert h.attributes == before.attributes | 0x08
    assert [r.timestamp for r in iter_records(b)] == [T0 + 999] * 5
    kp = list(KpBatch(bytes(b)))
    assert {r.timestamp for r in kp} == {T0 + 999} and kp[0].timestamp_type == 1
    set_log_append_time(b, 0, T0 + 999)
    assert bytes(b) == bytes(recrc(bytearray(b)))


def test_set_log_append_time_at_an_offset_in_a_larger_buffer():
    first, second = sample(2), sample(3)
    buf = bytearray(first + second)
    set_log_append_time(buf, len(first), 42)
    assert [h.log_append_time for h in check_batches(buf)] == [False, True]
    assert bytes(buf[:len(first)]) == first


def test_set_base_offset_moves_record_offsets():
    b = bytearray(sample(3))
    set_base_offset(b, 0, 1000)
    assert [r.offset for r in iter_records(b)] == [1000, 1001, 1002]


# -- check_batch / check_batches ---------------------------------------------------------------------


def test_check_batches_walks_consecutive_batches():
    a, b = sample(2), sample(3, codec=C.LZ4)
    assert [h.records_count for h in check_batches(a + b)] == [2, 3]
    with pytest.raises(CorruptRecordError):
        check_batches(b"")
    with pytest.raises(CorruptRecordError):
        check_batches(a + b[:-1])


def test_every_crc_covered_byte_is_protected():
    b = sample(3)
    for i in range(len(b)):
        flipped = bytearray(b)
        flipped[i] ^= 0x01
        if i < 8 or 12 <= i < 16:  # base offset and leader epoch are outside the CRC by design
            check_batch(flipped)
        else:
            with pytest.raises(CorruptRecordError):
                check_batch(flipped)


def test_truncation_anywhere_raises():
    b = sample(3, codec=C.GZIP)
    for cut in range(len(b)):
        with pytest.raises(CorruptRecordError):
            check_batch(b[:cut])
        with pytest.raises(CorruptRecordError):
            list(iter_records(b[:cut]))


@pytest.mark.parametrize(
    "fields, error",
    [
        (dict(magic=1), InvalidRecordError),
        (dict(magic=3), CorruptRecordError),
        (dict(batch_length=40), CorruptRecordError),
        (dict(records_count=-1), InvalidRecordError),
        (dict(last_offset_delta=-1), InvalidRecordError),
        (dict(records_count=4), InvalidRecordError),  # last offset delta 2 < 4 - 1
        (dict(attributes=5), CorruptRecordError),  # codec 5 does not exist
    ],
)
def test_check_batch_header_rules(fields, error):
    buf = patch_header(sample(3), **fields)
    with pytest.raises(error) as info:
        check_batch(buf)
    assert type(info.value) is error


def test_check_batch_accepts_compacted_gaps():
    # A cleaned batch: 2 records left at deltas 0 and 5, header still spanning 0..5.
    b = raw_batch(raw_record(0) + raw_record(5), count=2, last_offset_delta=5)
    check_batch(b)
    assert [r.offset for r in iter_records(b)] == [0, 5]


# -- iter_records / validate_records structure rules ---------------------------------------------------


@pytest.mark.parametrize(
    "records, count, last, message",
    [
        (raw_record(0) + raw_record(1), 3, 2, "premature EOF"),  # count says more records
        (raw_record(0) + raw_record(1), 1, 1, "remaining"),  # count says fewer
        (raw_record(1) + raw_record(0), 2, 1, "out of order"),  # deltas decreasing
        (raw_record(0) + raw_record(0), 2, 1, "out of order"),  # duplicate delta
        (raw_record(0) + raw_record(3), 2, 2, "out of order"),  # delta beyond lastOffsetDelta
        (raw_record(0, length_adjust=1), 1, 0, "size"),  # record length too long
        (raw_record(0, length_adjust=-1) + b"\x00", 1, 0, "size"),  # record length too short
        (raw_record(0)[:-1], 1, 0, "bytes left"),  # cut inside the last record
        (b"\x16\x00\x00\x00\x02k\x02v\x02\x03\x00\x00", 1, 0, "header key size"),  # key length -2
        (b"\x10\x00\x00\x00\x02k\x02v\x01", 1, 0, "number of record headers"),  # count -1
    ],
)
def test_malformed_records_are_invalid_record(records, count, last, message):
    for codec in (C.NONE, C.ZSTD):
        body = C.compress(codec, records)
        b = raw_batch(body, count=count, last_offset_delta=last, attributes=codec)
        with pytest.raises(InvalidRecordError, match=message) as info:
            list(iter_records(b))
        assert info.value.error_code == INVALID_RECORD
        with pytest.raises(InvalidRecordError):
            validate_records(b)


def test_negative_key_and_value_lengths_mean_null_as_in_kafka():
    body = bytearray(b"\x00\x00\x00")  # attributes, timestamp delta 0, offset delta 0
    write_varint(body, -7)  # any negative key length is null in DefaultRecord.readFrom
    write_varint(body, -1)
    write_varint(body, 0)
    record = bytearray()
    write_varint(record, len(body))
    b = raw_batch(bytes(record + body), count=1, last_offset_delta=0)
    assert list(iter_records(b)) == [Record(0, T0, None, None, [])]


def test_header_keys_that_are_not_utf8_survive_a_round_trip():
    b = raw_batch(raw_record(0, headers=[(b"\xff\xfe", b"v")]), count=1, last_offset_delta=0)
    (record,) = iter_records(b)
    assert list(iter_records(build_batch([record], timestamp_ms=T0))) == [record]


def test_oversized_decompression_is_refused():
    b = build_batch([(b"k", bytes(5 << 20), [])], compression=C.ZSTD, timestamp_ms=T0)
    assert len(b) < 1024
    with pytest.raises(CorruptRecordError) as info:
        list(iter_records(b, max_decompressed=1 << 20))
    assert info.value.error_code == CORRUPT_MESSAGE
    assert len(next(iter_records(b)).value) == 5 << 20


@pytest.mark.parametrize("codec", [C.GZIP, C.SNAPPY, C.LZ4, C.ZSTD])
def test_corrupt_compressed_payload_is_corrupt_message(codec):
    b = bytearray(sample(50, codec=codec))
    b[HEADER_SIZE] ^= 0xFF  # the codec's magic
    recrc(b)
    check_batch(b)
    with pytest.raises(CorruptRecordError) as info:
        list(iter_records(b))
    assert type(info.value) is CorruptRecordError and info.value.error_code == CORRUPT_MESSAGE


def test_validate_records_requires_keys_for_compacted_topics():
    b = build_batch([(b"a", b"1", []), (None, b"2", []), (b"c", b"3", []), (None, None, [])], timestamp_ms=T0)
    assert validate_records(b).records_count == 4
    with pytest.raises(InvalidRecordError) as info:
        validate_records(b, require_keys=True, partition="orders-3")
    err = info.value
    assert err.error_code == INVALID_RECORD
    assert [i for i, _ in err.record_errors] == [1, 3]
    assert all(m == "Compacted topic cannot accept message without key in topic partition orders-3"
               for _, m in err.record_errors)
    assert str(err).startswith("One or more records have been rejected due to 2 record errors in total")
    validate_records(sample(3), require_keys=True)


# -- check_produce_records: Kafka 4.2's answers -------------------------------------------------------


def check_produce_records(buf, api_version: int):
    """Every check Kafka 4.2 makes of a produced batch's header, in its order (the records
    module docstring) except max.message.bytes, which the broker makes between the base offset
    and the CRC; returns the header. Bytes after the one complete batch are ignored."""
    size = check_produce_request(buf, api_version)
    batch = memoryview(buf)[:size]
    check_base_offset(batch)
    return check_client_batch(batch)


def produce_error(buf, api_version=9):
    with pytest.raises(CorruptRecordError) as info:
        check_produce_records(buf, api_version)
    return info.value.error_code


def test_produce_accepts_a_client_batch_and_ignores_an_incomplete_tail():
    b = sample(3, producer_id=9, producer_epoch=0, base_sequence=0)
    assert check_produce_records(b, 9).records_count == 3
    assert check_produce_records(b + sample(1)[:30], 9).size == len(b)
    assert check_produce_records(b + b"\x00" * 5, 9).size == len(b)


def test_produce_error_codes():
    b = sample(3)
    assert produce_error(b"") == INVALID_RECORD
    assert produce_error(b[:40]) == INVALID_RECORD  # no complete batch
    assert produce_error(b + b) == INVALID_RECORD  # two batches
    assert produce_error(patch_header(b, magic=1)) == INVALID_RECORD
    assert produce_error(patch_header(b, magic=0)) == INVALID_RECORD
    assert produce_error(patch_header(b, magic=-1)) == CORRUPT_MESSAGE
    assert produce_error(patch_header(b, magic=7)) == CORRUPT_MESSAGE
    assert produce_error(patch_header(b, batch_length=13)) == CORRUPT_MESSAGE
    assert produce_error(b + b"\x00" * 8 + b"\x00\x00\x00\x05" + b"\x00" * 10) == CORRUPT_MESSAGE  # bad tail size
    assert produce_error(patch_header(b, base_offset=5)) == INVALID_RECORD
    assert produce_error(patch_header(b, last_offset_delta=5)) == INVALID_RECORD
    assert produce_error(patch_header(b, last_offset_delta=-1, records_count=0)) == INVALID_RECORD
    assert produce_error(patch_header(b, records_count=0)) == INVALID_RECORD
    assert produce_error(patch_header(b, attributes=0x20)) == INVALID_RECORD  # control batch
    assert produce_error(patch_header(b, producer_id=3, base_sequence=-1)) == INVALID_RECORD
    flipped = bytearray(b)
    flipped[-1] ^= 1
    assert produce_error(flipped) == CORRUPT_MESSAGE


def test_produce_checks_come_in_kafkas_order():
    b = sample(3)
    # base offset before CRC; CRC before the count rules
    both = bytearray(patch_header(b, base_offset=1))
    both[-1] ^= 1
    assert produce_error(both) == INVALID_RECORD
    crc_and_count = bytearray(patch_header(b, records_count=9))
    crc_and_count[-1] ^= 1
    assert produce_error(crc_and_count) == CORRUPT_MESSAGE


def test_zstd_needs_produce_v7():
    b = sample(3, codec=C.ZSTD)
    assert produce_error(b, api_version=6) == UNSUPPORTED_COMPRESSION_TYPE
    assert check_produce_records(b, 7).compression == C.ZSTD
    assert check_produce_records(sample(3, codec=C.LZ4), 3).compression == C.LZ4


# -- mutations never raise anything else ----------------------------------------------------------------

BASES = [sample(4, codec=codec) for codec in CODECS] + [
    build_batch([(None, b"", [("k", None)], -1)], timestamp_ms=T0, timestamp_type=1),
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.integers(0, len(BASES) - 1),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4),
    cut=st.none() | st.integers(0, 10**6),
    fix_crc=st.booleans(),
    records_only=st.booleans(),
)
def test_mutations_only_ever_raise_corrupt_record_error(which, edits, cut, fix_crc, records_only):
    buf = bytearray(BASES[which])
    for at, value in edits:
        lo = HEADER_SIZE if records_only else 0  # aim at the record bytes behind the header
        buf[lo + at % (len(buf) - lo)] = value
    if cut is not None:
        del buf[cut % (len(buf) + 1):]
    if fix_crc:
        try:
            recrc(buf)
        except CorruptRecordError:
            pass  # header unreadable: nothing to fix
    for check in (check_batch, lambda b: list(iter_records(b, max_decompressed=1 << 20)),
                  lambda b: check_produce_records(b, 9), validate_records):
        try:
            check(bytes(buf))
        except CorruptRecordError:
            pass
