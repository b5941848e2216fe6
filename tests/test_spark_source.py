"""The ``kshare-kafka`` Python data source against a real broker (every codec, keys, headers,
timestamps, split ranges, offset options), and the routing of partition requests to leaders
(a fake client standing in for a cluster of several brokers)."""

from __future__ import annotations

import datetime as dt
import json
import time
import types
import uuid

import pytest

from tests.test_spark_support import create_topic, spark, unique  # noqa: F401

pytestmark = pytest.mark.spark

from protocol.errors import ErrorCode  # noqa: E402
from protocol.messages.create_topics_request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest  # noqa: E402
from protocol.messages.list_offsets_response import (  # noqa: E402
    ListOffsetsPartitionResponse,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)
from protocol.messages.metadata_response import (  # noqa: E402
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from protocol.records import build_batch  # noqa: E402
from spark_jobs.kafka_io import Cluster, DataLossError  # noqa: E402
from spark_jobs.offsets import OffsetRange  # noqa: E402
from spark_jobs.source import source_options  # noqa: E402
from tests.raw_client import RawClient  # noqa: E402
from tests.test_produce_support import produce  # noqa: E402

CODECS = [0, 1, 2, 3, 4]  # none, gzip, snappy, lz4, zstd


def read(spark, bootstrap, topic, **options):  # noqa: F811
    r = spark.read.format("kshare-kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


@pytest.fixture(scope="module")
def loaded(broker):
    """A 3-partition topic: per partition, one batch per codec of 4 records each (keys, headers,
    timestamps), so 20 records per partition. Returns (topic, expected rows by (partition, offset))."""
    topic = unique("src")
    t0 = int(time.time() * 1000) - 3_600_000  # within retention: older segments may go at any pass
    expected = {}
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic, 3)
        for p in range(3):
            for codec in CODECS:
                recs = []
                for i in range(4):
                    n = len([k for k in expected if k[0] == p])
                    key = None if i == 0 else f"k{p}-{n}".encode()
                    headers = [("h", f"{n}".encode()), ("null", None)] if i == 1 else []
                    recs.append((key, f"v{p}-{n}".encode(), headers, t0 + n))
                    expected[(p, n)] = (key, f"v{p}-{n}".encode(), headers, t0 + n)
                resp = produce(c, topic, build_batch(recs, compression=codec), partition=p)
                assert resp.error_code == 0
    return topic, expected


def test_reads_every_record_once_across_codecs_and_split_ranges(spark, broker, loaded):  # noqa: F811
    topic, expected = loaded
    df = read(spark, broker.bootstrap, topic, maxOffsetsPerSplit="7", includeHeaders="true")
    assert df.rdd.getNumPartitions() == 9  # 20 offsets per partition in pieces of at most 7
    rows = df.collect()
    got = {}
    for r in rows:
        assert r["topic"] == topic and r["timestampType"] == 0
        got[(r["partition"], r["offset"])] = (
            r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"] or []],
            int(r["timestamp"].replace(tzinfo=dt.timezone.utc).timestamp() * 1000))
    assert len(rows) == len(got) == 60
    # Spark's KafkaRecordToRowConverter: a record without headers has null headers, not [].
    assert all((r["headers"] is None) == (not expected[(r["partition"], r["offset"])][2]) for r in rows)
    assert got == {k: (key, value, headers, ts) for k, (key, value, headers, ts) in expected.items()}


def test_starting_and_ending_offsets_like_sparks_kafka_source(spark, broker, loaded):  # noqa: F811
    topic, _ = loaded
    df = read(spark, broker.bootstrap, topic, startingOffsets=json.dumps({topic: {"0": 5, "1": -2, "2": -2}}),
              endingOffsets=json.dumps({topic: {"0": 9, "1": 3, "2": -1}}), minPartitions="4")
    assert df.rdd.getNumPartitions() >= 4
    got = sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(5, 9)] + [(1, o) for o in range(3)] + [(2, o) for o in range(20)]
    with pytest.raises(Exception, match="starting offset can't be latest for batch queries on Kafka"):
        read(spark, broker.bootstrap, topic, startingOffsets="latest").count()
    with pytest.raises(Exception, match=r"Could not read records in offset \[20, 999\) for topic partition"):
        read(spark, broker.bootstrap, topic, endingOffsets=json.dumps({topic: {"0": -1, "1": 999, "2": -1}})).count()


def test_options_as_sparks_kafka_source(spark, broker, loaded):  # noqa: F811
    """KafkaSourceProvider / KafkaOffsetReaderAdmin: no headers column without includeHeaders,
    a topic named twice read once, per-partition JSON naming every partition, and offsets by
    timestamp (global or per partition, with startingOffsetsByTimestampStrategy)."""
    topic, expected = loaded
    t0 = min(ts for *_, ts in expected.values())
    assert "headers" not in read(spark, broker.bootstrap, topic).columns
    assert read(spark, broker.bootstrap, f"{topic}, {topic}").count() == 60
    for nothing in (" , ", ""):
        with pytest.raises(Exception, match="No topics to subscribe"):
            read(spark, broker.bootstrap, nothing).count()
    with pytest.raises(ValueError, match="No topics to subscribe"):  # not the state topic
        source_options({"kafka.bootstrap.servers": broker.bootstrap, "subscribe": ""})
    for partial in ({topic: {"0": 5}}, {topic: {"0": 0, "1": 0, "2": 0}, "other": {"0": 0}}):
        with pytest.raises(Exception, match="must specify all TopicPartitions"):
            read(spark, broker.bootstrap, topic, startingOffsets=json.dumps(partial)).count()

    def offsets(**options):
        return sorted((r["partition"], r["offset"]) for r in read(spark, broker.bootstrap, topic, **options)
                      .select("partition", "offset").collect())

    # Record n of each partition has timestamp t0 + n.
    assert offsets(startingTimestamp=str(t0 + 15), endingTimestamp=str(t0 + 18)) == \
        [(p, o) for p in range(3) for o in range(15, 18)]
    assert offsets(startingOffsetsByTimestamp=json.dumps({topic: {"0": t0 + 19, "1": t0, "2": t0 + 10**9}}),
                   startingOffsetsByTimestampStrategy="latest",
                   endingOffsetsByTimestamp=json.dumps({topic: {"0": t0 + 10**9, "1": t0 + 2, "2": t0 + 10**9}})) == \
        [(0, 19), (1, 0), (1, 1)]
    assert offsets(endingTimestamp=str(t0 + 10**9)) == [(p, o) for p in range(3) for o in range(20)]
    with pytest.raises(Exception, match="No offset matched"):
        offsets(startingTimestamp=str(t0 + 10**9))
    # Strategies (ConsumerStrategy): assign names partitions (those that exist), subscribePattern
    # finds topics by regex search; only one of subscribe / subscribePattern / assign.
    def r():
        return spark.read.format("kshare-kafka").option("kafka.bootstrap.servers", broker.bootstrap)

    assert sorted({(x["partition"], x["offset"] // 20) for x in r().option(
        "assign", json.dumps({topic: [0, 2, 7]})).load().collect()}) == [(0, 0), (2, 0)]
    assert r().option("subscribePattern", topic[2:-3] + ".{3}$").load().count() == 60
    assert r().option("subscribePattern", "^no-such-topic-").load().count() == 0
    with pytest.raises(Exception, match="Only one of the following options"):
        r().option("subscribe", topic).option("assign", json.dumps({topic: [0]})).load().count()
    # Past the log end: an end fails the read unless failOnDataLoss=false (then a start past it
    # too reads nothing); a start past the resolved end fails as Spark's KafkaSourceRDD asserts.
    assert offsets(startingOffsets=json.dumps({topic: {"0": 25, "1": 18, "2": -2}}),
                   endingOffsets=json.dumps({topic: {"0": 30, "1": 40, "2": 2}}), failOnDataLoss="false") == \
        [(1, 18), (1, 19), (2, 0), (2, 1)]
    assert offsets(startingOffsets=json.dumps({topic: {"0": 20, "1": 19, "2": 20}})) == [(1, 19)]
    for failOnDataLoss in ("true", "false"):
        with pytest.raises(Exception, match="Beginning offset 25 is after the ending offset 20 for topic"):
            offsets(startingOffsets=json.dumps({topic: {"0": 25, "1": 19, "2": 20}}), failOnDataLoss=failOnDataLoss)
        with pytest.raises(Exception, match="Beginning offset 19 is after the ending offset 10 for topic"):
            offsets(startingOffsets=json.dumps({topic: {"0": 19, "1": 0, "2": 0}}), endingTimestamp=str(t0 + 10),
                    failOnDataLoss=failOnDataLoss)


def test_log_append_time_topics_report_the_brokers_time(spark, broker):  # noqa: F811
    topic = unique("lat")
    with RawClient(broker.bootstrap) as c:
        resp = c.request(19, 7, CreateTopicsRequest(topics=[CreatableTopic(
            name=topic, num_partitions=1, replication_factor=1,
            configs=[CreatableTopicConfig(name="message.timestamp.type", value="LogAppendTime")])]))
        assert resp.topics[0].error_code == 0
        before = int(time.time() * 1000)
        assert produce(c, topic, build_batch([(None, b"x", [], 5)])).error_code == 0
    (r,) = read(spark, broker.bootstrap, topic).collect()
    assert r["timestampType"] == 1
    assert int(r["timestamp"].replace(tzinfo=dt.timezone.utc).timestamp() * 1000) >= before


def test_ranges_outside_the_log_plan_as_sparks_batch_read(broker):
    """With records [5, 10) left after DeleteRecords: an explicit end below the log start fails
    as KafkaSourceRDD.compute asserts (it read nothing), and an empty explicit range outside the
    log reads nothing without failing (it failed as lost data), whatever failOnDataLoss."""
    from spark_jobs.source import plan_ranges
    from tests.test_delete_records import delete_records

    topic = unique("gone")
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic, 1)
        assert produce(c, topic, build_batch([(None, b"v", [], 1)] * 10)).error_code == 0
        assert delete_records(c, (topic, 0, 5))[0][2] == 0

    def plan(start, end, fail):
        return [(r.start, r.end) for r in plan_ranges(source_options({
            "kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic, "failOnDataLoss": fail,
            "startingOffsets": json.dumps({topic: {"0": start}}), "endingOffsets": json.dumps({topic: {"0": end}})}))]

    for fail in ("true", "false"):
        with pytest.raises(ValueError, match="^Beginning offset 5 is after the ending offset 3 for topic"):
            plan(-2, 3, fail)
        assert plan(2, 2, fail) == plan(12, 12, fail) == []
        assert plan(-2, 8, fail) == [(5, 8)]
    assert plan(2, 12, "false") == [(5, 10)]
    with pytest.raises(ValueError, match=r"Could not read records in offset \[2, 12\) for topic partition"):
        plan(2, 12, "true")


def test_internal_topics_have_nothing_to_read_as_in_spark(broker):
    """ConsumerStrategy.retrieveAllPartitions leaves internal topics out of subscribe and assign:
    kshare-kafka plans no range of __share_group_state holding a group's state, which
    kshare-share-state (internal_topics) reads."""
    from spark_jobs.source import plan_ranges
    from tests.test_share_state_support import initialize

    with RawClient(broker.bootstrap) as c:
        topic_id = create_topic(c, unique("stated"), 1)
        assert initialize(c, unique("g"), topic_id, 0, start_offset=0) is not None
    base = {"kafka.bootstrap.servers": broker.bootstrap}
    for strategy in ({"subscribe": "__share_group_state"},
                     {"assign": json.dumps({"__share_group_state": list(range(50))})}):
        opts = source_options({**base, **strategy}, None)
        assert plan_ranges(opts) == []
        assert sum(r.size for r in plan_ranges(opts, internal_topics=True)) >= 1


# --- routing to leaders -----------------------------------------------------------------------------


class FakeClient:
    """Two brokers; partition 0 led by node 1, partition 1 by node 2 until ``move()`` hands it to
    node 1 (node 2 then answers NOT_LEADER_OR_FOLLOWER)."""

    def __init__(self):
        self.leaders = {0: 1, 1: 2}
        self.stale = {}
        self.sent: list[tuple[int, list]] = []
        self.metadata_calls = 0
        self.tid = uuid.uuid4()

    def move(self):
        self.stale = dict(self.leaders)
        self.leaders[1] = 1

    def metadata(self, topics):
        self.metadata_calls += 1
        leaders = self.stale or self.leaders
        self.stale = {}
        return MetadataResponse(brokers=[MetadataResponseBroker(1, "h1", 1), MetadataResponseBroker(2, "h2", 2)],
                                topics=[MetadataResponseTopic(name="t", topic_id=self.tid, partitions=[
                                    MetadataResponsePartition(partition_index=p, leader_id=n)
                                    for p, n in leaders.items()])])

    def send(self, request, version=None, node=None):
        parts = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
        self.sent.append((node, parts))
        out = []
        for name, p in parts:
            ok = self.leaders[p] == node
            out.append(ListOffsetsTopicResponse(name=name, partitions=[ListOffsetsPartitionResponse(
                partition_index=p, error_code=0 if ok else ErrorCode.NOT_LEADER_OR_FOLLOWER,
                offset=100 * node + p if ok else -1)]))
        return ListOffsetsResponse(topics=out)

    def close(self):
        pass


def test_partition_requests_go_to_each_leader_and_follow_a_moved_leader():
    cluster = Cluster("unused:1", retry_backoff_s=0)
    fake = cluster.client = FakeClient()
    assert cluster.list_offsets({("t", 0): -1, ("t", 1): -1}) == {("t", 0): 100, ("t", 1): 201}
    assert sorted(fake.sent) == [(1, [("t", 0)]), (2, [("t", 1)])]
    fake.sent.clear()
    fake.move()  # the cached metadata is stale now; the first refresh still names the old leader
    assert cluster.list_offsets({("t", 0): -1, ("t", 1): -1}) == {("t", 0): 100, ("t", 1): 101}
    assert fake.sent[0][0] == 1 and (2, [("t", 1)]) in fake.sent and fake.sent[-1] == (1, [("t", 1)])


class _Truncated(Cluster):
    """A partition whose log now ends at 5 (say, recreated) though a read planned [0, 10):
    offsets 0-4 come back, then an empty answer or OFFSET_OUT_OF_RANGE at 5."""

    def __init__(self, code):
        super().__init__("unused:1", retry_backoff_s=0)
        self.code = code

    def fetch_once(self, topic, partition, offset, max_bytes, max_wait_ms=500):
        if offset == 0:
            records = build_batch([(None, b"v%d" % i, [], 1) for i in range(5)])
            return types.SimpleNamespace(error_code=0, records=records, high_watermark=5)
        return types.SimpleNamespace(error_code=self.code, records=b"", high_watermark=5 if not self.code else -1)

    def list_offsets(self, wanted):
        return {k: 0 for k in wanted}


@pytest.mark.parametrize("code", [0, ErrorCode.OFFSET_OUT_OF_RANGE])
def test_records_gone_past_the_log_end_fail_only_with_fail_on_data_loss(code):
    """KafkaDataConsumer.get: an offset at or past the log end is data loss; with failOnDataLoss
    off the rest of the range is skipped (getEarliestAvailableOffsetBetween), not an error."""
    r = OffsetRange("t", 0, 0, 10)
    with pytest.raises(DataLossError):
        list(_Truncated(code).read_range(r))
    got = [rec.offset for _, recs in _Truncated(code).read_range(r, fail_on_data_loss=False) for rec in recs]
    assert got == [0, 1, 2, 3, 4]
