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

from broker.config import ConfigError
from broker.log import LogConfig
from broker.log.file import FileLogStore
from broker.topics import REGISTRY_FILE, TopicRegistry

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
