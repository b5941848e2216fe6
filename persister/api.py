"""The persister: how share-partition leaders read and write durable share-partition state.

Its five operations mirror Kafka's Persister interface and the share coordinator's RPCs
(InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState,
ReadShareGroupStateSummary). Results carry Kafka error codes rather than raising, because the
leader maps each code onto the fetch or acknowledge error the client sees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol
from uuid import UUID

from protocol.errors import ErrorCode

StateBatch = tuple[int, int, int, int]  # (first_offset, last_offset, delivery_state, delivery_count)
TopicPartition = tuple[UUID, int]


@dataclass(frozen=True)
class ReadResult:
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    state_epoch: int = 0
    start_offset: int = -1  # -1: never consumed, apply share.auto.offset.reset
    batches: list[StateBatch] = field(default_factory=list)


@dataclass(frozen=True)
class SummaryResult:
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    state_epoch: int = 0
    leader_epoch: int = 0
    start_offset: int = -1
    delivery_complete_count: int = -1  # -1: unknown (KIP-1226)


class Persister(Protocol):
    async def initialize_state(
        self, group_id: str, topic_id: UUID, partition: int, *, state_epoch: int, start_offset: int
    ) -> tuple[int, str | None]: ...

    async def read_state(self, group_id: str, topic_id: UUID, partition: int, *, leader_epoch: int) -> ReadResult: ...

    async def write_state(
        self,
        group_id: str,
        topic_id: UUID,
        partition: int,
        *,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        delivery_complete_count: int,
        batches: list[StateBatch],  # sorted, disjoint, touching equal neighbours joined
    ) -> tuple[int, str | None]: ...

    async def delete_state(self, group_id: str, partitions: list[TopicPartition]) -> dict[TopicPartition, tuple[int, str | None]]: ...

    async def read_summary(self, group_id: str, partitions: list[TopicPartition]) -> dict[TopicPartition, SummaryResult]: ...
