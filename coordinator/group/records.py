"""ShareGroup* coordinator records for ``__consumer_offsets``, built and (de)serialised.

A record is ``(key, value)`` with generated classes from ``protocol.coordinator_records``;
``value`` None is a tombstone. On disk Kafka prefixes the key with its int16 record type
and the value with its int16 version (always 0 here), so Kafka tools read them alike.
"""

from __future__ import annotations

import struct
from typing import Any, Iterable, Mapping, NamedTuple

from protocol.coordinator_records.share_group_current_member_assignment_key import (
    ShareGroupCurrentMemberAssignmentKey,
)
from protocol.coordinator_records.share_group_current_member_assignment_value import (
    ShareGroupCurrentMemberAssignmentValue,
)
from protocol.coordinator_records.share_group_current_member_assignment_value import (
    TopicPartitions as CurrentTopicPartitions,
)
from protocol.coordinator_records.share_group_member_metadata_key import ShareGroupMemberMetadataKey
from protocol.coordinator_records.share_group_member_metadata_value import ShareGroupMemberMetadataValue
from protocol.coordinator_records.share_group_metadata_key import ShareGroupMetadataKey
from protocol.coordinator_records.share_group_metadata_value import ShareGroupMetadataValue
from protocol.coordinator_records.share_group_state_partition_metadata_key import (
    ShareGroupStatePartitionMetadataKey,
)
from protocol.coordinator_records.share_group_state_partition_metadata_value import (
    ShareGroupStatePartitionMetadataValue,
)
from protocol.coordinator_records.share_group_target_assignment_member_key import (
    ShareGroupTargetAssignmentMemberKey,
)
from protocol.coordinator_records.share_group_target_assignment_member_value import (
    ShareGroupTargetAssignmentMemberValue,
)
from protocol.coordinator_records.share_group_target_assignment_member_value import (
    TopicPartition as TargetTopicPartition,
)
from protocol.coordinator_records.share_group_target_assignment_metadata_key import (
    ShareGroupTargetAssignmentMetadataKey,
)
from protocol.coordinator_records.share_group_target_assignment_metadata_value import (
    ShareGroupTargetAssignmentMetadataValue,
)

VALUE_VERSION = 0
_INT16 = struct.Struct(">h")

# record type -> (key class, value class); the type is the key's API_KEY
SHARE_GROUP_RECORD_TYPES = {
    cls_key.API_KEY: (cls_key, cls_value)
    for cls_key, cls_value in (
        (ShareGroupMemberMetadataKey, ShareGroupMemberMetadataValue),
        (ShareGroupMetadataKey, ShareGroupMetadataValue),
        (ShareGroupTargetAssignmentMetadataKey, ShareGroupTargetAssignmentMetadataValue),
        (ShareGroupTargetAssignmentMemberKey, ShareGroupTargetAssignmentMemberValue),
        (ShareGroupCurrentMemberAssignmentKey, ShareGroupCurrentMemberAssignmentValue),
        (ShareGroupStatePartitionMetadataKey, ShareGroupStatePartitionMetadataValue),
    )
}

# MemberState in Kafka; share-group members are always STABLE (no revocation barrier).
MEMBER_STATE_STABLE = 0


class CoordinatorRecord(NamedTuple):
    key: Any
    value: Any | None  # None: tombstone


Assignment = Mapping[Any, Iterable[int]]  # topic id -> partitions


def _sorted_items(assignment: Assignment):
    return sorted((t, sorted(ps)) for t, ps in assignment.items() if ps)


def member_metadata(group_id: str, member_id: str, rack_id: str | None, client_id: str,
                    client_host: str, subscribed_topic_names: Iterable[str]) -> CoordinatorRecord:
    return CoordinatorRecord(
        ShareGroupMemberMetadataKey(group_id, member_id),
        ShareGroupMemberMetadataValue(rack_id, client_id, client_host, list(subscribed_topic_names)),
    )


def member_metadata_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(ShareGroupMemberMetadataKey(group_id, member_id), None)


def group_metadata(group_id: str, epoch: int, metadata_hash: int) -> CoordinatorRecord:
    return CoordinatorRecord(ShareGroupMetadataKey(group_id), ShareGroupMetadataValue(epoch, metadata_hash))


def group_metadata_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(ShareGroupMetadataKey(group_id), None)


def target_member(group_id: str, member_id: str, assignment: Assignment) -> CoordinatorRecord:
    return CoordinatorRecord(
        ShareGroupTargetAssignmentMemberKey(group_id, member_id),
        ShareGroupTargetAssignmentMemberValue(
            [TargetTopicPartition(t, ps) for t, ps in _sorted_items(assignment)]
        ),
    )


def target_member_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(ShareGroupTargetAssignmentMemberKey(group_id, member_id), None)


def target_metadata(group_id: str, assignment_epoch: int, timestamp_ms: int) -> CoordinatorRecord:
    return CoordinatorRecord(
        ShareGroupTargetAssignmentMetadataKey(group_id),
        ShareGroupTargetAssignmentMetadataValue(assignment_epoch, timestamp_ms),
    )


def target_metadata_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(ShareGroupTargetAssignmentMetadataKey(group_id), None)


def current_assignment(group_id: str, member_id: str, member_epoch: int, previous_member_epoch: int,
                       assigned: Assignment, state: int = MEMBER_STATE_STABLE) -> CoordinatorRecord:
    return CoordinatorRecord(
        ShareGroupCurrentMemberAssignmentKey(group_id, member_id),
        ShareGroupCurrentMemberAssignmentValue(
            member_epoch, previous_member_epoch, state,
            [CurrentTopicPartitions(t, ps) for t, ps in _sorted_items(assigned)],
        ),
    )


def current_assignment_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(ShareGroupCurrentMemberAssignmentKey(group_id, member_id), None)


def state_partition_metadata_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(ShareGroupStatePartitionMetadataKey(group_id), None)


def encode(record: CoordinatorRecord) -> tuple[bytes, bytes | None]:
    """Kafka's on-disk key and value bytes for a ShareGroup* record."""
    key = _INT16.pack(record.key.API_KEY) + record.key.to_bytes(0)
    if record.value is None:
        return key, None
    return key, _INT16.pack(VALUE_VERSION) + record.value.to_bytes(VALUE_VERSION)


def decode(key: bytes, value: bytes | None) -> CoordinatorRecord | None:
    """Parse a ``__consumer_offsets`` record; None when it is not a ShareGroup* record.

    Raises ``protocol.primitives.DecodeError`` (a ValueError) for malformed bytes and
    ValueError for a value version this broker does not know.
    """
    view = memoryview(key)
    if len(view) < 2:
        raise ValueError("coordinator record key shorter than its type prefix")
    (record_type,) = _INT16.unpack_from(view, 0)
    classes = SHARE_GROUP_RECORD_TYPES.get(record_type)
    if classes is None:
        return None
    if value is not None and len(value) < 2:
        raise ValueError("coordinator record value shorter than its version prefix")
    key_cls, value_cls = classes
    parsed_key = key_cls.from_bytes(view[2:], 0)
    if value is None:
        return CoordinatorRecord(parsed_key, None)
    vview = memoryview(value)
    (version,) = _INT16.unpack_from(vview, 0)
    if version != VALUE_VERSION:
        raise ValueError(f"unknown {value_cls.__name__} version {version}")
    return CoordinatorRecord(parsed_key, value_cls.from_bytes(vview[2:], version))
