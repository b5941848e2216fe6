"""The share coordinator service: routes state RPCs to shards and makes their records stick.

A request may name keys of several ``__share_group_state`` partitions; each partition is one
``ShareCoordinatorShard``. For each part the service asks the shard for records and a
response, replays the records into the shard at once (so the next request is computed on top
of them, with no lock and no await in between), hands them to the journal, and answers only
when the journal says they are durable. The journal is the seam to the log: ``None`` keeps
state in memory only.
"""

from __future__ import annotations

import itertools
from typing import Callable, Protocol
from uuid import UUID

from .routing import partition_for
from .shard import CoordinatorRecord, ShareCoordinatorShard


class Journal(Protocol):
    """Where a shard's records go: ``append`` returns their log offsets, ``sync`` waits for them."""

    def append(self, partition: int, records: list[CoordinatorRecord]) -> list[int]: ...

    async def sync(self, partition: int, offsets: list[int]) -> None: ...


class _MemoryJournal:
    def __init__(self) -> None:
        self._next = itertools.count()

    def append(self, partition: int, records: list[CoordinatorRecord]) -> list[int]:
        return [next(self._next) for _ in records]

    async def sync(self, partition: int, offsets: list[int]) -> None:
        return None


class ShareCoordinatorService:
    def __init__(
        self,
        *,
        num_partitions: int = 50,
        records_per_snapshot: int = 500,
        topic_partitions: Callable[[UUID], int | None] | None = None,
        clock_ms: Callable[[], int] | None = None,
        journal: Journal | None = None,
    ) -> None:
        self.num_partitions = num_partitions
        self._records_per_snapshot = records_per_snapshot
        self._topic_partitions = topic_partitions
        self._clock_ms = clock_ms
        self.journal: Journal = journal or _MemoryJournal()
        self.shards: dict[int, ShareCoordinatorShard] = {}

    def shard(self, partition: int) -> ShareCoordinatorShard:
        s = self.shards.get(partition)
        if s is None:
            s = self.shards[partition] = ShareCoordinatorShard(
                self._records_per_snapshot, clock_ms=self._clock_ms, topic_partitions=self._topic_partitions
            )
        return s

    def partition_of(self, group_id: str, topic_id: UUID, partition: int) -> int:
        return partition_for(group_id, topic_id, partition, self.num_partitions)

    # --- the five state RPCs ------------------------------------------------------------------

    async def initialize_state(self, request):
        return await self._run(request, lambda s, r: s.initialize_state(r))

    async def read_state(self, request):
        return await self._run(request, lambda s, r: s.read_state(r))

    async def write_state(self, request, version: int = 1):
        return await self._run(request, lambda s, r: s.write_state(r, version))

    async def delete_state(self, request):
        return await self._run(request, lambda s, r: s.delete_state(r))

    async def read_state_summary(self, request, version: int = 1):
        return await self._run(request, lambda s, r: ([], s.read_state_summary(r, version)))

    # --- plumbing -----------------------------------------------------------------------------

    def _split(self, request) -> dict[int, object]:
        """One sub-request per state partition, keeping the request's topic order."""
        parts: dict[int, dict[UUID, list]] = {}
        for topic in request.topics:
            for p in topic.partitions:
                sp = self.partition_of(request.group_id, topic.topic_id, p.partition)
                parts.setdefault(sp, {}).setdefault(topic.topic_id, []).append(p)
        return {
            sp: request.copy(topics=[t.copy(partitions=parts[sp][t.topic_id]) for t in request.topics
                                     if t.topic_id in parts[sp]])
            for sp in parts
        }

    async def _run(self, request, op):
        if not request.group_id or not request.topics:
            # The shard answers the degenerate cases (empty group id or topics) itself.
            _, response = op(self.shard(0), request)
            return response
        responses = []
        for sp, sub in self._split(request).items():
            shard = self.shard(sp)
            records, response = op(shard, sub)
            if records:
                offsets = self.journal.append(sp, records)
                for offset, rec in zip(offsets, records):
                    shard.replay(offset, rec.key, rec.value)
                await self.journal.sync(sp, offsets)
            responses.append(response)
        return _merge(responses)


def _merge(responses: list):
    """Join per-shard responses into one, topic by topic (all carry a ``results`` list)."""
    if len(responses) == 1:
        return responses[0]
    by_topic: dict[UUID, object] = {}
    for r in responses:
        for t in r.results:
            if t.topic_id in by_topic:
                by_topic[t.topic_id].partitions.extend(t.partitions)
            else:
                by_topic[t.topic_id] = t.copy(partitions=list(t.partitions))
    return responses[0].copy(results=list(by_topic.values()))
