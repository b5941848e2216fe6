"""Offset options and input-partition planning of the Kafka data source (pure, no Spark)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    Timestamps,
    bound_range,
    check_limits,
    data_loss_message,
    parse_offsets,
    parse_timestamps,
    resolve_offsets,
    split_ranges,
)


def test_parse_words_json_and_defaults():
    assert parse_offsets(None, EARLIEST) == EARLIEST
    assert parse_offsets("Earliest", LATEST) == EARLIEST
    assert parse_offsets("latest", EARLIEST) == LATEST
    assert parse_offsets('{"t": {"0": 23, "1": -2}, "u": {"3": -1}}', EARLIEST) == {"t": {0: 23, 1: -2}, "u": {3: -1}}
    # JsonUtils.partitionOffsets' message; a blank option is no default in Spark either
    for bad in ("soonest", "[1, 2]", '{"t": 5}', '{"t": {"x": 1}}', '{"t": {"0": "a"}}', "  "):
        with pytest.raises(ValueError) as e:
            parse_offsets(bad, EARLIEST)
        assert str(e.value) == 'Expected e.g. {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}, got ' + bad.strip()
    with pytest.raises(ValueError) as e:
        parse_timestamps({"startingoffsetsbytimestamp": ' {"t": 5} '}, "starting")
    assert str(e.value) == ('Expected e.g. {"topicA": {"0": 123456789, "1": 123456789},\n'
                            '"topicB": {"0": 123456789, "1": 123456789}}, got {"t": 5}')


def test_resolve_like_sparks_batch_reads():
    lo, hi = {0: 5, 1: 0}, {0: 50, 1: 7}
    assert resolve_offsets(EARLIEST, "t", lo, hi, ending=False) == {0: 5, 1: 0}
    assert resolve_offsets(LATEST, "t", lo, hi, ending=True) == {0: 50, 1: 7}
    # JSON: -2 / -1 and partitions left out (start at earliest, end at latest).
    assert resolve_offsets({"t": {0: 10}}, "t", lo, hi, ending=False) == {0: 10, 1: 0}
    assert resolve_offsets({"t": {1: 3}}, "t", lo, hi, ending=True) == {0: 50, 1: 3}
    assert resolve_offsets({"other": {0: 1}}, "t", lo, hi, ending=False) == {0: 5, 1: 0}
    with pytest.raises(ValueError, match="cannot be latest"):
        resolve_offsets(LATEST, "t", lo, hi, ending=False)
    with pytest.raises(ValueError, match="cannot be earliest"):
        resolve_offsets({"t": {0: -2}}, "t", lo, hi, ending=True)
    # Offsets outside the log are kept: what they read is bound_range's business.
    assert resolve_offsets({"t": {0: 2, 1: 8}}, "t", lo, hi, ending=True) == {0: 2, 1: 8}
    assert resolve_offsets({"t": {0: 2, 1: 8}}, "t", lo, hi, ending=False) == {0: 2, 1: 8}
    with pytest.raises(ValueError, match="no partition"):
        resolve_offsets({"t": {9: 1}}, "t", lo, hi, ending=False)
    with pytest.raises(ValueError, match="invalid offset"):
        resolve_offsets({"t": {0: -5}}, "t", lo, hi, ending=False)


def test_ranges_outside_the_log_as_sparks_batch_read():
    """KafkaSourceRDD.compute / KafkaDataConsumer.get with the log holding [5, 50): a start after
    the end fails whatever failOnDataLoss; an empty range reads nothing wherever it lies; a
    non-empty one reaching outside the log is data loss, or cut to the log without failOnDataLoss."""
    def bound(s, e, fail=True):
        r = bound_range("t", 0, s, e, 5, 50, fail_on_data_loss=fail)
        return (r.start, r.end) if r.size else None

    for fail in (True, False):
        # the log start (-2) resolved, an explicit end below it: Spark's assertion, not nothing
        with pytest.raises(ValueError, match="^Beginning offset 5 is after the ending offset 3 for topic t "):
            bound(5, 3, fail)
        assert bound(2, 2, fail) is None and bound(70, 70, fail) is None
        assert bound(10, 20, fail) == (10, 20)
    assert bound(2, 20, False) == (5, 20) and bound(40, 60, False) == (40, 50)
    assert bound(2, 4, False) is None and bound(55, 60, False) is None
    for s, e, at in [(2, 20, 2), (2, 60, 2), (40, 60, 50), (55, 60, 55)]:
        with pytest.raises(ValueError) as err:
            bound(s, e)
        assert str(err.value) == data_loss_message("t", 0, at, e)
    assert data_loss_message("t", 0, 2, 20).splitlines()[-2:] == [
        "Reason: Could not read records in offset [2, 20) for topic partition t-0", "with consumer group null."]


def test_split_examples():
    r = OffsetRange("t", 0, 10, 20)
    assert split_ranges([r]) == [r]
    assert split_ranges([r], 4) == [OffsetRange("t", 0, 10, 14), OffsetRange("t", 0, 14, 17),
                                    OffsetRange("t", 0, 17, 20)]
    assert split_ranges([OffsetRange("t", 1, 3, 3), r], 100) == [r]  # empty ranges vanish
    big, small = OffsetRange("t", 0, 0, 90), OffsetRange("t", 1, 0, 10)
    out = split_ranges([big, small], None, min_partitions=10)
    assert len(out) == 10 and sum(1 for x in out if x.partition == 1) == 1
    with pytest.raises(ValueError):
        split_ranges([r], 0)


ranges_strategy = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 1000), st.integers(0, 500)), max_size=6, unique_by=lambda x: x[0],
).map(lambda xs: [OffsetRange("t", p, s, s + n) for p, s, n in xs])


@given(ranges_strategy, st.one_of(st.none(), st.integers(1, 300)), st.one_of(st.none(), st.integers(1, 40)))
def test_splits_cover_each_range_exactly_once_in_order(ranges, max_per_split, min_partitions):
    out = split_ranges(ranges, max_per_split, min_partitions)
    for r in ranges:
        mine = [x for x in out if x.partition == r.partition]
        if r.size == 0:
            assert mine == []
            continue
        assert mine[0].start == r.start and mine[-1].end == r.end
        assert all(a.end == b.start for a, b in zip(mine, mine[1:]))
        assert all(x.size > 0 for x in mine)
        sizes = [x.size for x in mine]
        assert max(sizes) - min(sizes) <= 1
        if max_per_split:
            assert max(sizes) <= max_per_split
    total = sum(r.size for r in ranges)
    if min_partitions:
        assert len(out) >= min(min_partitions, total)


def test_options_refused_as_sparks_kafka_source():
    """KafkaSourceProvider.validateGeneralOptions: these options fail the read rather than being
    ignored (read_committed, which Spark honours, is refused: this source reads uncommitted)."""
    from spark_jobs.source import source_options

    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}
    assert source_options({**base, "failOnDataLoss": "FALSE", "minPartitions": "3"}).min_partitions == 3
    for extra, message in [({"minPartitions": "0"}, "minPartitions must be positive"),
                           ({"failOnDataLoss": "no"}, "failondataloss must be true or false"),
                           ({"includeHeaders": "yes"}, "includeheaders must be true or false"),
                           ({"kafka.auto.offset.reset": "earliest"}, "'auto.offset.reset' is not supported"),
                           ({"kafka.value.deserializer": "x"}, "'value.deserializer' is not supported"),
                           ({"kafka.enable.auto.commit": "true"}, "'enable.auto.commit' is not supported"),
                           ({"kafka.isolation.level": "read_committed"}, "read_committed' is not supported"),
                           ({"subscribe": " , "}, "No topics to subscribe"),
                           ({"startingTimestamp": "soon"}, "Expected a single long value, got soon"),
                           ({"startingOffsetsByTimestampStrategy": "earliest"}, "must be error or latest"),
                           # validateBatchOptions, with its messages, before any broker is asked
                           ({"startingOffsets": "LATEST"}, "^starting offset can't be latest for batch queries on "
                                                           "Kafka$"),
                           ({"startingOffsets": '{"t": {"1": 0, "0": -1}}'},
                            "^startingOffsets for t-0 can't be latest for batch queries on Kafka$"),
                           ({"endingOffsets": "earliest"}, "^ending offset can't be earliest for batch queries on "
                                                           "Kafka$"),
                           ({"endingOffsets": '{"t": {"0": -1, "1": -2}}'},
                            "^ending offset for t-1 can't be earliest for batch queries on Kafka$")]:
        with pytest.raises(ValueError, match=message):
            source_options({**base, **extra})
    with pytest.raises(ValueError) as e:
        source_options({**base, "kafka.auto.offset.reset": "earliest"})
    assert str(e.value).splitlines()[1:3] == [
        "Kafka option 'auto.offset.reset' is not supported.",
        "Instead set the source option 'startingoffsets' to 'earliest' or 'latest'"]
    with pytest.raises(ValueError, match="^Option 'kafka.bootstrap.servers' must be specified for configuring Kafka "
                                         "consumer$"):
        source_options({"subscribe": "t"})
    assert source_options({**base, "subscribe": "t, u,t"}).topics == ["t", "u"]
    kafka = {"kafka.bootstrap.servers": "h:1"}
    assert source_options({**kafka, "assign": '{"t": [0, 1], "u": [2]}'}, None).assign == {"t": {0, 1}, "u": {2}}
    # "topic" is a sink option to Spark: no source strategy (it names a copy for kshare-share-state only)
    assert source_options({**kafka, "topic": "copy"}).topics == ["copy"]
    for options, message in [({}, "One of the following options must be specified"),
                             ({"topic": "t"}, "One of the following options must be specified"),
                             ({"subscribe": "t", "subscribePattern": "t.*"}, "Only one of the following options"),
                             ({"assign": "t-0"}, "No topicpartitions to assign"),
                             ({"assign": '{"t": 0}'}, "Expected e.g."),
                             ({"subscribePattern": " "}, "Pattern to subscribe is empty")]:
        with pytest.raises(ValueError, match=message):
            source_options({**kafka, **options}, None)


def test_limits_checked_before_reading_as_spark():
    """KafkaSourceProvider.checkOffsetLimitValidity: the same partitions at both ends, and no
    explicit start after an explicit end (-1 / -2 and mixed kinds are left to the read)."""
    check_limits({"t": {0: 5, 1: -2}}, {"t": {0: 5, 1: 3}})
    check_limits({"t": {0: 5}}, LATEST)
    check_limits(Timestamps(100), {"t": {0: 1}})
    check_limits({"t": {0: 9}}, {"t": {0: -1}})
    with pytest.raises(ValueError, match="name different partitions"):
        check_limits({"t": {0: 1}}, {"t": {0: 2, 1: 2}})
    with pytest.raises(ValueError, match="starting offset 6 is after ending offset 5"):
        check_limits({"t": {0: 6}}, {"t": {0: 5}})
    with pytest.raises(ValueError, match="starting timestamp 6 is after ending timestamp 5"):
        check_limits(Timestamps({"t": {0: 6}}), Timestamps({"t": {0: 5}}))
