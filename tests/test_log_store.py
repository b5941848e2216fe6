"""Behaviour of a partition log, identical for the memory and the file backend."""

from __future__ import annotations

import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.log.config import LogConfig
from broker.log.store import OffsetOutOfRange, PartitionLog, RecordTooLarge
from protocol.records import check_batches, iter_records, parse_header

from .test_log_support import (  # noqa: F401  (fixtures)
    TOPIC_ID,
    FakeClock,
    append,
    blob,
    close_store,
    joined,
    kind,
    make_batch,
    make_store,
    open_store,
    records_of,
    result_batches,
    stored_model,
)


def test_append_assigns_offsets_and_read_returns_patched_batches(make_store):
    store = make_store()
    log = store.create("orders", 0, TOPIC_ID, None)
    assert isinstance(log, PartitionLog)
    assert (log.start_offset, log.end_offset) == (0, 0)
    info = append(log, make_batch(3, tag=1))
    assert (info.first_offset, info.last_offset, info.log_append_time_ms, info.start_offset) == (0, 2, -1, 0)
    info = append(log, make_batch(2, tag=2), make_batch(1, tag=3))  # two batches, one request
    assert (info.first_offset, info.last_offset) == (3, 5)
    assert log.end_offset == 6

    res = log.read(0, 1 << 20)
    batches = result_batches(res)
    assert [(b.base_offset, b.last_offset) for b in res.batches] == [(0, 2), (3, 4), (5, 5)]
    assert [h.base_offset for h in check_batches(joined(res))] == [0, 3, 5]  # CRCs still valid
    assert [o for o, _ in records_of(batches[1])] == [3, 4]
    assert (res.start_offset, res.end_offset, res.next_offset) == (0, 6, 6)
    # reading from the middle of a batch starts with that batch
    assert [b.base_offset for b in log.read(4, 1 << 20).batches] == [3, 5]


def test_read_bounds_and_budget(make_store):
    log = make_store().create("t", 0, TOPIC_ID, None)
    sizes = []
    for i in range(4):
        b = make_batch(1, value_size=100 * (i + 1))
        sizes.append(len(b))
        append(log, b)
    assert log.read(4, 100).batches == []  # at the end: nothing, no error
    with pytest.raises(OffsetOutOfRange):
        log.read(5, 100)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100)
    # KIP-74: an oversized first batch is returned whole with min_one, nothing without
    res = log.read(1, 10)
    assert [b.base_offset for b in res.batches] == [1] and res.size == sizes[1]
    assert log.read(1, 10, min_one=False).batches == []
    # budget is never exceeded after the first batch
    res = log.read(0, sizes[0] + sizes[1] + sizes[2] - 1)
    assert [b.base_offset for b in res.batches] == [0, 1]
    res = log.read(0, sum(sizes))
    assert [b.base_offset for b in res.batches] == [0, 1, 2, 3]
    assert [len(v) for v in res.views(1, 3)] == [sizes[1] + sizes[2]]


def test_reads_across_segment_rolls(make_store):
    log = make_store(segment_bytes=1000, index_interval_bytes=200).create("t", 0, TOPIC_ID, None)
    for i in range(40):
        append(log, make_batch(1 + i % 3, value_size=50, tag=i))
    assert len(log.segments) > 5
    assert all(s.size <= 1000 for s in log.segments)
    model = stored_model(log)
    assert [m[0] for m in model] == sorted(m[0] for m in model)
    assert model[-1][1] + 1 == log.end_offset
    res = log.read(0, 1 << 20)
    assert len(res.chunks) == len(log.segments)
    assert len(res.batches) == 40
    for seg in log.segments[1:]:  # each segment file starts with its base offset
        first = log.read(seg.base_offset, 1).batches[0]
        assert first.base_offset == seg.base_offset


def _expected_read(model, offset, max_bytes, min_one):
    out, total = [], 0
    for base, last, data in model:
        if last < offset:
            continue
        if total + len(data) > max_bytes:
            if not out and min_one:
                out.append((base, data))
            break
        out.append((base, data))
        total += len(data)
    return out


def _expected_fetch_read(log, model, offset, max_bytes, min_one) -> bytes:
    """Kafka's LocalLog.read and LogSegment.read: the fetch offset's segment only (the next one
    if it holds nothing at or after the offset), from the first batch ending at or after it, a
    file slice of max_bytes (at least the first batch with min_one; nothing when the first batch
    does not fit without it, ReplicaManager's firstEntryIncomplete)."""
    for seg in log.segments:
        held = [data for base, last, data in model if seg.base_offset <= base < seg.next_offset and last >= offset]
        if not held:
            continue
        first = len(held[0])
        if first > max_bytes and not min_one:
            return b""
        return b"".join(held)[: max(max_bytes, first)]
    return b""


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["memory", "file"]),
    batches=st.lists(
        st.tuples(st.integers(1, 6), st.integers(0, 400)), min_size=1, max_size=40
    ),
    segment_bytes=st.integers(100, 4000),
    index_interval=st.integers(0, 1500),
    reads=st.lists(
        st.tuples(st.floats(0, 1), st.integers(1, 6000), st.booleans()), min_size=1, max_size=15
    ),
)
def test_random_reads_match_brute_force(kind, batches, segment_bytes, index_interval, reads):
    tmp = tempfile.mkdtemp()
    try:
        config = dict(segment_bytes=segment_bytes, index_interval_bytes=index_interval)
        store = open_store(kind, tmp, **config)
        log = store.create("t", 0, TOPIC_ID, None)
        model = []
        for i, (n, size) in enumerate(batches):
            info = append(log, make_batch(n, value_size=size, tag=i))
            model.append(info.first_offset)
        model = stored_model(log)
        assert [m[0] for m in model] == [
            sum(n for n, _ in batches[:i]) for i in range(len(batches))
        ]
        end = log.end_offset

        def check(log):
            for frac, max_bytes, min_one in reads:
                offset = int(frac * end)
                res = log.read(offset, max_bytes, min_one=min_one)
                got = [(b.base_offset, d) for b, d in zip(res.batches, result_batches(res))]
                assert got == _expected_read(model, offset, max_bytes, min_one)
                # what Fetch reads: one segment, cut where max_bytes falls, as Kafka's
                bare = log.read(offset, max_bytes, min_one=min_one, headers=False, one_segment=True)
                expected = _expected_fetch_read(log, model, offset, max_bytes, min_one)
                assert (joined(bare), bare.size, bare.batches) == (expected, len(expected), [])

        check(log)
        if kind == "file":  # indexes saved on close and reloaded must agree too
            close_store(store)
            store = open_store(kind, tmp, **config)
            log = store.get("t", 0)
            assert log.end_offset == end
            check(log)
            close_store(store)
    finally:
        shutil.rmtree(tmp)


def test_index_entries_point_at_batches(make_store):
    log = make_store(index_interval_bytes=300).create("t", 0, TOPIC_ID, None)
    for i in range(30):
        append(log, make_batch(1 + i % 4, value_size=40 * (i % 5)))
    (seg,) = log.segments
    assert len(seg.index) >= 5
    raw = seg.data.read(0, seg.size)
    for rel, pos in zip(seg.index.offsets, seg.index.positions):
        h = parse_header(raw, pos)
        assert h.base_offset + h.last_offset_delta == seg.base_offset + rel


@settings(max_examples=25, deadline=None)
@given(
    kind=st.sampled_from(["memory", "file"]),
    stamps=st.lists(st.lists(st.integers(0, 1000), min_size=1, max_size=5), min_size=1, max_size=30),
    segment_bytes=st.integers(150, 2000),
    index_interval=st.integers(0, 500),
    queries=st.lists(st.integers(-1, 1002), min_size=1, max_size=10),
    compression=st.sampled_from([0, 1]),  # plain batches are read lazily, gzip ones decoded
)
def test_offset_for_timestamp_and_max_timestamp_match_brute_force(
    kind, stamps, segment_bytes, index_interval, queries, compression
):
    tmp = tempfile.mkdtemp()
    try:
        store = open_store(
            kind, tmp, segment_bytes=segment_bytes, index_interval_bytes=index_interval
        )
        log = store.create("t", 0, TOPIC_ID, None)
        for ts in stamps:
            append(log, make_batch(len(ts), timestamps=ts, ts=ts[0], compression=compression))
        records = [r for _, _, b in stored_model(log) for r in records_of(b)]
        for q in queries:
            expected = next(((ts, off) for off, ts in records if ts >= q), None)
            assert log.offset_for_timestamp(q) == expected
        top = max(ts for _, ts in records)
        assert log.max_timestamp() == (top, next(off for off, ts in records if ts == top))
        # the log start offset hides earlier records; as in Kafka, only the first segment whose
        # largest timestamp reaches the target is searched
        cut = records[len(records) // 2][0]
        log.delete_records_before(cut)
        for q in queries:
            seg = next((s for s in log.segments if s.largest_timestamp >= q), None)
            expected = seg and next(
                ((ts, off) for off, ts in records
                 if seg.base_offset <= off < seg.next_offset and ts >= q and off >= cut),
                None,
            )
            assert log.offset_for_timestamp(q) == expected
        if kind == "file":
            close_store(store)
    finally:
        shutil.rmtree(tmp)


def test_empty_log_timestamps(make_store):
    log = make_store().create("t", 0, TOPIC_ID, None)
    assert log.max_timestamp() == (-1, -1)
    assert log.offset_for_timestamp(0) is None


def test_log_append_time_stamps_batches(make_store):
    clock = FakeClock(77_000)
    store = make_store(clock=clock, message_timestamp_type="LogAppendTime")
    log = store.create("t", 0, TOPIC_ID, None)
    info = append(log, make_batch(2, ts=5), make_batch(1, ts=6))
    assert info.log_append_time_ms == 77_000
    info = append(log, make_batch(1, ts=7), log_append_time_ms=88_000)
    assert info.log_append_time_ms == 88_000
    data = joined(log.read(0, 1 << 20))
    headers = check_batches(data)  # CRC recomputed
    assert [h.log_append_time for h in headers] == [True] * 3
    assert [h.max_timestamp for h in headers] == [77_000, 77_000, 88_000]
    assert [r.timestamp for r in iter_records(data)] == [77_000, 77_000]
    assert log.max_timestamp() == (88_000, 3)
    assert log.offset_for_timestamp(70_000) == (77_000, 0)
    assert log.offset_for_timestamp(80_000) == (88_000, 3)


def test_create_time_append_reports_no_append_time_and_keeps_bytes(make_store):
    log = make_store().create("t", 0, TOPIC_ID, None)
    batch = make_batch(2, ts=5)
    append(log, batch)
    stored = joined(log.read(0, 1 << 20))
    assert stored[8:] == batch[8:]  # only the base offset may differ (here it is 0 anyway)


def test_leader_epoch_is_stamped(make_store):
    log = make_store().create("t", 0, TOPIC_ID, None)
    append(log, make_batch(1), leader_epoch=7)
    (h,) = check_batches(joined(log.read(0, 1000)))
    assert h.partition_leader_epoch == 7


def test_batch_larger_than_max_message_bytes_is_rejected(make_store):
    log = make_store(max_message_bytes=200).create("t", 0, TOPIC_ID, None)
    with pytest.raises(RecordTooLarge):
        append(log, make_batch(1, value_size=300))
    assert log.end_offset == 0
    append(log, make_batch(1, value_size=10))
    assert log.end_offset == 1


def test_append_rejects_mismatched_headers(make_store):
    log = make_store().create("t", 0, TOPIC_ID, None)
    buf, headers = blob(make_batch(1), make_batch(1))
    with pytest.raises(ValueError):
        log.append(buf, headers[:1])
    assert log.end_offset == 0


def _fill_one_batch_per_segment(log, timestamps):
    for i, ts in enumerate(timestamps):
        append(log, make_batch(1, ts=ts, value_size=50, tag=i))
    assert len(log.segments) == len(timestamps)


def test_retention_by_time_deletes_the_active_segment_too(make_store, kind):
    store = make_store(segment_bytes=1, retention_ms=5000)
    log = store.create("t", 0, TOPIC_ID, None)
    _fill_one_batch_per_segment(log, [1000, 2000, 3000, 9000, 1500])
    # now=8500: segments whose max timestamp is older than 3500 go, stopping at the first
    # one to keep (like Kafka), so 1500 in the active segment does not matter
    assert log.apply_retention(8500) == 3
    assert [s.base_offset for s in log.segments] == [3, 4]
    assert log.start_offset == 3
    with pytest.raises(OffsetOutOfRange):
        log.read(2, 100)
    assert log.read(3, 1 << 20).batches[0].base_offset == 3
    # Everything expired: as Kafka's deletableSegments, the active segment goes too (an idle
    # partition's data must not outlive retention.ms); a roll first leaves an empty one.
    assert log.apply_retention(10**9) == 2
    assert [(s.base_offset, s.size) for s in log.segments] == [(5, 0)]
    assert (log.start_offset, log.end_offset) == (5, 5)
    assert log.read(5, 100).batches == []
    assert log.apply_retention(10**9) == 0  # an empty last segment is never deleted
    if kind == "file":  # the emptied log reopens where it was
        close_store(store)
        store = make_store(segment_bytes=1, retention_ms=5000)
        log = store.get("t", 0)
        assert (log.start_offset, log.end_offset) == (5, 5)
    assert append(log, make_batch(1)).first_offset == 5
    assert log.read(5, 1 << 20).batches[0].base_offset == 5


def test_retention_by_bytes(make_store):
    log = make_store(segment_bytes=1, retention_bytes=300).create("t", 0, TOPIC_ID, None)
    _fill_one_batch_per_segment(log, [1] * 6)
    seg_size = log.segments[0].size
    assert log.size == 6 * seg_size
    deleted = log.apply_retention(0)
    # like Kafka: only whole segments whose removal keeps the log at or above retention.bytes
    assert 300 <= log.size < 300 + seg_size
    assert deleted == 6 - log.size // seg_size
    assert log.start_offset == deleted


def test_retention_respects_policy_and_unlimited(make_store):
    log = make_store(segment_bytes=1, retention_ms=-1, cleanup_policy="compact").create(
        "t", 0, TOPIC_ID, None
    )
    _fill_one_batch_per_segment(log, [1, 2, 3])
    assert log.apply_retention(10**12) == 0
    log.config = LogConfig(segment_bytes=1, retention_ms=-1, retention_bytes=-1)
    assert log.apply_retention(10**12) == 0
    log.config = LogConfig(segment_bytes=1, retention_ms=10)
    assert log.apply_retention(10**12) == 3


def test_retention_by_size_runs_before_retention_by_time(make_store):
    """Kafka's UnifiedLog.deleteOldSegments deletes the segments below the log start, then by
    retention.bytes, then by retention.ms, each from the oldest segment on: an expired segment
    behind a newer one the size limit removes goes in the same pass."""
    log = make_store(segment_bytes=1, retention_ms=5000).create("t", 0, TOPIC_ID, None)
    _fill_one_batch_per_segment(log, [9000, 1000, 9500])
    log.config = LogConfig(segment_bytes=1, retention_ms=5000, retention_bytes=log.size - log.segments[0].size)
    assert log.apply_retention(10_000) == 2  # 9000 by size, then 1000 by time; 9500 is recent
    assert (log.start_offset, [s.base_offset for s in log.segments]) == (2, [2])


def test_retention_bytes_zero_empties_the_log(make_store):
    log = make_store(segment_bytes=10**6, retention_bytes=0).create("t", 0, TOPIC_ID, None)
    for i in range(3):
        append(log, make_batch(2, value_size=50, tag=i))
    assert len(log.segments) == 1
    assert log.apply_retention(0) == 1
    assert (log.start_offset, log.end_offset, log.size) == (6, 6, 0)


def test_delete_records_before(make_store):
    log = make_store(segment_bytes=1).create("t", 0, TOPIC_ID, None)
    _fill_one_batch_per_segment(log, [1, 2, 3, 4])
    log.delete_records_before(2)
    assert log.start_offset == 2
    assert log.apply_retention(0) == 2  # the segments below the start go at the retention pass
    assert [s.base_offset for s in log.segments] == [2, 3]
    with pytest.raises(OffsetOutOfRange):
        log.read(1, 100)
    log.delete_records_before(1)  # never moves backwards
    assert log.start_offset == 2
    with pytest.raises(OffsetOutOfRange):
        log.delete_records_before(5)
    log.delete_records_before(4)  # up to the end: active segment stays, nothing readable
    log.apply_retention(0)
    assert (log.start_offset, log.end_offset, len(log.segments)) == (4, 4, 1)
    assert log.read(4, 100).batches == []
    assert append(log, make_batch(1)).start_offset == 4


def test_delete_records_keeps_segments_until_the_retention_pass(make_store):
    """Kafka's DeleteRecords only moves the log start (UnifiedLog.maybeIncrementLogStartOffset);
    the segments wholly below it go at the next retention pass (deleteLogStartOffsetBreachedSegments).
    Until then they still count for the partition size, MAX_TIMESTAMP and timestamp searches."""
    log = make_store(segment_bytes=1).create("t", 0, TOPIC_ID, None)
    _fill_one_batch_per_segment(log, [5000, 1000, 2000])
    size = log.size
    log.delete_records_before(2)
    assert (log.start_offset, [s.base_offset for s in log.segments], log.size) == (2, [0, 1, 2], size)
    assert log.max_timestamp() == (5000, 0)  # below the start, as Kafka answers
    assert log.offset_for_timestamp(1500) is None  # segment 0 reaches 1500 but holds nothing at 2+
    with pytest.raises(OffsetOutOfRange):
        log.read(1, 100)
    assert log.apply_retention(6000) == 2
    assert ([s.base_offset for s in log.segments], log.max_timestamp()) == ([2], (2000, 2))
    assert log.offset_for_timestamp(1500) == (2000, 2)


def test_start_offset_inside_a_batch(make_store):
    log = make_store().create("t", 0, TOPIC_ID, None)
    append(log, make_batch(5))
    log.delete_records_before(3)
    res = log.read(3, 1000)  # the whole batch comes back; clients skip offsets below start
    assert [b.base_offset for b in res.batches] == [0]
    assert log.offset_for_timestamp(0) == (1000, 3)


def test_offset_for_timestamp_searches_only_the_first_segment_reaching_it(make_store):
    """Kafka's UnifiedLog.searchOffsetInLocalLog returns what LogSegment.findOffsetByTimestamp
    finds in the first segment whose largest timestamp is at or after the target, nothing if
    that segment has no such record at or after the log start offset (later segments are not
    searched)."""
    log = make_store(segment_bytes=1).create("t", 0, TOPIC_ID, None)
    append(log, make_batch(2, timestamps=[5000, 1000], ts=5000))  # offsets 0-1, segment 0
    append(log, make_batch(1, ts=6000))  # offset 2, segment 2
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert log.offset_for_timestamp(4000) == (5000, 0)
    log.delete_records_before(1)  # segment 0 stays: offset 1 is in it
    assert log.offset_for_timestamp(4000) is None  # offset 0 (5000) is below the start
    assert log.offset_for_timestamp(5500) == (6000, 2)  # segment 0's largest is below 5500
    assert log.offset_for_timestamp(1000) == (1000, 1)


def test_time_based_roll(make_store):
    clock = FakeClock()
    log = make_store(clock=clock, segment_ms=1000).create("t", 0, TOPIC_ID, None)
    append(log, make_batch(1, ts=10_000))
    append(log, make_batch(1, ts=10_900))
    assert len(log.segments) == 1
    append(log, make_batch(1, ts=11_001))  # more than segment.ms after the segment's first batch
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_compacted_topic_rolls_by_max_compaction_lag(make_store):
    """Kafka's LogConfig.maxSegmentMs: a compacted topic's segments roll after
    min(max.compaction.lag.ms, segment.ms); a delete-only topic ignores the lag."""
    for policy, rolled in (("compact", True), ("delete,compact", True), ("delete", False)):
        store = make_store(segment_ms=1000, cleanup_policy=policy, max_compaction_lag_ms=500)
        log = store.create(f"t{len(policy)}", 0, TOPIC_ID, None)
        append(log, make_batch(1, ts=10_000))
        append(log, make_batch(1, ts=10_501))  # more than max.compaction.lag.ms after the first
        assert len(log.segments) == (2 if rolled else 1), policy
    cfg = LogConfig.from_properties({"log.cleaner.max.compaction.lag.ms": "700"}, {"cleanup.policy": "compact"})
    assert cfg.max_segment_ms == 700
    assert LogConfig.from_properties({}, {"cleanup.policy": "compact", "segment.ms": "600",
                                          "max.compaction.lag.ms": "700"}).max_segment_ms == 600


def test_time_based_roll_with_jitter(make_store, monkeypatch):
    """segment.jitter.ms: each segment rolls up to min(jitter, segment.ms) early, drawn per segment."""
    bounds = []
    monkeypatch.setattr("broker.log.config.random.randrange", lambda n: bounds.append(n) or n - 1)
    log = make_store(segment_ms=1000, segment_jitter_ms=400).create("t", 0, TOPIC_ID, None)
    append(log, make_batch(1, ts=10_000))
    append(log, make_batch(1, ts=10_601))  # 601 ms is not more than 1000 - 399
    assert len(log.segments) == 1
    append(log, make_batch(1, ts=10_602))
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert bounds == [400, 400]  # the first segment's draw and the new one's
    assert LogConfig(segment_ms=100, segment_jitter_ms=400).roll_jitter_ms() == 99
    assert LogConfig.from_properties({"log.roll.jitter.hours": "1"}).segment_jitter_ms == 3600_000
    assert LogConfig.from_properties({}, {"segment.jitter.ms": "5"}).segment_jitter_ms == 5


def test_store_create_get_delete(make_store):
    store = make_store()
    a = store.create("__share_group_state", 3, TOPIC_ID, None)
    b = store.create("my.topic_name-x", 0, None, None)
    assert store.create("__share_group_state", 3, TOPIC_ID, None) is a
    assert store.get("__share_group_state", 3) is a
    assert {(lg.topic, lg.partition) for lg in store.partitions()} == {
        ("__share_group_state", 3),
        ("my.topic_name-x", 0),
    }
    append(b, make_batch(1))
    store.delete([("my.topic_name-x", 0)])
    assert store.get("my.topic_name-x", 0) is None
    b2 = store.create("my.topic_name-x", 0, TOPIC_ID, None)
    assert b2.end_offset == 0


def test_config_from_kafka_properties():
    cfg = LogConfig.from_properties(
        {"log.retention.hours": "24", "log.roll.hours": 1, "log.segment.bytes": "1000",
         "log.flush.interval.messages": "1"},
        {"retention.ms": "5000", "message.timestamp.type": "LogAppendTime",
         "cleanup.policy": "compact,delete", "unrelated": "x"},
    )
    assert cfg.retention_ms == 5000
    assert cfg.segment_ms == 3600_000
    assert cfg.segment_bytes == 1000
    assert cfg.flush_messages == 1
    assert cfg.log_append_time and cfg.deletes
    assert LogConfig.from_properties({"log.retention.minutes": "2"}).retention_ms == 120_000
    assert LogConfig.from_properties({"log.retention.ms": "-1"}).retention_ms == -1
    # flush.ms falls back to log.flush.scheduler.interval.ms, as DescribeConfigs shows it
    assert LogConfig.from_properties({"log.flush.scheduler.interval.ms": "1000"}).flush_ms == 1000
    assert LogConfig.from_properties(
        {"log.flush.interval.ms": "500", "log.flush.scheduler.interval.ms": "1000"}).flush_ms == 500
    assert LogConfig.from_properties({}) == LogConfig()
    assert LogConfig().retention_ms == 604800000 and LogConfig().flush_ms is None
    assert LogConfig().to_properties()["flush.ms"] == str((1 << 63) - 1)
