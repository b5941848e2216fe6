"""The topic registry (``kshare-topics.json``) against the partition directories at start-up.

The registry is written before a topic's directories are made and before they are deleted, so
a directory of no listed topic is a deletion cut short, or data the registry never knew (a
lost or older registry): like Kafka 3.7+, such a directory is kept as ``<dir>.<id>-stray`` and
not served, never deleted. A registry that is damaged, or missing beside partition
directories, stops the start instead of turning every partition into a stray.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os

import pytest

from broker import topics as topics_module
from broker.config import ConfigError
from broker.log import LogConfig
from broker.log.file import FileLogStore
from broker.topics import REGISTRY_FILE, TopicRegistry
from protocol.errors import ErrorCode, KafkaError
from protocol.uuids import uuid_to_str

from .test_log_support import append, make_batch


def open_registry(data_dir) -> TopicRegistry:
    store = FileLogStore(str(data_dir))
    return TopicRegistry(str(data_dir), store, lambda overrides: LogConfig.from_properties({}, overrides))


def close(registry: TopicRegistry) -> None:
    asyncio.run(registry.store.close())


def strays(data_dir) -> list[str]:
    return sorted(n.split(".")[0] for n in os.listdir(data_dir) if n.endswith("-stray"))


@pytest.fixture
def data_dir(tmp_path):
    """A data directory with topics "kept" (2 partitions) and "gone", one record batch each."""
    d = tmp_path / "data"
    registry = open_registry(d)
    for name, partitions in (("kept", 2), ("gone", 1)):
        registry.create(name, partitions)
        append(registry.store.get(name, 0), make_batch(3))
    close(registry)
    return d


def test_a_deletion_cut_short_leaves_a_stray_that_is_kept_not_served(data_dir, caplog):
    registry_file = data_dir / REGISTRY_FILE
    listed = json.loads(registry_file.read_text())
    del listed["topics"]["gone"]  # the registry was saved, the directory not yet removed
    registry_file.write_text(json.dumps(listed))
    gone_files = sorted(os.listdir(data_dir / "gone-0"))

    caplog.set_level(logging.WARNING)
    registry = open_registry(data_dir)
    assert registry.get("gone") is None and registry.store.get("gone", 0) is None
    assert registry.store.get("kept", 0).end_offset == 3
    assert strays(data_dir) == ["gone-0"]
    (kept,) = [n for n in os.listdir(data_dir) if n.endswith("-stray")]
    assert sorted(os.listdir(data_dir / kept)) == gone_files
    assert f"gone-0: no such topic in {REGISTRY_FILE}; not serving it, its data is kept in" in caplog.text
    registry.create("gone", 1)  # the name is free again
    close(registry)

    caplog.clear()
    close(open_registry(data_dir))  # the stray stays where it is, and is mentioned again
    assert strays(data_dir) == ["gone-0"] and "keeping stray log" in caplog.text


def test_a_stray_of_the_longest_legal_topic_name_is_kept_under_a_shortened_name(data_dir):
    """"<dir>.<32 hex>-stray" of a 249-character topic would pass the 255 bytes a file name may
    have: the topic is cut short, as Kafka's UnifiedLog.logStrayDirName does."""
    name = "s" * 249
    registry = open_registry(data_dir)
    registry.create(name, 1)
    close(registry)
    registry_file = data_dir / REGISTRY_FILE
    listed = json.loads(registry_file.read_text())
    del listed["topics"][name]
    registry_file.write_text(json.dumps(listed))
    registry = open_registry(data_dir)
    (kept,) = [n for n in os.listdir(data_dir) if n.endswith("-stray")]
    assert len(kept) == 255 and kept.startswith("s" * 200) and kept.split(".")[0].endswith("s-0")
    registry.create(name, 1)  # the name is free again
    close(registry)


def test_a_directory_of_an_older_topic_id_is_kept_as_a_stray(data_dir, caplog):
    registry_file = data_dir / REGISTRY_FILE
    listed = json.loads(registry_file.read_text())
    listed["topics"]["kept"]["id"] = "AAAAAAAAAAAAAAAAAAAAAQ"  # the topic was recreated
    registry_file.write_text(json.dumps(listed))
    registry = open_registry(data_dir)
    assert [registry.store.get("kept", p).end_offset for p in (0, 1)] == [0, 0]
    assert strays(data_dir) == ["kept-0", "kept-1"]
    assert "kept-0: its directory belongs to an older topic id; not serving it" in caplog.text
    close(registry)


@pytest.mark.parametrize("damage, message", [
    (lambda f: f.unlink(), "is missing but"),
    (lambda f: f.write_text(f.read_text()[:40]), "is damaged"),
    (lambda f: f.write_text("[]"), "is damaged"),
])
def test_a_missing_or_damaged_registry_stops_the_start_and_touches_nothing(data_dir, damage, message):
    damage(data_dir / REGISTRY_FILE)
    before = partition_dirs(data_dir)
    with pytest.raises(ConfigError, match=message):
        open_registry(data_dir)
    assert partition_dirs(data_dir) == before and strays(data_dir) == []


def partition_dirs(data_dir) -> dict[str, list[str]]:
    return {n: sorted(os.listdir(data_dir / n)) for n in os.listdir(data_dir)
            if (data_dir / n).is_dir() and not n.startswith("__")}


def listed(data_dir) -> dict:
    return json.loads((data_dir / REGISTRY_FILE).read_text())["topics"]


def test_the_file_follows_every_kind_of_change_and_reloads_as_it_was(tmp_path):
    d = tmp_path / "data"
    registry = open_registry(d)
    a = registry.create("a", 1, {"retention.ms": "1000"})
    registry.create("b", 2)
    registry.add_partitions("a", 3)
    registry.set_configs("b", {"cleanup.policy": "compact", "segment.bytes": "1048576"})
    registry.delete("a")
    registry.create("a", 1)  # recreated: a new id
    expect = {t.name: {"id": uuid_to_str(t.topic_id), "partitions": t.partitions, "configs": t.configs}
              for t in registry}
    assert listed(d) == expect and expect["a"]["id"] != uuid_to_str(a.topic_id)
    assert expect["b"] == {"id": expect["b"]["id"], "partitions": 2,
                           "configs": {"cleanup.policy": "compact", "segment.bytes": "1048576"}}
    close(registry)
    again = open_registry(d)
    assert {t.name: (t.topic_id, t.partitions, t.configs) for t in again} == {
        t.name: (t.topic_id, t.partitions, t.configs) for t in registry}
    close(again)


def test_names_that_differ_only_by_dot_and_underscore_collide_until_one_is_deleted(tmp_path):
    registry = open_registry(tmp_path / "data")
    registry.create("a.b", 1)
    with pytest.raises(KafkaError, match="Topic 'a_b' collides with existing topic: a.b") as e:
        registry.create("a_b", 1)
    assert e.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    registry.delete("a.b")
    registry.create("a_b", 1)
    with pytest.raises(KafkaError, match="collides with existing topic: a_b"):
        registry.check_new_name("a.b")
    close(registry)
    reloaded = open_registry(tmp_path / "data")  # the index is rebuilt from the file
    with pytest.raises(KafkaError, match="collides with existing topic: a_b"):
        reloaded.check_new_name("a.b")
    close(reloaded)


@pytest.mark.parametrize("name, reason", [
    ("", "the empty string is not allowed"),
    (".", "'.' is not allowed"),
    ("..", "'..' is not allowed"),
    ("a" * 250, f"the length of '{'a' * 250}' is longer than the max allowed length 249"),
    ("\U0001F600" * 125, f"the length of '{chr(0x1F600) * 125}' is longer than the max allowed length 249"),
    ("bad name!", "'bad name!' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"),
])
def test_topic_names_are_refused_with_kafka_4_2_messages(name, reason):
    """Kafka 4.2's Topic.validate: "Topic name is invalid: " and detectInvalidTopic's reason; the
    length is Java's String.length (UTF-16 units, so 125 emoji are 250)."""
    with pytest.raises(KafkaError) as e:
        topics_module.validate_topic_name(name)
    assert (e.value.code, e.value.message) == (ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic name is invalid: {reason}")
    topics_module.validate_topic_name("a" * 249)


def test_a_collision_is_reported_over_an_invalid_name(tmp_path):
    """ReplicationControlManager.validateNewTopicNames checks collisions after Topic.validate and
    overwrites its error: "." with a topic "_" is a collision, not "'.' is not allowed"."""
    registry = open_registry(tmp_path / "data")
    registry.create("_", 1)
    registry.create("__", 1)
    for name, other in ((".", "_"), ("..", "__")):
        with pytest.raises(KafkaError) as e:
            registry.check_new_name(name)
        assert (e.value.code, e.value.message) == (ErrorCode.INVALID_TOPIC_EXCEPTION,
                                                   f"Topic '{name}' collides with existing topic: {other}")
    close(registry)


def test_a_change_encodes_only_the_topic_it_changes(tmp_path, monkeypatch):
    """With thousands of topics, encoding every one at each save made creating N topics O(N^2)."""
    registry = open_registry(tmp_path / "data")
    for i in range(50):
        registry.create(f"t{i}", 1)
    encoded = []
    real = topics_module.json.dumps
    monkeypatch.setattr(topics_module.json, "dumps", lambda obj, **kw: encoded.append(obj) or real(obj, **kw))
    registry.create("new", 1)
    registry.set_configs("t7", {"retention.ms": "5"})
    assert {o for o in encoded if isinstance(o, str)} == {"new", "t7"}
    assert len(listed(tmp_path / "data")) == 51
    close(registry)


def test_deleting_several_topics_saves_once_and_an_unknown_name_changes_nothing(tmp_path, monkeypatch):
    d = tmp_path / "data"
    registry = open_registry(d)
    for name in ("a", "b", "c"):
        registry.create(name, 2)
    with pytest.raises(KafkaError) as e:
        registry.delete_many(["a", "nope"])
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert sorted(listed(d)) == ["a", "b", "c"] and registry.store.get("a", 1) is not None
    saves, changes = [], []
    real = registry._save
    monkeypatch.setattr(registry, "_save", lambda entries: saves.append(1) or real(entries))
    registry.on_change(changes.append)
    assert registry.delete_many([]) == [] and saves == []  # (DeleteTopics of unknown topics only)
    assert [t.name for t in registry.delete_many(["a", "c", "a"])] == ["a", "c"]
    assert len(saves) == 1 and changes == [[("a", None), ("c", None)]]  # one call for the request
    assert list(listed(d)) == ["b"] and registry.get("a") is None and registry.get("c") is None
    assert sorted((lg.topic, lg.partition) for lg in registry.store.partitions()) == [("b", 0), ("b", 1)]
    close(registry)


def test_a_registry_write_the_disk_refuses_changes_nothing(tmp_path, monkeypatch):
    """A full disk refusing ``kshare-topics.json``: every change (create, grow, alter, delete)
    raises KafkaError KAFKA_STORAGE_ERROR, which the admin requests answer, and leaves the
    topics, their logs and the file as they were; it used to raise the OSError after changing
    the registry in memory (a created topic listed with no logs, a deleted one gone until a
    restart brought it back) and the client's connection was closed without an answer."""
    d = tmp_path / "data"
    registry = open_registry(d)
    registry.create("a", 1)
    registry.create("b", 1, {"retention.ms": "1000"})
    changes = []
    registry.on_change(changes.append)
    before = ({t.name: (t.topic_id, t.partitions, dict(t.configs)) for t in registry}, listed(d),
              sorted((lg.topic, lg.partition) for lg in registry.store.partitions()))
    real_open = os.open

    def full(path, flags, *args, **kw):
        if str(path).endswith(REGISTRY_FILE + ".tmp"):
            raise OSError(28, "No space left on device")
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", full)
    for change in (lambda: registry.create("c", 1), lambda: registry.add_partitions("a", 3),
                   lambda: registry.set_configs("b", {"retention.ms": "5"}), lambda: registry.delete_many(["a", "b"])):
        with pytest.raises(KafkaError, match="No space left") as e:
            change()
        assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    monkeypatch.undo()
    assert ({t.name: (t.topic_id, t.partitions, dict(t.configs)) for t in registry}, listed(d),
            sorted((lg.topic, lg.partition) for lg in registry.store.partitions())) == before
    assert changes == [] and registry.check_new_name("c") is None
    registry.create("c", 1)  # room again
    registry.delete("a")
    assert sorted(listed(d)) == ["b", "c"] and registry.store.get("a", 0) is None
    close(registry)


def test_a_deletion_whose_checkpoints_the_disk_refuses_still_completes(tmp_path, monkeypatch, caplog):
    """After the registry is saved the topic is gone: a checkpoint write the disk then refuses
    used to raise out of the store's deletion, before the listeners (share partitions,
    producer state, groups) were told and with the OSError closing the client's connection.
    The checkpoints are best effort there (an entry of a removed partition is ignored)."""
    d = tmp_path / "data"
    registry = open_registry(d)
    registry.create("a", 2)
    registry.create("b", 1)
    changes = []
    registry.on_change(changes.append)
    real_open = os.open

    def full(path, flags, *args, **kw):
        if str(path).endswith("-checkpoint.tmp"):
            raise OSError(28, "No space left on device")
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", full)
    assert [t.name for t in registry.delete_many(["a"])] == ["a"]
    monkeypatch.undo()
    assert changes == [[("a", None)]] and list(listed(d)) == ["b"]
    assert sorted(partition_dirs(d)) == ["b-0"] and registry.store.get("a", 0) is None
    assert "cannot write the checkpoints after removing partitions" in caplog.text
    close(registry)
    again = open_registry(d)
    assert [t.name for t in again] == ["b"] and strays(d) == []
    close(again)
