"""Kafka record batches (magic v2): header parsing, validation, offset patching, building.

The broker treats produced batches as opaque bytes: it reads the 61-byte header, checks the CRC,
checks that the records' lengths fill the batch (:func:`check_record_framing`) and rewrites the
base offset in place. Only internal topics, the deep check (:func:`validate_records`), a topic
whose compression.type differs from the producer's codec (:func:`recompress_batch`) and tests
decode individual records.

Layout of a batch header (big-endian)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 | crc uint32 |
    attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 |
    producerId int64 | producerEpoch int16 | baseSequence int32 | recordsCount int32

``batchLength`` counts the bytes after itself; the CRC-32C covers everything from ``attributes``
to the end of the batch, so base offset and leader epoch can be patched without recomputing it.

Each record after the header (compressed as one stream when the codec bits are set)::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value | headerCount varint |
    [headerKeyLength varint | headerKey utf8 | headerValueLength varint | headerValue]...

``length`` counts the bytes after itself; a negative key/value/header-value length means null.

How Apache Kafka 4.2 rejects a produced batch, and the error code we must answer with (the broker
maps any ``CorruptRecordError`` to its ``error_code``). ``ProduceRequest.validateRecords`` runs
first (the first three items), then ReplicaManager's acks and internal-topic checks, then
``UnifiedLog.analyzeAndValidateRecords``, then ``LogValidator``:

* batch size field below 14, or magic outside 0..2 (``ByteBufferLogInputStream``): CORRUPT_MESSAGE (2).
* no complete batch, magic 0 or 1 in Produce v3+, or more than one batch: INVALID_RECORD (87).
* zstd in Produce below v7: UNSUPPORTED_COMPRESSION_TYPE (76).
* codec bits 5-7 (``CompressionType.forId`` throws IllegalArgumentException): UNKNOWN_SERVER_ERROR
  (-1), for the whole request below v7 (read by the zstd check), after the CRC from v7.
* baseOffset != 0 from a client: INVALID_RECORD.
* batch larger than max.message.bytes: MESSAGE_TOO_LARGE (10), checked by the caller.
* size below the 61-byte header or CRC-32C mismatch (``batch.isValid()``): CORRUPT_MESSAGE.
* lastOffsetDelta + 1 <= 0, recordsCount <= 0 or lastOffsetDelta + 1 != recordsCount, a control
  batch from a client, or a producer id without a base sequence: INVALID_RECORD.
* records that do not parse, or whose number differs from recordsCount: INVALID_RECORD
  ("Found invalid record structure", "Incorrect declared batch size, records still remaining").
  kshare reads every record only for compacted topics, bounded timestamps and recompression;
  otherwise it checks the records' length prefixes, so a record whose length is right but whose
  inside does not parse is stored.
* a record without a key on a compacted topic: INVALID_RECORD with per-record ``record_errors``.
* UNSUPPORTED_FOR_MESSAGE_FORMAT (43) never applies to v2 batches: Kafka only raises it when
  converting idempotent or transactional batches down to magic 0/1, which 4.x no longer does.

Kafka wraps a failing decompressor in a plain ``KafkaException`` (UNKNOWN_SERVER_ERROR); we answer
CORRUPT_MESSAGE instead, which tells the client the same thing with a better code.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from crc32c import crc32c

from . import compression as codecs
from .record_lengths import record_starts_in
from .varint import VarintError, read_varint, read_varlong, write_varint, write_varlong

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
CRC_OFFSET = 17  # where the crc field starts
ATTRIBUTES_OFFSET = 21  # first byte covered by the crc
MAGIC_OFFSET = 16
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43  # then producer epoch (51) and base sequence (53..56)
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_END = 57
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_ATTRIBUTES = struct.Struct(">h")
_TIMESTAMP = struct.Struct(">q")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1

# Kafka error codes carried by the exceptions below (``error_code``).
UNKNOWN_SERVER_ERROR = -1
CORRUPT_MESSAGE = 2
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87


class CorruptRecordError(ValueError):
    """The bytes are not a valid v2 record batch (Kafka's CORRUPT_MESSAGE).

    Root of every error raised here, so one ``except CorruptRecordError`` catches them all;
    ``error_code`` is the Kafka error to answer with.
    """

    error_code = CORRUPT_MESSAGE


class InvalidRecordError(CorruptRecordError):
    """The batch breaks one of Kafka's structural or client rules (INVALID_RECORD).

    ``record_errors`` holds ``(batch_index, message)`` pairs for the ProduceResponse's
    ``RecordErrors`` when the fault lies with individual records.
    """

    error_code = INVALID_RECORD

    def __init__(self, message: str, record_errors: Iterable[tuple[int, str]] = ()):
        super().__init__(message)
        self.record_errors = list(record_errors)


class UnsupportedCompressionTypeError(CorruptRecordError):
    """zstd in a Produce request older than v7 (UNSUPPORTED_COMPRESSION_TYPE)."""

    error_code = UNSUPPORTED_COMPRESSION_TYPE


class UnknownCompressionIdError(CorruptRecordError):
    """A client batch with codec bits 5-7: Kafka's ``CompressionType.forId`` throws an
    IllegalArgumentException, which its produce path answers as UNKNOWN_SERVER_ERROR."""

    error_code = UNKNOWN_SERVER_ERROR


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes taken by the whole batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def parse_header(buf, pos: int = 0) -> BatchHeader:
    """Read the header at ``pos`` without checking anything but that 61 bytes exist."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError("record batch header truncated")
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


def compute_crc(buf, pos: int, header: BatchHeader) -> int:
    end = pos + header.size
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:end])


def check_batch(buf, pos: int = 0) -> BatchHeader:
    """Parse and validate one batch at ``pos``: magic, lengths, codec, CRC and counts.

    Header and CRC only, no per-record work: this runs on every produced batch. Checks come in
    Kafka's order, so a batch with several faults gets the error code Kafka would give.
    """
    h = parse_header(buf, pos)
    if h.magic != 2:
        if h.magic in (0, 1):
            raise InvalidRecordError(f"record batch magic {h.magic} is not supported, only magic 2")
        raise CorruptRecordError(f"invalid record batch magic {h.magic}")
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"record batch length {h.batch_length} below the header size")
    if pos + h.size > len(buf):
        raise CorruptRecordError("record batch truncated")
    if compute_crc(buf, pos, h) != h.crc:
        raise CorruptRecordError("record batch CRC mismatch")
    if h.attributes & COMPRESSION_MASK > codecs.ZSTD:
        raise CorruptRecordError(f"unknown compression codec {h.attributes & COMPRESSION_MASK}")
    if h.records_count < 0 or h.last_offset_delta < 0:
        raise InvalidRecordError("negative record count or offset delta")
    if not h.is_control and h.records_count and h.last_offset_delta < h.records_count - 1:
        raise InvalidRecordError(
            f"last offset delta {h.last_offset_delta} below record count {h.records_count} - 1"
        )
    return h


def check_batches(buf) -> list[BatchHeader]:
    """Validate a records field that must hold whole v2 batches back to back."""
    headers = []
    pos, end = 0, len(buf)
    if end == 0:
        raise CorruptRecordError("empty records")
    while pos < end:
        h = check_batch(buf, pos)
        headers.append(h)
        pos += h.size
    return headers


def walk_headers(buf, pos: int = 0, end: int | None = None):
    """Yield ``(position, header)`` of each complete batch; stops at the first incomplete one.

    No CRC check: for reading trusted data (our own log segments) quickly.
    """
    end = len(buf) if end is None else end
    while end - pos >= HEADER_SIZE:
        h = BatchHeader._make(HEADER.unpack_from(buf, pos))
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > end:
            return
        yield pos, h
        pos += h.size


def set_base_offset(buf, pos: int, base_offset: int) -> None:
    """Assign offsets to a batch by rewriting its header only (not covered by the CRC)."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf, pos: int, epoch: int) -> None:
    _LEADER_EPOCH.pack_into(buf, pos + 12, epoch)


def set_crc(buf, pos: int) -> None:
    """Recompute the CRC after a change to a covered field (e.g. LogAppendTime)."""
    h = parse_header(buf, pos)
    _CRC.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, h))


def set_log_append_time(buf, pos: int, now_ms: int) -> None:
    """Stamp a batch for a ``message.timestamp.type=LogAppendTime`` topic, as LogValidator does.

    Sets the timestamp-type bit and ``maxTimestamp`` and recomputes the CRC; ``baseTimestamp`` and
    the record deltas stay as the producer wrote them (Kafka's ``setMaxTimestamp`` touches only
    those two fields). Readers then report ``maxTimestamp`` for every record.
    """
    h = parse_header(buf, pos)
    if h.log_append_time and h.max_timestamp == now_ms:
        return
    _ATTRIBUTES.pack_into(buf, pos + ATTRIBUTES_OFFSET, h.attributes | TIMESTAMP_TYPE_MASK)
    _TIMESTAMP.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, now_ms)
    _CRC.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, h))


def set_create_time(buf, pos: int) -> None:
    """Clear a batch's LogAppendTime bit, keeping ``maxTimestamp``: what Kafka's LogValidator
    does to a producer's LogAppendTime batch on a CreateTime topic (``setMaxTimestamp`` with
    CREATE_TIME and the records' maximum, which for such a batch is ``maxTimestamp``)."""
    h = parse_header(buf, pos)
    _ATTRIBUTES.pack_into(buf, pos + ATTRIBUTES_OFFSET, h.attributes & ~TIMESTAMP_TYPE_MASK)
    _CRC.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, h))


# -- client produce checks --------------------------------------------------------------------------

_SIZE_FIELD = struct.Struct(">i")
_MIN_SIZE_FIELD = 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0, the smallest size it parses


def first_batch_size(buf) -> int | None:
    """Size of the complete batch that starts ``buf``, or None if the bytes end first; a size
    field or magic Kafka's ``ByteBufferLogInputStream`` cannot read raises CorruptRecordError
    with Kafka's message."""
    return _next_batch_size(buf, 0, len(buf))


def _next_batch_size(buf, pos: int, end: int) -> int | None:
    """Size of the complete batch at ``pos``, or None if the bytes end first (as Kafka iterates)."""
    remaining = end - pos
    if remaining < LOG_OVERHEAD:
        return None
    size = _SIZE_FIELD.unpack_from(buf, pos + 8)[0]
    if size < _MIN_SIZE_FIELD:
        raise CorruptRecordError(f"Record size {size} is less than the minimum record overhead (14)")
    if remaining < MAGIC_OFFSET + 1:
        return None
    magic = buf[pos + MAGIC_OFFSET]
    if magic > 2:  # as a signed byte: negative or above the current magic
        raise CorruptRecordError(f"Invalid magic found in record: {magic - 256 if magic > 127 else magic}")
    if remaining < size + LOG_OVERHEAD:
        return None
    return size + LOG_OVERHEAD


def check_produce_request(buf, api_version: int) -> int:
    """Kafka's ``ProduceRequest.validateRecords``, run before any other check of the partition:
    exactly one complete v2 batch (zstd only from v7). Returns that batch's size; like Kafka,
    bytes after it that do not form another complete batch are ignored."""
    end = len(buf)
    size = _next_batch_size(buf, 0, end)
    if size is None:
        raise InvalidRecordError(
            f"Produce requests with version {api_version} must have at least one record batch per partition"
        )
    if buf[MAGIC_OFFSET] != 2:
        raise InvalidRecordError(
            f"Produce requests with version {api_version} are only allowed to contain record "
            "batches with magic version 2"
        )
    if size >= ATTRIBUTES_OFFSET + 2 and api_version < 7:
        codec = _ATTRIBUTES.unpack_from(buf, ATTRIBUTES_OFFSET)[0] & COMPRESSION_MASK
        if codec > codecs.ZSTD:  # read for the zstd check below v7 only
            raise UnknownCompressionIdError(f"Unknown compression type id: {codec}")
        if codec == codecs.ZSTD:
            raise UnsupportedCompressionTypeError(
                f"Produce requests with version {api_version} are not allowed to use ZStandard compression"
            )
    if _next_batch_size(buf, size, end) is not None:
        raise InvalidRecordError(
            f"Produce requests with version {api_version} are only allowed to contain exactly one "
            "record batch per partition"
        )
    return size


def check_base_offset(batch) -> None:
    """``UnifiedLog.analyzeAndValidateRecords``' first check of a client batch, before its size."""
    base_offset = _BASE_OFFSET.unpack_from(batch, 0)[0]
    if base_offset != 0:
        raise InvalidRecordError(f"The baseOffset of the record batch should be 0, but it is {base_offset}")


def check_client_batch(batch) -> BatchHeader:
    """The rest of a client batch's header checks, after max.message.bytes: the CRC
    (``analyzeAndValidateRecords``, CORRUPT_MESSAGE) then ``LogValidator.validateBatch``'s counts,
    control flag and sequence (INVALID_RECORD). ``batch`` holds exactly one batch."""
    size = len(batch)
    if size < HEADER_SIZE:
        raise CorruptRecordError(f"record batch of {size} bytes is smaller than its header")
    h = parse_header(batch, 0)
    if compute_crc(batch, 0, h) != h.crc:
        raise CorruptRecordError(f"Record is corrupt (stored crc = {h.crc})")
    if h.attributes & COMPRESSION_MASK > codecs.ZSTD:
        raise UnknownCompressionIdError(f"Unknown compression type id: {h.attributes & COMPRESSION_MASK}")
    if h.last_offset_delta < 0:
        raise InvalidRecordError(f"Batch has an invalid offset range: [0, {h.last_offset_delta}]")
    if h.records_count <= 0:
        raise InvalidRecordError(f"Invalid reported count for record batch: {h.records_count}")
    if h.last_offset_delta + 1 != h.records_count:
        raise InvalidRecordError(
            f"Inconsistent batch offset range [0, {h.last_offset_delta}] and count of records {h.records_count}"
        )
    if h.is_control:
        raise InvalidRecordError("Clients are not allowed to write control records")
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise InvalidRecordError(
            f"Invalid sequence number {h.base_sequence} in record batch with producerId {h.producer_id}"
        )
    return h


# -- records ----------------------------------------------------------------------------------------


class Record(NamedTuple):
    """One record with absolute offset and timestamp (header keys are str, values bytes or None)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def iter_records(buf, pos: int = 0, *, max_decompressed: int = codecs.DEFAULT_MAX_OUTPUT) -> Iterator[Record]:
    """The records of the batch at ``pos``, checked in full before the first is returned.

    Verifies the header and CRC (:func:`check_batch`), decompresses, and requires exactly
    ``recordsCount`` well-formed records filling the batch, with offset deltas strictly increasing
    and within ``lastOffsetDelta`` (a compacted batch may have gaps). LogAppendTime batches report
    ``maxTimestamp`` for every record, as Kafka's readers do.
    """
    return iter(_decode_batch(buf, pos, max_decompressed)[1])


def validate_records(
    buf,
    pos: int = 0,
    *,
    require_keys: bool = False,
    partition: str | None = None,
    max_decompressed: int = codecs.DEFAULT_MAX_OUTPUT,
) -> BatchHeader:
    """Deep check of one batch: everything :func:`iter_records` checks, plus Kafka's record rules.

    ``require_keys`` is for compacted topics: every keyless record is reported in the error's
    ``record_errors`` (INVALID_RECORD), as LogValidator does. ``partition`` (e.g. ``"topic-0"``)
    only completes the messages. Costs a pass over every record: keep it off the common path.
    """
    h, records = _decode_batch(buf, pos, max_decompressed)
    if require_keys:
        where = f" in topic partition {partition}" if partition else ""
        message = f"Compacted topic cannot accept message without key{where}"
        errors = [(i, message) for i, r in enumerate(records) if r.key is None]
        if errors:
            raise InvalidRecordError(_record_errors_summary(errors), errors)
    return h


def check_record_framing(buf, h: BatchHeader, max_decompressed: int = codecs.DEFAULT_MAX_OUTPUT) -> None:
    """The produce path's record-structure check, from the records' length prefixes alone: the
    ``records_count`` records must fill the batch exactly (INVALID_RECORD, as Kafka's LogValidator
    answers records that do not parse). A compressed batch is decompressed for it. What is inside
    each record is not read: :func:`validate_records` does that, at a Python step per record."""
    body = memoryview(buf)[HEADER_SIZE:h.size]
    codec = h.attributes & COMPRESSION_MASK
    data = codecs.decompress(codec, body, max_decompressed) if codec else bytes(body)
    if record_starts_in(data, 0, h.records_count) is None:
        raise InvalidRecordError(
            f"Found invalid record structure: the lengths of {h.records_count} records do not fill the batch"
        )


def _record_errors_summary(errors: list[tuple[int, str]]) -> str:
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return (
        f"One or more records have been rejected due to {len(errors)} record errors in total, "
        f"and only showing the first three errors at most: [{shown}]"
    )


def _decode_batch(buf, pos: int, max_decompressed: int) -> tuple[BatchHeader, list[Record]]:
    h = check_batch(buf, pos)
    body = memoryview(buf)[pos + HEADER_SIZE:pos + h.size]
    codec = h.attributes & COMPRESSION_MASK
    data = codecs.decompress(codec, body, max_decompressed) if codec else bytes(body)
    append_time = h.max_timestamp if h.log_append_time else None
    try:
        records = _decode_records(
            data, h.records_count, h.base_offset, h.base_timestamp, append_time, h.last_offset_delta
        )
    except VarintError as e:
        raise InvalidRecordError(f"Found invalid record structure: {e}") from None
    return h, records


def _decode_records(data: bytes, count: int, base_offset: int, base_timestamp: int,
                    append_time: int | None, last_offset_delta: int) -> list[Record]:
    """Parse ``count`` records that must fill ``data`` exactly, in one pass."""
    records = []
    append = records.append
    end = len(data)
    pos = 0
    prev_delta = -1
    for _ in range(count):
        if pos >= end:
            raise InvalidRecordError("Incorrect declared batch size, premature EOF reached")
        length, pos = read_varint(data, pos)
        body_end = pos + length
        if length < 0 or body_end > end:
            raise InvalidRecordError(f"Invalid record size {length} with {end - pos} bytes left in the batch")
        ts_delta, pos = read_varlong(data, pos + 1)  # pos + 1: skip the unused attributes byte
        offset_delta, pos = read_varint(data, pos)
        n, pos = read_varint(data, pos)
        if n < 0:
            key = None
        else:
            key = data[pos:pos + n]
            pos += n
        n, pos = read_varint(data, pos)
        if n < 0:
            value = None
        else:
            value = data[pos:pos + n]
            pos += n
        header_count, pos = read_varint(data, pos)
        if header_count < 0:
            raise InvalidRecordError(f"Found invalid number of record headers {header_count}")
        headers = []
        for _ in range(header_count):
            n, pos = read_varint(data, pos)
            if n < 0:
                raise InvalidRecordError(f"Invalid negative header key size {n}")
            if pos + n > body_end:
                break  # reported by the size check below
            header_key = data[pos:pos + n].decode("utf-8", "surrogateescape")
            pos += n
            n, pos = read_varint(data, pos)
            if n < 0:
                header_value = None
            else:
                header_value = data[pos:pos + n]
                pos += n
            headers.append((header_key, header_value))
        if pos != body_end:
            raise InvalidRecordError(
                f"Invalid record size: expected to read {length} bytes in record payload, "
                f"but instead read {pos - body_end + length}"
            )
        if offset_delta <= prev_delta or offset_delta > last_offset_delta:
            raise InvalidRecordError(
                f"record offset delta {offset_delta} out of order (previous {prev_delta}, "
                f"last offset delta {last_offset_delta})"
            )
        prev_delta = offset_delta
        append(Record(
            base_offset + offset_delta,
            base_timestamp + ts_delta if append_time is None else append_time,
            key,
            value,
            headers,
        ))
    if pos != end:
        raise InvalidRecordError("Incorrect declared batch size, records still remaining in file")
    return records


# -- building ---------------------------------------------------------------------------------------


def build_batch(
    records: Iterable,
    *,
    base_offset: int = 0,
    compression: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
    timestamp_type: int = 0,
    timestamp_ms: int | None = None,
    compression_level: int | None = None,
) -> bytes:
    """Encode one v2 batch, as Kafka's ``MemoryRecordsBuilder`` lays it out.

    ``records`` holds ``(key, value, headers[, timestamp])`` tuples or objects with ``key``,
    ``value``, ``headers`` and ``timestamp`` attributes (e.g. :class:`Record`). Offsets are
    ``base_offset`` + 0, 1, 2...; a record's own ``offset`` is ignored. ``timestamp_ms`` is the
    timestamp of records that have none (default: now) and, with ``timestamp_type=1``
    (LogAppendTime), the batch's ``maxTimestamp``. ``baseTimestamp`` is the first record's.
    ``compression_level`` is the codec's level (None: its default).
    """
    if timestamp_ms is None:
        timestamp_ms = int(time.time() * 1000)
    body = bytearray()
    rec = bytearray()
    base_ts = None
    max_ts = NO_TIMESTAMP
    count = 0
    for r in records:
        if hasattr(r, "value"):
            key, value, headers, ts = r.key, r.value, r.headers, getattr(r, "timestamp", None)
        elif len(r) == 4:
            key, value, headers, ts = r
        else:
            key, value, headers = r
            ts = None
        if ts is None:
            ts = timestamp_ms
        if base_ts is None:
            base_ts = ts
        if ts > max_ts:
            max_ts = ts
        del rec[:]
        rec.append(0)  # attributes: unused in v2
        write_varlong(rec, ts - base_ts)
        write_varint(rec, count)
        _write_nullable(rec, key)
        _write_nullable(rec, value)
        write_varint(rec, len(headers) if headers else 0)
        for header_key, header_value in headers or ():
            raw_key = header_key.encode("utf-8", "surrogateescape")
            write_varint(rec, len(raw_key))
            rec += raw_key
            _write_nullable(rec, header_value)
        write_varint(body, len(rec))
        body += rec
        count += 1
    if not count:
        raise ValueError("a record batch needs at least one record")
    if timestamp_type == 1:
        max_ts = timestamp_ms
    payload = codecs.compress(compression, body, compression_level) if compression else body
    attributes = compression | (TIMESTAMP_TYPE_MASK if timestamp_type == 1 else 0)
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG
    if is_control:
        attributes |= CONTROL_FLAG
    out = bytearray(HEADER_SIZE)
    out += payload
    HEADER.pack_into(
        out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, 2, 0, attributes,
        count - 1, base_ts, max_ts, producer_id, producer_epoch, base_sequence, count,
    )
    _CRC.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def recompress_batch(buf, codec: int, level: int | None = None, *,
                     max_decompressed: int = codecs.DEFAULT_MAX_OUTPUT) -> bytearray:
    """The batch in ``buf`` rewritten with ``codec``, for a topic whose compression.type differs
    from the producer's (Kafka's ``LogValidator.buildRecordsAndAssignOffsets``).

    Decodes every record (so malformed records fail as :func:`iter_records` says) and keeps what
    the producer state and readers rely on: producer id, epoch and base sequence, the
    transactional and control flags, the timestamp type, and each record's timestamp, key, value
    and headers. Offset deltas become 0..n-1, as Kafka renumbers them. Returns a writable buffer
    (the log patches offsets in place).
    """
    h, records = _decode_batch(buf, 0, max_decompressed)
    return bytearray(build_batch(
        records, base_offset=h.base_offset, compression=codec, compression_level=level,
        producer_id=h.producer_id, producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
        is_transactional=h.is_transactional, is_control=h.is_control,
        partition_leader_epoch=h.partition_leader_epoch, timestamp_type=1 if h.log_append_time else 0,
        timestamp_ms=h.max_timestamp,
    ))


def _write_nullable(out: bytearray, data) -> None:
    if data is None:
        out.append(1)  # zig-zag -1
    else:
        write_varint(out, len(data))
        out += data
