"""The Spark lag report against DescribeShareGroupOffsets after the admin flows that rewrite share
state: AlterShareGroupOffsets (a fresh snapshot, delivery-complete count 0), consumption with
accepts and rejects (updates), DeleteShareGroupOffsets and a topic deletion (tombstones), while
the share coordinator snapshots cold keys and prunes ``__share_group_state`` every second."""

from __future__ import annotations

import time

import pytest

from tests.test_spark_support import create_topic, spark, unique  # noqa: F401

pytestmark = pytest.mark.spark

from protocol.client import KafkaClient  # noqa: E402
from protocol.messages.delete_topics_request import DeleteTopicsRequest, DeleteTopicState  # noqa: E402
from protocol.primitives import ZERO_UUID  # noqa: E402
from spark_jobs.kafka_io import Cluster  # noqa: E402
from spark_jobs.report import build_report  # noqa: E402
from tests.raw_client import RawClient  # noqa: E402
from tests.test_share_admin_rpcs import delete_offsets, empty_group_at, offsets  # noqa: E402
from tests.test_share_wire_support import ACCEPT, REJECT, ShareMember, acquired_offsets, parts, produce_batches  # noqa: E402
from tests.test_spark_report import Member, heartbeat  # noqa: E402

DELETE_TOPICS = 20


def described(raw, group):
    g = offsets(raw, group, None, version=1)
    assert g.error_code == 0, g.error_code
    return {(group, t.topic_name, p.partition_index): (p.start_offset, None if p.lag == -1 else p.lag)
            for t in g.topics for p in t.partitions if p.error_code == 0}


def reported(result, group):
    out = {}
    for r in result.lag.astype(object).to_dict("records"):
        if r["group"] == group:
            lag = r["lag"]
            out[(r["group"], r["topic"], int(r["partition"]))] = (
                int(r["start_offset"]), None if lag is None or lag is getattr(__import__("pandas"), "NA") else int(lag))
    return out


def test_report_follows_alter_consume_delete_and_pruning(spark, broker_factory, tmp_path):  # noqa: F811
    b = broker_factory({"share.coordinator.state.topic.prune.interval.ms": "500",
                        "share.coordinator.cold.partition.snapshot.interval.ms": "1000",
                        "share.coordinator.state.topic.num.partitions": "1"})
    g = unique("g")
    a, bt, c = unique("ta"), unique("tb"), unique("tc")
    with RawClient(b.bootstrap) as raw, KafkaClient(b.bootstrap) as client:
        tids = {a: create_topic(raw, a, 2), bt: create_topic(raw, bt, 1), c: create_topic(raw, c, 1)}
        for t, n in ((a, 2), (bt, 1), (c, 1)):
            for p in range(n):
                produce_batches(raw, t, [5, 5], partition=p)
        empty_group_at(raw, g, a, {0: 0, 1: 4})
        empty_group_at(raw, g, bt, {0: 3})
        empty_group_at(raw, g, c, {0: 0})
        out = tmp_path / "report"
        first = build_report(spark, b.bootstrap, out, groups=[g])
        assert reported(first, g) == described(raw, g)

        m = object.__new__(Member)  # joined without re-initializing the state the alter wrote
        m.client, m.group = client, g
        m.share = ShareMember(b.bootstrap, g, initialize=False)
        join = heartbeat(client, g, m.share.member_id, 0, [a])
        assert join.error_code == 0, join
        m.epoch = join.member_epoch
        opened = m.share.open([(tids[a], 0), (tids[a], 1)])  # epoch 0: fetches too
        got = {tp: acquired_offsets(p) for tp, p in parts(opened).items()}
        assert got == {(tids[a], 0): list(range(10)), (tids[a], 1): list(range(4, 10))}, got
        m.ack((tids[a], 0), [(0, 3, ACCEPT), (4, 4, REJECT), (7, 9, ACCEPT)])
        m.ack((tids[a], 1), [(4, 9, ACCEPT)])
        m.leave()
        r = delete_offsets(raw, g, bt)
        assert r.error_code == 0, r
        resp = raw.request(DELETE_TOPICS, 6, DeleteTopicsRequest(
            topics=[DeleteTopicState(name=c, topic_id=ZERO_UUID)], timeout_ms=5000))
        assert resp.responses[0].error_code == 0
        with Cluster(b.bootstrap) as cluster:  # cold snapshots and prunes: wait for the first prune
            deadline = time.monotonic() + 30
            while cluster.offset_bounds("__share_group_state")[0][0] == 0:
                assert time.monotonic() < deadline, "the state topic was never pruned"
                time.sleep(0.1)
        second = build_report(spark, b.bootstrap, out, groups=[g])
        want = described(raw, g)
        assert reported(second, g) == want, (reported(second, g), want)
        fresh = build_report(spark, b.bootstrap, tmp_path / "fresh", groups=[g])
        assert reported(fresh, g) == want
