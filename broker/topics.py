"""The topic registry: names, ids, partition counts and per-topic config overrides.

It is what Kafka keeps in its KRaft metadata log. kshare keeps it in one JSON file in the data
directory, replaced atomically on every change and written *before* the logs it describes are
created (and after they are removed on deletion), so a crash in between leaves logs the
registry does not know, which start-up removes, rather than a registry entry without logs.

Each topic's JSON text is kept from its last change, so a save joins strings instead of encoding
every topic again: with thousands of topics, encoding them all made each creation cost tens of
milliseconds, and creating N topics cost O(N^2).
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

from protocol.errors import ErrorCode, KafkaError
from protocol.uuids import random_uuid, uuid_from_str, uuid_to_str

from .config import ConfigError, why_unparsable
from .log import LogConfig, LogStore
from .log.checkpoint import write_durably

log = logging.getLogger("kshare.topics")

REGISTRY_FILE = "kshare-topics.json"
MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
CONSUMER_OFFSETS = "__consumer_offsets"
SHARE_GROUP_STATE = "__share_group_state"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS, SHARE_GROUP_STATE, "__transaction_state"})
CLUSTER_METADATA = "__cluster_metadata"  # KRaft's metadata log: Kafka never lets a client create it


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


def validate_topic_name(name: str) -> None:
    """Kafka 4.2's Topic.validate, raising INVALID_TOPIC_EXCEPTION with its messages ("Topic name
    is invalid: " and Topic.detectInvalidTopic's reason). The length is Java's, in UTF-16 units."""
    reason = None
    if not name:
        reason = "the empty string is not allowed"
    elif name in (".", ".."):
        reason = f"'{name}' is not allowed"
    elif len(name.encode("utf-16-le", "surrogatepass")) // 2 > MAX_NAME_LENGTH:
        reason = f"the length of '{name}' is longer than the max allowed length {MAX_NAME_LENGTH}"
    elif not _LEGAL.fullmatch(name):
        reason = f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    if reason is not None:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic name is invalid: {reason}")


def unknown_topic_error(name: str) -> ErrorCode:
    """Kafka's answer for a name it has no topic for: INVALID_TOPIC_EXCEPTION when the name
    could never be a topic (Topic.validate fails), else UNKNOWN_TOPIC_OR_PARTITION."""
    try:
        validate_topic_name(name)
    except KafkaError:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _collision_key(name: str) -> str:
    """Kafka refuses names that differ only by '.' vs '_' (metric names would collide)."""
    return name.replace(".", "_")


def _entry(topic: Topic) -> str:
    """The topic's text in the registry file."""
    entry = {"id": uuid_to_str(topic.topic_id), "partitions": topic.partitions, "configs": topic.configs}
    return f"{json.dumps(topic.name)}: {json.dumps(entry)}"


class TopicRegistry:
    def __init__(self, data_dir: str, store: LogStore, log_config: Callable[[dict[str, str]], LogConfig]) -> None:
        """``log_config(topic_overrides)`` resolves a topic's LogConfig against broker defaults."""
        self.data_dir = data_dir
        self.store = store
        self._log_config = log_config
        self._by_name: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}
        # _collision_key(name) -> the names with it (an ordered set): more than one when a
        # single CreateTopics created names that collide, as Kafka's controller allows
        self._by_collision_key: dict[str, dict[str, None]] = {}
        self._entries: dict[str, str] = {}  # name -> the topic's text in the registry file
        self._listeners: list[Callable[[list[tuple[str, Topic | None]]], None]] = []
        self._load()

    # --- persistence --------------------------------------------------------------------------

    @property
    def _path(self) -> str:
        return os.path.join(self.data_dir, REGISTRY_FILE)

    def _load(self) -> None:
        """Read the registry and reconcile the store with it. The registry is written before a
        topic's directories and before they are deleted, so a partition of no listed topic is
        a deletion cut short or someone else's data: like Kafka, keep it as a stray log."""
        if os.path.exists(self._path):
            try:
                with open(self._path, encoding="utf-8") as f:
                    data = json.load(f)
                for name, t in data.get("topics", {}).items():
                    self._put(Topic(name, uuid_from_str(t["id"]), int(t["partitions"]), dict(t.get("configs", {}))))
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise ConfigError(f"{self._path} is damaged ({why_unparsable(e)}); restore it from a backup") from None
        elif any(True for _ in self.store.partitions()):
            raise ConfigError(f"{self._path} is missing but {self.data_dir} holds partition directories; restore "
                              "it from a backup, or move them away to start empty")
        known = set()
        for topic in self._by_name.values():
            cfg = self._log_config(topic.configs)
            for p in range(topic.partitions):
                known.add((topic.name, p))
                existing = self.store.get(topic.name, p)
                if existing is not None and existing.topic_id not in (None, topic.topic_id):
                    self._keep_stray(topic.name, p, "its directory belongs to an older topic id")
                self.store.create(topic.name, p, topic.topic_id, cfg)
        for lg in list(self.store.partitions()):
            if (lg.topic, lg.partition) not in known:
                self._keep_stray(lg.topic, lg.partition, f"no such topic in {REGISTRY_FILE}")

    def _keep_stray(self, topic: str, partition: int, why: str) -> None:
        kept = self.store.mark_stray(topic, partition)
        log.warning("%s-%d: %s; not serving it%s", topic, partition, why,
                    f", its data is kept in {kept}" if kept else "")

    def _save(self, entries: dict[str, str]) -> None:
        """Write the registry as ``entries`` say, before any change is made in memory: a write
        the disk refuses (ENOSPC, EIO) changes nothing and raises KafkaError
        KAFKA_STORAGE_ERROR, which the admin requests answer, as Kafka maps a
        KafkaStorageException. The entry of a topic in the file is the one in memory, always."""
        text = '{"version": 1, "topics": {\n' + ",\n".join(entries.values()) + "\n}}\n"
        try:
            write_durably(self._path, text.encode())
        except OSError as e:
            log.error("cannot write %s: %s", self._path, e)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"Cannot write the topic registry: {e}") from None

    def _save_with(self, topic: Topic) -> str:
        """Save the registry with ``topic`` new or changed (not yet indexed); its entry."""
        entry = _entry(topic)
        self._save({**self._entries, topic.name: entry})
        return entry

    def _put(self, topic: Topic, entry: str | None = None) -> None:
        """Index a new or changed topic with its text for the next save."""
        self._by_name[topic.name] = topic
        self._by_id[topic.topic_id] = topic
        self._by_collision_key.setdefault(_collision_key(topic.name), {})[topic.name] = None
        self._entries[topic.name] = entry if entry is not None else _entry(topic)

    # --- queries ------------------------------------------------------------------------------

    def get(self, name: str) -> Topic | None:
        return self._by_name.get(name)

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def __iter__(self) -> Iterable[Topic]:
        return iter(list(self._by_name.values()))

    def __len__(self) -> int:
        return len(self._by_name)

    def log_config(self, topic: Topic) -> LogConfig:
        return self._log_config(topic.configs)

    def on_change(self, listener: Callable[[list[tuple[str, Topic | None]]], None]) -> None:
        """``listener([(name, topic or None if deleted), ...])`` after every create, grow or
        alter (one topic) and deletion (all the topics of one DeleteTopics: a listener that
        writes group records or scans share partitions does it once, not once per topic)."""
        self._listeners.append(listener)

    def _changed(self, *names: str) -> None:
        changes = [(name, self._by_name.get(name)) for name in names]
        for listener in self._listeners:
            listener(changes)

    # --- changes ------------------------------------------------------------------------------

    def check_new_name(self, name: str) -> None:
        """Kafka's createTopics order of precedence: already exists, else a collision (reported
        even over an invalid name, as "." colliding with a topic "_"), else Topic.validate."""
        if name in self._by_name:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        others = self._by_collision_key.get(_collision_key(name))
        if others:
            other = next(iter(others))
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {other}")
        validate_topic_name(name)

    def new_name_errors(self, names: Iterable[str]) -> dict[str, KafkaError]:
        """``check_new_name``'s error for each of ``names`` that has one, all checked against the
        topics as they are now: Kafka's controller checks every name of a request before it
        creates any (``validateNewTopicNames``), so names of one request never collide."""
        errors = {}
        for name in names:
            try:
                self.check_new_name(name)
            except KafkaError as e:
                errors[name] = e
        return errors

    def create(self, name: str, partitions: int, configs: dict[str, str] | None = None,
               name_checked: bool = False) -> Topic:
        """Create a topic (configs already validated by the caller). ``name_checked``: the caller
        checked the name against the topics before its request, as Kafka's controller checks
        every name of a CreateTopics before creating any, so a name colliding with another of
        the same request is created too."""
        if not name_checked or name in self._by_name:
            self.check_new_name(name)
        if partitions < 1:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        topic = Topic(name, random_uuid(), partitions, dict(configs or {}))
        self._put(topic, self._save_with(topic))
        cfg = self._log_config(topic.configs)
        for p in range(partitions):
            self.store.create(name, p, topic.topic_id, cfg)
        log.info("created topic %s (%s) with %d partition(s)", name, uuid_to_str(topic.topic_id), partitions)
        self._changed(name)
        return topic

    def delete(self, name: str) -> Topic:
        return self.delete_many([name])[0]

    def delete_many(self, names: Iterable[str]) -> list[Topic]:
        """Delete existing topics with one registry save and one store deletion for them all
        (a DeleteTopics of hundreds of topics); raises before any change if one is unknown."""
        names = list(dict.fromkeys(names))
        if not names:
            return []
        if any(n not in self._by_name for n in names):
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        gone = set(names)
        self._save({name: entry for name, entry in self._entries.items() if name not in gone})
        topics = [self._by_name.pop(name) for name in names]
        for topic in topics:
            del self._by_id[topic.topic_id]
            key = _collision_key(topic.name)
            del self._by_collision_key[key][topic.name]
            if not self._by_collision_key[key]:
                del self._by_collision_key[key]
            del self._entries[topic.name]
        self.store.delete((t.name, p) for t in topics for p in range(t.partitions))
        for topic in topics:
            log.info("deleted topic %s", topic.name)
        self._changed(*(t.name for t in topics))
        return topics

    def add_partitions(self, name: str, total: int) -> Topic:
        topic = self._by_name[name]
        if total <= topic.partitions:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {topic.partitions} partitions, which is higher than the requested {total}.",
            )
        old = topic.partitions
        entry = self._save_with(replace(topic, partitions=total))
        topic.partitions = total
        self._put(topic, entry)
        cfg = self._log_config(topic.configs)
        for p in range(old, total):
            self.store.create(name, p, topic.topic_id, cfg)
        self._changed(name)
        return topic

    def set_configs(self, name: str, configs: dict[str, str]) -> Topic:
        """Replace a topic's overrides and apply them to its logs."""
        topic = self._by_name[name]
        entry = self._save_with(replace(topic, configs=dict(configs)))
        topic.configs = dict(configs)
        self._put(topic, entry)
        self.store.update_config(name, self._log_config(topic.configs))
        self._changed(name)
        return topic

    def refresh_log_configs(self) -> None:
        """Re-resolve every topic's LogConfig (after a dynamic broker config change)."""
        for topic in self._by_name.values():
            self.store.update_config(topic.name, self._log_config(topic.configs))
