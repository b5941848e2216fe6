"""The GROUP (32) config resource: group-level configs for DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs, stored by the group coordinator's runtime.

Kafka 4.2 behaviour: any group name but the empty one works, whether or not the group exists
(empty: INVALID_REQUEST, with ConfigHelper's message to a describe and the controller's to an
alteration); describe lists every group config with its source and synonyms
(``coordinator.group.configs.describe``); an alteration is validated as the group's complete
new set against the broker's ``group.*`` bounds and refused whole with INVALID_CONFIG (unknown
names, bad values, out of bounds). None of the group configs is a list, so APPEND / SUBTRACT
are refused as the controller refuses them for any non-list key. Importing this module
registers the provider.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.group import configs as group_configs
from protocol.errors import ErrorCode, KafkaError

from .config_resources import GROUP, AlterOp, ConfigEntry, apply_ops, register_provider

if TYPE_CHECKING:
    from coordinator.group.runtime import GroupCoordinatorRuntime

    from .broker import Broker


def _runtime(broker: Broker) -> GroupCoordinatorRuntime:
    runtime = getattr(broker, "group_coordinator", None)
    if runtime is None:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Unsupported resource type: GROUP")
    return runtime


def _check_name(name: str, message: str) -> None:
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, message)


def _no_list_type(name: str) -> None:
    return None


class GroupConfigProvider:
    def describe(self, broker: Broker, name: str, keys: list[str] | None) -> list[ConfigEntry]:
        _check_name(name, "Group name must not be empty")
        cfg = broker.config
        # All the broker's properties, not only group.*: Kafka 4.2 lists a bare group config
        # name set in the properties file as a synonym.
        entries = group_configs.describe(
            _runtime(broker).group_configs(name), cfg.static,
            include_synonyms=True, include_docs=True, names=keys,
            dynamic_broker_config=cfg.dynamic, dynamic_default_broker_config=cfg.dynamic_default,
        )
        return [
            ConfigEntry(e.name, e.value, e.source, e.read_only, e.is_sensitive,
                        tuple((s.name, s.value, s.source) for s in e.synonyms), e.config_type, e.documentation)
            for e in entries
        ]

    def _replace(self, broker: Broker, name: str, new: dict[str, str], validate_only: bool) -> None:
        _check_name(name, "Default group resources are not allowed.")
        runtime = _runtime(broker)
        try:
            group_configs.validate(new, runtime.broker_config)
        except group_configs.InvalidConfig as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
        if not validate_only:
            runtime.set_group_configs(name, new)

    def alter(self, broker: Broker, name: str, configs: dict[str, str], validate_only: bool) -> None:
        self._replace(broker, name, dict(configs), validate_only)

    def incremental_alter(self, broker: Broker, name: str, ops: list[AlterOp], validate_only: bool) -> None:
        current = _runtime(broker).group_configs(name)
        new = apply_ops(current, ops, _no_list_type, _no_list_type)
        self._replace(broker, name, new, validate_only)


register_provider(GROUP, GroupConfigProvider())
