"""Broker properties of the group coordinators (``group.share.*``, ``group.consumer.*``,
``group.streams.*``, and the ``offsets.*`` ones the runtime reads): names, types, defaults
and ranges as in Kafka 4.2.

This table is the single source of truth: the broker's config module imports it, and
the group-level configs (``configs.py``) take their defaults and bounds from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@dataclass(frozen=True, slots=True)
class BrokerConfigDef:
    name: str
    type: str  # "int" | "boolean" | "list"
    default: int | bool | str
    min: int | None = None
    max: int | None = None
    internal: bool = False
    doc: str = ""


def _int(name, default, lo=None, hi=None, doc="", internal=False) -> BrokerConfigDef:
    return BrokerConfigDef(name, "int", default, lo, hi, internal, doc)


GROUP_BROKER_CONFIGS: tuple[BrokerConfigDef, ...] = (
    # Share groups: membership (GroupCoordinatorConfig).
    _int("group.share.session.timeout.ms", 45000, 1,
         doc="Time without a heartbeat after which a share-group member is removed."),
    _int("group.share.min.session.timeout.ms", 45000, 1, doc="Lowest allowed share session timeout."),
    _int("group.share.max.session.timeout.ms", 60000, 1, doc="Highest allowed share session timeout."),
    _int("group.share.heartbeat.interval.ms", 5000, 1,
         doc="Heartbeat interval handed to share-group members."),
    _int("group.share.min.heartbeat.interval.ms", 5000, 1, doc="Lowest allowed share heartbeat interval."),
    _int("group.share.max.heartbeat.interval.ms", 15000, 1, doc="Highest allowed share heartbeat interval."),
    _int("group.share.max.size", 200, 1, 1000, doc="Maximum number of members in one share group."),
    BrokerConfigDef("group.share.assignors", "list", "simple",
                    doc="Server-side assignor of share groups: exactly one, the built-in simple."),
    _int("group.share.initialize.retry.interval.ms", 30000, 1, internal=True,
         doc="How long share-partition initialisation may stay pending before it is retried."),
    # Share groups: delivery (ShareGroupConfig).
    BrokerConfigDef("group.share.enable", "boolean", False, internal=True,
                    doc="Legacy switch; share groups are governed by the share.version feature."),
    _int("group.share.record.lock.duration.ms", 30000, 1000, 3600000,
         doc="How long records stay acquired by a share consumer before they are released."),
    _int("group.share.min.record.lock.duration.ms", 15000, 1000, 30000,
         doc="Lowest allowed record lock duration."),
    _int("group.share.max.record.lock.duration.ms", 60000, 30000, 3600000,
         doc="Highest allowed record lock duration."),
    _int("group.share.delivery.count.limit", 5, 2, 10,
         doc="Deliveries of a record before it is archived."),
    _int("group.share.partition.max.record.locks", 2000, 100, 10000,
         doc="Maximum acquired-but-unacknowledged records per share partition."),
    _int("group.share.max.share.sessions", 2000, 1,
         doc="Maximum share sessions per broker; must be at least group.share.max.size."),
    # Consumer groups (KIP-848), listed because their group-level configs exist in 4.2.
    _int("group.consumer.session.timeout.ms", 45000, 1, doc="Consumer-group session timeout."),
    _int("group.consumer.min.session.timeout.ms", 45000, 1, doc="Lowest allowed consumer session timeout."),
    _int("group.consumer.max.session.timeout.ms", 60000, 1, doc="Highest allowed consumer session timeout."),
    _int("group.consumer.heartbeat.interval.ms", 5000, 1, doc="Consumer-group heartbeat interval."),
    _int("group.consumer.min.heartbeat.interval.ms", 5000, 1,
         doc="Lowest allowed consumer heartbeat interval."),
    _int("group.consumer.max.heartbeat.interval.ms", 15000, 1,
         doc="Highest allowed consumer heartbeat interval."),
    # Streams groups (KIP-1071).
    _int("group.streams.session.timeout.ms", 45000, 1, doc="Streams-group session timeout."),
    _int("group.streams.min.session.timeout.ms", 45000, 1, doc="Lowest allowed streams session timeout."),
    _int("group.streams.max.session.timeout.ms", 60000, 1, doc="Highest allowed streams session timeout."),
    _int("group.streams.heartbeat.interval.ms", 5000, 1, doc="Streams-group heartbeat interval."),
    _int("group.streams.min.heartbeat.interval.ms", 5000, 1,
         doc="Lowest allowed streams heartbeat interval."),
    _int("group.streams.max.heartbeat.interval.ms", 15000, 1,
         doc="Highest allowed streams heartbeat interval."),
    _int("group.streams.num.standby.replicas", 0, 0, doc="Standby replicas per streams task."),
    _int("group.streams.max.standby.replicas", 2, 0, doc="Highest allowed number of standby replicas."),
    _int("group.streams.initial.rebalance.delay.ms", 3000, 0,
         doc="Delay before the first rebalance of a new streams group."),
    # __consumer_offsets, as the group coordinator writes and loads it (GroupCoordinatorConfig);
    # its partition count and segment size are the broker's offsets.topic.* properties.
    _int("offsets.topic.compression.codec", 0,
         doc="Compression codec for the offsets topic - compression may be used to achieve \"atomic\" commits."),
    _int("offsets.load.buffer.size", 5 * 1024 * 1024, 1,
         doc="Batch size for reading from the offsets segments when loading group metadata into the cache."),
)

BROKER_CONFIG_DEFS: dict[str, BrokerConfigDef] = {d.name: d for d in GROUP_BROKER_CONFIGS}

_INT_RE = re.compile(r"[+-]?[0-9]+")
_JAVA_DIGITS = re.compile(r"[+-]?\d+")
_JAVA_WHITESPACE = "".join(chr(c) for c in range(33))


def java_trim(text: str) -> str:
    """``String.trim()``: strips every code point <= U+0020, as Kafka's ConfigDef does."""
    return text.strip(_JAVA_WHITESPACE)


def java_integer(text: str, bits: int = 32) -> int | None:
    """``Integer.parseInt`` (32 bits) / ``Long.parseLong`` (64): a sign and decimal digits (any
    Unicode digit, as Character.digit), in range; None where Java throws NumberFormatException
    (spaces, underscores, overflow)."""
    value = int(text) if _JAVA_DIGITS.fullmatch(text) else None
    return value if value is not None and -2 ** (bits - 1) <= value < 2 ** (bits - 1) else None


def parse_int32(text: str) -> int:
    """``Integer.parseInt`` after trimming; ValueError for anything else."""
    trimmed = java_trim(text)
    if not _INT_RE.fullmatch(trimmed):
        raise ValueError(text)
    value = int(trimmed)
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(text)
    return value


def parse_broker_value(definition: BrokerConfigDef, text: str) -> int | bool | str:
    """Parse and range-check one broker property, with Kafka's ConfigException wording."""
    name = definition.name
    if definition.type == "int":
        try:
            value = parse_int32(text)
        except ValueError:
            raise ValueError(f"Invalid value {text} for configuration {name}: Not a number of type INT") from None
        lo, hi = definition.min, definition.max
        if lo is not None and value < lo:
            raise ValueError(f"Invalid value {value} for configuration {name}: Value must be at least {lo}")
        if hi is not None and value > hi:
            raise ValueError(f"Invalid value {value} for configuration {name}: Value must be no more than {hi}")
        return value
    if definition.type == "boolean":
        trimmed = java_trim(text).lower()
        if trimmed not in ("true", "false"):
            raise ValueError(f"Invalid value {text} for configuration {name}: Expected value to be either true or false")
        return trimmed == "true"
    return java_trim(text)


def broker_value(name: str, broker_config: Mapping[str, str]):
    """The typed value of a broker property: the configured one, else its default."""
    definition = BROKER_CONFIG_DEFS[name]
    text = broker_config.get(name)
    if text is None:
        return definition.default
    return parse_broker_value(definition, text)


def validate_broker_config(broker_config: Mapping[str, str]) -> None:
    """Kafka's start-up checks for these properties, in its order (GroupCoordinatorConfig's
    constructor, then ShareGroupConfig.validate); raises ValueError with its message."""
    for name in broker_config:
        if name in BROKER_CONFIG_DEFS:
            broker_value(name, broker_config)
    assignors = _share_assignors(broker_config)
    for kind in ("consumer", "share", "streams"):
        for what in ("heartbeat.interval.ms", "session.timeout.ms"):
            _check_within(broker_config, f"group.{kind}.{what}", f"group.{kind}.min.{what}", f"group.{kind}.max.{what}")
        if kind == "streams":
            _require(broker_value("group.streams.num.standby.replicas", broker_config)
                     <= broker_value("group.streams.max.standby.replicas", broker_config),
                     "group.streams.num.standby.replicas must be less than or equal to "
                     "group.streams.max.standby.replicas")
        _require(broker_value(f"group.{kind}.heartbeat.interval.ms", broker_config)
                 < broker_value(f"group.{kind}.session.timeout.ms", broker_config),
                 f"group.{kind}.heartbeat.interval.ms must be less than group.{kind}.session.timeout.ms")
        if kind == "share":
            _require(len(assignors) == 1,
                     f"group.share.assignors must contain exactly one assignor, but found {len(assignors)}")
    lock = broker_value("group.share.record.lock.duration.ms", broker_config)
    _require(lock >= broker_value("group.share.min.record.lock.duration.ms", broker_config),
             "group.share.record.lock.duration.ms must be greater than or equal to "
             "group.share.min.record.lock.duration.ms")
    _require(broker_value("group.share.max.record.lock.duration.ms", broker_config) >= lock,
             "group.share.max.record.lock.duration.ms must be greater than or equal to "
             "group.share.record.lock.duration.ms")
    _require(broker_value("group.share.max.share.sessions", broker_config)
             >= broker_value("group.share.max.size", broker_config),
             "group.share.max.share.sessions must be greater than or equal to group.share.max.size")


def _require(condition: bool, message: str) -> None:
    """Kafka's ``Utils.require``: an IllegalArgumentException with the message as it is."""
    if not condition:
        raise ValueError(message)


def _share_assignors(broker_config: Mapping[str, str]) -> list[str]:
    """``group.share.assignors`` as Kafka 4.2 reads it: a non-empty list without duplicates
    (ConfigDef.ValidList.anyNonDuplicateValues), each the built-in "simple" or a class name,
    which kshare cannot load unless it is the simple assignor's own class
    (GroupCoordinatorConfig.shareGroupAssignors)."""
    from broker.config import check_valid_list  # (broker.config imports this module)

    name = "group.share.assignors"
    text = java_trim(broker_config.get(name, "simple"))
    values = [java_trim(v) for v in text.split(",")] if text else []
    check_valid_list(name, values, empty_allowed=False)
    for value in values:
        if value not in _SIMPLE_ASSIGNOR_NAMES:
            raise ValueError(f"Class {value} cannot be found")
    return values


# The built-in assignor's short name, and its class, which Kafka loads by name like any other.
_SIMPLE_ASSIGNOR_NAMES = ("simple", "org.apache.kafka.coordinator.group.assignor.SimpleAssignor")


def _check_within(broker_config, name: str, min_name: str, max_name: str) -> None:
    """GroupCoordinatorConfig's three checks of a value and its bounds, in its order."""
    low, value, high = (broker_value(n, broker_config) for n in (min_name, name, max_name))
    _require(high >= low, f"{max_name} must be greater than or equal to {min_name}")
    _require(value >= low, f"{name} must be greater than or equal to {min_name}")
    _require(value <= high, f"{name} must be less than or equal to {max_name}")
