"""Kafka 4.2's topic-level configs: names, types, defaults, validators and broker synonyms.

One table serves CreateTopics (validation, and the effective configs its v5+ response carries),
DescribeConfigs on TOPIC resources, and the Alter*Configs validation. A topic config that Kafka
derives from a broker property lists that property (and its coarser-unit fallbacks, e.g.
``log.retention.ms``/``minutes``/``hours``) as synonyms; the effective value is the topic
override, else the first synonym with a value, else the topic config's own default.

Parsing and range errors use Kafka's ``ConfigException`` wording ("Invalid value X for
configuration Y: ...") because admin tools show them verbatim. The broker properties named as
synonyms are defined in ``broker.config``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from protocol.errors import ErrorCode, KafkaError

from .config import (
    BOOLEAN, DEFS, DOUBLE, INT, LIST, LONG, STRING, BrokerConfig, ConfigDef, ConfigError, check_valid_list, invalid,
    log_retention_ms, parse_typed,
)

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1
INT_MIN = -(1 << 31)

# DescribeConfigs ConfigSource ids
TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 2, 3, 4, 5
DYNAMIC_BROKER_LOGGER_CONFIG = 6

def java_str(value: Any) -> str:
    """How Java's ``toString`` prints a parsed config value (what Kafka puts in messages)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        if value.is_integer() and abs(value) < 1e7:
            return f"{value:.1f}"
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(value) + "]"
    return str(value)


def render(type_: int, value: Any) -> str | None:
    """Kafka's ``ConfigDef.convertToString``: how DescribeConfigs shows a value."""
    if value is None:
        return None
    if type_ == LIST or isinstance(value, list):
        return ",".join(value) if isinstance(value, list) else str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_str(value)
    return str(value)


# --- validators (Kafka's ConfigDef.Range / ValidString / ValidList wording) -----------------------

Validator = Callable[[str, Any], None]


def at_least(lo: int | float) -> Validator:
    def check(name: str, value: Any) -> None:
        if value < lo:
            raise invalid(name, java_str(value), f"Value must be at least {lo}")
    return check


def between(lo: int | float, hi: int | float) -> Validator:
    def check(name: str, value: Any) -> None:
        if value < lo:
            raise invalid(name, java_str(value), f"Value must be at least {lo}")
        if value > hi:
            raise invalid(name, java_str(value), f"Value must be no more than {hi}")
    return check


def one_of(*allowed: str) -> Validator:
    def check(name: str, value: Any) -> None:
        if value not in allowed:
            raise invalid(name, value, "String must be one of: " + ", ".join(allowed))
    return check


def each_one_of(*allowed: str) -> Validator:
    """Kafka 4.2's ConfigDef.ValidList.in (KIP-1161): no repeats, then each item non-empty and allowed."""
    return lambda name, values: check_valid_list(name, values, allowed)


def _gzip_level(name: str, value: int) -> None:
    if value > 9 or (value < 1 and value != -1):
        raise invalid(name, value, "Value must be between 1 and 9 or equal to -1")


_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")


def _throttled_replicas(name: str, values: list[str]) -> None:
    if "".join(values) == "*" or all(_REPLICA.fullmatch(v.strip()) for v in values):
        return
    raise invalid(name, ",".join(values), f"{name} must be the literal '*' or a list of replicas in the following "
                  "format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")


# --- the table ---------------------------------------------------------------------------------

MS_PER_HOUR = 3_600_000
MS_PER_MINUTE = 60_000


@dataclass(frozen=True)
class TopicConfigDef:
    name: str
    type: int
    default: Any  # typed value (the topic config's own default, used when no synonym has a value)
    doc: str
    validator: Validator | None = None
    synonyms: tuple[tuple[str, int], ...] = ()  # (broker property, multiplier to this config's unit)
    internal: bool = False  # ConfigDef.defineInternal: DescribeConfigs lists it only when the topic sets it

    def parse(self, raw: Any) -> Any:
        value = parse_typed(self.name, self.type, raw)
        if value is not None and self.validator is not None:
            self.validator(self.name, value)
        return value

    def render(self, value: Any) -> str | None:
        return render(self.type, value)


def _t(name, type_, default, doc, validator=None, *synonyms) -> TopicConfigDef:
    syns = tuple(s if isinstance(s, tuple) else (s, 1) for s in synonyms)
    return TopicConfigDef(name, type_, default, doc, validator, syns)


_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

# In the order Kafka's LogConfig defines them: ConfigDef.parse validates in that order.
_TOPIC_DEFS: list[TopicConfigDef] = [
    _t("segment.bytes", INT, 1_073_741_824, "Size at which a new segment file is rolled.",
       at_least(1_048_576), "log.segment.bytes"),
    _t("segment.ms", LONG, 604_800_000, "Time after which a segment is rolled even if not full.",
       at_least(1), "log.roll.ms", ("log.roll.hours", MS_PER_HOUR)),
    _t("segment.jitter.ms", LONG, 0, "Largest random jitter subtracted from the segment roll time.",
       at_least(0), "log.roll.jitter.ms", ("log.roll.jitter.hours", MS_PER_HOUR)),
    _t("segment.index.bytes", INT, 10_485_760, "Size of the preallocated offset index of a segment.",
       at_least(4), "log.index.size.max.bytes"),
    _t("flush.messages", LONG, LONG_MAX, "Force an fsync after this many messages have been appended.",
       at_least(1), "log.flush.interval.messages"),
    _t("flush.ms", LONG, LONG_MAX, "Force an fsync once the oldest unflushed message is this old.",
       at_least(0), "log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    _t("retention.bytes", LONG, -1, "Size limit per partition before old segments are deleted; -1 for none.",
       None, "log.retention.bytes"),
    _t("retention.ms", LONG, 604_800_000, "How long segments are kept before deletion; -1 for ever.",
       at_least(-1), "log.retention.ms", ("log.retention.minutes", MS_PER_MINUTE),
       ("log.retention.hours", MS_PER_HOUR)),
    _t("max.message.bytes", INT, 1_048_588, "Largest record batch (after compression) the topic accepts.",
       at_least(0), "message.max.bytes"),
    _t("index.interval.bytes", INT, 4096, "Bytes appended between two offset index entries.",
       at_least(0), "log.index.interval.bytes"),
    _t("delete.retention.ms", LONG, 86_400_000, "How long delete tombstones are kept in compacted topics.",
       at_least(0), "log.cleaner.delete.retention.ms"),
    _t("min.compaction.lag.ms", LONG, 0, "Shortest time a record stays uncompacted.",
       at_least(0), "log.cleaner.min.compaction.lag.ms"),
    _t("max.compaction.lag.ms", LONG, LONG_MAX, "Longest time a record may stay uncompacted.",
       at_least(1), "log.cleaner.max.compaction.lag.ms"),
    _t("file.delete.delay.ms", LONG, 60_000, "Delay before a deleted segment file is removed from disk.",
       at_least(0), "log.segment.delete.delay.ms"),
    _t("min.cleanable.dirty.ratio", DOUBLE, 0.5, "Share of uncompacted log that makes a partition eligible "
       "for compaction.", between(0, 1), "log.cleaner.min.cleanable.ratio"),
    _t("cleanup.policy", LIST, ["delete"],
       "How old segments are cleaned up: 'delete' drops them past retention, 'compact' keeps the last value "
       "per key; both may be listed.", each_one_of("compact", "delete"), "log.cleanup.policy"),
    _t("unclean.leader.election.enable", BOOLEAN, False,
       "Allow an out-of-sync replica to become leader as a last resort.", None, "unclean.leader.election.enable"),
    _t("min.insync.replicas", INT, 1, "In-sync replicas needed to acknowledge an acks=all write.",
       at_least(1), "min.insync.replicas"),
    _t("compression.type", STRING, "producer",
       "Final compression of the topic's batches; 'producer' keeps what the producer sent, 'uncompressed' "
       "stores them uncompressed.", one_of(*_COMPRESSION_TYPES), "compression.type"),
    _t("compression.gzip.level", INT, -1, "Compression level used when compression.type is gzip.",
       _gzip_level, "compression.gzip.level"),
    _t("compression.lz4.level", INT, 9, "Compression level used when compression.type is lz4.",
       between(1, 17), "compression.lz4.level"),
    _t("compression.zstd.level", INT, 3, "Compression level used when compression.type is zstd.",
       between(-131072, 22), "compression.zstd.level"),
    _t("preallocate", BOOLEAN, False, "Preallocate segment files on disk when they are created.",
       None, "log.preallocate"),
    _t("message.timestamp.type", STRING, "CreateTime",
       "Whether record timestamps are the producer's CreateTime or the broker's LogAppendTime.",
       one_of("CreateTime", "LogAppendTime"), "log.message.timestamp.type"),
    _t("message.timestamp.before.max.ms", LONG, LONG_MAX,
       "How far a CreateTime timestamp may lie behind the broker clock.",
       at_least(0), "log.message.timestamp.before.max.ms"),
    _t("message.timestamp.after.max.ms", LONG, 3_600_000,
       "How far a CreateTime timestamp may lie ahead of the broker clock.",
       at_least(0), "log.message.timestamp.after.max.ms"),
    _t("leader.replication.throttled.replicas", LIST, [],
       "Replicas whose replication is throttled on the leader side ('*' for all).", _throttled_replicas),
    _t("follower.replication.throttled.replicas", LIST, [],
       "Replicas whose replication is throttled on the follower side ('*' for all).", _throttled_replicas),
    _t("remote.storage.enable", BOOLEAN, False, "Enable tiered storage for the topic."),
    _t("local.retention.ms", LONG, -2,
       "Local retention time when tiered storage is on; -2 means use retention.ms.",
       at_least(-2), "log.local.retention.ms"),
    _t("local.retention.bytes", LONG, -2,
       "Local size limit per partition when tiered storage is on; -2 means use retention.bytes.",
       at_least(-2), "log.local.retention.bytes"),
    _t("remote.log.copy.disable", BOOLEAN, False,
       "Stop copying segments to tiered storage and make the tiered data read-only."),
    _t("remote.log.delete.on.disable", BOOLEAN, False,
       "Delete the tiered data when tiered storage is turned off for the topic."),
    # Kafka 4.1+ (KAFKA-19080): segment size for tests, below segment.bytes' minimum; wins when set.
    TopicConfigDef("internal.segment.bytes", INT, None, "Segment size that replaces segment.bytes, without its "
                   "1 MiB minimum (meant for tests).", internal=True),
]

TOPIC_CONFIGS: dict[str, TopicConfigDef] = {d.name: d for d in sorted(_TOPIC_DEFS, key=lambda d: d.name)}




# --- broker-side values and synonyms -----------------------------------------------------------

def broker_layers(cfg: BrokerConfig, name: str) -> list[tuple[int, str]]:
    """(source, raw value) of ``name`` in each broker layer that has it, highest precedence first."""
    out = []
    for source, layer in ((DYNAMIC_BROKER_CONFIG, cfg.dynamic), (DYNAMIC_DEFAULT_BROKER_CONFIG, cfg.dynamic_default),
                          (STATIC_BROKER_CONFIG, cfg.static)):
        if name in layer:
            out.append((source, layer[name]))
    d = DEFS.get(name)
    if d is not None and d.default is not None:
        out.append((DEFAULT_CONFIG, broker_render(d, d.default)))
    return out


def broker_render(d: ConfigDef, value: Any) -> str | None:
    return render(d.type, value)


def broker_value(cfg: BrokerConfig, name: str) -> Any:
    """The effective typed value of broker property ``name`` (None when unset without default).

    Resolved from the layers rather than ``cfg[name]`` so properties registered after the config
    object was built (like the synonyms above) still resolve.
    """
    d = DEFS.get(name)
    for source, raw in broker_layers(cfg, name):
        if source == DEFAULT_CONFIG:
            return d.default
        if d is None:
            return raw
        try:
            return d.parse(raw)
        except ConfigError:
            continue  # a static value that never parsed: Kafka would not have started; fall back
    return None


def synonym_entries(cfg: BrokerConfig, names: Iterable[str], primary: str,
                    sensitive: bool = False) -> list[tuple[str, str | None, int]]:
    """Kafka's ``ConfigHelper.configSynonyms``: (name, value, source) by source then synonym order,
    dropping entries before the first one named ``primary`` (so describing ``retention.ms`` with
    only ``log.retention.hours`` set reports no synonym, exactly like Kafka). Every value is null
    when the described entry is ``sensitive``, as Kafka hides the synonyms of a sensitive entry."""
    names = list(names)
    by_source: dict[int, list[tuple[str, str | None, int]]] = {}
    for name in names:
        for source, raw in broker_layers(cfg, name):
            by_source.setdefault(source, []).append((name, None if sensitive else raw, source))
    ordered = [e for s in (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG)
               for e in by_source.get(s, [])]
    for i, entry in enumerate(ordered):
        if entry[0] == primary:
            return ordered[i:]
    return []


BROKER_SYNONYM_GROUPS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


def broker_synonym_names(name: str) -> tuple[str, ...]:
    """Kafka's ``DynamicBrokerConfig.brokerConfigSynonyms`` (without listener prefixes)."""
    for group in BROKER_SYNONYM_GROUPS:
        if name in group:
            return group if name != "log.flush.scheduler.interval.ms" else (name,)
    return (name,)


# --- topic values ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ResolvedConfig:
    name: str
    value: str | None
    source: int
    synonyms: tuple[tuple[str, str | None, int], ...]  # (name, value, source), Kafka's order
    type: int
    doc: str


def _scaled(value: Any, scale: int) -> Any:
    """A synonym's value in the topic config's unit: a plain product, as Kafka's ConfigSynonym
    HOURS_TO_MILLISECONDS / MINUTES_TO_MILLISECONDS (a negative value stays negative)."""
    if scale == 1 or value is None:
        return value
    return value * scale


def effective_topic_value(d: TopicConfigDef, overrides: Mapping[str, str], cfg: BrokerConfig) -> Any:
    """Typed value the topic's log uses: override, else first synonym with a value, else default.

    A negative broker retention (any of its three synonyms) is -1, unlimited, as Kafka's
    ``KafkaConfig.logRetentionTimeMillis`` hands it to the topics' LogConfig."""
    if d.name in overrides:
        return d.parse(overrides[d.name])
    for broker_name, scale in d.synonyms:
        value = broker_value(cfg, broker_name)
        if value is not None:
            value = _scaled(value, scale)
            return -1 if d.name == "retention.ms" and value < 0 else value
    return d.default


def describe_topic_configs(overrides: Mapping[str, str], cfg: BrokerConfig,
                           names: Iterable[str] | None = None) -> list[ResolvedConfig]:
    """DescribeConfigs entries for a topic (Kafka's ``ConfigHelper.createTopicConfigEntry``)."""
    wanted = TOPIC_CONFIGS if names is None else [n for n in dict.fromkeys(names) if n in TOPIC_CONFIGS]
    out = []
    for name in wanted:
        d = TOPIC_CONFIGS[name]
        if d.internal and name not in overrides:  # ConfigHelper.allConfigs: nonInternalValues + originals
            continue
        value = d.render(effective_topic_value(d, overrides, cfg))
        synonyms: list[tuple[str, str | None, int]] = []
        if d.synonyms:
            primary = d.synonyms[0][0]
            synonyms = synonym_entries(cfg, broker_synonym_names(primary), primary)
        if name in overrides:
            synonyms.insert(0, (name, value, TOPIC_CONFIG))
        source = synonyms[0][2] if synonyms else DEFAULT_CONFIG
        out.append(ResolvedConfig(name, value, source, tuple(synonyms), d.type, d.doc))
    return out


def creation_topic_configs(overrides: Mapping[str, str], cfg: BrokerConfig) -> list[tuple[str, str | None, int]]:
    """(name, value, source) for CreateTopics v5+, Kafka's ``KafkaConfigSchema`` resolution:
    topic override, else the first broker layer holding any synonym, else the topic default."""
    out = []
    for name, d in TOPIC_CONFIGS.items():
        if name in overrides:
            out.append((name, d.render(d.parse(overrides[name])), TOPIC_CONFIG))
            continue
        found = None
        for source, layer in ((DYNAMIC_BROKER_CONFIG, cfg.dynamic), (DYNAMIC_DEFAULT_BROKER_CONFIG, cfg.dynamic_default),
                              (STATIC_BROKER_CONFIG, cfg.static)):
            for broker_name, scale in d.synonyms:
                if broker_name in layer:
                    try:
                        typed = parse_typed(broker_name, DEFS[broker_name].type if broker_name in DEFS else d.type,
                                            layer[broker_name])
                    except ConfigError:
                        continue
                    found = (name, d.render(_scaled(typed, scale)), source)
                    break
            if found:
                break
        out.append(found or (name, d.render(d.default), DEFAULT_CONFIG))
    return out


# --- validation -------------------------------------------------------------------------------


def validate_topic_configs(configs: Mapping[str, str | None], cfg: BrokerConfig) -> None:
    """Kafka's ``ControllerConfigurationValidator`` + ``LogConfig.validate`` for a topic's full set of
    overrides; raises KafkaError(INVALID_CONFIG) with Kafka's message."""
    nulls = [k for k, v in configs.items() if v is None]
    if nulls:
        raise KafkaError(ErrorCode.INVALID_CONFIG, "Null value not supported for topic configs: " + ",".join(nulls))
    for name in configs:
        if name not in TOPIC_CONFIGS:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
    try:  # in LogConfig's definition order, as ConfigDef.parse goes: its first bad value is reported
        values = {d.name: d.parse(configs[d.name]) for d in _TOPIC_DEFS if d.name in configs}
    except ConfigError as e:
        raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None

    def merged(name: str) -> Any:
        return values[name] if name in values else effective_topic_value(TOPIC_CONFIGS[name], {}, cfg)

    min_lag, max_lag = merged("min.compaction.lag.ms"), merged("max.compaction.lag.ms")
    if min_lag > max_lag:
        raise KafkaError(ErrorCode.INVALID_CONFIG, "conflict topic config setting min.compaction.lag.ms "
                         f"({min_lag}) > max.compaction.lag.ms ({max_lag})")
    if merged("remote.storage.enable") and not broker_value(cfg, "remote.log.storage.system.enable"):
        raise KafkaError(ErrorCode.INVALID_CONFIG, "Tiered Storage functionality is disabled in the broker. "
                         "Topic cannot be configured with remote log storage.")


# Kafka's DynamicLogConfig.reconfigurableConfigs: the broker property each topic config defaults to.
LOG_RECONFIGURABLE = frozenset(d.synonyms[0][0] for d in _TOPIC_DEFS if d.synonyms)


def check_log_reconfiguration(cfg: BrokerConfig, layer: Mapping[str, str], values: Mapping[str, Any], *,
                              cluster_default: bool) -> None:
    """Kafka's DynamicLogConfig.validateReconfiguration, which DynamicBrokerConfig runs only when
    a dynamic change (``layer``, giving ``values``) alters one of ``LOG_RECONFIGURABLE``: a local
    (tiered storage) retention must be neither unlimited nor above a limited retention. Kafka
    wraps the cause, so the client reads only "Invalid dynamic configuration" (INVALID_REQUEST)."""
    old = {**cfg.static, **cfg.dynamic_default, **cfg.dynamic}
    new = {**cfg.static, **layer, **cfg.dynamic} if cluster_default else {**cfg.static, **cfg.dynamic_default, **layer}
    if all(old.get(k) == new.get(k) for k in LOG_RECONFIGURABLE):
        return
    for limit, local in ((log_retention_ms(values), values["log.local.retention.ms"]),
                         (values["log.retention.bytes"], values["log.local.retention.bytes"])):
        if limit >= 0 and local != -2 and (local == -1 or local > limit):
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid dynamic configuration")


def topic_config_type(name: str) -> int | None:
    d = TOPIC_CONFIGS.get(name)
    return None if d is None else d.type


def topic_config_default(name: str) -> str | None:
    """The config's own default as a string (what Kafka's APPEND/SUBTRACT start from)."""
    d = TOPIC_CONFIGS.get(name)
    return None if d is None else d.render(d.default)
