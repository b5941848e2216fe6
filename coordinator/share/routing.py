"""Which ``__share_group_state`` partition owns a share-partition's state.

Kafka keys the share coordinator by the string ``groupId:topicId:partition`` (topic id in its
base64url form, as FindCoordinator with key type SHARE carries it) and picks the partition
``Utils.abs(key.hashCode()) % share.coordinator.state.topic.num.partitions``, with Java's
``String.hashCode``. Brokers and tools must agree on this exactly, or a coordinator would
look for state in the wrong partition.
"""

from __future__ import annotations

from functools import lru_cache
from uuid import UUID

from coordinator.group.broker_defaults import java_integer, java_trim
from protocol.uuids import uuid_from_str, uuid_to_str

__all__ = ["STATE_TOPIC_NUM_PARTITIONS_CONFIG", "STATE_TOPIC_NUM_PARTITIONS_DEFAULT",
           "key_string", "parse_key_string", "java_string_hash", "partition_for", "partition_for_key"]

STATE_TOPIC_NUM_PARTITIONS_CONFIG = "share.coordinator.state.topic.num.partitions"
STATE_TOPIC_NUM_PARTITIONS_DEFAULT = 50

_INT_MIN = -(1 << 31)


def key_string(group_id: str, topic_id: UUID, partition: int) -> str:
    """Kafka's ``SharePartitionKey.asCoordinatorKey``: ``groupId:topicId:partition``."""
    return f"{group_id}:{uuid_to_str(topic_id)}:{partition}"


def parse_key_string(key: str) -> tuple[str, UUID, int]:
    """Kafka's ``SharePartitionKey.getInstance(String)``, so FindCoordinator refuses the keys it
    refuses: ``split(":")`` (trailing empty parts dropped) read from the right, the group id
    (which may contain ':') not blank after ``String.trim``, the partition as ``Integer.parseInt``
    reads it (a sign, no spaces or '_', within int32)."""
    tokens = key.split(":")
    while tokens and not tokens[-1]:
        tokens.pop()
    if len(tokens) < 3:
        raise ValueError(f"invalid share coordinator key {key!r}")
    group_id, topic, partition = ":".join(tokens[:-2]), tokens[-2], tokens[-1]
    number = java_integer(partition)
    if not java_trim(group_id) or number is None:
        raise ValueError(f"invalid share coordinator key {key!r}")
    return group_id, uuid_from_str(topic), number


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: 31-polynomial over UTF-16 code units, as a signed int32."""
    h = 0
    raw = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


@lru_cache(maxsize=1 << 16)
def partition_for(group_id: str, topic_id: UUID, partition: int,
                  num_partitions: int = STATE_TOPIC_NUM_PARTITIONS_DEFAULT) -> int:
    """The ``__share_group_state`` partition for this share-partition (Kafka's ``partitionFor``).

    Cached: every state write asks again, and the Java string hash costs ~17 us in Python."""
    return partition_for_key(key_string(group_id, topic_id, partition), num_partitions)


def partition_for_key(key: str, num_partitions: int = STATE_TOPIC_NUM_PARTITIONS_DEFAULT) -> int:
    """``Utils.abs(key.hashCode()) % num_partitions``; Utils.abs maps Integer.MIN_VALUE to 0."""
    if num_partitions < 1:
        raise ValueError("num_partitions must be at least 1")
    h = java_string_hash(key)
    return (0 if h == _INT_MIN else abs(h)) % num_partitions
