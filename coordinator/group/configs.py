"""Group-level configs (ConfigResource type GROUP = 32) as Kafka 4.2 defines them.

Pure functions over plain mappings: ``group_props`` is what was set on one group
(name -> string), ``broker_config`` the broker's properties (name -> string). A group
config that is not set takes the broker's ``group.<name>`` value, else the default in
``broker_defaults``; ``share.auto.offset.reset`` and ``share.isolation.level`` have no
broker property and use their own defaults.

Errors carry Kafka's messages; the admin handlers map ``InvalidConfig`` to
INVALID_CONFIG (40).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Union

from .broker_defaults import BROKER_CONFIG_DEFS, broker_value, java_trim, parse_int32

# DescribeConfigs ConfigSource ids
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
SOURCE_GROUP = 8

# DescribeConfigs ConfigType ids
TYPE_BOOLEAN = 1
TYPE_STRING = 2
TYPE_INT = 3

AutoOffsetReset = Union[str, tuple]  # "latest" | "earliest" | ("by_duration", ms)


class InvalidConfig(ValueError):
    """A group config Kafka would reject with INVALID_CONFIG; ``str()`` is its message."""


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    name: str
    type: str  # "int" | "string"
    default: int | str  # used when there is no broker synonym
    min: int | None = None
    valid_strings: tuple[str, ...] = ()
    check: Callable[[str, str], None] | None = None  # extra validator for strings
    doc: str = ""

    @property
    def broker_synonym(self) -> str | None:
        name = "group." + self.name
        return name if name in BROKER_CONFIG_DEFS else None

    @property
    def type_id(self) -> int:
        return TYPE_INT if self.type == "int" else TYPE_STRING


# --- share.auto.offset.reset ---------------------------------------------------------

_ISO_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE,
)
_LONG_MAX = 2**63 - 1


def parse_iso_duration_ms(text: str) -> int:
    """Milliseconds of an ISO-8601 duration as ``java.time.Duration.parse`` reads it
    (``PnDTnHnMn.nS``, signs allowed per part); ValueError when invalid or negative."""
    match = _ISO_DURATION.fullmatch(text)
    if not match or match.group(3) in ("T", "t"):
        raise ValueError(text)
    sign, days, hours, minutes, seconds, fraction = match.group(1, 2, 4, 5, 6, 7)
    if days is None and hours is None and minutes is None and seconds is None:
        raise ValueError(text)
    total_seconds = 0
    for number, unit in ((days, 86400), (hours, 3600), (minutes, 60), (seconds, 1)):
        if number is not None:
            part = int(number)
            if abs(part) > _LONG_MAX or abs(part * unit) > _LONG_MAX:
                raise ValueError(text)
            total_seconds += part * unit
            if abs(total_seconds) > _LONG_MAX:
                raise ValueError(text)
    nanos = int((fraction or "").ljust(9, "0")) if fraction is not None else 0
    if seconds is not None and seconds.startswith("-"):
        nanos = -nanos
    total_nanos = total_seconds * 1_000_000_000 + nanos
    if sign == "-":
        total_nanos = -total_nanos
    if total_nanos < 0:
        raise ValueError(text)
    return total_nanos // 1_000_000


def parse_auto_offset_reset(text: str) -> AutoOffsetReset:
    """``latest`` | ``earliest`` | ``("by_duration", ms)``; ValueError otherwise (case matters)."""
    if text in ("latest", "earliest"):
        return text
    if text.startswith("by_duration:"):
        return ("by_duration", parse_iso_duration_ms(text[len("by_duration:"):]))
    raise ValueError(text)


def _check_auto_offset_reset(name: str, value: str) -> None:
    try:
        parse_auto_offset_reset(value)
    except ValueError:
        raise InvalidConfig(
            f"Invalid value {value} for configuration {name}: Invalid value `{value}` for configuration "
            f"{name}. The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'."
        ) from None


# --- the Kafka 4.2 group config list, in Kafka's definition order ------------------------

def _int(name: str, minimum: int, doc: str) -> GroupConfigDef:
    return GroupConfigDef(name, "int", BROKER_CONFIG_DEFS["group." + name].default, minimum, doc=doc)


GROUP_CONFIGS: tuple[GroupConfigDef, ...] = (
    _int("consumer.session.timeout.ms", 1,
         "How long a consumer-group member may go without a heartbeat before it is removed."),
    _int("consumer.heartbeat.interval.ms", 1, "The heartbeat interval given to consumer-group members."),
    _int("share.session.timeout.ms", 1,
         "How long a share-group member may go without a heartbeat before it is removed."),
    _int("share.heartbeat.interval.ms", 1, "The heartbeat interval given to share-group members."),
    _int("share.record.lock.duration.ms", 1000,
         "How long records delivered to a share-group member stay locked before they are released."),
    GroupConfigDef(
        "share.auto.offset.reset", "string", "latest", check=_check_auto_offset_reset,
        doc="Where a share partition starts when it has no state: 'earliest', 'latest', or "
            "'by_duration:<ISO-8601 duration>' (the first record no older than now minus the duration; "
            "the duration must not be negative).",
    ),
    GroupConfigDef(
        "share.isolation.level", "string", "read_uncommitted",
        valid_strings=("read_committed", "read_uncommitted"),
        doc="Whether a share group delivers only committed transactional records (read_committed) "
            "or all records (read_uncommitted). Non-transactional records are always delivered.",
    ),
    _int("streams.session.timeout.ms", 1,
         "How long a streams-group member may go without a heartbeat before it is removed."),
    _int("streams.heartbeat.interval.ms", 1, "The heartbeat interval given to streams-group members."),
    _int("streams.num.standby.replicas", 0, "The number of standby replicas for each streams task."),
    _int("streams.initial.rebalance.delay.ms", 0,
         "How long a new streams group waits before its first rebalance."),
)

GROUP_CONFIG_DEFS: dict[str, GroupConfigDef] = {d.name: d for d in GROUP_CONFIGS}


def config_names() -> list[str]:
    return [d.name for d in GROUP_CONFIGS]


# --- parsing ----------------------------------------------------------------------------

def _parse(definition: GroupConfigDef, raw) -> int | str:
    """ConfigDef.parseValue: type conversion, then the validator, with Kafka's messages."""
    name = definition.name
    if raw is None:
        raise InvalidConfig(f"Invalid value null for configuration {name}: Value must not be null")
    if definition.type == "int":
        try:
            value = parse_int32(str(raw))
        except ValueError:
            raise InvalidConfig(f"Invalid value {raw} for configuration {name}: Not a number of type INT") from None
        if definition.min is not None and value < definition.min:
            raise InvalidConfig(f"Invalid value {value} for configuration {name}: Value must be at least {definition.min}")
        return value
    value = java_trim(str(raw))
    if definition.valid_strings and value not in definition.valid_strings:
        raise InvalidConfig(
            f"Invalid value {value} for configuration {name}: String must be one of: "
            + ", ".join(definition.valid_strings)
        )
    if definition.check is not None:
        definition.check(name, value)
    return value


def _broker_default(definition: GroupConfigDef, broker_config: Mapping[str, str]) -> int | str:
    synonym = definition.broker_synonym
    return broker_value(synonym, broker_config) if synonym else definition.default


def _merged(group_props: Mapping[str, str], broker_config: Mapping[str, str]) -> dict[str, int | str]:
    values: dict[str, int | str] = {}
    for definition in GROUP_CONFIGS:
        if definition.name in group_props:
            values[definition.name] = _parse(definition, group_props[definition.name])
        else:
            values[definition.name] = _broker_default(definition, broker_config)
    return values


# --- validate ---------------------------------------------------------------------------

def validate(group_props: Mapping[str, str], broker_config: Mapping[str, str]) -> None:
    """Check a group's complete new config (existing props with the alterations applied).

    Raises ``InvalidConfig`` with Kafka's message: unknown names first, then per-config
    type and range checks, then the bounds given by the broker's min/max properties and
    session timeout > heartbeat interval. Unset configs take their broker-derived value.
    """
    for name in group_props:
        if name not in GROUP_CONFIG_DEFS:
            raise InvalidConfig(f"Unknown group config name: {name}")
    v = _merged(group_props, broker_config)

    def bound(name: str, low: str | None, high: str | None) -> None:
        if low is not None and v[name] < broker_value(low, broker_config):
            raise InvalidConfig(f"{name} must be greater than or equal to {low}")
        if high is not None and v[name] > broker_value(high, broker_config):
            raise InvalidConfig(f"{name} must be less than or equal to {high}")

    for kind in ("consumer", "share"):
        bound(f"{kind}.heartbeat.interval.ms", f"group.{kind}.min.heartbeat.interval.ms",
              f"group.{kind}.max.heartbeat.interval.ms")
        bound(f"{kind}.session.timeout.ms", f"group.{kind}.min.session.timeout.ms",
              f"group.{kind}.max.session.timeout.ms")
    bound("share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms",
          "group.share.max.record.lock.duration.ms")
    bound("streams.heartbeat.interval.ms", "group.streams.min.heartbeat.interval.ms",
          "group.streams.max.heartbeat.interval.ms")
    bound("streams.session.timeout.ms", "group.streams.min.session.timeout.ms",
          "group.streams.max.session.timeout.ms")
    bound("streams.num.standby.replicas", None, "group.streams.max.standby.replicas")
    for kind in ("consumer", "share", "streams"):
        if v[f"{kind}.session.timeout.ms"] <= v[f"{kind}.heartbeat.interval.ms"]:
            raise InvalidConfig(f"{kind}.session.timeout.ms must be greater than {kind}.heartbeat.interval.ms")


# --- effective values -------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class EffectiveGroupConfig:
    """Typed values a group runs with. A stored number outside the broker's current min/max
    (the bounds changed after it was set) is used as stored, as Kafka 4.2's
    GroupConfigManager does; the bounds are checked only when a config is altered."""

    share_session_timeout_ms: int
    share_heartbeat_interval_ms: int
    share_record_lock_duration_ms: int
    share_auto_offset_reset: AutoOffsetReset
    share_isolation_level: str
    consumer_session_timeout_ms: int
    consumer_heartbeat_interval_ms: int
    streams_session_timeout_ms: int
    streams_heartbeat_interval_ms: int
    streams_num_standby_replicas: int
    streams_initial_rebalance_delay_ms: int
    # Broker-wide in Kafka 4.2 (no group-level config), resolved here so share-partition
    # leaders read every setting from one place.
    share_delivery_count_limit: int = 5
    share_partition_max_record_locks: int = 2000
    overrides: Mapping[str, str] = field(default_factory=dict)


def effective(group_props: Mapping[str, str], broker_config: Mapping[str, str]) -> EffectiveGroupConfig:
    """The values a group uses now. A stored value that no longer parses (it was valid
    when set) falls back to the broker-derived default rather than breaking the group."""
    values: dict[str, int | str] = {}
    for definition in GROUP_CONFIGS:
        raw = group_props.get(definition.name)
        value = None
        if raw is not None:
            try:
                value = _parse(definition, raw)
            except InvalidConfig:
                value = None
        if value is None:
            value = _broker_default(definition, broker_config)
        values[definition.name] = value
    return EffectiveGroupConfig(
        share_session_timeout_ms=values["share.session.timeout.ms"],
        share_heartbeat_interval_ms=values["share.heartbeat.interval.ms"],
        share_record_lock_duration_ms=values["share.record.lock.duration.ms"],
        share_auto_offset_reset=parse_auto_offset_reset(values["share.auto.offset.reset"]),
        share_isolation_level=values["share.isolation.level"],
        consumer_session_timeout_ms=values["consumer.session.timeout.ms"],
        consumer_heartbeat_interval_ms=values["consumer.heartbeat.interval.ms"],
        streams_session_timeout_ms=values["streams.session.timeout.ms"],
        streams_heartbeat_interval_ms=values["streams.heartbeat.interval.ms"],
        streams_num_standby_replicas=values["streams.num.standby.replicas"],
        streams_initial_rebalance_delay_ms=values["streams.initial.rebalance.delay.ms"],
        share_delivery_count_limit=broker_value("group.share.delivery.count.limit", broker_config),
        share_partition_max_record_locks=broker_value("group.share.partition.max.record.locks", broker_config),
        overrides=dict(group_props),
    )


# --- describe ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One DescribeConfigs result entry for a GROUP resource."""

    name: str
    value: str | None
    source: int
    read_only: bool
    is_sensitive: bool
    config_type: int
    synonyms: list[ConfigSynonym]
    documentation: str | None


def _as_text(value: int | str | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def describe(
    group_props: Mapping[str, str],
    broker_config: Mapping[str, str],
    include_synonyms: bool = False,
    include_docs: bool = False,
    *,
    names: Iterable[str] | None = None,
    dynamic_broker_config: Mapping[str, str] | None = None,
    dynamic_default_broker_config: Mapping[str, str] | None = None,
) -> list[ConfigEntry]:
    """All group configs (or ``names`` among them, unknown ones skipped), sorted by name.

    Kafka 4.2's ConfigHelper.createGroupConfigEntry: the first synonym is the config itself,
    source GROUP_CONFIG (8) when set on the group, else DEFAULT_CONFIG (5) with the value in
    use (the broker's ``group.<name>`` property, else the config's own default); the entry's
    source is that synonym's. The broker synonyms it looks up are the group config's own name
    among the broker's dynamic (2), dynamic default (3) and static (4) properties (4.2 passes
    the name without the ``group.`` prefix, so they appear only when a properties file sets
    the bare name; the ``group.``-prefixed chain is KAFKA-20289, 4.3). ``broker_config`` holds
    the static properties. Synonyms and documentation are listed only when asked for. Works
    for any group name, existing or not. ``group_props`` are assumed valid (validated when set).
    """
    dynamic = dynamic_broker_config or {}
    dynamic_default = dynamic_default_broker_config or {}
    wanted = set(GROUP_CONFIG_DEFS) if names is None else {n for n in names if n in GROUP_CONFIG_DEFS}
    layered = {**broker_config, **dynamic_default, **dynamic}
    entries = []
    for name in sorted(wanted):
        definition = GROUP_CONFIG_DEFS[name]
        if name in group_props:
            value = _as_text(_parse(definition, group_props[name]))
            synonyms = [ConfigSynonym(name, value, SOURCE_GROUP)]
        else:
            value = _as_text(_broker_default(definition, layered))
            synonyms = [ConfigSynonym(name, value, SOURCE_DEFAULT)]
        for layer, source in ((dynamic, SOURCE_DYNAMIC_BROKER), (dynamic_default, SOURCE_DYNAMIC_DEFAULT_BROKER),
                              (broker_config, SOURCE_STATIC_BROKER)):
            if name in layer:
                synonyms.append(ConfigSynonym(name, layer[name], source))
        entries.append(ConfigEntry(
            name=name,
            value=value,
            source=synonyms[0].source,
            read_only=False,
            is_sensitive=False,
            config_type=definition.type_id,
            synonyms=synonyms if include_synonyms else [],
            documentation=definition.doc if include_docs else None,
        ))
    return entries
