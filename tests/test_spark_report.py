"""The Spark lag report against the broker's own answers, on share groups driven over the wire.

Several groups consume two topics (three partitions) with accepts, rejects, releases and
redeliveries, then close their share sessions (epoch -1: acknowledgements applied, the rest
released), so the share state is quiet. The report's lag per share-partition must then be:

- what ReadShareGroupStateSummary v1 (API 87, from the share coordinator) and ListOffsets give
  with KIP-1226's formula, and
- DescribeShareGroupOffsets v1's lag (API 90), once the broker serves it.

Also runs the ``kshare-lag-report`` console entry point in-process and checks its files.
"""

from __future__ import annotations

import csv
import time

import pandas as pd
import pytest

from tests.test_spark_support import create_topic, spark, unique  # noqa: F401

pytestmark = pytest.mark.spark

from coordinator.share.routing import key_string  # noqa: E402
from protocol.client import KafkaClient  # noqa: E402
from protocol.messages.describe_share_group_offsets_request import (  # noqa: E402
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
)
from protocol.messages.find_coordinator_request import FindCoordinatorRequest  # noqa: E402
from protocol.messages.list_offsets_request import (  # noqa: E402
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from protocol.messages.read_share_group_state_summary_request import (  # noqa: E402
    PartitionData,
    ReadShareGroupStateSummaryRequest,
    ReadStateSummaryData,
)
from protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest  # noqa: E402
from spark_jobs import cli  # noqa: E402
from spark_jobs.report import build_report  # noqa: E402
from tests.raw_client import RawClient  # noqa: E402
from tests.test_delete_records import delete_records  # noqa: E402
from tests.test_share_wire_support import ACCEPT, REJECT, RELEASE, ShareMember, acquired_offsets, parts  # noqa: E402
from tests.test_share_wire_support import produce_batches  # noqa: E402
from tests.test_spark_lag import parse  # noqa: E402

SHARE_KEY_TYPE = 2
DESCRIBE_SHARE_GROUP_OFFSETS = 90


def heartbeat(client: KafkaClient, group: str, member: str, epoch: int, topics=None):
    return client.send(ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch,
                                                  subscribed_topic_names=topics), 1)


class Member:
    """A share-group member: joined with ShareGroupHeartbeat, fetching with raw ShareFetch."""

    def __init__(self, client: KafkaClient, bootstrap: str, group: str, topics: list[str], tps: list):
        self.client, self.group = client, group
        self.share = ShareMember(bootstrap, group)
        join = heartbeat(client, group, self.share.member_id, 0, topics)
        assert join.error_code == 0, (join.error_code, join.error_message)
        self.epoch = join.member_epoch
        self.share.open(tps)

    def fetch(self, want: dict) -> dict:
        """Fetch until ``want`` ({tp: records}) are acquired; returns {tp: offsets}."""
        got: dict = {}
        deadline = time.monotonic() + 10
        while any(len(got.get(tp, [])) < n for tp, n in want.items()):
            assert time.monotonic() < deadline, f"acquired only {got}"
            for tp, p in parts(self.share.fetch(max_wait_ms=2000)).items():
                got.setdefault(tp, []).extend(acquired_offsets(p))
        return got

    def ack(self, tp, ranges):
        resp = self.share.acknowledge({tp: [(f, l, [t]) for f, l, t in ranges]})
        assert resp.error_code == 0 and parts(resp)[tp].error_code == 0

    def leave(self):
        resp = self.share.fetch(epoch=-1)  # applies nothing more, releases what is still acquired
        assert resp.error_code == 0
        self.share.close()
        heartbeat(self.client, self.group, self.share.member_id, -1)


def expected_lag(client: KafkaClient, group: str, tid, topic: str, partition: int):
    """KIP-1226 lag from the share coordinator's summary (API 87 v1) and ListOffsets."""
    fc = client.send(FindCoordinatorRequest(key_type=SHARE_KEY_TYPE,
                                            coordinator_keys=[key_string(group, tid, partition)]))
    node = fc.coordinators[0].node_id
    summary = client.send(ReadShareGroupStateSummaryRequest(group_id=group, topics=[ReadStateSummaryData(
        topic_id=tid, partitions=[PartitionData(partition=partition)])]), 1, node=node)
    p = summary.results[0].partitions[0]
    assert p.error_code == 0, (p.error_code, p.error_message)
    lo = client.send(ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(
        name=topic, partitions=[ListOffsetsPartition(partition_index=partition, timestamp=-1)])]))
    leo = lo.topics[0].partitions[0].offset
    if p.start_offset == -1 or p.delivery_complete_count == -1:
        return (p.start_offset, p.delivery_complete_count, None)
    return (p.start_offset, p.delivery_complete_count, leo - p.start_offset - p.delivery_complete_count)


@pytest.fixture(scope="module")
def groups(broker):
    """Drives the groups; returns (topics {name: id}, {group: [(topic, partition)]})."""
    a, b = unique("ta"), unique("tb")
    g_done, g_partial, g_retry, g_idle = (unique(x) for x in ("done", "partial", "retry", "idle"))
    with RawClient(broker.bootstrap) as raw, KafkaClient(broker.bootstrap) as client:
        tids = {a: create_topic(raw, a, 2), b: create_topic(raw, b, 1)}
        a0, a1, b0 = (tids[a], 0), (tids[a], 1), (tids[b], 0)
        done = Member(client, broker.bootstrap, g_done, [a, b], [a0, a1, b0])
        partial = Member(client, broker.bootstrap, g_partial, [a], [a0])
        retry = Member(client, broker.bootstrap, g_retry, [b], [b0])
        idle = Member(client, broker.bootstrap, g_idle, [a], [a0])  # opens a session, never fetches
        for tp_topic, tp_partition in ((a, 0), (a, 1), (b, 0)):
            produce_batches(raw, tp_topic, [5, 5], partition=tp_partition)
        for tp, offsets in done.fetch({a0: 10, a1: 10, b0: 10}).items():  # everything, accepted
            done.ack(tp, [(min(offsets), max(offsets), ACCEPT)])
        assert partial.fetch({a0: 10}) == {a0: list(range(10))}
        # 0-2 done, so the start offset moves to 3; 7-9 stay acquired until the member leaves.
        partial.ack(a0, [(0, 2, ACCEPT), (3, 3, RELEASE), (4, 4, REJECT), (5, 6, ACCEPT)])
        assert retry.fetch({b0: 10}) == {b0: list(range(10))}
        retry.ack(b0, [(0, 0, RELEASE), (1, 2, REJECT), (3, 3, ACCEPT), (4, 9, RELEASE)])
        assert retry.fetch({b0: 7}) == {b0: [0, 4, 5, 6, 7, 8, 9]}  # redelivered
        retry.ack(b0, [(0, 0, RELEASE), (4, 9, RELEASE)])
        for m in (done, partial, retry, idle):
            m.leave()
    return tids, {g_done: [(a, 0), (a, 1), (b, 0)], g_partial: [(a, 0), (a, 1)], g_retry: [(b, 0)],
                  g_idle: [(a, 0), (a, 1)]}


def records(frame) -> list[dict]:
    """Rows as dicts of plain Python values (pandas' NA as None)."""
    return [{k: (None if v is None or v is pd.NA else (int(v) if k != "group" and k != "topic" and
                                                         not isinstance(v, str) else v))
             for k, v in row.items()} for row in frame.astype(object).to_dict("records")]


def wire_lags(bootstrap, tids, groups):
    with KafkaClient(bootstrap) as client:
        return {(g, t, p): expected_lag(client, g, tids[t], t, p) for g, tps in groups.items() for t, p in tps}


def test_report_lag_equals_the_share_coordinators_summary_and_list_offsets(spark, broker, groups, tmp_path):  # noqa: F811
    tids, members = groups
    before = wire_lags(broker.bootstrap, tids, members)
    r = build_report(spark, broker.bootstrap, tmp_path / "out", groups=list(members))
    after = wire_lags(broker.bootstrap, tids, members)
    assert before == after, "the share state changed during the run"
    got = {(row["group"], row["topic"], row["partition"]):
           (row["start_offset"], row["delivery_complete_count"], row["lag"]) for row in records(r.lag)}
    for key, (start, dcc, lag) in before.items():
        if start == -1 and key not in got:
            continue  # never initialised: no state record at all
        assert got[key] == (start, dcc, lag), key
    # The story the groups tell.
    g_done, g_partial, g_retry, g_idle = members
    a, b = tids
    assert [got[(g_done, t, p)][2] for t, p in members[g_done]] == [0, 0, 0]
    assert got[(g_partial, a, 0)] == (3, 3, 4)   # 3 released, 4 rejected, 5-6 accepted, 7-9 released
    assert got[(g_partial, a, 1)] == (-1, -1, None)  # subscribed, never fetched: unknown
    assert got[(g_retry, b, 0)] == (0, 3, 7)     # 1-3 done; 0 and 4-9 released twice
    assert got[(g_idle, a, 0)] == (-1, -1, None)  # a session, no fetch: not initialised yet
    assert [got[(g_done, t, p)][:2] for t, p in members[g_done]] == [(0, 10)] * 3  # all 10 complete
    health = r.health.set_index(["group", "topic", "partition"])
    h = health.loc[(g_retry, b, 0)]
    assert (h.archived_rejected, h.acknowledged, h.inflight_available, h.inflight_redelivered,
            h.max_delivery_count, h.redelivered) == (2, 1, 7, 7, 2, 0)  # redelivered: completed ones only
    h = health.loc[(g_partial, a, 0)]
    assert (h.archived_rejected, h.acknowledged, h.inflight_available) == (1, 5, 4)  # 0-2 and 5-6 acknowledged


def test_history_lag_is_unknown_where_deleted_records_would_tell_the_end_offset(spark, broker, tmp_path):  # noqa: F811
    """After DeleteRecords past every record, ListOffsets by time cannot say where the log ended
    at a past time (the records that would tell are gone): those points' lag is unknown, not
    counted against today's end offset. The current lag is still known."""
    topic, group = unique("hist"), unique("hist-done")
    with RawClient(broker.bootstrap) as raw, KafkaClient(broker.bootstrap) as client:
        tp = (create_topic(raw, topic, 1), 0)
        member = Member(client, broker.bootstrap, group, [topic], [tp])
        produce_batches(raw, topic, [5, 5])
        assert member.fetch({tp: 10}) == {tp: list(range(10))}
        member.ack(tp, [(0, 9, ACCEPT)])
        member.leave()
        r = build_report(spark, broker.bootstrap, tmp_path / "before", groups=[group])
        last = records(r.history)[-1]
        assert (last["lag"], last["partitions"]) == (0, 1)
        assert delete_records(raw, (topic, 0, 10)) == [(topic, 0, 0, 10)]
    r = build_report(spark, broker.bootstrap, tmp_path / "after", groups=[group])
    assert [(row["lag"], row["partitions"]) for row in records(r.history)] == [(None, 0)] * len(r.history)
    assert [row["lag"] for row in records(r.lag)] == [0]


def test_report_lag_equals_describe_share_group_offsets(spark, broker, groups, tmp_path):  # noqa: F811
    tids, members = groups
    with KafkaClient(broker.bootstrap) as client:
        if DESCRIBE_SHARE_GROUP_OFFSETS not in client.any_broker().versions:
            pytest.skip("the broker does not serve DescribeShareGroupOffsets (API 90) yet")
        described = {}
        for g in members:
            node = client.group_coordinator(g)
            resp = client.send(DescribeShareGroupOffsetsRequest(groups=[
                DescribeShareGroupOffsetsRequestGroup(group_id=g, topics=None)]), 1, node=node)
            (group,) = resp.groups
            assert group.error_code == 0, (group.error_code, group.error_message)
            for t in group.topics:
                for p in t.partitions:
                    assert p.error_code == 0, (t.topic_name, p.partition_index, p.error_code)
                    described[(g, t.topic_name, p.partition_index)] = None if p.lag == -1 else p.lag
    r = build_report(spark, broker.bootstrap, tmp_path / "out", groups=list(members))
    got = {(row["group"], row["topic"], row["partition"]): row["lag"] for row in records(r.lag)}
    assert described and {k: v for k, v in described.items() if k in got or v is not None} == got


def test_console_script_writes_csv_parquet_and_html(spark, broker, groups, tmp_path, capsys):  # noqa: F811
    tids, members = groups
    g_partial = list(members)[1]
    out = tmp_path / "cli"
    assert cli.main(["--bootstrap-server", broker.bootstrap, "--out", str(out), "--group", g_partial,
                     "--master", "local[2]"]) == 0
    assert spark.range(1).count() == 1  # the shared session survived
    captured = capsys.readouterr()
    assert captured.out.strip() == str(out / "report.html")
    assert "[kshare-lag-report" in captured.err and "done: 2 share-partitions" in captured.err
    with open(out / "lag.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["group"], r["partition"], r["lag"]) for r in rows] == [(g_partial, "0", "4"), (g_partial, "1", "")]
    assert pd.read_parquet(out / "lag.parquet")["lag"].tolist() == [4, pd.NA]
    page = parse((out / "report.html").read_text())
    assert len(page.svgs) == 1 and page.svgs[0]["circle"] >= 1
    assert [row[-1] for row in page.tables["lag"][1:]] == ["4", "-"]
