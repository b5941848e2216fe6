"""PySpark 4 Python data sources that read topics over the Kafka protocol.

``kshare-kafka`` yields Kafka records with the columns of Spark's own Kafka source (key, value,
topic, partition, offset, timestamp, timestampType, and headers with ``includeHeaders=true``).
``kshare-share-state`` reads ``__share_group_state`` (or a copy of it) and yields its records decoded into typed rows
(``state_rows.STATE_SCHEMA``). Both plan the same way::

    spark.read.format("kshare-kafka")
        .option("kafka.bootstrap.servers", "127.0.0.1:9092")
        .option("subscribe", "orders")                       # or subscribePattern / assign
        .option("startingOffsets", "earliest")               # or JSON {"orders": {"0": 42}}
        .option("endingOffsets", "latest")                   # or JSON, -1 = latest
        .load()

Planning (on the driver) asks each partition's leader for its log start and end offsets,
resolves the options (``offsets.resolve_offsets``) and makes one input partition per
topic-partition range, split when it holds more than ``maxOffsetsPerSplit`` offsets
(default 1,000,000) or when ``minPartitions`` asks for more. Each task fetches its range from the
partition's leader and hands Spark Arrow record batches. Other options: ``failOnDataLoss``
(default true), ``startingTimestamp`` / ``endingTimestamp`` / ``startingOffsetsByTimestamp`` /
``endingOffsetsByTimestamp`` (with ``startingOffsetsByTimestampStrategy``) as in Spark,
``fetchMaxBytes`` (default 8 MiB per Fetch), ``batchRows`` (rows per Arrow batch).

``kshare-share-state`` decodes the fetched batches column-wise (``StateRowBuilder.add_raw``):
numpy reads the records' framing and the values' fixed layout, Python only walks the batches.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from protocol.coordinator_serde import SHARE_GROUP_STATE_TOPIC

from .kafka_io import Cluster
from .offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    Timestamps,
    bound_range,
    check_assigned,
    check_batch_limits,
    check_limits,
    parse_offsets,
    parse_timestamps,
    resolve_offsets,
    split_ranges,
)
from .state_rows import STATE_SCHEMA, StateRowBuilder

__all__ = ["KafkaSource", "ShareStateSource", "KAFKA_SCHEMA", "RangePartition", "register", "plan_ranges",
           "read_state_range", "source_options"]

KAFKA_SCHEMA = StructType([  # with includeHeaders=true; without it, no headers column (as in Spark)
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),  # 0 CreateTime, 1 LogAppendTime
    StructField("headers", ArrayType(StructType([
        StructField("key", StringType()),
        StructField("value", BinaryType()),
    ]))),
])
_KAFKA_SCHEMA_NO_HEADERS = StructType(KAFKA_SCHEMA.fields[:-1])
_KAFKA_ARROW_SCHEMA = to_arrow_schema(KAFKA_SCHEMA, timezone="UTC")
_KAFKA_ARROW_SCHEMA_NO_HEADERS = to_arrow_schema(_KAFKA_SCHEMA_NO_HEADERS, timezone="UTC")

DEFAULT_MAX_OFFSETS_PER_SPLIT = 1_000_000
DEFAULT_FETCH_MAX_BYTES = 8 << 20
DEFAULT_BATCH_ROWS = 50_000


class RangePartition(InputPartition):
    """One Spark input partition: offsets ``[start, end)`` of one topic-partition."""

    def __init__(self, r: OffsetRange) -> None:
        super().__init__(r)
        self.range = r


class _Options:
    """The source options, validated on the driver and shipped to the tasks."""

    def __init__(self, options, default_topic: str | None) -> None:
        opts = _lowered(options)
        # As Spark's validateBatchOptions: the offset limits first, then the general options.
        # (As Spark's getKafkaOffsetRangeLimit: a timestamp, then timestamps per partition, then offsets.)
        self.starting = parse_timestamps(opts, "starting") or parse_offsets(opts.get("startingoffsets"), EARLIEST)
        self.ending = parse_timestamps(opts, "ending") or parse_offsets(opts.get("endingoffsets"), LATEST)
        check_batch_limits(self.starting, self.ending)
        # KafkaSourceProvider.validateGeneralOptions / strategy: one of subscribe, subscribePattern
        # and assign (here ``topic`` or the source's default topic stand in for subscribe).
        strategies = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
        if len(strategies) > 1:
            raise ValueError("Only one of the following options can be specified for Kafka source: "
                             "subscribe, subscribepattern, assign. See the docs for more details.")
        self.pattern: str | None = None
        self.assign: dict[str, set[int]] | None = None
        topics = ""
        if strategies == ["subscribepattern"]:
            self.pattern = str(opts["subscribepattern"]).strip()
            if not self.pattern:
                raise ValueError("Pattern to subscribe is empty as specified value for option "
                                 f"'subscribePattern' is '{opts['subscribepattern']}'")
            re.compile(self.pattern)
        elif strategies == ["assign"]:
            self.assign = _parse_assign(str(opts["assign"]))
        elif "subscribe" in opts:  # an empty one is Spark's "No topics" error below, not the default topic
            topics = opts["subscribe"]
        elif default_topic is not None:  # kshare-share-state: ``topic`` may name a copy of the state topic
            topics = opts.get("topic") or default_topic
        else:  # kshare-kafka: ``topic`` is only a sink option for Spark, so no strategy
            raise ValueError("One of the following options must be specified for Kafka source: "
                             "subscribe, subscribepattern, assign. See the docs for more details.")
        # Each topic once, as Spark's SubscribeStrategy reads a set of topic-partitions.
        self.topics = list(dict.fromkeys(t.strip() for t in topics.split(",") if t.strip()))
        if self.assign is not None:
            self.topics = list(self.assign)
        elif not self.topics and self.pattern is None:
            raise ValueError(f"No topics to subscribe to as specified value for option 'subscribe' is '{topics}'")
        strategy = str(opts.get("startingoffsetsbytimestampstrategy", "error")).upper()
        if strategy not in ("ERROR", "LATEST"):
            raise ValueError(f"startingOffsetsByTimestampStrategy must be error or latest, got {strategy.lower()}")
        self.no_match_latest = strategy == "LATEST"
        check_limits(self.starting, self.ending)
        self.include_headers = _boolean(opts, "includeheaders", False)
        self.fail_on_data_loss = _boolean(opts, "failondataloss", True)
        self.max_offsets_per_split = int(opts.get("maxoffsetspersplit", DEFAULT_MAX_OFFSETS_PER_SPLIT))
        self.min_partitions = int(opts["minpartitions"]) if "minpartitions" in opts else None
        if self.min_partitions is not None and self.min_partitions <= 0:
            raise ValueError("minPartitions must be positive")
        _check_kafka_options(opts)
        self.bootstrap = opts.get("kafka.bootstrap.servers") or opts.get("bootstrap.servers")
        if not self.bootstrap:
            raise ValueError("Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer")
        self.fetch_max_bytes = int(opts.get("fetchmaxbytes", DEFAULT_FETCH_MAX_BYTES))
        self.batch_rows = int(opts.get("batchrows", DEFAULT_BATCH_ROWS))


_UNSUPPORTED_KAFKA_OPTIONS = {
    # KafkaSourceProvider.validateGeneralOptions
    "auto.offset.reset": "\nKafka option 'auto.offset.reset' is not supported.\n"
                         "Instead set the source option 'startingoffsets' to 'earliest' or 'latest'\n"
                         "to specify where to start. Structured Streaming manages which offsets are consumed\n"
                         "internally, rather than relying on the kafkaConsumer to do it. This will ensure that no\n"
                         "data is missed when new topics/partitions are dynamically subscribed. Note that\n"
                         "'startingoffsets' only applies when a new Streaming query is started, and\n"
                         "that resuming will always pick up from where the query left off. See the docs for more\n"
                         "details.\n         ",
    "key.deserializer": "Kafka option 'key.deserializer' is not supported as keys are deserialized as byte arrays "
                        "with ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize the keys.",
    "value.deserializer": "Kafka option 'value.deserializer' is not supported as values are deserialized as byte "
                          "arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize "
                          "the values.",
    "enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported",
    "interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
}


def _check_kafka_options(opts: dict) -> None:
    """The ``kafka.*`` options Spark's Kafka source refuses, refused alike; and read_committed,
    which Spark honours but this source (reading up to the high watermark, aborted records
    included) does not, refused rather than ignored."""
    for name, message in _UNSUPPORTED_KAFKA_OPTIONS.items():
        if f"kafka.{name}" in opts:
            raise ValueError(message)
    level = str(opts.get("kafka.isolation.level", "read_uncommitted")).strip().lower()
    if level != "read_uncommitted":
        raise ValueError(f"kafka.isolation.level {level!r} is not supported: this source reads read_uncommitted")


def _parse_assign(text: str) -> dict[str, set[int]]:
    """``assign``: JSON such as ``{"topicA":[0,1],"topicB":[0,1]}`` (Spark's JsonUtils.partitions)."""
    if not text.strip().startswith("{"):
        raise ValueError(f"No topicpartitions to assign as specified value for option 'assign' is '{text}'")
    try:
        raw = json.loads(text)
        if all(isinstance(parts, list) for parts in raw.values()):
            return {str(t): {int(p) for p in parts} for t, parts in raw.items()}
    except (ValueError, TypeError, AttributeError):
        pass
    raise ValueError(f'Expected e.g. {{"topicA":[0,1],"topicB":[0,1]}}, got {text}')


def _lowered(options) -> dict:
    """The options with their names lower-cased: Spark's option names are case-insensitive."""
    return {str(k).lower(): v for k, v in dict(options).items()}


def _boolean(opts: dict, key: str, default: bool) -> bool:
    """A boolean option as Scala's ``toBoolean`` reads it (true / false in any case)."""
    value = str(opts.get(key, default)).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"option {key} must be true or false, got {opts[key]!r}")
    return value == "true"


def source_options(options: dict, default_topic: str | None = SHARE_GROUP_STATE_TOPIC) -> _Options:
    """The options of a read, validated as ``spark.read.format(...).option(...)`` would."""
    return _Options(options, default_topic)


def plan_ranges(opts: _Options, *, internal_topics: bool = False) -> list[OffsetRange]:
    """The offset ranges of a read, split into input partitions (asks the brokers). As Spark's
    ConsumerStrategy.retrieveAllPartitions, internal topics have no partitions to read unless
    ``internal_topics`` (kshare-share-state, which reads ``__share_group_state``)."""
    ranges = []
    with Cluster(opts.bootstrap) as cluster:
        topics = opts.topics
        if opts.pattern is not None:  # SubscribePatternStrategy: listed topics (not internal) it finds
            topics = sorted(n for n, info in cluster.refresh(None).items()
                            if not info.internal and re.search(opts.pattern, n))
        elif not internal_topics:
            topics = [t for t in topics if not cluster.topic(t).internal]
        bounds = {topic: cluster.offset_bounds(topic) for topic in topics}
        if opts.assign is not None:  # AssignStrategy: those of the partitions that exist
            bounds = {t: tuple({p: o for p, o in b.items() if p in opts.assign[t]} for b in bs)
                      for t, bs in bounds.items()}
        assigned = {(t, p) for t, (_, latest) in bounds.items() for p in latest}
        check_assigned(opts.starting, assigned, "startingOffsets")
        check_assigned(opts.ending, assigned, "endingOffsets")
        starting = _by_timestamp(cluster, opts.starting, bounds, ending=False, no_match_latest=opts.no_match_latest)
        ending = _by_timestamp(cluster, opts.ending, bounds, ending=True, no_match_latest=True)
        for topic, (earliest, latest) in bounds.items():
            start = resolve_offsets(starting, topic, earliest, latest, ending=False)
            end = resolve_offsets(ending, topic, earliest, latest, ending=True)
            for p in sorted(latest):
                # Spark's batch read ("kafka" is in spark.sql.sources.useV1SourceList by default):
                # KafkaSourceRDD.compute and KafkaDataConsumer.get on each range
                ranges.append(bound_range(topic, p, start[p], end[p], earliest[p], latest[p],
                                          fail_on_data_loss=opts.fail_on_data_loss))
    return split_ranges(ranges, opts.max_offsets_per_split, opts.min_partitions)


def _by_timestamp(cluster: Cluster, spec, bounds: dict, *, ending: bool, no_match_latest: bool):
    """``spec`` with timestamps turned into offsets (ListOffsets by timestamp); a timestamp after
    every record gives the log end offset, or for a start without ``no_match_latest`` an error
    (Spark's ``KafkaOffsetReaderAdmin.readTimestampOffsets``)."""
    if not isinstance(spec, Timestamps):
        return spec
    if isinstance(spec.value, dict):
        wanted = {(t, p): ts for t, parts in spec.value.items() for p, ts in parts.items()}
    else:
        wanted = {(t, p): spec.value for t, (_, latest) in bounds.items() for p in latest}
    out: dict[str, dict[int, int]] = {}
    for (t, p), offset in cluster.list_offsets(wanted).items():
        if offset == -1:
            if not ending and not no_match_latest:
                raise ValueError(f"No offset matched from request of topic-partition {t}-{p} "
                                 f"and timestamp {wanted[(t, p)]}.")
            offset = bounds[t][1][p]
        out.setdefault(t, {})[p] = offset
    return out


class _Reader(DataSourceReader):
    internal_topics = True

    def __init__(self, opts: _Options) -> None:
        self.opts = opts

    def partitions(self) -> list[InputPartition]:
        ranges = plan_ranges(self.opts, internal_topics=self.internal_topics)
        return [RangePartition(r) for r in ranges] or [InputPartition(None)]

    def _records(self, partition) -> Iterator:
        r = getattr(partition, "range", None)
        if r is None:
            return
        with Cluster(self.opts.bootstrap) as cluster:
            yield from cluster.read_range(r, max_bytes=self.opts.fetch_max_bytes,
                                          fail_on_data_loss=self.opts.fail_on_data_loss)


class _KafkaReader(_Reader):
    internal_topics = False  # as Spark's Kafka source

    def read(self, partition) -> Iterator[pa.RecordBatch]:
        cols = _KafkaColumns(self.opts.include_headers)
        for header, records in self._records(partition):
            cols.add(partition.range.topic, partition.range.partition, header, records)
            if cols.n >= self.opts.batch_rows:
                yield cols.take()
        if cols.n:
            yield cols.take()


class _ShareStateReader(_Reader):
    def read(self, partition) -> Iterator[pa.RecordBatch]:
        r = getattr(partition, "range", None)
        if r is None:
            return
        yield from read_state_range(self.opts, r)


def read_state_range(opts: _Options, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    """One input partition of ``kshare-share-state``: the state rows of ``r`` as Arrow batches
    of at most ``batchRows`` rows (decoded column-wise from the fetched batches)."""
    rows = StateRowBuilder()
    size = opts.batch_rows
    with Cluster(opts.bootstrap) as cluster:
        for buf, pos, stop, offset, starts in cluster.read_range_raw(r, max_bytes=opts.fetch_max_bytes,
                                                                     fail_on_data_loss=opts.fail_on_data_loss):
            rows.add_raw(r.partition, buf, pos, stop, offset, r.end, starts)
            if rows.n >= size:
                yield from _slices(rows.take(), size)
    if rows.n:
        yield from _slices(rows.take(), size)


def _slices(batch: pa.RecordBatch, size: int) -> Iterator[pa.RecordBatch]:
    """``batch`` in pieces of at most ``size`` rows (zero-copy)."""
    for i in range(0, batch.num_rows, max(1, size)):
        yield batch.slice(i, size)


class KafkaSource(DataSource):
    """``spark.read.format("kshare-kafka")``: the records of any topic."""

    @classmethod
    def name(cls) -> str:
        return "kshare-kafka"

    def schema(self) -> StructType:
        include = _boolean(_lowered(self.options), "includeheaders", False)
        return KAFKA_SCHEMA if include else _KAFKA_SCHEMA_NO_HEADERS

    def reader(self, schema: StructType) -> DataSourceReader:
        return _KafkaReader(_Options(self.options, None))


class ShareStateSource(DataSource):
    """``spark.read.format("kshare-share-state")``: ``__share_group_state`` (or the topic named
    by ``subscribe`` / ``topic``, e.g. a copy) decoded into typed state rows."""

    @classmethod
    def name(cls) -> str:
        return "kshare-share-state"

    def schema(self) -> StructType:
        return STATE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _ShareStateReader(_Options(self.options, SHARE_GROUP_STATE_TOPIC))


class _KafkaColumns:
    """Kafka records as the columns of ``KAFKA_SCHEMA`` (without headers unless
    ``include_headers``; a record without headers has null ones, as in Spark's
    ``KafkaRecordToRowConverter``)."""

    def __init__(self, include_headers: bool = True) -> None:
        self.include_headers = include_headers
        self._reset()

    def _reset(self) -> None:
        self.n = 0
        self.keys: list = []
        self.values: list = []
        self.topics: list = []
        self.partitions: list = []
        self.offsets: list = []
        self.timestamps: list = []
        self.timestamp_types: list = []
        self.header_offsets = [0]
        self.header_keys: list = []
        self.header_values: list = []

    def add(self, topic: str, partition: int, header, records) -> None:
        ts_type = 1 if header.log_append_time else 0
        n = len(records)
        self.topics.extend([topic] * n)
        self.partitions.extend([partition] * n)
        self.timestamp_types.extend([ts_type] * n)
        headers = self.include_headers  # without includeHeaders nothing is collected for them
        hk, hv, ho = self.header_keys, self.header_values, self.header_offsets
        for rec in records:
            self.keys.append(rec.key)
            self.values.append(rec.value)
            self.offsets.append(rec.offset)
            self.timestamps.append(rec.timestamp * 1000)
            if headers:
                for k, v in rec.headers:
                    hk.append(k)
                    hv.append(v)
                ho.append(len(hk))
        self.n += n

    def take(self) -> pa.RecordBatch:
        s = _KAFKA_ARROW_SCHEMA
        arrays = [
            pa.array(self.keys, pa.binary()), pa.array(self.values, pa.binary()),
            pa.array(self.topics, pa.string()), pa.array(self.partitions, pa.int32()),
            pa.array(self.offsets, pa.int64()), pa.array(self.timestamps, s.field("timestamp").type),
            pa.array(self.timestamp_types, pa.int32()),
        ]
        if self.include_headers:
            headers_type = s.field("headers").type
            entry = headers_type.value_type
            ho = np.array(self.header_offsets, np.int32)
            arrays.append(pa.ListArray.from_arrays(
                pa.array(ho), pa.StructArray.from_arrays([pa.array(self.header_keys, entry[0].type),
                                                          pa.array(self.header_values, entry[1].type)],
                                                         fields=list(entry)),
                type=headers_type, mask=pa.array(ho[1:] == ho[:-1])))
        else:
            s = _KAFKA_ARROW_SCHEMA_NO_HEADERS
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=s)


def register(spark) -> None:
    """Make both formats available to ``spark.read.format(...)``."""
    spark.dataSource.register(KafkaSource)
    spark.dataSource.register(ShareStateSource)
