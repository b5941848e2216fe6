"""Share-group offsets as the admin APIs report them: the share-partition lag formula of
KIP-1226 and the plain results the runtime hands to the DescribeShareGroupOffsets,
AlterShareGroupOffsets and DeleteShareGroupOffsets handlers.

Lag is Kafka 4.2's ``GroupCoordinatorService`` computation: the partition's end offset (the
offset the next record gets, so no "+1" is needed, unlike the KIP's "highest offset" wording)
minus the share-partition start offset minus the DeliveryCompleteCount, i.e. the records at
or after the SPSO that are not yet ACKNOWLEDGED or ARCHIVED. It is unknown (-1) while the start
offset or the count is: state initialised with start offset -1 and never written since, or
written by a version-0 WriteShareGroupState. Kafka does not clamp it, and neither do we; its
Java long subtraction wraps around, so a start offset or count written by a WriteShareGroupState
near the int64 limits gives a wrapped lag, never one too wide for the response's int64 field.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from persister.api import SummaryResult

UNINITIALIZED_START_OFFSET = -1
UNINITIALIZED_DELIVERY_COMPLETE_COUNT = -1
UNINITIALIZED_LAG = -1
DEFAULT_LEADER_EPOCH = 0
_INT64_SPAN = 1 << 64


def share_partition_lag(end_offset: int, start_offset: int, delivery_complete_count: int) -> int:
    """KIP-1226 lag, or -1 when the start offset or the delivery-complete count is unknown."""
    if start_offset == UNINITIALIZED_START_OFFSET or delivery_complete_count == UNINITIALIZED_DELIVERY_COMPLETE_COUNT:
        return UNINITIALIZED_LAG
    return java_long(end_offset - start_offset - delivery_complete_count)


def java_long(n: int) -> int:
    """``n`` wrapped into int64, as Java long arithmetic wraps."""
    return ((n + _INT64_SPAN // 2) % _INT64_SPAN) - _INT64_SPAN // 2


def lag_is_computable(summary: SummaryResult | None) -> bool:
    """Kafka's ``shouldComputeSharePartitionLag``: a successful read with a known start offset
    and a known delivery-complete count."""
    return (summary is not None and summary.error_code == 0
            and summary.start_offset != UNINITIALIZED_START_OFFSET
            and summary.delivery_complete_count != UNINITIALIZED_DELIVERY_COMPLETE_COUNT)


@dataclass
class TopicOffsets:
    """One topic of DescribeShareGroupOffsets: ``partitions`` maps each partition to its state
    summary, or None where there is none to report (a topic that does not exist, or a failed
    read: Kafka answers both as absent data, start offset -1, not as an error)."""

    name: str
    topic_id: uuid.UUID | None  # None: the topic does not exist
    partitions: list[tuple[int, SummaryResult | None]] = field(default_factory=list)


@dataclass
class AlteredTopic:
    """One topic of AlterShareGroupOffsets: ``(partition, error code, message or None)``."""

    name: str
    topic_id: uuid.UUID | None
    partitions: list[tuple[int, int, str | None]] = field(default_factory=list)


@dataclass
class DeletedTopic:
    """One topic of DeleteShareGroupOffsets."""

    name: str | None
    topic_id: uuid.UUID | None
    error_code: int = 0
    error_message: str | None = None
