"""The coordinator's view of topic metadata, and the group "metadata hash".

The coordinator never owns topics: whoever does (the broker's topic registry) hands
it an object with ``topic_by_name`` / ``topic_by_id``. ``TopicsImage`` is a small
immutable implementation for tests and for callers without a registry of their own.

Kafka stores a hash of the subscribed topics' metadata in ShareGroupMetadataValue and
bumps the group epoch when it changes. It is computed as Kafka's ``Utils.computeTopicHash`` /
``computeGroupHash`` do (XXH3-64 over hash4j's little-endian encoding), so a Kafka broker
reading these records sees the hash it would compute itself and rebalances nothing.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Protocol

import xxhash


@dataclass(frozen=True, slots=True)
class TopicInfo:
    topic_id: uuid.UUID
    name: str
    num_partitions: int


class TopicLookup(Protocol):
    def topic_by_name(self, name: str) -> TopicInfo | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None: ...


class TopicsImage:
    """An immutable topic lookup built from ``TopicInfo`` values."""

    __slots__ = ("_by_name", "_by_id")

    def __init__(self, topics: Iterable[TopicInfo] = ()) -> None:
        self._by_name = {t.name: t for t in topics}
        self._by_id = {t.topic_id: t for t in self._by_name.values()}

    @classmethod
    def of(cls, by_name: dict[str, TopicInfo], by_id: dict[uuid.UUID, TopicInfo]) -> "TopicsImage":
        """An image of consistent lookup dicts, copied (in C: cheap for thousands of topics)."""
        image = cls.__new__(cls)
        image._by_name, image._by_id = dict(by_name), dict(by_id)
        return image

    def topic_by_name(self, name: str) -> TopicInfo | None:
        return self._by_name.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def with_topic(self, topic: TopicInfo) -> "TopicsImage":
        """A copy with ``topic`` added or replaced (by name)."""
        return TopicsImage([*(t for t in self._by_name.values() if t.name != topic.name), topic])

    def without_topic(self, name: str) -> "TopicsImage":
        return TopicsImage(t for t in self._by_name.values() if t.name != name)

    def __iter__(self):
        return iter(self._by_name.values())


EMPTY_TOPICS = TopicsImage()


def _hash4j_string(text: str) -> bytes:
    """hash4j's ``putString``: the UTF-16 code units, little-endian, then the unit count."""
    units = text.encode("utf-16-le")
    return units + struct.pack("<i", len(units) // 2)


@lru_cache(maxsize=65536)
def _topic_hash(topic: TopicInfo) -> int:
    """Kafka's topic hash: magic byte 0, the id's two longs, the name, the partition count
    and each partition index. Partitions would add their replicas' racks; kshare has none.
    Cached per (id, name, partition count), as Kafka keeps its topicHashCache."""
    body = b"\x00" + struct.pack("<qq", *struct.unpack(">qq", topic.topic_id.bytes))
    body += _hash4j_string(topic.name) + struct.pack("<i", topic.num_partitions)
    body += struct.pack(f"<{topic.num_partitions}i", *range(topic.num_partitions))
    return xxhash.xxh3_64_intdigest(body)


def metadata_hash(subscribed_names: Iterable[str], topics: TopicLookup) -> int:
    """Signed 64-bit hash of the existing subscribed topics in name order (0 when there are
    none): XXH3-64 over their topic hashes."""
    parts = []
    for name in sorted(set(subscribed_names)):
        topic = topics.topic_by_name(name)
        if topic is not None:
            parts.append(struct.pack("<Q", _topic_hash(topic)))
    if not parts:
        return 0
    return struct.unpack("<q", struct.pack("<Q", xxhash.xxh3_64_intdigest(b"".join(parts))))[0]
