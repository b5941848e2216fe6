"""Broker configuration: Kafka's property names, types and defaults.

Values come from (lowest to highest precedence) the defaults below, a ``server.properties``
file (``--config``), and ``--override key=value`` flags. Unknown names are kept and reported
as they are (Kafka logs them as unused), so a properties file written for Apache Kafka loads.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1

# DescribeConfigs ConfigType ids
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = range(1, 10)
TYPE_NAMES = {BOOLEAN: "boolean", STRING: "string", INT: "int", SHORT: "short", LONG: "long",
              DOUBLE: "double", LIST: "list", CLASS: "class", PASSWORD: "password"}


class ConfigError(ValueError):
    """A property value that does not parse or is out of range (Kafka's ConfigException)."""


def why_unparsable(e: Exception) -> str:
    """Why one of kshare's metadata files did not parse, short enough for the one line the
    broker stops with (the repr of a UnicodeDecodeError carries the whole file)."""
    return f"{type(e).__name__}: {e}"


_INTEGER = re.compile(r"[+-]?[0-9]+")


def invalid(name: str, value: Any, reason: str) -> ConfigError:
    """Kafka's ``ConfigException(name, value, message)`` text."""
    return ConfigError(f"Invalid value {value} for configuration {name}: {reason}")


def check_valid_list(name: str, values: list[str], allowed: tuple[str, ...] = (), *,
                     empty_allowed: bool = True) -> None:
    """Kafka 4.2's ``ConfigDef.ValidList`` (KIP-1161), in its order: a list not empty unless
    ``empty_allowed`` (``anyNonDuplicateValues(false, ...)``), no repeats, then each item not
    empty and, given ``allowed`` (``ValidList.in``), one of them."""
    if not values and not empty_allowed:
        raise ConfigError(f"Configuration '{name}' must not be empty. Valid values include: any non-empty value")
    if len(set(values)) != len(values):
        raise ConfigError(f"Configuration '{name}' values must not be duplicated.")
    for v in values:
        if not v:
            raise ConfigError(f"Configuration '{name}' values must not be empty.")
        if allowed and v not in allowed:
            raise invalid(name, v, "String must be one of: " + ", ".join(allowed))


def parse_typed(name: str, type_: int, raw: Any) -> Any:
    """Kafka's ``ConfigDef.parseType``: a property string to a typed value, or ConfigError."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    if type_ == BOOLEAN:
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise invalid(name, raw, "Expected value to be either true or false")
    if type_ in (INT, SHORT, LONG):
        bits = {INT: 31, SHORT: 15, LONG: 63}[type_]
        if _INTEGER.fullmatch(text):
            value = int(text)
            if -(1 << bits) <= value < (1 << bits):
                return value
        raise invalid(name, raw, f"Not a number of type {TYPE_NAMES[type_].upper()}")
    if type_ == DOUBLE:
        try:
            return float(text)
        except ValueError:
            raise invalid(name, raw, "Not a number of type DOUBLE") from None
    if type_ == LIST:
        return [] if not text else [part.strip() for part in text.split(",")]
    return text


@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: int
    default: Any  # parsed value, or None for "no default" (null)
    doc: str = ""
    at_least: float | None = None
    at_most: float | None = None
    one_of: tuple[str, ...] | None = None
    dynamic: bool = False  # may be changed at run time through (Incremental)AlterConfigs
    internal: bool = False  # Kafka's internal configs: not listed by DescribeConfigs
    validator: Callable[[Any], Any] | None = None  # raises ConfigError for a value the checks above allow

    def parse(self, raw: Any) -> Any:
        """Turn a property string (or already-typed value) into this config's Python value, with
        Kafka's parse messages. A list drops empty entries ("a,,b," is two), as kshare always has."""
        if self.type == LIST and isinstance(raw, str):
            value = [s.strip() for s in raw.split(",") if s.strip()]
        else:
            value = parse_typed(self.name, self.type, raw)
        if value is not None:
            self.check(value)
        return value

    def check(self, value: Any) -> None:
        if self.at_least is not None and value < self.at_least:
            raise ConfigError(
                f"Invalid value {value} for configuration {self.name}: Value must be at least {_num(self.at_least)}"
            )
        if self.at_most is not None and value > self.at_most:
            raise ConfigError(
                f"Invalid value {value} for configuration {self.name}: Value must be no more than {_num(self.at_most)}"
            )
        if self.one_of is not None:
            values = value if isinstance(value, list) else [value]
            for v in values:
                if v not in self.one_of:
                    raise ConfigError(
                        f"Invalid value {v} for configuration {self.name}: String must be one of: "
                        + ", ".join(self.one_of)
                    )
        if self.validator is not None:
            self.validator(value)

    def render(self, value: Any) -> str | None:
        """The string DescribeConfigs shows for a value."""
        if value is None:
            return None
        if self.type == BOOLEAN:
            return "true" if value else "false"
        if self.type == LIST:
            return ",".join(value)
        return str(value)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


_VALID_HOST = re.compile(r"[0-9a-zA-Z\-%._:]*")  # Kafka's Utils.validHostPattern


def java_split(text: str, pattern: str) -> list[str]:
    """Java's ``String.split(regex)`` as Kafka's parsers use it: trailing empty strings are
    dropped (so "" gives no parts here)."""
    parts = re.split(pattern, text)
    while parts and not parts[-1]:
        parts.pop()
    return parts


def parse_ip_overrides(raw: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides`` as Kafka reads it (Csv.parseCsvMap, then the
    addresses checked): ``host:count`` entries split at the last colon (IPv6 addresses keep
    theirs), a later duplicate winning."""
    name = "max.connections.per.ip.overrides"
    out: dict[str, int] = {}
    for entry in java_split(raw, r"\s*,\s*"):
        host, colon, count = entry.rpartition(":")
        count = count.strip()
        if not colon:
            raise ConfigError(f"Error parsing configuration property '{name}': {entry!r} is not host:count")
        if not _INTEGER.fullmatch(count) or not -(1 << 31) <= int(count) < 1 << 31:
            raise ConfigError(f"Error parsing configuration property '{name}': For input string: \"{count}\"")
        out[host.strip()] = int(count)
    invalid = [h for h in out if not _VALID_HOST.fullmatch(h)]
    if invalid:
        raise ConfigError(f"{name} contains invalid addresses : {','.join(invalid)}")
    return out


def _compression_type_id(value: int) -> None:
    """Kafka's ``CompressionType.forId``, which ShareCoordinatorConfig calls at start-up (the
    property itself has no range)."""
    if not 0 <= value <= 4:
        raise ConfigError(f"Unknown compression type id: {value}")


def _d(name, type_, default, doc="", **kw) -> ConfigDef:
    return ConfigDef(name, type_, default, doc, **kw)


_DEFS: list[ConfigDef] = [
    # --- identity and networking ---------------------------------------------------------
    _d("node.id", INT, 1, "The node id of this broker (stored in meta.properties).", at_least=0),
    # Kafka's KafkaConfig.populateSynonyms makes either of node.id and broker.id set the other.
    _d("broker.id", INT, 1, "The broker id: node.id's synonym (either sets the other; set both, they must agree)."),
    _d("listeners", LIST, ["PLAINTEXT://127.0.0.1:9092"], "Listener URIs the broker binds to."),
    _d("advertised.listeners", LIST, None, "Listeners published to clients; defaults to listeners."),
    # LIST since Kafka 4.2 (KIP-1161), without repeats; log.dirs may be unset (null), not empty.
    _d("log.dirs", LIST, None, "The data directory (kshare uses the first entry).",
       validator=lambda v: check_valid_list("log.dirs", v, empty_allowed=False)),
    _d("log.dir", LIST, ["/tmp/kafka-logs"], "The data directory, used when log.dirs is not set.",
       validator=lambda v: check_valid_list("log.dir", v, empty_allowed=False)),
    _d("socket.request.max.bytes", INT, 104857600, "The largest request the broker accepts.", at_least=1),
    _d("socket.send.buffer.bytes", INT, 102400, "SO_SNDBUF of accepted sockets (-1: OS default)."),
    _d("socket.receive.buffer.bytes", INT, 102400, "SO_RCVBUF of accepted sockets (-1: OS default)."),
    _d("connections.max.idle.ms", LONG, 600000, "Idle connections are closed after this long."),
    _d("failed.authentication.delay.ms", INT, 100, "Accepted for compatibility: kshare has no authentication to "
       "fail.", at_least=0),
    _d("max.connections", INT, INT_MAX, "Connections accepted at once.", at_least=0, dynamic=True),
    _d("max.connections.per.ip", INT, INT_MAX, "Connections accepted at once from one address.", at_least=0,
       dynamic=True),
    _d("max.connections.per.ip.overrides", STRING, "", "Per-address exceptions to max.connections.per.ip, "
       "e.g. hostName:100,127.0.0.1:200.", dynamic=True, validator=parse_ip_overrides),
    _d("num.network.threads", INT, 3, "Accepted for compatibility; kshare runs one event loop.", at_least=1),
    _d("num.io.threads", INT, 8, "Accepted for compatibility; kshare runs one event loop.", at_least=1),
    _d("queued.max.requests", INT, 500, "Accepted for compatibility; a connection has one request in progress "
       "at a time.", at_least=1),
    _d("request.timeout.ms", INT, 30000, "Upper bound for internal waits (e.g. acks=all)."),
    # --- topics -------------------------------------------------------------------------
    _d("auto.create.topics.enable", BOOLEAN, True, "Create unknown topics on metadata requests and produce."),
    _d("delete.topic.enable", BOOLEAN, True, "Whether DeleteTopics is allowed."),
    # Read-only in Kafka 4.2: it is in none of the sets DynamicBrokerConfig.ALL_DYNAMIC_CONFIGS joins.
    _d("num.partitions", INT, 1, "Default partition count of auto-created topics.", at_least=1),
    _d("default.replication.factor", INT, 1, "Default replication factor of auto-created topics."),
    _d("min.insync.replicas", INT, 1, "Minimum in-sync replicas for acks=all.", at_least=1, dynamic=True),
    _d("message.max.bytes", INT, 1048588, "Largest record batch size allowed.", at_least=0, dynamic=True),
    _d("compression.type", STRING, "producer", "Final compression of topics.",
       one_of=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), dynamic=True),
    _d("fetch.max.bytes", INT, 57671680, "Largest fetch response the broker builds.", at_least=1024),
    _d("offsets.topic.num.partitions", INT, 50, "Partitions of __consumer_offsets.", at_least=1),
    _d("offsets.topic.replication.factor", SHORT, 3,
       "Replication factor of __consumer_offsets (capped at the number of brokers, i.e. 1).", at_least=1),
    _d("offsets.topic.segment.bytes", INT, 104857600, "Segment size of __consumer_offsets.", at_least=1),
    # --- log ----------------------------------------------------------------------------
    # At least 1 MiB since Kafka 4.0 (KIP-1030), as the topic-level segment.bytes.
    _d("log.segment.bytes", INT, 1073741824, "Segment file size.", at_least=1_048_576, dynamic=True),
    _d("log.roll.ms", LONG, None, "Roll a segment after this long (overrides log.roll.hours).", dynamic=True),
    _d("log.roll.hours", INT, 168, "Roll a segment after this many hours.", at_least=1),
    _d("log.retention.ms", LONG, None, "Delete segments older than this (-1: forever).", dynamic=True),
    _d("log.retention.minutes", INT, None, "Retention in minutes (when log.retention.ms is unset)."),
    _d("log.retention.hours", INT, 168, "Retention in hours (when the finer settings are unset)."),
    _d("log.retention.bytes", LONG, -1, "Delete old segments above this size per partition.", dynamic=True),
    _d("log.retention.check.interval.ms", LONG, 300000, "How often retention runs.", at_least=1),
    _d("log.initial.task.delay.ms", LONG, 30000, "Delay of the first retention check and checkpoint after "
       "a start.", at_least=0, internal=True),
    _d("log.index.interval.bytes", INT, 4096, "Bytes between offset index entries.", at_least=0, dynamic=True),
    _d("log.index.size.max.bytes", INT, 10485760, "Maximum index file size.", at_least=4, dynamic=True),
    _d("log.flush.interval.messages", LONG, LONG_MAX,
       "fsync after this many messages; 1 makes every acknowledged produce durable.", at_least=1, dynamic=True),
    _d("log.flush.interval.ms", LONG, None, "fsync at least this often (unset: never).", dynamic=True),
    _d("log.flush.scheduler.interval.ms", LONG, LONG_MAX, "How often the flusher checks logs."),
    _d("log.flush.offset.checkpoint.interval.ms", INT, 60000, "How often recovery points are saved.", at_least=0),
    _d("log.message.timestamp.type", STRING, "CreateTime", "Timestamp type of new topics.",
       one_of=("CreateTime", "LogAppendTime"), dynamic=True),
    _d("log.message.timestamp.before.max.ms", LONG, LONG_MAX,
       "Largest accepted age of a record timestamp.", at_least=0, dynamic=True),
    _d("log.message.timestamp.after.max.ms", LONG, 3600000,
       "Largest accepted lead of a record timestamp over the broker clock.", at_least=0, dynamic=True),
    _d("log.cleanup.policy", LIST, ["delete"], "Cleanup policy of new topics.", one_of=("delete", "compact"),
       dynamic=True),
    # Kafka's other log.* broker properties: defaults of topic configs kshare accepts as-is.
    ConfigDef("log.roll.jitter.ms", LONG, None, "Largest roll jitter for new segments (ms).", dynamic=True),
    ConfigDef("log.roll.jitter.hours", INT, 0, "Largest roll jitter for new segments (hours).", at_least=0),
    ConfigDef("log.cleaner.delete.retention.ms", LONG, 86_400_000, "Default delete.retention.ms.",
              at_least=0, dynamic=True),
    ConfigDef("log.cleaner.min.compaction.lag.ms", LONG, 0, "Default min.compaction.lag.ms.", at_least=0,
              dynamic=True),
    ConfigDef("log.cleaner.max.compaction.lag.ms", LONG, LONG_MAX, "Default max.compaction.lag.ms.", at_least=1,
              dynamic=True),
    ConfigDef("log.cleaner.min.cleanable.ratio", DOUBLE, 0.5, "Default min.cleanable.dirty.ratio; also when "
              "__consumer_offsets is compacted.", at_least=0, at_most=1, dynamic=True),
    _d("log.cleaner.enable", BOOLEAN, True, "Compact __consumer_offsets and run compacted topics' retention "
       "(kshare compacts no other topic)."),
    _d("log.cleaner.backoff.ms", LONG, 15_000, "How often __consumer_offsets partitions are checked for "
       "compaction, and compacted topics for retention.", at_least=0, dynamic=True),
    ConfigDef("log.segment.delete.delay.ms", LONG, 60_000, "Default file.delete.delay.ms.", at_least=0,
              dynamic=True),
    ConfigDef("log.preallocate", BOOLEAN, False, "Default preallocate.", dynamic=True),
    ConfigDef("unclean.leader.election.enable", BOOLEAN, False, "Default unclean.leader.election.enable.",
              dynamic=True),
    ConfigDef("compression.gzip.level", INT, -1, "Default compression.gzip.level.", dynamic=True),
    ConfigDef("compression.lz4.level", INT, 9, "Default compression.lz4.level.", at_least=1, at_most=17,
              dynamic=True),
    ConfigDef("compression.zstd.level", INT, 3, "Default compression.zstd.level.", at_least=-131072, at_most=22,
              dynamic=True),
    ConfigDef("log.local.retention.ms", LONG, -2, "Default local.retention.ms.", at_least=-2, dynamic=True),
    ConfigDef("log.local.retention.bytes", LONG, -2, "Default local.retention.bytes.", at_least=-2, dynamic=True),
    ConfigDef("remote.log.storage.system.enable", BOOLEAN, False,
              "Whether tiered storage is enabled on the broker (kshare has none)."),
    _d("max.request.partition.size.limit", INT, 2000,
       "Most partitions one DescribeTopicPartitions response may describe.", at_least=1),
    # --- producers ----------------------------------------------------------------------
    _d("producer.id.expiration.ms", INT, 86400000, "Producer state is kept this long after the last write.",
       at_least=1, dynamic=True),
    _d("producer.id.expiration.check.interval.ms", INT, 600000, "How often idle producer ids are expired.",
       at_least=1, internal=True),
    _d("transactional.id.expiration.ms", INT, 604800000, "Accepted for compatibility.", at_least=1),
    _d("transaction.state.log.num.partitions", INT, 50, "Accepted for compatibility.", at_least=1),
    # --- share coordinator (sizes of __share_group_state) --------------------------------
    _d("share.coordinator.state.topic.num.partitions", INT, 50, "Partitions of __share_group_state.", at_least=1),
    _d("share.coordinator.state.topic.replication.factor", SHORT, 3,
       "Replication factor of __share_group_state (capped at 1).", at_least=1),
    _d("share.coordinator.state.topic.segment.bytes", INT, 104857600, "Segment size of __share_group_state.",
       at_least=1),
    _d("share.coordinator.snapshot.update.records.per.snapshot", INT, 500,
       "ShareUpdate records written per key before a ShareSnapshot.", at_least=0, at_most=500),
    _d("share.coordinator.state.topic.min.isr", SHORT, 2,
       "min.insync.replicas of __share_group_state (a single broker's effective ISR is 1).", at_least=1),
    _d("share.coordinator.state.topic.compression.codec", INT, 0,
       "Compression of __share_group_state batches: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.",
       validator=_compression_type_id),
    _d("share.coordinator.state.topic.prune.interval.ms", INT, 300000,
       "How often the share coordinator deletes superseded __share_group_state records.", at_least=1,
       internal=True),
    _d("share.coordinator.load.buffer.size", INT, 5 * 1024 * 1024,
       "Bytes read at a time while loading __share_group_state.", at_least=1),
    _d("share.coordinator.cold.partition.snapshot.interval.ms", INT, 300000,
       "How often share-partitions whose last snapshot is that old get a fresh one, so that idle "
       "ones do not keep __share_group_state from being pruned.", at_least=1, internal=True),
    _d("share.coordinator.threads", INT, 1, "Accepted for compatibility; kshare runs one event loop.", at_least=1),
    _d("share.coordinator.write.timeout.ms", INT, 5000,
       "Accepted for compatibility: with one replica a write completes when it is appended.", at_least=1),
    _d("share.coordinator.append.linger.ms", INT, -1,
       "Accepted for compatibility: each request's records are appended at once.", at_least=-1),
    _d("share.coordinator.cached.buffer.max.bytes", INT, 1048588, "Accepted for compatibility.",
       at_least=512 * 1024, dynamic=True),
    # kshare's own: checkpoints of the loaded share state, so that a start after a crash
    # reads only the records after the latest one (coordinator.share.checkpoint).
    _d("kshare.share.coordinator.state.checkpoint.interval.ms", INT, 5000,
       "How often due __share_group_state checkpoints are written; 0 writes none.", at_least=0,
       internal=True),
    _d("kshare.share.coordinator.state.checkpoint.min.records", INT, 1000,
       "Records a load would read (at least the partition's key count) before a checkpoint is due.",
       at_least=1, internal=True),
    # kshare's own: which persister share-partition leaders use (in-process, or the state
    # RPCs over a loopback connection, as a multi-broker deployment would).
    _d("kshare.share.persister", STRING, "in-process", "Persister of share-partition leaders.",
       one_of=("in-process", "network"), internal=True),
]

DEFS: dict[str, ConfigDef] = {}


def register(defs: Iterable[ConfigDef]) -> None:
    """Add definitions (other rooms own theirs, e.g. ``group.share.*``); names must be unique."""
    for d in defs:
        if d.name in DEFS:
            raise ValueError(f"duplicate config definition {d.name}")
        DEFS[d.name] = d


register(_DEFS)


def _group_defs() -> list[ConfigDef]:
    """The group coordinator owns its broker properties (group.share.* and friends)."""
    from coordinator.group.broker_defaults import GROUP_BROKER_CONFIGS

    types = {"int": INT, "boolean": BOOLEAN, "list": LIST}
    return [
        ConfigDef(d.name, types[d.type], [d.default] if d.type == "list" else d.default, d.doc,
                  at_least=d.min, at_most=d.max, internal=d.internal)
        for d in GROUP_BROKER_CONFIGS
    ]


register(_group_defs())


_PROPERTIES_WHITESPACE = " \t\f"
_PROPERTIES_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape_properties(text: str) -> str:
    """Java's ``Properties.load`` escapes: \\t \\n \\r \\f, \\uXXXX, and a backslash before
    any other character stands for that character."""
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch if ch != "\\" else "")
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2:i + 6]
            if len(digits) < 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError("Malformed \\uxxxx encoding.")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_PROPERTIES_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def read_properties(path: Path) -> dict[str, str]:
    """Parse a .properties file as Java's ``Properties.load`` does (Kafka's Utils.loadProps): a
    key ends at the first unescaped ``=``, ``:`` or blank (``num.partitions 3`` sets it to 3), a
    line ending in an odd number of backslashes continues on the next, escapes are decoded, and
    a value keeps its trailing blanks (Kafka trims the values of the properties it defines)."""
    props: dict[str, str] = {}
    # Properties.load(InputStream) reads ISO 8859-1 and ends lines at \r, \n or \r\n only
    lines = iter(re.split(r"\r\n|\r|\n", Path(path).read_text(encoding="latin-1")))
    for raw in lines:
        line = raw.lstrip(_PROPERTIES_WHITESPACE)
        if not line or line[0] in "#!":
            continue
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:  # continued: drop the backslash
            line = line[:-1] + next(lines, "").lstrip(_PROPERTIES_WHITESPACE)
        i = 0
        while i < len(line) and line[i] not in "=:" + _PROPERTIES_WHITESPACE:
            i += 2 if line[i] == "\\" else 1
        key, rest = line[:i], line[i:].lstrip(_PROPERTIES_WHITESPACE)
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(_PROPERTIES_WHITESPACE)
        props[_unescape_properties(key)] = _unescape_properties(rest)
    return props


DYNAMIC_CONFIG_FILE = "kshare-dynamic-broker-configs.json"


class BrokerConfig:
    """Resolved broker properties with the source of each (static file/flag or default).

    Dynamic changes (AlterConfigs on the BROKER resource) live in ``dynamic`` (this broker's
    resource, e.g. "1") and ``dynamic_default`` (the cluster-wide resource ""); precedence is
    dynamic > dynamic_default > static > default, as in Kafka. They are persisted in
    ``DYNAMIC_CONFIG_FILE`` in the data directory and reloaded when a config names that
    directory (Kafka keeps them in its metadata log, i.e. also in the data directory).
    """

    def __init__(self, static: Mapping[str, Any] | None = None) -> None:
        self.static: dict[str, str] = {k: str(v) for k, v in (static or {}).items()}
        for name, synonym in (("node.id", "broker.id"), ("broker.id", "node.id")):  # KafkaConfig.populateSynonyms
            if name in self.static and synonym not in self.static:
                self.static[synonym] = self.static[name]
        self.dynamic: dict[str, str] = {}
        self.dynamic_default: dict[str, str] = {}
        self._values: dict[str, Any] = {}
        self._raw: dict[str, str] | None = None  # raw_properties, until the values change
        self._listeners: list[Callable[[set[str]], None]] = []
        self._load_dynamic()
        # Like Kafka's DynamicBrokerConfig, stored dynamic configs the resulting config refuses
        # as a whole (e.g. a check added since) are logged and not applied.
        for layer in ("dynamic", "dynamic_default"):
            try:
                self._resolve()
                return
            except ConfigError as e:
                if getattr(self, layer):
                    logging.getLogger("kshare.config").warning(
                        "ignoring persisted dynamic configs %s: %s", sorted(getattr(self, layer)), e)
                    setattr(self, layer, {})
        self._resolve()

    def _resolve(self) -> None:
        self._values = self._resolved(self.dynamic, self.dynamic_default)
        self._raw = None
        self.listener_max_connections()  # validated at start, as Kafka's listener config
        self.listener_address()  # parsed, then its protocol, before the names are checked, as in Kafka
        self.listener_security_protocol()
        self.check_listener_names()
        self.advertised_address()

    def check_listener_names(self) -> None:
        """KafkaConfig.validateValues for a broker: the inter-broker listener
        (``inter.broker.listener.name``, else the one named after ``security.inter.broker.protocol``,
        AbstractKafkaConfig.getInterBrokerListenerNameAndSecurityProtocol) must be advertised, and every
        advertised listener name must be one of ``listeners``', and there must be one at all
        (validateAdvertisedBrokerListenersNonEmptyForBroker). Names compare upper-cased
        (ListenerName.normalised); those in ``controller.listener.names`` are not broker listeners."""
        def names(uris: list[str]) -> list[str]:
            return list(dict.fromkeys(_listener_name(u) for u in uris))

        listeners = names(self["listeners"])
        controller = self._controller_listener_names()
        advertised = [n for n in names(self["advertised.listeners"] or self["listeners"]) if n not in controller]
        by_name = self.static.get("inter.broker.listener.name")
        by_protocol = self.static.get("security.inter.broker.protocol")
        if by_name is not None and by_protocol is not None:
            raise ConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol should be "
                              "set.")
        inter = (by_name if by_name is not None else by_protocol or "PLAINTEXT").strip().upper()
        roles = {r.strip().lower() for r in (self.static.get("process.roles") or "").split(",")}
        _require(bool(advertised), "There must be at least one broker advertised listener."
                 + (" Perhaps all listeners appear in controller.listener.names?" if "broker" in roles else ""))
        _require(inter in advertised, "inter.broker.listener.name must be a listener name defined in "
                 f"advertised.listeners. The valid options based on currently configured listeners are "
                 f"{','.join(advertised)}")
        _require(set(advertised) <= set(listeners), "advertised.listeners listener names must be equal to or a subset "
                 f"of the ones defined in listeners. Found {','.join(advertised)}. The valid options based on the "
                 f"current configuration are {','.join(listeners)}")

    def _resolved(self, dynamic: Mapping[str, str], dynamic_default: Mapping[str, str]) -> dict[str, Any]:
        """Every property's value with these dynamic layers, or ConfigError as Kafka's KafkaConfig."""
        values = {}
        for name, d in DEFS.items():
            raw = dynamic.get(name, dynamic_default.get(name, self.static.get(name)))
            values[name] = d.default if raw is None else d.parse(raw)
        check_broker_values(values)
        return values

    def check_dynamic_layer(self, layer: Mapping[str, str], *, cluster_default: bool = False) -> dict[str, Any]:
        """The values with ``layer`` as the whole of this broker's (or the cluster-wide) dynamic
        configs, or ConfigError if they would not resolve; changes nothing. A validate_only
        AlterConfigs needs it: Kafka checks the resulting config as a whole whether or not it
        applies it."""
        if cluster_default:
            return self._resolved(self.dynamic, layer)
        return self._resolved(layer, self.dynamic_default)

    def __getitem__(self, name: str) -> Any:
        if name in self._values:
            return self._values[name]
        return self.static.get(name)

    def get(self, name: str, default: Any = None) -> Any:
        v = self[name]
        return default if v is None else v

    def source(self, name: str) -> int:
        """DescribeConfigs ConfigSource: 2 dynamic broker, 3 dynamic default, 4 static, 5 default."""
        if name in self.dynamic:
            return 2
        if name in self.dynamic_default:
            return 3
        if name in self.static:
            return 4
        return 5

    def raw_properties(self) -> dict[str, str]:
        """Every known property as the string Kafka would show (for LogConfig and friends).

        Rendered once per change of the values and copied: each topic's LogConfig starts from
        it, and rendering every property took most of a topic's load at start-up."""
        if self._raw is None:
            out = {}
            for name, d in DEFS.items():
                rendered = d.render(self._values.get(name))
                if rendered is not None:
                    out[name] = rendered
            for name, value in self.static.items():
                out.setdefault(name, value)
            self._raw = out
        return dict(self._raw)

    def set_dynamic(self, changes: Mapping[str, str | None], *, cluster_default: bool = False) -> None:
        """Apply dynamic changes (None deletes one); validates everything before changing anything.

        ``cluster_default`` selects the cluster-wide layer (BROKER resource "") instead of this
        broker's own. Call ``save_dynamic`` afterwards to make the change survive a restart.
        """
        layer = "dynamic_default" if cluster_default else "dynamic"
        old = getattr(self, layer)
        new = dict(old)
        for name, value in changes.items():
            d = DEFS.get(name)
            if d is None or not d.dynamic:
                raise ConfigError(f"Cannot update these configs dynamically: {name}")
            if value is None:
                new.pop(name, None)
            else:
                d.parse(value)
                new[name] = value
        setattr(self, layer, new)
        try:
            self._resolve()
        except ConfigError:
            setattr(self, layer, old)
            self._resolve()
            raise
        changed = set(old.items()) ^ set(new.items())
        for listener in self._listeners:
            listener({k for k, _ in changed})

    def _dynamic_path(self) -> Path | None:
        if not (self.static.get("log.dirs") or self.static.get("log.dir")):
            return None  # no data directory named: nothing to load or persist
        return self.data_dir / DYNAMIC_CONFIG_FILE

    def _load_dynamic(self) -> None:
        """Reload persisted dynamic configs; like Kafka (DynamicBrokerConfig.fromPersistentProps),
        skip (and log) values that no longer parse and properties that are no longer dynamic."""
        path = self._dynamic_path()
        if path is None or not path.exists():
            return
        import json

        try:  # the file stands for Kafka's metadata log: damaged, the broker refuses to start
            data = json.loads(path.read_bytes())
            layers = {key: dict(data.get(key, {})) for key in ("broker", "cluster_default")}
        except (ValueError, TypeError, AttributeError) as e:
            raise ConfigError(f"{path} is damaged ({why_unparsable(e)}); restore it from a backup, or remove it "
                              "to reset the dynamic broker configs") from None
        for layer, key in (("dynamic", "broker"), ("dynamic_default", "cluster_default")):
            kept = {}
            for name, value in layers[key].items():
                d = DEFS.get(name)
                if d is not None and not d.dynamic:
                    logging.getLogger("kshare.config").warning(
                        "ignoring persisted dynamic config %s: it cannot be updated dynamically", name)
                    continue
                try:
                    if d is not None:
                        d.parse(value)
                except ConfigError as e:
                    logging.getLogger("kshare.config").warning("ignoring persisted dynamic config: %s", e)
                    continue
                kept[name] = str(value)
            setattr(self, layer, kept)

    def save_dynamic(self) -> None:
        """Persist both dynamic layers atomically (no-op without a named data directory)."""
        path = self._dynamic_path()
        if path is None:
            return
        import json

        from .log.checkpoint import write_durably

        path.parent.mkdir(parents=True, exist_ok=True)
        body = {"version": 1, "broker": self.dynamic, "cluster_default": self.dynamic_default}
        write_durably(str(path), json.dumps(body, indent=1, sort_keys=True).encode())

    def on_change(self, listener: Callable[[set[str]], None]) -> None:
        self._listeners.append(listener)

    @property
    def data_dir(self) -> Path:
        dirs = self["log.dirs"] or self["log.dir"]
        if isinstance(dirs, str):  # the static text, before the values are resolved
            dirs = DEFS["log.dirs"].parse(dirs)
        return Path(dirs[0])

    def _controller_listener_names(self) -> set[str]:
        return {n.strip().upper() for n in (self.static.get("controller.listener.names") or "").split(",")}

    def served_listener(self) -> str:
        """The one listener kshare opens: the first of ``listeners`` that is not a controller
        listener, as clients of a Kafka broker use only broker listeners (the first entry if all
        are controller ones, which check_listener_names then refuses with Kafka's message)."""
        controller = self._controller_listener_names()
        return next((u for u in self["listeners"] if _listener_name(u) not in controller), self["listeners"][0])

    def listener_address(self) -> tuple[str, int]:
        """(host, port) of the served listener."""
        return parse_listener(self.served_listener())

    def listener_security_protocol(self) -> str:
        """The served listener's security protocol, from ``listener.security.protocol.map`` (or
        Kafka's default map, where each protocol name maps to itself), or ConfigError. kshare has
        no TLS or SASL, so a listener Kafka would secure is refused rather than served in plain
        text without authentication."""
        name = _listener_name(self.served_listener())
        raw = self.static.get("listener.security.protocol.map") or DEFAULT_SECURITY_PROTOCOL_MAP
        protocols = {}
        for item in raw.split(","):
            listener, _, protocol = item.strip().partition(":")
            protocols[listener.strip().upper()] = protocol.strip().upper()
        protocol = protocols.get(name)
        if protocol is None:
            raise ConfigError(f"No security protocol defined for listener {name} "
                              f"(listener.security.protocol.map={raw})")
        if protocol != "PLAINTEXT":
            raise ConfigError(f"Listener {name} uses security protocol {protocol}: kshare serves PLAINTEXT only "
                              "(no TLS or SASL)")
        return protocol

    def listener_config_name(self, name: str) -> str:
        """``listener.name.<listener>.<name>`` for the one listener (Kafka's configPrefix)."""
        return f"listener.name.{_listener_name(self.served_listener()).lower()}.{name}"

    def listener_max_connections(self) -> int:
        """The listener's ``max.connections``, else the broker's: Kafka reads a listener's
        settings with its prefix overriding."""
        raw = self.static.get(self.listener_config_name("max.connections"))
        return self["max.connections"] if raw is None else DEFS["max.connections"].parse(raw)

    def advertised_address(self) -> tuple[str, int]:
        """(host, port) clients are sent to: the entry of ``advertised.listeners`` (else
        ``listeners``) named like the served listener, as Kafka's Metadata answers with the
        endpoint of the listener a request came in on (the served listener's own address if
        none is). As KafkaConfig.validateValues, 0.0.0.0 in any broker entry is refused: no client
        can connect to it."""
        controller = self._controller_listener_names()
        effective = [u for u in self["advertised.listeners"] or self["listeners"]
                     if _listener_name(u) not in controller]  # effectiveAdvertisedBrokerListeners
        endpoints = [(_listener_name(u), parse_listener(u)) for u in effective]
        if any(host == "0.0.0.0" for _, (host, _port) in endpoints):
            raise ConfigError("requirement failed: advertised.listeners cannot use the nonroutable meta-address "
                              "0.0.0.0. Use a routable IP address.")
        served = _listener_name(self.served_listener())
        return next((address for name, address in endpoints if name == served), self.listener_address())


def _require(condition: bool, message: str) -> None:
    """Scala's ``require``, as KafkaConfig.validateValues uses it: its message gets a prefix."""
    if not condition:
        raise ConfigError("requirement failed: " + message)


def log_retention_ms(values: Mapping[str, Any]) -> int:
    """Kafka's ``logRetentionTimeMillis``: log.retention.ms, else minutes, else hours; -1 if negative."""
    retention = values["log.retention.ms"]
    if retention is None:
        minutes = values["log.retention.minutes"]
        retention = minutes * 60_000 if minutes is not None else values["log.retention.hours"] * 3_600_000
    return -1 if retention < 0 else retention


def check_broker_values(values: Mapping[str, Any]) -> None:
    """The cross-property checks of Kafka's ``KafkaConfig.validateValues`` for the properties kshare
    has, in its order; it runs for a start-up config and for the result of a dynamic change."""
    if values["node.id"] != values["broker.id"]:
        raise ConfigError("You must set `node.id` to the same value as `broker.id`.")
    hour = 3_600_000
    roll = values["log.roll.ms"]
    _require((roll if roll is not None else values["log.roll.hours"] * hour) >= 1,
             "log.roll.ms must be greater than or equal to 1")
    jitter = values["log.roll.jitter.ms"]
    _require((jitter if jitter is not None else values["log.roll.jitter.hours"] * hour) >= 0,
             "log.roll.jitter.ms must be greater than or equal to 0")
    _require(log_retention_ms(values) != 0, "log.retention.ms must be unlimited (-1) or, greater than or equal to 1")
    if values["max.connections.per.ip"] == 0:
        _require(bool(values["max.connections.per.ip.overrides"]), "max.connections.per.ip can be set to zero only "
                 "if max.connections.per.ip.overrides property is set.")
    idle, delay = values["connections.max.idle.ms"], values["failed.authentication.delay.ms"]
    if idle >= 0:
        _require(delay < idle, f"failed.authentication.delay.ms={delay} should always be less than "
                 f"connections.max.idle.ms={idle} to prevent failed authentication responses from timing out")


# Kafka's listener.security.protocol.map default (SocketServerConfigs).
DEFAULT_SECURITY_PROTOCOL_MAP = "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"


def _listener_name(uri: str) -> str:
    """``name://host:port`` -> NAME, normalised as Kafka's ListenerName.normalised."""
    return uri.partition("://")[0].strip().upper()


def parse_listener(uri: str) -> tuple[str, int]:
    """``PLAINTEXT://host:port`` -> (host, port); an empty host means all interfaces."""
    _, _, hostport = uri.partition("://")
    host, _, port = hostport.rpartition(":")
    if not port.isdigit():
        raise ConfigError(f"Invalid listener {uri!r}: expected NAME://host:port")
    return host.strip("[]"), int(port)
