"""Config resources for DescribeConfigs, AlterConfigs and IncrementalAlterConfigs.

Each ConfigResource type (TOPIC 2, BROKER 4, BROKER_LOGGER 8, GROUP 32, ...) has one provider
with ``describe``, ``alter`` (AlterConfigs: replace the whole set) and ``incremental_alter``
(SET / DELETE / APPEND / SUBTRACT). Handlers only dispatch by type, so adding GROUP configs is
one ``register_provider(GROUP, ...)`` call from the module that owns them.

Providers raise ``KafkaError``; the handlers put its code and message on that resource only, as
Kafka does (one resource's failure never fails the others, and a resource is altered
all-or-nothing). Messages follow Kafka 4.2: the broker-side pre-processing in
``ConfigAdminManager`` (BROKER, BROKER_LOGGER) and the controller's ``ConfigurationControlManager``
and ``ControllerConfigurationValidator`` (TOPIC).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Protocol

from coordinator.group.broker_defaults import java_integer
from protocol.errors import ErrorCode, KafkaError

from .config import DEFS, LIST, PASSWORD, ConfigError, java_split
from .topic_configs import (
    DEFAULT_CONFIG, DYNAMIC_BROKER_LOGGER_CONFIG, STATIC_BROKER_CONFIG, broker_layers, broker_synonym_names,
    check_log_reconfiguration, describe_topic_configs, parse_typed, render, synonym_entries, topic_config_default,
    topic_config_type, validate_topic_configs,
)
from .topics import validate_topic_name

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("kshare.configs")

# ConfigResource.Type ids
UNKNOWN, TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 0, 2, 4, 8, 16, 32
TYPE_NAMES = {TOPIC: "TOPIC", BROKER: "BROKER", BROKER_LOGGER: "BROKER_LOGGER", CLIENT_METRICS: "CLIENT_METRICS",
              GROUP: "GROUP"}

# IncrementalAlterConfigs operations (AlterConfigOp.OpType)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


@dataclass(frozen=True)
class ConfigEntry:
    """One DescribeConfigs result entry, independent of the wire version."""

    name: str
    value: str | None
    source: int
    read_only: bool = False
    sensitive: bool = False
    synonyms: tuple[tuple[str, str | None, int], ...] = ()  # (name, value, source)
    type: int = 0  # ConfigType id; 0 = UNKNOWN
    doc: str | None = None


@dataclass(frozen=True)
class AlterOp:
    name: str
    op: int
    value: str | None


class ConfigProvider(Protocol):
    def describe(self, broker: Broker, name: str, keys: list[str] | None) -> list[ConfigEntry]: ...

    def alter(self, broker: Broker, name: str, configs: dict[str, str], validate_only: bool) -> None: ...

    def incremental_alter(self, broker: Broker, name: str, ops: list[AlterOp], validate_only: bool) -> None: ...


PROVIDERS: dict[int, ConfigProvider] = {}


def register_provider(resource_type: int, provider: ConfigProvider) -> None:
    if resource_type in PROVIDERS:
        raise ValueError(f"config provider for resource type {resource_type} registered twice")
    PROVIDERS[resource_type] = provider


def provider_for(resource_type: int) -> ConfigProvider:
    """The provider, or Kafka's per-resource INVALID_REQUEST for a type this broker does not serve."""
    provider = PROVIDERS.get(resource_type)
    if provider is None:
        label = TYPE_NAMES.get(resource_type, "UNKNOWN")
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {label}")
    return provider


# --- shared validation of alter requests (ConfigAdminManager.preprocess) -------------------------

def check_alter_entries(names: list[str], null_values: list[str]) -> None:
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    if null_values:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(null_values))


def apply_ops(current: Mapping[str, str], ops: Iterable[AlterOp], type_of: Callable[[str], int | None],
              default_of: Callable[[str], str | None]) -> dict[str, str]:
    """The resource's configs after IncrementalAlterConfigs ``ops`` (Kafka's controller semantics):
    APPEND adds list items not yet present, SUBTRACT removes them; both start from the default
    when the key is unset and require a LIST config."""
    new = dict(current)
    for op in ops:
        if op.op == SET:
            new[op.name] = op.value
        elif op.op == DELETE:
            new.pop(op.name, None)
        elif op.op in (APPEND, SUBTRACT):
            if type_of(op.name) != LIST:
                raise KafkaError(ErrorCode.INVALID_CONFIG,
                                 f"Can't {OP_NAMES[op.op]} to key {op.name} because its type is not LIST.")
            base = new.get(op.name)
            if base is None:
                base = default_of(op.name)
            items = [p for p in (base or "").split(",") if p]
            for value in java_split(op.value, ",") if op.value else [""]:  # Java's "".split(",") is [""]
                if op.op == APPEND:
                    if value not in items:
                        items.append(value)
                elif value in items:
                    items.remove(value)
            new[op.name] = ",".join(items)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {op.op}")
    return new


def check_op_types(ops: Iterable[AlterOp]) -> None:
    for op in ops:
        if op.op not in OP_NAMES:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {op.op}")


# --- TOPIC --------------------------------------------------------------------------------------

class TopicConfigProvider:
    """Topic overrides live in the TopicRegistry; changing them re-resolves the logs' LogConfig."""

    @staticmethod
    def _validate_name(name: str) -> None:
        if not name:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
        validate_topic_name(name)

    def describe(self, broker: Broker, name: str, keys: list[str] | None) -> list[ConfigEntry]:
        validate_topic_name(name)
        topic = broker.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "")
        return [
            ConfigEntry(r.name, r.value, r.source, False, False, r.synonyms, r.type, r.doc)
            for r in describe_topic_configs(topic.configs, broker.config, keys or None)
        ]

    def _replace(self, broker: Broker, name: str, new: dict[str, str], validate_only: bool) -> None:
        self._validate_name(name)
        validate_topic_configs(new, broker.config)
        if broker.topics.get(name) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        if not validate_only:
            broker.topics.set_configs(name, new)
            log.info("set configs of topic %s to %s", name, new)

    def alter(self, broker: Broker, name: str, configs: dict[str, str], validate_only: bool) -> None:
        self._replace(broker, name, dict(configs), validate_only)

    def incremental_alter(self, broker: Broker, name: str, ops: list[AlterOp], validate_only: bool) -> None:
        topic = broker.topics.get(name)
        current = dict(topic.configs) if topic is not None else {}
        new = apply_ops(current, ops, topic_config_type, topic_config_default)
        self._replace(broker, name, new, validate_only)


# --- BROKER -------------------------------------------------------------------------------------

def _broker_type(name: str) -> int | None:
    d = DEFS.get(name)
    return None if d is None else d.type


def _broker_default(name: str) -> str | None:
    d = DEFS.get(name)
    return None if d is None else render(d.type, d.default)


_LISTENER_CONFIG = re.compile(r"listener\.name\.[^.]*\.(.*)")


def _broker_config_type(name: str) -> int | None:
    """Kafka's ``KafkaConfig.configType``: the property's own type, else (for a
    ``listener.name.<listener>.<property>`` override) the base property's; None when unknown."""
    d = DEFS.get(name)
    if d is None and (m := _LISTENER_CONFIG.fullmatch(name)) is not None:
        d = DEFS.get(m.group(1))
    return None if d is None else d.type


def java_parse_int(name: str, word: str) -> int:
    """``Integer.parseInt`` as Kafka reads a broker id (``java_integer``); INVALID_REQUEST otherwise."""
    node = java_integer(name)
    if node is None:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"{word} id must be an integer, but it is: {name}")
    return node


def check_node_id(broker: Broker, name: str) -> None:
    """ConfigAdminManager.validateResourceNameIsCurrentNodeId (Alter*Configs on BROKER)."""
    if java_parse_int(name, "Node") != broker.node_id:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Unexpected broker id, expected {broker.node_id}, but received {name}")


class BrokerConfigProvider:
    """This broker's configs (resource "<node id>") and the cluster defaults (resource "").

    Only properties defined as dynamic may be changed; a change is applied through
    ``BrokerConfig.set_dynamic`` (which re-resolves every topic's LogConfig) and persisted in the
    data directory. Kafka reports invalid broker values as INVALID_REQUEST, not INVALID_CONFIG.
    """

    def describe(self, broker: Broker, name: str, keys: list[str] | None) -> list[ConfigEntry]:
        cfg = broker.config
        if name:
            if java_parse_int(name, "Broker") != broker.node_id:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {broker.node_id} "
                                 f"or empty string, but received {name}")
            listed = {n for n, d in DEFS.items() if not d.internal}
            names = sorted(listed | set(cfg.static) | set(cfg.dynamic) | set(cfg.dynamic_default))
        else:
            names = sorted(cfg.dynamic_default)
        if keys:
            wanted = set(keys)
            names = [n for n in names if n in wanted]
        return [self._entry(broker, n, per_broker=bool(name)) for n in names]

    @staticmethod
    def _entry(broker: Broker, name: str, per_broker: bool) -> ConfigEntry:
        cfg = broker.config
        d = DEFS.get(name)
        type_ = _broker_config_type(name)
        # KafkaConfig.maybeSensitive: a property whose type is unknown is treated as sensitive
        # "to be safe", so a password kshare does not define (ssl.keystore.password,
        # sasl.jaas.config from a Kafka server.properties) is never shown.
        sensitive = type_ is None or type_ == PASSWORD
        layers = broker_layers(cfg, name)
        if per_broker:
            value = layers[0][1] if layers else None
        else:  # currentDynamicDefaultConfigs holds the strings as sent: shown unparsed
            value = cfg.dynamic_default.get(name)
        if value is not None and d is not None and per_broker:
            try:
                value = render(d.type, parse_typed(name, d.type, value))
            except ConfigError:
                pass
        synonyms = synonym_entries(cfg, broker_synonym_names(name), name, sensitive)
        if not per_broker:
            synonyms = [s for s in synonyms if s[2] == 3]
        source = synonyms[0][2] if synonyms else DEFAULT_CONFIG
        if d is None and name in cfg.static and not synonyms:
            source = STATIC_BROKER_CONFIG
        return ConfigEntry(
            name=name, value=None if sensitive else value, source=source,
            read_only=d is None or not d.dynamic, sensitive=sensitive, synonyms=tuple(synonyms),
            type=type_ or 0, doc=d.doc if d is not None else None,
        )

    @staticmethod
    def _validate(broker: Broker, name: str, new: Mapping[str, str]) -> None:
        """DynamicBrokerConfig.validate: every name dynamic, every value parses and is in range,
        and the broker's config with them is valid as a whole (validate_only too)."""
        if name:
            check_node_id(broker, name)
        fixed = sorted(k for k in new if k not in DEFS or not DEFS[k].dynamic)
        if fixed:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "Cannot update these configs dynamically: [" + ", ".join(fixed) + "]")
        for key, raw in new.items():
            d = DEFS[key]
            try:
                value = parse_typed(key, d.type, raw)
                d.check(value)
            except ConfigError as e:
                raise KafkaError(ErrorCode.INVALID_REQUEST, str(e)) from None
        try:
            values = broker.config.check_dynamic_layer(new, cluster_default=not name)
        except ConfigError as e:
            raise KafkaError(ErrorCode.INVALID_REQUEST, str(e)) from None
        check_log_reconfiguration(broker.config, new, values, cluster_default=not name)

    @staticmethod
    def _install(broker: Broker, name: str, new: dict[str, str]) -> None:
        cfg = broker.config
        cluster_default = not name
        current = cfg.dynamic_default if cluster_default else cfg.dynamic
        changes: dict[str, str | None] = {k: None for k in current if k not in new}
        changes.update({k: v for k, v in new.items() if current.get(k) != v})
        if not changes:
            return
        try:
            cfg.set_dynamic(changes, cluster_default=cluster_default)
        except ConfigError as e:
            raise KafkaError(ErrorCode.INVALID_REQUEST, str(e)) from None
        try:
            cfg.save_dynamic()
        except OSError as e:  # a full disk: undo the change, which would not survive a restart
            cfg.set_dynamic({k: current.get(k) for k in changes}, cluster_default=cluster_default)
            log.error("cannot persist dynamic broker configs, not changed: %s", e)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"Cannot persist the dynamic configs: {e}") from None
        log.info("dynamic broker configs%s changed: %s", "" if name else " (cluster default)", changes)

    def alter(self, broker: Broker, name: str, configs: dict[str, str], validate_only: bool) -> None:
        self._validate(broker, name, configs)
        if not validate_only:
            self._install(broker, name, dict(configs))

    def incremental_alter(self, broker: Broker, name: str, ops: list[AlterOp], validate_only: bool) -> None:
        if name:
            check_node_id(broker, name)
        cfg = broker.config
        current = cfg.dynamic_default if not name else cfg.dynamic
        for op in ops:
            if op.op in (APPEND, SUBTRACT):
                if op.name not in DEFS:  # prepareIncrementalConfigs' configKeys(name) throws NoSuchElementException
                    raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, None)
                if DEFS[op.name].type != LIST:
                    verb = "append" if op.op == APPEND else "subtract"
                    raise KafkaError(ErrorCode.INVALID_CONFIG,
                                     f"Config value {verb} is not allowed for config key: {op.name}")
        new = apply_ops(current, ops, _broker_type, _broker_default)
        self._validate(broker, name, new)
        if not validate_only:
            self._install(broker, name, new)


# --- BROKER_LOGGER (KIP-412; Python loggers, log4j level names) ----------------------------------

_TO_PY = {"TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
          "ERROR": logging.ERROR, "FATAL": logging.CRITICAL}
VALID_LOG_LEVELS = ("FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE")
# RuntimeLoggerManager lists them sorted by name (LogLevelConfig.VALID_LOG_LEVELS is a HashSet)
VALID_LOG_LEVELS_STRING = ", ".join(sorted(VALID_LOG_LEVELS))
ROOT_LOGGER = "root"


def _level_name(level: int) -> str:
    for name, value in sorted(_TO_PY.items(), key=lambda kv: kv[1]):
        if level <= value:
            return name
    return "FATAL"


def current_loggers() -> dict[str, str]:
    out = {ROOT_LOGGER: _level_name(logging.getLogger().getEffectiveLevel())}
    for name, lg in sorted(logging.root.manager.loggerDict.items()):
        if isinstance(lg, logging.Logger):
            out[name] = _level_name(lg.getEffectiveLevel())
    return out


class BrokerLoggerProvider:
    """Log levels of this broker's loggers; changes are not persisted (as in Kafka)."""

    def describe(self, broker: Broker, name: str, keys: list[str] | None) -> list[ConfigEntry]:
        """Names checked as ConfigHelper.describeConfigs checks them (its own wording, which
        differs from the alter side's)."""
        if not name:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
        if java_parse_int(name, "Broker") != broker.node_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Unexpected broker id, expected {broker.node_id} but received {name}")
        loggers = current_loggers()
        names = [k for k in loggers if not keys or k in keys]
        return [ConfigEntry(n, loggers[n], DYNAMIC_BROKER_LOGGER_CONFIG) for n in names]

    def alter(self, broker: Broker, name: str, configs: dict[str, str], validate_only: bool) -> None:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {BROKER_LOGGER}")

    def incremental_alter(self, broker: Broker, name: str, ops: list[AlterOp], validate_only: bool) -> None:
        # RuntimeLoggerManager.validateResourceNameIsNodeId: an empty name is just not an integer
        if java_parse_int(name, "Node") != broker.node_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Unexpected node id. Expected {broker.node_id}, but received {name}")
        loggers = current_loggers()
        for op in ops:
            if op.op in (SET, DELETE) and op.name not in loggers:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Logger {op.name} does not exist!")
            if op.op == SET and op.value not in VALID_LOG_LEVELS:
                raise KafkaError(ErrorCode.INVALID_CONFIG,
                                 f"Cannot set the log level of {op.name} to {op.value} as it is not a supported "
                                 f"log level. Valid log levels are {VALID_LOG_LEVELS_STRING}")
            if op.op == DELETE and op.name == ROOT_LOGGER:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Removing the log level of the {ROOT_LOGGER} logger is not allowed")
            if op.op in (APPEND, SUBTRACT):
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"{OP_NAMES[op.op]} operation is not allowed for the BROKER_LOGGER resource")
            if op.op not in OP_NAMES:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown operation type {op.op} is not allowed "
                                 "for the BROKER_LOGGER resource")
        if validate_only:
            return
        for op in ops:
            target = logging.getLogger() if op.name == ROOT_LOGGER else logging.getLogger(op.name)
            target.setLevel(_TO_PY[op.value] if op.op == SET else logging.NOTSET)


register_provider(TOPIC, TopicConfigProvider())
register_provider(BROKER, BrokerConfigProvider())
register_provider(BROKER_LOGGER, BrokerLoggerProvider())
