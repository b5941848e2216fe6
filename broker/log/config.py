"""Per-log settings (Kafka's topic-level configs) and how they map to broker-level defaults.

A ``LogConfig`` is built from the broker's ``log.*`` properties overlaid with a topic's own
overrides, exactly as Kafka resolves them, so config code only has to hand over two mappings.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1

PRODUCER = "producer"
# compression.type values (Kafka's BrokerCompressionType) and the codec ids batches carry.
TARGET_CODECS = {"uncompressed": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Settings of one partition log, named after Kafka's topic configs (dots -> underscores)."""

    segment_bytes: int = 1073741824  # segment.bytes
    segment_ms: int = 168 * 3600 * 1000  # segment.ms
    segment_jitter_ms: int = 0  # segment.jitter.ms
    retention_ms: int = 168 * 3600 * 1000  # retention.ms; -1 = keep forever
    retention_bytes: int = -1  # retention.bytes; -1 = no size limit
    index_interval_bytes: int = 4096  # index.interval.bytes
    segment_index_bytes: int = 10485760  # segment.index.bytes
    flush_messages: int = LONG_MAX  # flush.messages
    flush_ms: int | None = None  # flush.ms; None = never flush on a timer
    message_timestamp_type: str = CREATE_TIME  # message.timestamp.type
    cleanup_policy: str = "delete"  # cleanup.policy (comma separated)
    max_compaction_lag_ms: int = LONG_MAX  # max.compaction.lag.ms (rolls compacted topics' segments)
    min_cleanable_ratio: float = 0.5  # min.cleanable.dirty.ratio (when __consumer_offsets is compacted)
    max_message_bytes: int = 1048588  # max.message.bytes (largest batch accepted)
    compression_type: str = PRODUCER  # compression.type
    compression_gzip_level: int = -1  # compression.gzip.level (-1: zlib's default)
    compression_lz4_level: int = 9  # compression.lz4.level
    compression_zstd_level: int = 3  # compression.zstd.level
    # The codec id compression.type names, or -1 for 'producer': resolved once per config so the
    # produce hot path compares two ints instead of looking a name up.
    target_codec: int = field(init=False, default=-1)

    def __post_init__(self) -> None:
        object.__setattr__(self, "target_codec", TARGET_CODECS.get(self.compression_type, -1))

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    def roll_jitter_ms(self) -> int:
        """A new segment's random head start on segment.ms, below min(segment.jitter.ms,
        segment.ms), as Kafka draws one per segment so partitions created together do not all
        roll at once."""
        bound = min(self.segment_jitter_ms, self.segment_ms)
        return random.randrange(bound) if bound > 0 else 0

    @property
    def deletes(self) -> bool:
        """Whether time/size retention applies (``delete`` is in cleanup.policy)."""
        return "delete" in {p.strip() for p in self.cleanup_policy.split(",")}

    @property
    def compacts(self) -> bool:
        """Whether ``compact`` is in cleanup.policy."""
        return "compact" in {p.strip() for p in self.cleanup_policy.split(",")}

    @property
    def max_segment_ms(self) -> int:
        """How long a segment may stay active: segment.ms, or max.compaction.lag.ms if shorter
        on a compacted topic (Kafka's LogConfig.maxSegmentMs)."""
        lag = self.max_compaction_lag_ms  # compared first: this runs on every append
        return lag if 0 < lag < self.segment_ms and self.compacts else self.segment_ms

    @property
    def compression_level(self) -> int | None:
        """The level of ``target_codec`` (None: the codec has no level or uses its default)."""
        codec = self.target_codec
        if codec == GZIP:
            return None if self.compression_gzip_level == -1 else self.compression_gzip_level
        if codec == LZ4:
            return self.compression_lz4_level
        if codec == ZSTD:
            return self.compression_zstd_level
        return None

    def with_overrides(self, topic_props: Mapping[str, Any]) -> LogConfig:
        """This config with topic-level properties (Kafka names, e.g. ``retention.ms``) applied;
        ``internal.segment.bytes``, when set, is the segment size (Kafka's LogConfig.segmentSize)."""
        changes = {}
        for key, value in topic_props.items():
            attr = TOPIC_PROPERTY_TO_FIELD.get(key)
            if attr is not None:
                changes[attr] = _convert(attr, value)
        if topic_props.get("internal.segment.bytes") is not None:
            changes["segment_bytes"] = int(topic_props["internal.segment.bytes"])
        return replace(self, **changes) if changes else self

    @classmethod
    def from_properties(
        cls, broker_props: Mapping[str, Any] = {}, topic_props: Mapping[str, Any] = {}
    ) -> LogConfig:
        """Broker ``log.*`` defaults (with Kafka's hours/minutes fallbacks), then topic overrides."""
        changes: dict[str, Any] = {}
        for topic_key, broker_keys in TOPIC_TO_BROKER_PROPERTIES.items():
            attr = TOPIC_PROPERTY_TO_FIELD[topic_key]
            for broker_key, scale in broker_keys:
                value = broker_props.get(broker_key)
                if value is None or value == "":
                    continue
                value = _convert(attr, value)
                if scale != 1 and value is not None and value >= 0:
                    value *= scale
                changes[attr] = value
                break
        return replace(cls(), **changes).with_overrides(topic_props)

    def to_properties(self) -> dict[str, str]:
        """Topic-level view (DescribeConfigs): Kafka names and string values."""
        out = {}
        for key, attr in TOPIC_PROPERTY_TO_FIELD.items():
            value = getattr(self, attr)
            out[key] = str(LONG_MAX if value is None else value)
        return out


TOPIC_PROPERTY_TO_FIELD: dict[str, str] = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.jitter.ms": "segment_jitter_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "segment.index.bytes": "segment_index_bytes",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "message.timestamp.type": "message_timestamp_type",
    "cleanup.policy": "cleanup_policy",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_ratio",
    "max.message.bytes": "max_message_bytes",
    "compression.type": "compression_type",
    "compression.gzip.level": "compression_gzip_level",
    "compression.lz4.level": "compression_lz4_level",
    "compression.zstd.level": "compression_zstd_level",
}

# Broker property (and multiplier to milliseconds) in Kafka's precedence order, per topic config.
TOPIC_TO_BROKER_PROPERTIES: dict[str, tuple[tuple[str, int], ...]] = {
    "segment.bytes": (("log.segment.bytes", 1),),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", 3600 * 1000)),
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3600 * 1000)),
    "retention.ms": (
        ("log.retention.ms", 1),
        ("log.retention.minutes", 60 * 1000),
        ("log.retention.hours", 3600 * 1000),
    ),
    "retention.bytes": (("log.retention.bytes", 1),),
    "index.interval.bytes": (("log.index.interval.bytes", 1),),
    "segment.index.bytes": (("log.index.size.max.bytes", 1),),
    "flush.messages": (("log.flush.interval.messages", 1),),
    # Kafka's KafkaConfig.logFlushIntervalMs: log.flush.interval.ms, else the flusher's period.
    "flush.ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
    "message.timestamp.type": (("log.message.timestamp.type", 1),),
    "cleanup.policy": (("log.cleanup.policy", 1),),
    "max.compaction.lag.ms": (("log.cleaner.max.compaction.lag.ms", 1),),
    "min.cleanable.dirty.ratio": (("log.cleaner.min.cleanable.ratio", 1),),
    "max.message.bytes": (("message.max.bytes", 1),),
    "compression.type": (("compression.type", 1),),
    "compression.gzip.level": (("compression.gzip.level", 1),),
    "compression.lz4.level": (("compression.lz4.level", 1),),
    "compression.zstd.level": (("compression.zstd.level", 1),),
}

def _convert(attr: str, value: Any) -> Any:
    if attr in ("message_timestamp_type", "cleanup_policy", "compression_type"):
        if isinstance(value, (list, tuple)):
            return ",".join(value)
        return str(value).strip()
    if attr == "min_cleanable_ratio":
        return float(value)
    value = int(value)
    if attr == "flush_ms" and value >= LONG_MAX:
        return None  # Long.MAX_VALUE is how Kafka spells "never"
    return value
