"""Key/value bytes of the records coordinators write to Kafka's internal topics.

Kafka stores every coordinator record as a plain record whose

- key   = int16 record type (the schema's ``apiKey``) + the key struct at version 0, and whose
- value = int16 value version + the value struct at that version, or null for a tombstone.

Record types are numbered per coordinator, so the same number means different things on
different topics (0 is ShareSnapshot on ``__share_group_state`` but TransactionLog on
``__transaction_state``); decoding therefore needs the topic. Encoding does not: the class
of the key or value decides.

The value versions written here are the ones Kafka 4.2 writes. Share-coordinator and
share-group records only have version 0. For the classic-group records the version depends
on what Kafka knows at write time (OffsetCommitValue is 1 when an expire timestamp is set);
callers can pass ``version=`` to override the default.
"""

from __future__ import annotations

import struct

from .coordinator_records.consumer_group_metadata_key import ConsumerGroupMetadataKey
from .coordinator_records.consumer_group_metadata_value import ConsumerGroupMetadataValue
from .coordinator_records.group_metadata_key import GroupMetadataKey
from .coordinator_records.group_metadata_value import GroupMetadataValue
from .coordinator_records.offset_commit_key import OffsetCommitKey
from .coordinator_records.offset_commit_value import OffsetCommitValue
from .coordinator_records.share_group_current_member_assignment_key import (
    ShareGroupCurrentMemberAssignmentKey,
)
from .coordinator_records.share_group_current_member_assignment_value import (
    ShareGroupCurrentMemberAssignmentValue,
)
from .coordinator_records.share_group_member_metadata_key import ShareGroupMemberMetadataKey
from .coordinator_records.share_group_member_metadata_value import ShareGroupMemberMetadataValue
from .coordinator_records.share_group_metadata_key import ShareGroupMetadataKey
from .coordinator_records.share_group_metadata_value import ShareGroupMetadataValue
from .coordinator_records.share_group_state_partition_metadata_key import (
    ShareGroupStatePartitionMetadataKey,
)
from .coordinator_records.share_group_state_partition_metadata_value import (
    ShareGroupStatePartitionMetadataValue,
)
from .coordinator_records.share_group_target_assignment_member_key import (
    ShareGroupTargetAssignmentMemberKey,
)
from .coordinator_records.share_group_target_assignment_member_value import (
    ShareGroupTargetAssignmentMemberValue,
)
from .coordinator_records.share_group_target_assignment_metadata_key import (
    ShareGroupTargetAssignmentMetadataKey,
)
from .coordinator_records.share_group_target_assignment_metadata_value import (
    ShareGroupTargetAssignmentMetadataValue,
)
from .coordinator_records.share_snapshot_key import ShareSnapshotKey
from .coordinator_records.share_snapshot_value import ShareSnapshotValue
from .coordinator_records.share_update_key import ShareUpdateKey
from .coordinator_records.share_update_value import ShareUpdateValue
from .coordinator_records.transaction_log_key import TransactionLogKey
from .coordinator_records.transaction_log_value import TransactionLogValue
from .message import Message
from .primitives import DecodeError

__all__ = [
    "SHARE_GROUP_STATE_TOPIC", "CONSUMER_OFFSETS_TOPIC", "TRANSACTION_STATE_TOPIC",
    "UnknownRecordTypeError", "encode_key", "encode_value", "decode", "record_types",
]

SHARE_GROUP_STATE_TOPIC = "__share_group_state"
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"

_I16 = struct.Struct(">h")


class UnknownRecordTypeError(DecodeError):
    """A record type this topic's table does not know; Kafka's loaders skip such records."""

    def __init__(self, topic: str, record_type: int) -> None:
        super().__init__(f"unknown coordinator record type {record_type} on {topic}")
        self.topic = topic
        self.record_type = record_type


# topic -> record type -> (key class, value class)
_TYPES: dict[str, dict[int, tuple[type[Message], type[Message]]]] = {
    SHARE_GROUP_STATE_TOPIC: {
        0: (ShareSnapshotKey, ShareSnapshotValue),
        1: (ShareUpdateKey, ShareUpdateValue),
    },
    CONSUMER_OFFSETS_TOPIC: {
        # Type 0 is Kafka's LegacyOffsetCommitKey/Value (pre-0.10 offset commits). Their
        # layout is OffsetCommitKey v0 / OffsetCommitValue v0, so old logs still decode.
        0: (OffsetCommitKey, OffsetCommitValue),
        1: (OffsetCommitKey, OffsetCommitValue),
        2: (GroupMetadataKey, GroupMetadataValue),
        3: (ConsumerGroupMetadataKey, ConsumerGroupMetadataValue),
        10: (ShareGroupMemberMetadataKey, ShareGroupMemberMetadataValue),
        11: (ShareGroupMetadataKey, ShareGroupMetadataValue),
        12: (ShareGroupTargetAssignmentMetadataKey, ShareGroupTargetAssignmentMetadataValue),
        13: (ShareGroupTargetAssignmentMemberKey, ShareGroupTargetAssignmentMemberValue),
        14: (ShareGroupCurrentMemberAssignmentKey, ShareGroupCurrentMemberAssignmentValue),
        15: (ShareGroupStatePartitionMetadataKey, ShareGroupStatePartitionMetadataValue),
    },
    TRANSACTION_STATE_TOPIC: {
        0: (TransactionLogKey, TransactionLogValue),
    },
}

# The value version Kafka 4.2 writes for each value class when the caller does not say.
_WRITE_VERSION: dict[type[Message], int] = {
    ShareSnapshotValue: 0,
    ShareUpdateValue: 0,
    ConsumerGroupMetadataValue: 0,
    ShareGroupMemberMetadataValue: 0,
    ShareGroupMetadataValue: 0,
    ShareGroupTargetAssignmentMetadataValue: 0,
    ShareGroupTargetAssignmentMemberValue: 0,
    ShareGroupCurrentMemberAssignmentValue: 0,
    ShareGroupStatePartitionMetadataValue: 0,
    # Classic-group records: the highest non-flexible version (what Kafka has written since
    # IBP 2.3 / 2.1); OffsetCommitValue is 1 when it carries an expire timestamp.
    GroupMetadataValue: 3,
    OffsetCommitValue: 3,
    # Transaction version 2 (the 4.x default) writes the flexible version.
    TransactionLogValue: 1,
}

_KEY_CLASSES = frozenset(k for table in _TYPES.values() for k, _ in table.values())


def record_types(topic: str) -> dict[int, tuple[type[Message], type[Message]]]:
    """The (key class, value class) for every record type Kafka writes to ``topic``."""
    try:
        return dict(_TYPES[topic])
    except KeyError:
        raise ValueError(f"{topic!r} is not a coordinator topic") from None


def encode_key(key: Message) -> bytes:
    """The record key: int16 record type, then the key struct at version 0."""
    cls = type(key)
    if cls not in _KEY_CLASSES:
        raise ValueError(f"{cls.__name__} is not a coordinator record key")
    return _I16.pack(cls.API_KEY) + key.to_bytes(0)


def encode_value(value: Message | None, version: int | None = None) -> bytes | None:
    """The record value: int16 version, then the value struct; ``None`` is a tombstone."""
    if value is None:
        return None
    cls = type(value)
    if version is None:
        try:
            version = _WRITE_VERSION[cls]
        except KeyError:
            raise ValueError(f"{cls.__name__} is not a coordinator record value") from None
    lo, hi = cls.VALID_VERSIONS
    if not lo <= version <= hi:
        raise ValueError(f"{cls.__name__} has no version {version}")
    return _I16.pack(version) + value.to_bytes(version)


def decode(key: bytes, value: bytes | None,
           topic: str = SHARE_GROUP_STATE_TOPIC) -> tuple[Message, Message | None]:
    """Decode one record of ``topic``: ``(key object, value object or None)``.

    Raises ``UnknownRecordTypeError`` for a type the topic does not have and
    ``DecodeError`` for bytes that do not follow the schema.
    """
    table = _TYPES.get(topic)
    if table is None:
        raise ValueError(f"{topic!r} is not a coordinator topic")
    if key is None or len(key) < 2:
        raise DecodeError("coordinator record key shorter than its 2-byte type")
    view = memoryview(key)
    (record_type,) = _I16.unpack_from(view)
    classes = table.get(record_type)
    if classes is None:
        raise UnknownRecordTypeError(topic, record_type)
    key_cls, value_cls = classes
    key_obj = key_cls.from_bytes(view[2:], 0)
    if value is None:
        return key_obj, None
    if len(value) < 2:
        raise DecodeError("coordinator record value shorter than its 2-byte version")
    vview = memoryview(value)
    (version,) = _I16.unpack_from(vview)
    lo, hi = value_cls.VALID_VERSIONS
    if not lo <= version <= hi:
        raise DecodeError(f"{value_cls.__name__} has no version {version} (record type {record_type})")
    return key_obj, value_cls.from_bytes(vview[2:], version)
