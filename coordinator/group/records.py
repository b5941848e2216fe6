"""ShareGroup* coordinator records for ``__consumer_offsets``: builders and (de)serialisation.

A record is ``(key, value)`` with generated classes from ``protocol.coordinator_records``;
``value`` None is a tombstone. The bytes are ``protocol.coordinator_serde``'s (the one
implementation of Kafka's layout: int16 record type before the key, int16 version before
the value), so Kafka tools read them alike; this module only picks out the share-group types.
"""

from __future__ import annotations

import struct
from typing import Any, Iterable, Mapping, NamedTuple

from protocol import coordinator_serde as serde
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
    TopicPartitionsInfo,
)
from protocol.coordinator_records.share_group_state_partition_metadata_value import TopicInfo as StateTopicInfo
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
from protocol.primitives import DecodeError

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


def target_metadata(group_id: str, assignment_epoch: int) -> CoordinatorRecord:
    """Kafka 4.2 writes no AssignmentTimestamp (tagged field added in 4.3 by KIP-1263), so the
    tag keeps its default and is not written."""
    return CoordinatorRecord(
        ShareGroupTargetAssignmentMetadataKey(group_id),
        ShareGroupTargetAssignmentMetadataValue(assignment_epoch=assignment_epoch),
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


def state_partition_metadata(
    group_id: str,
    initializing: Mapping[Any, tuple[str, Iterable[int]]],
    initialized: Mapping[Any, tuple[str, Iterable[int]]],
    deleting: Mapping[Any, str],
) -> CoordinatorRecord:
    """ShareGroupStatePartitionMetadata: topic id -> (name, partitions) for the initializing
    and initialized share partitions, topic id -> name for the topics being deleted. Topics
    are written in topic-id order and partitions ascending (Kafka's hash maps give no order
    worth copying)."""
    return CoordinatorRecord(
        ShareGroupStatePartitionMetadataKey(group_id),
        ShareGroupStatePartitionMetadataValue(
            [TopicPartitionsInfo(t, name, sorted(ps)) for t, (name, ps) in sorted(initializing.items())],
            [TopicPartitionsInfo(t, name, sorted(ps)) for t, (name, ps) in sorted(initialized.items())],
            [StateTopicInfo(t, name) for t, name in sorted(deleting.items())],
        ),
    )


def state_partition_metadata_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(ShareGroupStatePartitionMetadataKey(group_id), None)


def is_share_group_key(key: bytes) -> bool:
    """Whether a ``__consumer_offsets`` record key is one of the ShareGroup* types."""
    return key is not None and len(key) >= 2 and _INT16.unpack_from(key, 0)[0] in SHARE_GROUP_RECORD_TYPES


def encode(record: CoordinatorRecord) -> tuple[bytes, bytes | None]:
    """Kafka's on-disk key and value bytes (``protocol.coordinator_serde`` does the work)."""
    return serde.encode_key(record.key), serde.encode_value(record.value)


def decode(key, value) -> CoordinatorRecord | None:
    """Parse a ``__consumer_offsets`` record; None when it is not a ShareGroup* record
    (offset commits, classic and consumer groups: not this coordinator's).

    Raises ``protocol.primitives.DecodeError`` (a ValueError) for malformed bytes or a
    value version this broker does not know.
    """
    if key is None or len(key) < 2:
        raise DecodeError("coordinator record key shorter than its type prefix")
    if not is_share_group_key(key):
        return None
    parsed_key, parsed_value = serde.decode(key, value, serde.CONSUMER_OFFSETS_TOPIC)
    return CoordinatorRecord(parsed_key, parsed_value)
