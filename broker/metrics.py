"""Prometheus metrics under Apache Kafka's broker metric names, served on ``--metrics-port``.

Names are Kafka's MBeans passed through the rules most Kafka deployments feed the Prometheus
JMX exporter (Strimzi's ``kafka-metrics.yaml``, the exporter's ``kafka-2_0_0.yml``):
``kafka.<domain>:type=<Type>,name=<Name>PerSec,<tag>=<v>`` becomes the counter
``kafka_<domain>_<type>_<name>_total{<tag>="v"}`` and a gauge ``...,name=<Name>`` becomes
``kafka_<domain>_<type>_<name>``, the name lower-cased (``lowercaseOutputName``) and the tags
kept as Kafka spells them (those rules do not set ``lowercaseOutputLabelNames``, so
``ackType`` stays ``ackType``); Kafka-metrics style names
(``type=group-coordinator-metrics``, attribute ``share-group-count``) get ``-`` turned into ``_``.
So existing Kafka dashboards and alerts find these series where they expect them. Kafka's
Yammer histograms (TotalTimeMs, RequestBytes, PartitionLoadTimeMs) are real Prometheus
histograms here (``_bucket``/``_sum``/``_count``, in Kafka's units: milliseconds and bytes)
rather than the exporter's pre-computed quantiles. README "Metrics" lists every series.

Cost. Nothing here runs unless asked: the request pipeline records into plain integers of a
per-API object picked from a list by API key (one index, no label lookup, no lock), share-
partition leaders bump integer counters at the points where records are acquired, acknowledged
or their locks expire, and every gauge (in-flight records, lag, groups by state, members,
sessions) is computed at scrape time by walking the in-memory state. The HTTP endpoint runs on
the broker's own event loop, so a scrape reads that state from the thread that owns it: no
locks, no torn values, and no work at all between scrapes. Share partitions are read a few
hundred per turn of the loop and formatted in a worker thread (about 50 ms in all for 4,000
of them), so requests are not held up while a scrape is written.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from bisect import bisect_left
from typing import TYPE_CHECKING, Iterable, Iterator

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.utils import floatToGoString

from coordinator.group.share_offsets import share_partition_lag

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("kshare.metrics")

_SIZE = struct.Struct(">i")

# Bucket bounds (inclusive upper bounds, like Prometheus' ``le``).
TIME_BUCKETS_MS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
SIZE_BUCKETS_BYTES = (64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)

# Acknowledge types by wire id, named as Kafka's ackType tag does; Gap (0) is a kshare addition.
ACK_TYPE_NAMES = ("Gap", "Accept", "Release", "Reject", "Renew")
# Share-group states Kafka reports a count for (always exported, zero included).
GROUP_STATES = ("Empty", "Stable", "Dead")
LISTENER = "PLAINTEXT"
FETCH_CONSUMER = "FetchConsumer"  # Kafka's RequestMetrics.consumerFetchMetricName
# The share request counters' row for all topics (no topic can have an empty name): Kafka's
# BrokerTopicStats.allTopicsStats, exported without the topic label as Kafka's MBean has none.
ALL_TOPICS = ""


class Histogram:
    """Bucket counts in plain integers; cumulated only when scraped."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        out, total = [], 0
        for bound, n in zip(self.bounds, self.counts):
            total += n
            out.append((_le(bound), total))
        out.append(("+Inf", total + self.counts[-1]))
        return out


def _le(bound: float) -> str:
    return repr(float(bound))


# --- request metrics ---------------------------------------------------------------------------------


class ApiStats:
    """One API's request metrics (kafka.network:type=RequestMetrics,request=<name>)."""

    __slots__ = ("name", "time_ms", "request_bytes", "response_bytes")

    def __init__(self, name: str) -> None:
        self.name = name
        self.time_ms = Histogram(TIME_BUCKETS_MS)
        self.request_bytes = Histogram(SIZE_BUCKETS_BYTES)
        self.response_bytes = Histogram(SIZE_BUCKETS_BYTES)


class RequestMetrics:
    """Per-API request count, latency and bytes, recorded by the connection worker.

    ``by_key`` is pre-built for every registered API, so recording is one list index and a
    few integer additions.
    """

    def __init__(self, apis: Iterable[tuple[int, str]]) -> None:
        apis = sorted(apis)
        self.by_key: list[ApiStats | None] = [None] * (max((k for k, _ in apis), default=-1) + 1)
        for key, name in apis:
            self.by_key[key] = ApiStats(name)

    def record(self, frame, parts, elapsed_s: float) -> None:
        """A request ``frame`` (header and body, no size prefix) was answered with ``parts``
        (the encoded response, size prefix first; None for acks=0) ``elapsed_s`` after its
        handling started. Only frames whose API key was registered get here."""
        s = self.by_key[(frame[0] << 8) | frame[1]]
        ms = elapsed_s * 1000.0
        h = s.time_ms
        h.counts[bisect_left(TIME_BUCKETS_MS, ms)] += 1
        h.sum += ms
        n = len(frame)
        h = s.request_bytes
        h.counts[bisect_left(SIZE_BUCKETS_BYTES, n)] += 1
        h.sum += n
        if parts is not None:
            (n,) = _SIZE.unpack_from(parts[0], 0)
            h = s.response_bytes
            h.counts[bisect_left(SIZE_BUCKETS_BYTES, n)] += 1
            h.sum += n

    def apis(self) -> list[ApiStats]:
        return [s for s in self.by_key if s is not None]


# --- share groups -----------------------------------------------------------------------------------


class ShareGroupStats:
    """Broker-wide share-group counters (kafka.server:type=ShareGroupMetrics and the share
    request counters of type=BrokerTopicMetrics)."""

    __slots__ = ("acknowledged", "partition_load_ms", "fetch_requests", "ack_requests")

    def __init__(self) -> None:
        self.acknowledged = [0] * len(ACK_TYPE_NAMES)  # records, by acknowledge type id
        self.partition_load_ms = Histogram(TIME_BUCKETS_MS)
        # topic -> [total, failed]; ALL_TOPICS -> the sums, kept when a topic goes
        self.fetch_requests: dict[str, list[int]] = {ALL_TOPICS: [0, 0]}
        self.ack_requests: dict[str, list[int]] = {ALL_TOPICS: [0, 0]}

    def records_acknowledged(self, batches: Iterable[tuple[int, int, list[int]]]) -> None:
        """Count the records of applied acknowledgement batches ``(first, last, types)`` by
        type: one type for the whole batch, or one per offset."""
        counts = self.acknowledged
        for first, last, types in batches:
            if len(types) == 1:
                counts[types[0]] += last - first + 1
            else:
                for t in set(types):
                    counts[t] += types.count(t)

    def share_requests(self, table: dict[str, list[int]], topics: Iterable[tuple[str, bool]]) -> None:
        """One request touched each of ``topics`` ((name, failed)), once per topic. The all-topics
        row counts once per topic too, as SharePartitionManager marks allTopicsStats."""
        every = table[ALL_TOPICS]
        for topic, failed in topics:
            row = table.get(topic)
            if row is None:
                row = table[topic] = [0, 0]
            row[0] += 1
            every[0] += 1
            if failed:
                row[1] += 1
                every[1] += 1

    def share_requests_failed(self, table: dict[str, list[int]], topics: Iterable[str]) -> None:
        """Requests counted by ``share_requests`` as they started that failed in the end, once
        per topic (Kafka marks the totals as a share fetch starts, the failures as it
        completes). A topic deleted meanwhile gets no row again: its counters went with it."""
        every = table[ALL_TOPICS]
        for topic in topics:
            every[1] += 1
            if (row := table.get(topic)) is not None:
                row[1] += 1

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's counters go, as Kafka removes its BrokerTopicMetrics; the
        all-topics sums keep what it counted."""
        self.fetch_requests.pop(topic, None)
        self.ack_requests.pop(topic, None)


class SharePartitionStats:
    """Counters of one share partition (kafka.server:type=SharePartitionMetrics), kept by its
    leader so they go away with it, as Kafka removes a share partition's metrics."""

    __slots__ = ("acquired", "lock_timeouts")

    def __init__(self) -> None:
        self.acquired = 0  # records acquired (deliveries, redeliveries included)
        self.lock_timeouts = 0  # records whose acquisition lock expired


def per_topic(rows: Iterable[tuple[str, int]]) -> list[tuple[str, bool]]:
    """((topic, error code), ...) per partition -> [(topic, any partition failed)] per topic."""
    out: dict[str, bool] = {}
    for topic, code in rows:
        out[topic] = out.get(topic, False) or bool(code)
    return list(out.items())


# --- the collector ----------------------------------------------------------------------------------


# The per-share-partition series, in the order of a row's values (``_share_partition_rows``).
SHARE_PARTITION_SERIES = (
    ("kafka_server_sharepartitionmetrics_inflightmessagecount", "gauge",
     "Records from the share-partition start offset to the last cached one."),
    ("kafka_server_sharepartitionmetrics_inflightbatchcount", "gauge", "Cached in-flight batches."),
    ("kafka_server_sharepartitionmetrics_acquiredmessagecount", "gauge", "Records currently acquired by consumers."),
    ("kafka_server_sharepartitionmetrics_lag", "gauge",
     "KIP-1226 share-partition lag: log end offset - start offset - delivery-complete count."),
    ("kafka_server_sharepartitionmetrics_startoffset", "gauge", "Share-partition start offset (SPSO)."),
    ("kafka_server_sharepartitionmetrics_acquisitionlocktimeout", "counter", "Records whose acquisition lock expired."),
    ("kafka_server_sharepartitionmetrics_acquiredrecords", "counter",
     "Records acquired (deliveries, redeliveries included)."),
)
# Share partitions read per turn of the event loop at scrape time (about 1 ms each).
ROWS_PER_TURN = 256


def _share_partition_families(rows: list[tuple]) -> list:
    """The per-share-partition families as prometheus_client objects (the registry's view, and
    the reference ``share_partition_exposition`` is tested against)."""
    kinds = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily}
    families = [kinds[kind](name, doc, labels=["group", "topic", "partition"])
                for name, kind, doc in SHARE_PARTITION_SERIES]
    for labels, *values in rows:
        for family, value in zip(families, values):
            if value is not None:  # lag is unknown until the state was written once
                family.add_metric(labels, value)
    return families


def _label_value(text: str) -> str:
    """A label value escaped as both exposition formats want it."""
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def _number(n: int) -> str:
    """``floatToGoString(n)``, without its float round trip for the usual small counts."""
    return f"{n}.0" if type(n) is int and 0 <= n < 1_000_000 else floatToGoString(n)


def share_partition_exposition(rows: list[tuple], *, openmetrics: bool) -> list[bytes]:
    """The per-share-partition series in the text (0.0.4) or OpenMetrics format, one part per
    series, exactly as prometheus_client writes ``_share_partition_families``, without its
    per-sample objects: those took 0.4 s (text) and 0.65 s (OpenMetrics) for 4,000 share
    partitions, holding the GIL against the event loop."""
    labels = [f'{{group="{_label_value(group)}",partition="{partition}",topic="{_label_value(topic)}"}}'
              for (group, topic, partition), *_ in rows]
    parts = []
    for i, (name, kind, doc) in enumerate(SHARE_PARTITION_SERIES, start=1):
        sample = name + "_total" if kind == "counter" else name
        head = name if openmetrics else sample
        lines = [f"# HELP {head} {doc}\n# TYPE {head} {kind}\n"]
        lines += [f"{sample}{label} {_number(row[i])}\n" for label, row in zip(labels, rows) if row[i] is not None]
        parts.append("".join(lines).encode())
    return parts


class BrokerCollector:
    """Turns the counters and the broker's live state into metric families at scrape time."""

    def __init__(self, broker: Broker, metrics: BrokerMetrics) -> None:
        self.broker = broker
        self.metrics = metrics

    def collect(self) -> Iterator:
        """Everything at once, in the caller's thread (the registry's view; scrapes use
        ``BrokerMetrics.exposition``)."""
        yield from self.broker_families()
        yield from _share_partition_families(self._share_partition_rows(self.broker.share_manager.metrics_view()))

    def broker_families(self) -> list:
        """The few broker-wide families, built on the event loop."""
        return [*self._requests(), *self._share_group(), *self._group_coordinator(), *self._share_sessions(),
                GaugeMetricFamily("kafka_controller_kafkacontroller_offlinepartitionscount",
                                  "Partitions whose log went offline (a failed fsync or read) until a restart.",
                                  value=sum(lg.offline for lg in self.broker.store.partitions()))]

    async def share_partition_rows(self) -> list[tuple]:
        """Every loaded share partition's numbers, read on the event loop ``ROWS_PER_TURN`` at
        a time: thousands read at once held requests up for tens of milliseconds."""
        leaders = self.broker.share_manager.metrics_view()
        rows = []
        for i in range(0, len(leaders), ROWS_PER_TURN):
            if i:
                await asyncio.sleep(0)
            rows += self._share_partition_rows(leaders[i:i + ROWS_PER_TURN])
        return rows

    def _requests(self):
        apis = self.metrics.requests.apis()
        reqs = CounterMetricFamily("kafka_network_requestmetrics_requests", "Requests answered, by API.",
                                   labels=["request"])
        time_ms = HistogramMetricFamily(
            "kafka_network_requestmetrics_totaltimems",
            "Time from the start of handling a request to its response being written, in milliseconds.",
            labels=["request"])
        req_bytes = HistogramMetricFamily("kafka_network_requestmetrics_requestbytes",
                                          "Request sizes in bytes (header and body), by API.", labels=["request"])
        resp_bytes = HistogramMetricFamily("kafka_network_requestmetrics_responsebytes",
                                           "Response sizes in bytes (header and body), by API.", labels=["request"])
        incoming = outgoing = 0
        for s in apis:
            count = s.time_ms.count
            # Kafka's RequestChannel records a Fetch under "Fetch" and again under
            # "FetchConsumer" (or "FetchFollower", from another broker's replica: kshare has none).
            for name in (s.name, FETCH_CONSUMER) if s.name == "Fetch" else (s.name,):
                reqs.add_metric([name], count)
                if not count:
                    continue  # histograms only for APIs in use: 18 buckets x 3 x every API is a lot to scrape
                time_ms.add_metric([name], s.time_ms.cumulative(), s.time_ms.sum)
                req_bytes.add_metric([name], s.request_bytes.cumulative(), s.request_bytes.sum)
                resp_bytes.add_metric([name], s.response_bytes.cumulative(), s.response_bytes.sum)
            incoming += s.request_bytes.sum + 4 * count
            outgoing += s.response_bytes.sum + 4 * s.response_bytes.count
        yield from (reqs, time_ms, req_bytes, resp_bytes)
        for name, value, what in (("incoming_byte", incoming, "received in answered requests"),
                                  ("outgoing_byte", outgoing, "sent in responses")):
            family = CounterMetricFamily(f"kafka_server_socket_server_metrics_{name}",
                                         f"Bytes {what}, size prefixes included.", labels=["listener"])
            family.add_metric([LISTENER], value)
            yield family

    def _share_group(self):
        stats = self.metrics.share
        acks = CounterMetricFamily("kafka_server_sharegroupmetrics_recordacknowledgements",
                                   "Records acknowledged, by acknowledge type.", labels=["ackType"])
        for t, name in enumerate(ACK_TYPE_NAMES):
            acks.add_metric([name], stats.acknowledged[t])
        yield acks
        load = HistogramMetricFamily("kafka_server_sharegroupmetrics_partitionloadtimems",
                                     "Time to load a share partition's state (failed loads too), in milliseconds.")
        load.add_metric([], stats.partition_load_ms.cumulative(), stats.partition_load_ms.sum)
        yield load
        for table, what, name in ((stats.fetch_requests, "ShareFetch", "sharefetchrequests"),
                                  (stats.ack_requests, "share acknowledgement", "shareacknowledgementrequests")):
            total = CounterMetricFamily(f"kafka_server_brokertopicmetrics_total{name}",
                                        f"{what} requests, per topic they touched.", labels=["topic"])
            failed = CounterMetricFamily(f"kafka_server_brokertopicmetrics_failed{name}",
                                         f"{what} requests that failed for a partition of the topic.",
                                         labels=["topic"])
            for topic, (n, bad) in sorted(table.items()):
                if topic == ALL_TOPICS:  # Kafka's all-topics MBean: no topic tag
                    total.add_sample(total.name + "_total", {}, n)
                    failed.add_sample(failed.name + "_total", {}, bad)
                else:
                    total.add_metric([topic], n)
                    failed.add_metric([topic], bad)
            yield total
            yield failed

    def _share_partition_rows(self, leaders) -> list[tuple]:
        store = self.broker.store
        rows = []
        for leader in leaders:
            sp = leader.sp
            if sp is None or leader.dropped:  # (forgotten since the scrape began)
                continue
            group, _, partition = leader.key
            lg = store.get(leader.topic, partition)
            lag = None if lg is None else share_partition_lag(lg.end_offset, sp.start_offset,
                                                                sp.delivery_complete_count)
            stats = leader.stats
            rows.append(((group, leader.topic, str(partition)), sp.in_flight_count, sp.batch_count,
                         sp.acquired_count, lag, sp.start_offset, stats.lock_timeouts, stats.acquired))
        return rows

    def _group_coordinator(self):
        rows = self.broker.group_coordinator.coordinator.group_summaries()
        by_state = dict.fromkeys(GROUP_STATES, 0)
        members = GaugeMetricFamily("kafka_server_group_coordinator_metrics_share_group_member_count",
                                    "Members of each share group.", labels=["group"])
        for group, state, n in rows:
            by_state[state] = by_state.get(state, 0) + 1
            members.add_metric([group], n)
        total = GaugeMetricFamily("kafka_server_group_coordinator_metrics_group_count",
                                  "Groups, by protocol.", labels=["protocol"])
        total.add_metric(["share"], len(rows))
        states = GaugeMetricFamily("kafka_server_group_coordinator_metrics_share_group_count",
                                   "Share groups, by state.", labels=["state"])
        for state, n in by_state.items():
            states.add_metric([state], n)
        yield from (total, states, members)

    def _share_sessions(self):
        cache = self.broker.share_sessions
        sessions = cache.sessions()
        yield GaugeMetricFamily("kafka_server_sharesessioncache_sharesessionscount",
                                "Cached share sessions.", value=len(sessions))
        yield GaugeMetricFamily("kafka_server_sharesessioncache_sharepartitionscount",
                                "Share partitions in cached share sessions.",
                                value=sum(len(s.partitions) for s in sessions))
        yield CounterMetricFamily("kafka_server_sharesessioncache_sharesessionevictions",
                                  "Share sessions dropped because their client's connection closed.",
                                  value=cache.evictions)


# --- the broker's metrics and their endpoint ----------------------------------------------------------


class BrokerMetrics:
    """Everything one broker measures, and the HTTP endpoint that exposes it.

    The share counters always count (a few integer additions per request, not per record);
    request metrics are recorded only while the endpoint is served (``requests`` is handed to
    the network layer by ``serve``).
    """

    def __init__(self, broker: Broker, apis: Iterable[tuple[int, str]]) -> None:
        self.requests = RequestMetrics(apis)
        self.share = ShareGroupStats()
        self.collector = BrokerCollector(broker, self)
        self.runtime = CollectorRegistry(auto_describe=False)  # the process's own: readable from any thread
        ProcessCollector(registry=self.runtime)
        PlatformCollector(registry=self.runtime)
        GCCollector(registry=self.runtime)
        self.registry = CollectorRegistry(auto_describe=False)  # everything, collected in the caller's thread
        self.registry.register(self.collector)
        self.registry.register(self.runtime)
        self._server: asyncio.base_events.Server | None = None

    async def exposition(self, accept: str = "") -> tuple[list[bytes], str]:
        """The scrape body in parts, and its content type (OpenMetrics if the scraper asks for
        it). The broker's state is read here, on the loop; formatting runs in a worker thread.
        The parts are written with one writev, never joined: at 40,000 share partitions the
        body is 28 MB, and each copy of it held the loop for tens of milliseconds."""
        encoder, content_type = choose_encoder(accept)
        families = self.collector.broker_families()
        rows = await self.collector.share_partition_rows()
        parts = await asyncio.get_running_loop().run_in_executor(
            None, _encode, encoder, content_type, _Scrape(families, self.runtime), rows)
        return parts, content_type

    async def serve(self, host: str, port: int) -> tuple[str, int]:
        """Serve ``GET /metrics`` on the running loop; returns the bound (host, port)."""
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _MetricsHttp(self), host or None, port, reuse_address=True)
        addr = self._server.sockets[0].getsockname()
        log.info("metrics on http://%s:%d/metrics", addr[0], addr[1])
        return addr[0], addr[1]

    @property
    def serving(self) -> bool:
        return self._server is not None

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None


class _Scrape:
    """A scrape's families for an encoder: the broker-wide ones, then the process's own."""

    def __init__(self, families: list, runtime: CollectorRegistry) -> None:
        self.families = families
        self.runtime = runtime

    def collect(self) -> Iterator:
        yield from self.families
        yield from self.runtime.collect()


_EOF = b"# EOF\n"


def _encode(encoder, content_type: str, scrape: _Scrape, rows: list[tuple]) -> list[bytes]:
    """The encoder's body, then the share-partition series (before OpenMetrics' end mark)."""
    head = encoder(scrape)
    if content_type.startswith("application/openmetrics-text"):
        return [head.removesuffix(_EOF), *share_partition_exposition(rows, openmetrics=True), _EOF]
    return [head, *share_partition_exposition(rows, openmetrics=False)]


MAX_HTTP_HEAD = 16 * 1024
HTTP_TIMEOUT_S = 10.0


class _MetricsHttp(asyncio.Protocol):
    """A minimal HTTP/1.x responder: one request per connection, GET or HEAD of ``/metrics``
    (or ``/``), answered and closed. Anything else gets 404/405; a head
    that is too large or too slow closes the connection."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.timer: asyncio.TimerHandle | None = None
        self.answer: asyncio.Task | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.timer = asyncio.get_running_loop().call_later(HTTP_TIMEOUT_S, transport.close)

    def connection_lost(self, exc) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.answer is not None:
            self.answer.cancel()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buf) > MAX_HTTP_HEAD:
                self.transport.close()
            return
        self.transport.pause_reading()
        self.timer.cancel()  # the head arrived in time; a long scrape is still answered
        head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        parts = head[0].split(" ")
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            self._reply(400, [b"bad request\n"])
        elif parts[0] not in ("GET", "HEAD"):
            self._reply(405, [b"method not allowed\n"], extra="Allow: GET, HEAD\r\n")
        elif parts[1].split("?", 1)[0] not in ("/metrics", "/"):
            self._reply(404, [b"not found; try /metrics\n"])
        else:
            self.answer = asyncio.get_running_loop().create_task(
                self._scrape(headers.get("accept", ""), head_only=parts[0] == "HEAD"))

    async def _scrape(self, accept: str, *, head_only: bool) -> None:
        try:
            parts, content_type = await self.metrics.exposition(accept)
        except Exception:
            log.exception("collecting metrics failed")
            self._reply(500, [b"collecting metrics failed\n"])
            return
        self._reply(200, parts, content_type=content_type, head_only=head_only)

    def _reply(self, status: int, body: list[bytes], *, content_type: str = "text/plain; charset=utf-8",
               extra: str = "", head_only: bool = False) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                  500: "Internal Server Error"}[status]
        head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {sum(map(len, body))}\r\n{extra}Connection: close\r\n\r\n").encode("latin-1")
        self.transport.writelines([head] if head_only else [head, *body])
        self.transport.close()
