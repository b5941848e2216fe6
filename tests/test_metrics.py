"""Prometheus metrics without sockets to Kafka clients: the counters' arithmetic, the CLI flag,
and the HTTP endpoint of an in-process broker (what it serves, and that it is off by default).
The end-to-end values after real share consumption are in test_metrics_e2e.py.
"""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as text_string_to_openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from broker import __main__ as cli
from broker import metrics as metrics_module
from broker.broker import Broker
from broker.config import BrokerConfig, ConfigError
from broker.log.memory import MemoryLogStore
from broker.share.manager import FetchParams
from broker.metrics import (
    ACK_TYPE_NAMES,
    SIZE_BUCKETS_BYTES,
    TIME_BUCKETS_MS,
    Histogram,
    RequestMetrics,
    ShareGroupStats,
    _share_partition_families,
    per_topic,
    share_partition_exposition,
)
from tests.test_share_wire_support import share_partition

# --- counters -----------------------------------------------------------------------------------------


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False)))
def test_histogram_buckets_are_cumulative_and_inclusive(values):
    h = Histogram(TIME_BUCKETS_MS)
    for v in values:
        h.observe(v)
    cum = h.cumulative()
    assert [le for le, _ in cum] == [repr(float(b)) for b in TIME_BUCKETS_MS] + ["+Inf"]
    for (le, n), bound in zip(cum, TIME_BUCKETS_MS):
        assert n == sum(1 for v in values if v <= bound), le
    assert cum[-1][1] == h.count == len(values)
    assert h.sum == pytest.approx(sum(values))


def test_request_metrics_index_by_the_frames_api_key():
    rm = RequestMetrics([(0, "Produce"), (78, "ShareFetch")])
    frame = bytearray(b"\x00\x4e\x00\x01" + b"\x00" * 96)  # ShareFetch v1, 100 bytes
    head = bytearray(b"\x00\x00\x00\x1c" + b"\x00" * 4)  # size prefix: 28 bytes follow it
    rm.record(frame, [head, b"x" * 24], 0.0123)
    rm.record(bytearray(b"\x00\x00\x00\x09" + b"\x00" * 16), None, 0.0004)  # Produce acks=0
    sf, produce = rm.by_key[78], rm.by_key[0]
    assert (sf.name, sf.time_ms.count, sf.time_ms.sum) == ("ShareFetch", 1, pytest.approx(12.3))
    assert (sf.request_bytes.sum, sf.response_bytes.sum, sf.response_bytes.count) == (100, 28, 1)
    assert dict(sf.time_ms.cumulative())["10.0"] == 0 and dict(sf.time_ms.cumulative())["25.0"] == 1
    assert (produce.time_ms.count, produce.request_bytes.sum, produce.response_bytes.count) == (1, 20, 0)
    assert [s.name for s in rm.apis()] == ["Produce", "ShareFetch"]
    assert len(SIZE_BUCKETS_BYTES) + 1 == len(sf.request_bytes.counts)


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20), st.booleans(),
                          st.lists(st.integers(0, 4), min_size=1, max_size=1))))
def test_records_acknowledged_counts_every_record_by_its_type(specs):
    """One type per batch or one per offset; the counts are a per-record tally either way."""
    stats = ShareGroupStats()
    batches, expected = [], [0] * len(ACK_TYPE_NAMES)
    for first, extra, per_offset, (t,) in specs:
        last = first + extra
        if per_offset:
            types = [(t + i) % 5 for i in range(extra + 1)]
        else:
            types = [t]
        batches.append((first, last, types))
        for o in range(first, last + 1):
            expected[types[o - first] if per_offset else t] += 1
    stats.records_acknowledged(batches)
    assert stats.acknowledged == expected


def test_share_requests_count_each_topic_once_per_request_and_all_topics_once_per_topic():
    """Kafka's SharePartitionManager marks the topic's and the all-topics meter once for each
    topic a request touched; a deleted topic's row goes, the all-topics sums stay."""
    stats = ShareGroupStats()
    stats.share_requests(stats.fetch_requests, per_topic([("a", 0), ("a", 3), ("b", 0), ("a", 0)]))
    stats.share_requests(stats.fetch_requests, per_topic([("b", 0)]))
    assert stats.fetch_requests == {"a": [1, 1], "b": [2, 0], "": [3, 1]}
    stats.forget_topic("a")
    assert stats.fetch_requests == {"b": [2, 0], "": [3, 1]}
    assert stats.ack_requests == {"": [0, 0]}


async def test_share_request_counters_have_an_all_topics_series_without_the_topic_label(tmp_path):
    """As Kafka's BrokerTopicMetrics MBean without a topic tag (allTopicsStats): dashboards
    that read the broker-wide rate find it, in both exposition formats."""
    b = Broker(_config(tmp_path), store=MemoryLogStore())
    await b.start()
    try:
        stats = b.metrics.share
        stats.share_requests(stats.fetch_requests, [("a", False), ("b", True)])
        stats.share_requests(stats.ack_requests, [("a", True)])
        parts, _ = await b.metrics.exposition()
        om_parts, _ = await b.metrics.exposition("application/openmetrics-text; version=1.0.0")
    finally:
        await b.stop()
    got = samples(b"".join(parts).decode())
    for name, every, failed in (("sharefetchrequests", 2, 1), ("shareacknowledgementrequests", 1, 1)):
        assert got[(f"kafka_server_brokertopicmetrics_total{name}_total", frozenset())] == every
        assert got[(f"kafka_server_brokertopicmetrics_failed{name}_total", frozenset())] == failed
    assert got[("kafka_server_brokertopicmetrics_failedsharefetchrequests_total", frozenset({("topic", "b")}))] == 1
    om = {(s.name, frozenset(s.labels.items())): s.value
          for f in text_string_to_openmetrics_families(b"".join(om_parts).decode()) for s in f.samples}
    assert om[("kafka_server_brokertopicmetrics_totalsharefetchrequests_total", frozenset())] == 2



async def test_a_failed_share_partition_load_is_timed_too(tmp_path):
    """Kafka's processShareFetch records PartitionLoadTimeMs when the load it started
    completes, successfully or not: a share partition never initialised fails to load, and
    is one sample."""
    b = Broker(_config(tmp_path), store=MemoryLogStore())
    await b.start()
    try:
        topic_id = b.topics.create("t", 1).topic_id
        got = await b.share_manager.fetch("g", "m", [(topic_id, 0, "t")], _fetch_params())
        assert got[(topic_id, 0)].error_code  # not initialised by the group coordinator
        assert b.metrics.share.partition_load_ms.count == 1
    finally:
        await b.stop()


async def test_a_deleted_topics_share_request_counters_go_even_without_a_share_partition(tmp_path):
    """Kafka removes a topic's BrokerTopicMetrics when its partitions are deleted
    (ReplicaManager.stopPartitions -> maybeRemoveTopicMetrics), whatever share partitions
    exist: here the fetch failed (never initialised), so none was ever loaded. Under topic
    churn the rows would otherwise pile up, one per topic ever fetched."""
    b = Broker(_config(tmp_path), store=MemoryLogStore())
    await b.start()
    try:
        topic_id = b.topics.create("t", 1).topic_id
        await b.share_manager.fetch("g", "m", [(topic_id, 0, "t")], _fetch_params())
        b.metrics.share.share_requests(b.metrics.share.ack_requests, [("t", True)])
        assert b.share_manager.cached("g", topic_id, 0) is None and b.metrics.share.fetch_requests["t"] == [1, 1]
        b.topics.delete("t")
        assert b.metrics.share.fetch_requests == {"": [1, 1]}
        assert b.metrics.share.ack_requests == {"": [1, 1]}
    finally:
        await b.stop()


@pytest.mark.parametrize("max_records, max_bytes", [(0, 1 << 20), (500, 0)])
async def test_a_share_fetch_for_no_records_or_no_bytes_is_not_counted(tmp_path, max_records, max_bytes):
    """Kafka's processShareFetch answers such a fetch at once, before it loads a share
    partition or marks TotalShareFetchRequestsPerSec."""
    b = Broker(_config(tmp_path), store=MemoryLogStore())
    await b.start()
    try:
        topic_id = b.topics.create("t", 1).topic_id
        p = _fetch_params(max_records=max_records, max_bytes=max_bytes)
        assert await b.share_manager.fetch("g", "m", [(topic_id, 0, "t")], p) == {}
        assert b.metrics.share.fetch_requests == {"": [0, 0]}
        assert b.share_manager.cached("g", topic_id, 0) is None
        assert b.metrics.share.partition_load_ms.count == 0
    finally:
        await b.stop()


def _fetch_params(max_records: int = 500, max_bytes: int = 1 << 20):
    return FetchParams(max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, max_records=max_records, batch_size=500)


class _Families:
    def __init__(self, families) -> None:
        self.families = families

    def collect(self):
        return self.families


_counts = st.integers(0, 2**53)
_rows = st.lists(st.tuples(st.tuples(st.text(), st.text(), st.integers(0, 2**31 - 1).map(str)),
                           _counts, _counts, _counts, st.none() | _counts, _counts, _counts, _counts))


@given(_rows)
def test_share_partition_series_are_written_as_prometheus_client_writes_them(rows):
    """The share-partition series skip prometheus_client's per-sample objects (0.35-0.9 s for
    4,000 share partitions): byte for byte what it writes, in both formats, escapes included."""
    reference = _Families(_share_partition_families(rows))
    assert b"".join(share_partition_exposition(rows, openmetrics=False)) == generate_latest(reference)
    assert b"".join(share_partition_exposition(rows, openmetrics=True)) + b"# EOF\n" == generate_openmetrics(reference)


# --- the command line ---------------------------------------------------------------------------------


def test_metrics_are_off_unless_a_port_is_given_and_bind_where_host_says():
    assert cli.metrics_address(cli.parse_args([])) is None
    assert cli.metrics_address(cli.parse_args(["--metrics-port", "0"])) == ("127.0.0.1", 0)
    assert cli.metrics_address(cli.parse_args(["--host", "0.0.0.0", "--metrics-port", "9404"])) == ("0.0.0.0", 9404)
    with pytest.raises(ConfigError):
        cli.metrics_address(cli.parse_args(["--metrics-port", "70000"]))


# --- the endpoint of an in-process broker -------------------------------------------------------------


def _config(tmp_path) -> BrokerConfig:
    return BrokerConfig({
        "log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0",
        "offsets.topic.num.partitions": "2", "share.coordinator.state.topic.num.partitions": "2",
    })


async def _http(host: str, port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(request)
    data = await asyncio.wait_for(reader.read(), 10)  # the server closes after one answer
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split(" ")[1]), headers, body


def samples(text: str) -> dict:
    """{(sample name, frozenset of labels): value} of a text-format scrape."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def test_the_endpoint_serves_metrics_on_get_and_head_only(tmp_path):
    b = Broker(_config(tmp_path), store=MemoryLogStore(), metrics_address=("127.0.0.1", 0))
    await b.start()
    try:
        host, port = b.metrics_bound
        assert b.server.request_metrics is b.metrics.requests
        status, headers, body = await _http(host, port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
        assert int(headers["content-length"]) == len(body)
        got = samples(body.decode())
        assert got[("kafka_server_group_coordinator_metrics_share_group_count", frozenset({("state", "Stable")}))] == 0
        assert got[("kafka_network_requestmetrics_requests_total", frozenset({("request", "ShareFetch")}))] == 0
        assert ("process_cpu_seconds_total", frozenset()) in got
        status, headers, body = await _http(host, port, b"HEAD /metrics HTTP/1.0\r\n\r\n")
        assert (status, body) == (200, b"") and int(headers["content-length"]) > 0
        status, headers, body = await _http(
            host, port, b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text; version=1.0.0\r\n\r\n")
        assert headers["content-type"].startswith("application/openmetrics-text") and body.endswith(b"# EOF\n")
        assert (await _http(host, port, b"GET /other HTTP/1.1\r\n\r\n"))[0] == 404
        assert (await _http(host, port, b"POST /metrics HTTP/1.1\r\n\r\n"))[0] == 405
        assert (await _http(host, port, b"nonsense\r\n\r\n"))[0] == 400
    finally:
        await b.stop()
    with pytest.raises(OSError):
        await asyncio.open_connection(host, port)  # stopped with the broker


async def test_a_scrape_is_formatted_off_the_event_loop(tmp_path, monkeypatch):
    """Formatting a scrape (about 40 ms for 4,000 share partitions) runs in a worker thread:
    while one is being formatted, the broker goes on answering, and a scrape that takes
    longer than the request head's timeout is still answered."""
    entered, release = threading.Event(), threading.Event()
    choose = metrics_module.choose_encoder

    def held_encoder(accept):
        encoder, content_type = choose(accept)

        def held(registry):
            entered.set()
            release.wait(5)
            return encoder(registry)
        return held, content_type

    monkeypatch.setattr(metrics_module, "choose_encoder", held_encoder)
    monkeypatch.setattr(metrics_module, "HTTP_TIMEOUT_S", 0.3)  # for the request head, not the answer
    b = Broker(_config(tmp_path), store=MemoryLogStore(), metrics_address=("127.0.0.1", 0))
    await b.start()
    try:
        host, port = b.metrics_bound
        scrape = asyncio.create_task(_http(host, port, b"GET /metrics HTTP/1.1\r\n\r\n"))
        assert await asyncio.to_thread(entered.wait, 10)
        assert (await _http(host, port, b"GET /other HTTP/1.1\r\n\r\n"))[0] == 404
        await asyncio.sleep(0.5)
        assert not scrape.done()
        release.set()
        status, _, body = await scrape
        assert status == 200 and b"kafka_server_sharesessioncache_sharesessionscount 0.0" in body
    finally:
        release.set()
        await b.stop()


async def test_a_scrape_reads_share_partitions_a_few_at_a_time_and_skips_those_dropped_meanwhile(
        tmp_path, monkeypatch):
    """4,000 share partitions read in one go held every request up for about 30 ms: a scrape
    reads ``ROWS_PER_TURN`` of them per turn of the loop. One forgotten between two turns
    (its group's state reset) is left out."""
    monkeypatch.setattr(metrics_module, "ROWS_PER_TURN", 4)
    b = Broker(_config(tmp_path), store=MemoryLogStore())
    await b.start()
    try:
        topic_id = b.topics.create("t", 3).topic_id
        for group in ("g", "h"):
            for p in range(3):
                await share_partition(b, group, topic_id, p, "t")
        reads, turns = [], 0
        read = metrics_module.BrokerCollector._share_partition_rows

        def counting(collector, leaders):
            reads.append((len(leaders), turns))
            rows = read(collector, leaders)
            if len(reads) == 1:
                b.share_manager.forget_share_state("h")
            return rows

        async def other_work():
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        monkeypatch.setattr(metrics_module.BrokerCollector, "_share_partition_rows", counting)
        other = asyncio.create_task(other_work())
        parts, _ = await b.metrics.exposition()
        other.cancel()
        assert [n for n, _ in reads] == [4, 2]
        assert reads[0][1] < reads[1][1]  # other tasks ran between the reads
        starts = {labels for (name, labels), _ in samples(b"".join(parts).decode()).items()
                  if name == "kafka_server_sharepartitionmetrics_startoffset"}
        assert sorted(dict(labels)["group"] for labels in starts) == ["g", "g", "g", "h"]  # read before the reset
    finally:
        await b.stop()


async def test_share_sessions_dropped_with_their_connection_count_as_evictions(tmp_path):
    """Kafka's ShareSessionCache marks ShareSessionEvictionsPerSec when a client's disconnect
    drops its session; one closed with epoch -1 (or replaced by a re-open) is not counted."""
    b = Broker(_config(tmp_path), store=MemoryLogStore())
    await b.start()
    try:
        cache = b.share_sessions
        gone, _ = cache.open("g", "m1", {})
        closed, _ = cache.open("g", "m2", {})
        replaced, _ = cache.open("g", "m3", {})
        cache.open("g", "m3", {})
        cache.close("g", "m2")
        assert [cache.evict(s) for s in (gone, gone, closed, replaced)] == [True, False, False, False]
        assert len(cache) == 1
        parts, _ = await b.metrics.exposition()
    finally:
        await b.stop()
    got = samples(b"".join(parts).decode())
    assert got[("kafka_server_sharesessioncache_sharesessionevictions_total", frozenset())] == 1
    assert got[("kafka_server_sharesessioncache_sharesessionscount", frozenset())] == 1


async def test_fetch_requests_are_also_counted_as_fetch_consumer(tmp_path):
    """Kafka's RequestChannel records a consumer's Fetch under request="Fetch" and again under
    "FetchConsumer", the name Kafka dashboards chart; the socket byte counts take it once."""
    b = Broker(_config(tmp_path), store=MemoryLogStore())
    await b.start()
    try:
        frame = bytearray(b"\x00\x01\x00\x0b" + b"\x00" * 56)  # Fetch v11, 60 bytes
        b.metrics.requests.record(frame, [bytearray(b"\x00\x00\x00\x10"), b"x" * 16], 0.004)
        parts, _ = await b.metrics.exposition()
    finally:
        await b.stop()
    got = samples(b"".join(parts).decode())
    for request in ("Fetch", "FetchConsumer"):
        r = frozenset({("request", request)})
        assert got[("kafka_network_requestmetrics_requests_total", r)] == 1, request
        assert got[("kafka_network_requestmetrics_totaltimems_count", r)] == 1, request
        assert got[("kafka_network_requestmetrics_totaltimems_sum", r)] == pytest.approx(4), request
        assert got[("kafka_network_requestmetrics_requestbytes_sum", r)] == 60, request
        assert got[("kafka_network_requestmetrics_responsebytes_sum", r)] == 16, request
    listener = frozenset({("listener", "PLAINTEXT")})
    assert got[("kafka_server_socket_server_metrics_incoming_byte_total", listener)] == 64
    assert got[("kafka_server_socket_server_metrics_outgoing_byte_total", listener)] == 20


def readme_metric_names() -> set[str]:
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    start = text.index("\n## Metrics\n")
    section = text[start:text.index("\n## ", start + 1)]
    return set(re.findall(r"^\| `(kafka_\w+)` \|", section, re.M))


async def test_the_readme_lists_exactly_the_kafka_series_served(tmp_path):
    b = Broker(_config(tmp_path), store=MemoryLogStore(), metrics_address=("127.0.0.1", 0))
    await b.start()
    try:
        served = {m.name + ("_total" if m.type == "counter" else "") for m in b.metrics.registry.collect()}
    finally:
        await b.stop()
    assert {n for n in served if n.startswith("kafka_")} == readme_metric_names()


# Each series' labels: Kafka's tag names as Kafka spells them. The JMX-exporter rules kshare's
# names follow (Strimzi's kafka-metrics.yaml, the exporter's kafka-2_0_0.yml) set
# lowercaseOutputName but not lowercaseOutputLabelNames, so a tag keeps its case on the way
# to Prometheus (ShareGroupMetrics' ackType stays ackType), and label names are case-sensitive.
KAFKA_TAGS = {
    "kafka_network_requestmetrics_requests": {"request"},
    "kafka_network_requestmetrics_totaltimems": {"request"},
    "kafka_network_requestmetrics_requestbytes": {"request"},
    "kafka_network_requestmetrics_responsebytes": {"request"},
    "kafka_server_socket_server_metrics_incoming_byte": {"listener"},
    "kafka_server_socket_server_metrics_outgoing_byte": {"listener"},
    "kafka_server_brokertopicmetrics_totalsharefetchrequests": {"topic"},
    "kafka_server_brokertopicmetrics_failedsharefetchrequests": {"topic"},
    "kafka_server_brokertopicmetrics_totalshareacknowledgementrequests": {"topic"},
    "kafka_server_brokertopicmetrics_failedshareacknowledgementrequests": {"topic"},
    "kafka_server_sharegroupmetrics_recordacknowledgements": {"ackType"},
    "kafka_server_sharegroupmetrics_partitionloadtimems": set(),
    **{name: {"group", "topic", "partition"} for name, _, _ in metrics_module.SHARE_PARTITION_SERIES},
    "kafka_server_group_coordinator_metrics_group_count": {"protocol"},
    "kafka_server_group_coordinator_metrics_share_group_count": {"state"},
    "kafka_server_group_coordinator_metrics_share_group_member_count": {"group"},
    "kafka_server_sharesessioncache_sharesessionscount": set(),
    "kafka_server_sharesessioncache_sharepartitionscount": set(),
    "kafka_server_sharesessioncache_sharesessionevictions": set(),
    "kafka_controller_kafkacontroller_offlinepartitionscount": set(),
}


async def test_label_names_are_kafkas_tag_names_with_their_case(tmp_path):
    b = Broker(_config(tmp_path), store=MemoryLogStore())
    await b.start()
    try:
        topic_id = b.topics.create("t", 1).topic_id
        await share_partition(b, "g", topic_id, 0, "t")
        b.metrics.share.records_acknowledged([(0, 0, [1])])
        families = [f for f in b.metrics.registry.collect() if f.name.startswith("kafka_")]
    finally:
        await b.stop()
    assert {f.name for f in families} == set(KAFKA_TAGS)
    for family in families:
        for sample in family.samples:
            assert set(sample.labels) - {"le"} <= KAFKA_TAGS[family.name], (sample.name, sample.labels)
    acks = next(f for f in families if f.name == "kafka_server_sharegroupmetrics_recordacknowledgements")
    assert {s.labels["ackType"]: s.value for s in acks.samples}["Accept"] == 1


async def test_without_a_metrics_address_nothing_listens_and_requests_are_not_timed(tmp_path):
    b = Broker(_config(tmp_path), store=MemoryLogStore())
    await b.start()
    try:
        assert b.metrics_bound is None and not b.metrics.serving
        assert b.server.request_metrics is None
    finally:
        await b.stop()
