"""Cutting a record batch down to some of its records (protocol/batch_subset.py), and the
choice of which batches a ShareFetch sends cut (broker/share/served_records.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.store import ReadBatch, ReadResult
from broker.share.served_records import MIN_CUT_BYTES, served_records
from protocol.batch_subset import record_starts, subset
from protocol.records import (
    HEADER_SIZE,
    build_batch,
    check_batch,
    iter_records,
    parse_header,
    set_crc,
)
from protocol.varint import read_varint
from tests.test_share_wire_support import offsets_in

BASE = 1000


def a_batch(n: int, *, size: int = 100, compression: int = 0, is_control: bool = False) -> bytes:
    """``n`` records at offsets BASE.., with keys, headers and timestamps that differ."""
    recs = [(b"k%d" % i if i % 3 else None, bytes([i % 251]) * (size + i % 150),
             [("h", b"x%d" % i)] if i % 5 == 0 else [], 1_700_000_000_000 + 7 * i) for i in range(n)]
    return build_batch(recs, base_offset=BASE, producer_id=9, producer_epoch=2, base_sequence=40,
                       compression=compression, is_control=is_control, partition_leader_epoch=3)


def cut(buf: bytes, ranges) -> bytes | None:
    h = parse_header(buf)
    starts = record_starts(memoryview(buf), h)
    assert starts is not None
    return subset(memoryview(buf), starts, h.base_offset, ranges)


def test_a_cut_keeps_the_chosen_records_and_the_batch_header():
    buf = a_batch(700)
    ranges = [(BASE + i, BASE + i, 2) for i in range(0, 700, 10)] + [(BASE + 41, BASE + 49, 3)]
    ranges.sort()
    out = cut(buf, ranges)
    full = {r.offset: r for r in iter_records(buf)}
    got = list(iter_records(out))  # checks the CRC, the count and the records filling the batch
    wanted = sorted({o for a, b, _ in ranges for o in range(a, b + 1)})
    assert [r.offset for r in got] == wanted
    assert all(r == full[r.offset] for r in got)  # keys, values, headers, timestamps
    h, h0 = check_batch(out), check_batch(buf)
    assert h.records_count == len(wanted) and h.size == len(out) < len(buf) // 5
    same = ("base_offset", "partition_leader_epoch", "magic", "attributes", "last_offset_delta",
            "base_timestamp", "max_timestamp", "producer_id", "producer_epoch", "base_sequence")
    assert [getattr(h, f) for f in same] == [getattr(h0, f) for f in same]


@given(st.lists(st.tuples(st.integers(-5, 130), st.integers(0, 10)), max_size=12))
def test_a_cut_holds_exactly_the_records_inside_the_ranges(spans):
    buf = a_batch(120, size=20)
    ranges, prev = [], -10
    for start, length in sorted(spans):  # ascending, not overlapping, may stick out of the batch
        first = max(start, prev + 1)
        ranges.append((BASE + first, BASE + first + length, 1))
        prev = first + length
    out = cut(buf, ranges)
    wanted = [o for a, b, _ in ranges for o in range(max(a, BASE), min(b, BASE + 119) + 1)]
    assert [r.offset for r in iter_records(out)] == wanted


def plain_walk(buf: bytes) -> list[int]:
    pos, out = HEADER_SIZE, []
    for _ in range(parse_header(buf).records_count):
        out.append(pos)
        n, pos = read_varint(buf, pos)
        pos += n
    return [*out, pos]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 1, 50, 51, 70, 100, 101, 134, 8170, 8200]), st.integers(1, 300)),
                min_size=1, max_size=8))
def test_record_starts_finds_every_record_whatever_the_runs_of_lengths(runs):
    """Runs of equal lengths are found a slice at a time. Lengths crossing one-, two- and
    three-byte varints, lengths 64 apart (same first byte: 70 and 134) and offset deltas
    growing a byte on the way must not fool it."""
    values = [b"v" * size for size, n in runs for _ in range(n)]
    buf = build_batch([(None, v, [], 1_700_000_000_000 + i) for i, v in enumerate(values)], base_offset=BASE)
    assert record_starts(memoryview(buf), parse_header(buf)) == plain_walk(buf)


def test_batches_that_cannot_be_cut():
    assert record_starts(memoryview(b := a_batch(50, compression=1)), parse_header(b)) is None
    assert record_starts(memoryview(b := a_batch(50, is_control=True)), parse_header(b)) is None
    # a record's length field that runs past the batch, or a batch with bytes left over
    buf = bytearray(a_batch(50))
    buf[61] = 0x7E  # first record: length 63, shorter than it is
    assert record_starts(memoryview(buf), parse_header(buf)) is None
    assert record_starts(memoryview(buf[:-1]), parse_header(buf)) is None


def test_a_record_whose_offset_delta_is_not_its_index_is_never_cut_out():
    """Producers may write any offset deltas; the record at index 1 says it is offset +2."""
    buf = bytearray(build_batch([(None, b"a", []), (None, b"b", []), (None, b"c", [])],
                                base_offset=BASE, timestamp_ms=5))
    starts = record_starts(memoryview(buf), parse_header(buf))
    # length (1 byte), attributes, timestampDelta 0 (1 byte), then the offset delta
    for i, delta in ((1, 2), (2, 1)):
        buf[starts[i] + 3] = delta * 2
    set_crc(buf, 0)  # a valid batch for Produce (Kafka does not read uncompressed records' deltas)
    assert subset(memoryview(buf), starts, BASE, [(BASE + 1, BASE + 1, 1)]) is None
    assert subset(memoryview(buf), starts, BASE, [(BASE, BASE, 1)]) is not None


def read_result(*batches: bytes) -> ReadResult:
    chunk, rr, pos = b"".join(batches), ReadResult(), 0
    rr.chunks = [chunk]
    for b in batches:
        h = parse_header(b)
        rr.batches.append(ReadBatch(0, pos, h))
        pos += h.size
    rr.size = pos
    return rr


def records_of(buffers) -> list[int]:
    return offsets_in(b"".join(bytes(b) for b in buffers))


def test_served_records_cuts_only_big_sparsely_acquired_batches():
    big = a_batch(400)  # 400 records at BASE..BASE+399
    assert len(big) >= MIN_CUT_BYTES
    small = build_batch([(None, b"s", [])] * 10, base_offset=BASE + 400)
    rr = read_result(big, small)
    cache: dict = {}
    sparse = [(BASE + i, BASE + i, 2) for i in range(0, 400, 10)] + [(BASE + 400, BASE + 400, 2)]
    out = served_records(rr, 0, 2, sparse, cache)
    assert records_of(out) == [BASE + i for i in range(0, 400, 10)] + list(range(BASE + 400, BASE + 410))
    assert bytes(out[1]) == small  # under MIN_CUT_BYTES: sent whole
    assert list(cache) == [(BASE, parse_header(big).crc)]

    half = [(BASE, BASE + 199, 1)]
    assert b"".join(bytes(b) for b in served_records(rr, 0, 1, half, cache)) != big
    more = [(BASE, BASE + 200, 1)]
    assert [bytes(b) for b in served_records(rr, 0, 1, more, cache)] == [big]  # over half: whole
    compressed = a_batch(2000, compression=1)
    assert len(compressed) >= MIN_CUT_BYTES
    rr = read_result(compressed)
    assert [bytes(b) for b in served_records(rr, 0, 1, [(BASE, BASE, 2)], cache)] == [compressed]


def test_served_records_keeps_a_few_batches_record_positions():
    cache: dict = {}
    for k in range(12):
        b = build_batch([(None, b"x" * 100, [])] * 400, base_offset=BASE + 400 * k)
        served_records(read_result(b), 0, 1, [(BASE + 400 * k, BASE + 400 * k, 2)], cache)
    assert [base for base, _ in cache] == [BASE + 400 * k for k in range(4, 12)]

