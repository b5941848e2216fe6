"""KIP-1226 lag, the report's tables and its HTML (pure: no Spark, no broker)."""

from __future__ import annotations

from html.parser import HTMLParser

import tests.test_spark_support  # noqa: F401  (skips under docker-compose's e2e image, which has no pandas)

import pandas as pd  # noqa: E402

from spark_jobs.html_report import line_chart, render  # noqa: E402
from spark_jobs.lag import end_offset_at, group_history, lag_table, lag_totals, share_partition_lag  # noqa: E402


def test_lag_is_kip_1226s_formula_with_the_log_end_offset():
    # The KIP's example: highest offset 10 (log end offset 11), SPSO 2, offsets 5 and 6 complete.
    assert share_partition_lag(11, 2, 2) == 10 - 2 + 1 - 2 == 7
    assert share_partition_lag(11, 11, 0) == 0
    # Unknown: uninitialised start offset, count never written, log end offset unknown.
    assert share_partition_lag(11, -1, 0) is None
    assert share_partition_lag(11, 2, -1) is None
    assert share_partition_lag(None, 2, 0) is None
    assert share_partition_lag(11, None, 0) is None


def test_a_negative_lag_is_unknown_as_kafkas_admin_client_reads_it():
    """A start offset altered past the log end (AlterShareGroupOffsets does not check it):
    DescribeShareGroupOffsets answers a negative lag, which Kafka's ListShareGroupOffsetsHandler
    turns into no lag and kafka-share-groups.sh --describe shows as "-". The report agrees,
    rather than listing -5 and taking 5 off the group's total."""
    assert share_partition_lag(10, 15, 0) is None
    latest = latest_rows([("g", "id-a", 0, 15, 0, 0, 1), ("g", "id-a", 1, 0, 0, 0, 1)])
    table = lag_table(latest, {"id-a": "alpha"}, {("alpha", 0): 10, ("alpha", 1): 4})
    assert table["lag"].tolist() == [pd.NA, 4]
    assert lag_totals(table).values.tolist() == [["g", "*", 2, 1, 4], ["g", "alpha", 2, 1, 4]]
    points = [{"group_id": "g", "topic_id": "id-a", "partition": p, "at_ms": 100, "start_offset": start,
               "delivery_complete_count": 0} for p, start in ((0, 15), (1, 0))]
    history = group_history(points, {"id-a": "alpha"}, {("alpha", 0, 100): 10, ("alpha", 1, 100): 4})
    assert history[["lag", "partitions"]].values.tolist() == [[4, 1]]


def latest_rows(rows):
    cols = ["group_id", "topic_id", "partition", "start_offset", "delivery_complete_count", "leader_epoch",
            "state_epoch"]
    return pd.DataFrame([dict(zip(cols, r)) for r in rows], columns=cols)


def test_lag_table_names_topics_and_leaves_unknowns_empty():
    latest = latest_rows([
        ("g", "id-b", 0, 3, 1, 0, 1), ("g", "id-a", 1, 10, 0, 0, 1), ("g", "id-a", 0, -1, -1, 0, 1),
        ("h", "id-gone", 0, 5, 0, 0, 1),
    ])
    table = lag_table(latest, {"id-a": "alpha", "id-b": "beta"}, {("alpha", 0): 4, ("alpha", 1): 12, ("beta", 0): 9})
    assert table[["group", "topic", "partition"]].values.tolist() == [
        ["g", "alpha", 0], ["g", "alpha", 1], ["g", "beta", 0], ["h", "id-gone", 0]]
    assert table["lag"].tolist() == [pd.NA, 2, 5, pd.NA]
    assert table["log_end_offset"].tolist() == [4, 12, 9, pd.NA]
    totals = lag_totals(table)
    assert totals.values.tolist() == [
        ["g", "*", 3, 1, 7], ["g", "alpha", 2, 1, 2], ["g", "beta", 1, 0, 5], ["h", "*", 1, 1, pd.NA],
        ["h", "id-gone", 1, 1, pd.NA]]
    csv = table[["group", "topic", "partition", "start_offset", "log_end_offset", "delivery_complete_count",
                 "lag"]].to_csv(index=False).splitlines()
    assert csv[1] == "g,alpha,0,-1,4,-1,"  # unknown lag: an empty field


def test_a_lag_beyond_2_53_beside_an_unknown_one_keeps_every_digit():
    """With an unknown lag (None) in the column, pandas built it as float64 and the report
    showed 2**62 for DescribeShareGroupOffsets' 2**62 + 5 (a start offset written far below 0)."""
    latest = latest_rows([("g", "id-a", 0, -1, -1, 0, 1), ("g", "id-a", 1, -(2**62), 0, 0, 1)])
    table = lag_table(latest, {"id-a": "alpha"}, {("alpha", 0): 5, ("alpha", 1): 5})
    assert table["lag"].tolist() == [pd.NA, 2**62 + 5]


def test_group_history_carries_each_partitions_state_forward():
    points = [
        {"group_id": "g", "topic_id": "a", "partition": 0, "at_ms": 100, "start_offset": 0, "delivery_complete_count": 0},
        {"group_id": "g", "topic_id": "a", "partition": 1, "at_ms": 200, "start_offset": 5, "delivery_complete_count": 1},
        {"group_id": "g", "topic_id": "a", "partition": 0, "at_ms": 300, "start_offset": 4, "delivery_complete_count": -1},
        {"group_id": "g", "topic_id": "a", "partition": 1, "at_ms": 400, "start_offset": None,
         "delivery_complete_count": None},
    ]
    end_at = {("A", 0, 100): 10, ("A", 0, 200): 20, ("A", 1, 200): 8, ("A", 0, 300): 30, ("A", 1, 300): 9,
              ("A", 0, 400): 31, ("A", 1, 400): 9}
    h = group_history(points, {"a": "A"}, end_at)
    assert h.values.tolist() == [
        ["g", 100, 10, 1],           # only partition 0 has state
        ["g", 200, 20 + 2, 2],       # partition 0 keeps its state while its log grows
        ["g", 300, 3, 1],            # partition 0's count became unknown: only partition 1 counts
        ["g", 400, pd.NA, 0],        # partition 1's state was deleted: nothing known
    ]


def test_the_end_offset_at_a_past_time_is_unknown_where_deleted_records_would_tell():
    # (first record at or after t, log start, log end) -> log end offset at t
    assert end_offset_at(7, 0, 20) == 7  # records 0-6 came before t
    assert end_offset_at(7, 5, 20) == 7  # record 6 is still there and came before t
    assert end_offset_at(-1, 5, 20) == 20  # every record left came before t
    assert end_offset_at(-1, 0, 0) == 0  # nothing was ever written
    # Records below the log start were deleted: any of them may have come after t.
    assert end_offset_at(5, 5, 20) is None
    assert end_offset_at(-1, 20, 20) is None


class Page(HTMLParser):
    """Collects what the tests look at: SVGs with their shapes, and table cells per class."""

    def __init__(self):
        super().__init__()
        self.svgs: list[dict] = []
        self.tables: dict[str, list[list[str]]] = {}
        self.external: list[str] = []
        self._table = None
        self._cell = None
        self._row = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("script", "link", "img", "iframe"):
            self.external.append(tag)
        if tag == "svg":
            self.svgs.append({"polyline": [], "circle": 0, "text": 0})
        elif self.svgs and tag == "polyline":
            self.svgs[-1]["polyline"].append(a["points"])
        elif self.svgs and tag == "circle":
            self.svgs[-1]["circle"] += 1
        elif tag == "table":
            self._table = self.tables.setdefault(a.get("class", ""), [])
        elif tag == "tr" and self._table is not None:
            self._row = []
            self._table.append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def parse(text: str) -> Page:
    p = Page()
    p.feed(text)
    return p


def test_line_chart_is_an_svg_polyline_through_the_points():
    page = parse(line_chart([(0, 5), (1000, 0), (2000, 10)], width=300, height=200))
    (svg,) = page.svgs
    (coords,) = svg["polyline"]
    xy = [tuple(map(float, p.split(","))) for p in coords.split()]
    assert len(xy) == 3 == svg["circle"]
    assert xy[0][0] < xy[1][0] < xy[2][0]
    assert xy[2][1] < xy[0][1] < xy[1][1]  # higher lag is drawn higher up
    assert parse(line_chart([])).svgs[0]["polyline"] == []


def test_report_page_has_a_chart_and_tables_per_group_and_nothing_external():
    latest = latest_rows([("g1", "a", 0, 2, 1, 0, 0), ("g1", "a", 1, -1, -1, 0, 0), ("g2", "a", 0, 0, 0, 0, 0)])
    table = lag_table(latest, {"a": "orders"}, {("orders", 0): 10, ("orders", 1): 3})
    history = pd.DataFrame([["g1", 1000, 7, 1], ["g1", 2000, 7, 1], ["g2", 1000, 10, 1]],
                           columns=["group", "at_ms", "lag", "partitions"])
    health = pd.DataFrame(columns=["group", "topic", "partition"])
    text = render(lag=table, totals=lag_totals(table), history=history, health=health, generated_ms=0,
                  bootstrap="b:1", delivery_count_limit=5, state_records=9)
    page = parse(text)
    assert page.external == []
    assert len(page.svgs) == 2 and all(len(s["polyline"]) == 1 for s in page.svgs)
    rows = page.tables["lag"]
    assert rows[0] == ["Topic", "Partition", "Start offset", "Log end offset", "Delivery complete count", "Lag"]
    assert rows[1:3] == [["orders", "0", "2", "10", "1", "7"], ["orders", "1", "-1", "3", "-1", "-"]]
    assert rows[4] == ["orders", "0", "0", "10", "0", "10"]


def test_lag_wraps_as_a_java_long_as_describe_share_group_offsets_does():
    """A start offset or count written near the int64 limits (a fuzzed WriteShareGroupState):
    the broker's lag wraps as Kafka's long subtraction does, and the report's must too (it failed
    to build its Int64 column). A lag that wraps negative is unknown, as Kafka's admin client
    reads it; one that wraps back positive is kept, and so is a sum that wraps."""
    assert share_partition_lag(5, -(2**63), 0) is None  # 5 - 2**63 after the wrap
    assert share_partition_lag(2**63 - 1, -(2**63), -(2**31)) == 2**31 - 1  # wraps back positive
    latest = latest_rows([("g", "id-a", 0, -(2**63), 0, 0, 1), ("g", "id-a", 1, 0, 0, 0, 1),
                          ("g", "id-a", 2, 0, 0, 0, 1)])
    table = lag_table(latest, {"id-a": "alpha"}, {("alpha", 0): 5, ("alpha", 1): 2**63 - 1, ("alpha", 2): 2**63 - 1})
    assert table["lag"].tolist() == [pd.NA, 2**63 - 1, 2**63 - 1]
    points = [{"group_id": "g", "topic_id": "a", "partition": p, "at_ms": 100, "start_offset": 0,
               "delivery_complete_count": 0} for p in (0, 1)]
    history = group_history(points, {"a": "A"}, {("A", 0, 100): 2**63 - 1, ("A", 1, 100): 2**63 - 1})
    assert history["lag"].tolist() == [-2]  # (2**63 - 1) * 2 wraps as a long sum
