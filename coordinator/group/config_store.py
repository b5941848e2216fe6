"""Group-level config overrides (ConfigResource GROUP), kept in one JSON file.

Kafka keeps them as ConfigRecords in its metadata log; kshare keeps what that log would
replay to: ``{"version": 1, "groups": {group id: {name: value}}}`` in
``kshare-group-configs.json`` in the data directory, replaced atomically (write, fsync,
rename, fsync the directory) on every change, so a crash leaves the old or the new set.

The store only stores: validation against ``configs.validate`` is the caller's job, done
before ``replace``. A group needs no members (or existence) to have configs.
"""

from __future__ import annotations

import json
import logging
import os
from types import MappingProxyType
from typing import Mapping

from broker.config import ConfigError, why_unparsable
from broker.log.checkpoint import write_durably
from protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("kshare.configs")

FILE_NAME = "kshare-group-configs.json"
FORMAT_VERSION = 1
_EMPTY: Mapping[str, str] = MappingProxyType({})


class GroupConfigStore:
    """Overrides by group id. ``data_dir`` None keeps them in memory only (tests)."""

    def __init__(self, data_dir: str | None) -> None:
        self._path = None if data_dir is None else os.path.join(data_dir, FILE_NAME)
        self._groups: dict[str, Mapping[str, str]] = {}
        self._load()

    def _load(self) -> None:
        if self._path is None or not os.path.exists(self._path):
            return
        try:
            with open(self._path, encoding="utf-8") as f:
                data = json.load(f)
            if data.get("version") != FORMAT_VERSION:
                raise ValueError(f"unsupported version {data.get('version')!r}")
            for group_id, props in data.get("groups", {}).items():
                if props:
                    self._groups[group_id] = MappingProxyType({str(k): str(v) for k, v in props.items()})
        except (ValueError, AttributeError, TypeError) as e:
            # The broker must not start and later overwrite it.
            raise ConfigError(f"{self._path} is damaged ({why_unparsable(e)}); restore it from a backup, or remove "
                              "it to reset every group's configs") from None

    def _save(self, groups: Mapping[str, Mapping[str, str]]) -> None:
        if self._path is None:
            return
        body = {"version": FORMAT_VERSION,
                "groups": {g: dict(sorted(p.items())) for g, p in sorted(groups.items())}}
        try:
            write_durably(self._path, json.dumps(body, indent=1).encode())
        except OSError as e:  # a full disk: nothing changed, the request gets KAFKA_STORAGE_ERROR
            log.error("cannot write %s: %s", self._path, e)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"Cannot write the group configs: {e}") from None

    def get(self, group_id: str) -> Mapping[str, str]:
        """The group's overrides (read-only; empty when none are set)."""
        return self._groups.get(group_id, _EMPTY)

    def replace(self, group_id: str, props: Mapping[str, str]) -> bool:
        """Make ``props`` the group's whole override set (empty removes the group) and
        persist it before returning; returns whether anything changed."""
        new = {str(k): str(v) for k, v in props.items()}
        if dict(self.get(group_id)) == new:
            return False
        groups = dict(self._groups)
        if new:
            groups[group_id] = MappingProxyType(new)
        else:
            del groups[group_id]
        self._save(groups)  # the file first: a failed write changes nothing
        self._groups = groups
        return True

    def group_ids(self) -> list[str]:
        return sorted(self._groups)
