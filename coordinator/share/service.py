"""The share coordinator service: routes state RPCs to shards and makes their records stick.

A request may name keys of several ``__share_group_state`` partitions; each partition is one
``ShareCoordinatorShard``. For each part the service asks the shard for records and a
response, replays the records into the shard at once (so the next request is computed on top
of them, with no lock and no await in between), hands them to the journal, and answers only
when the journal says they are durable. The journal is the seam to the log: ``None`` keeps
state in memory only.

What Kafka 4.2's ``ShareCoordinatorService`` answers before a shard is asked, followed here:

- no topics, a topic without partitions, or an empty group id: an empty response;
- the coordinator not started (or stopped): COORDINATOR_NOT_AVAILABLE for every partition,
  "Share coordinator is not available.";
- a state partition still loading: COORDINATOR_LOAD_IN_PROGRESS; one this broker does not
  coordinate (never loaded, or its load failed): NOT_COORDINATOR; each with the message
  "Unable to <operation>: <reason>";
- a failed log write: Kafka's ``CoordinatorOperationExceptionHelper`` mapping (storage error
  -> NOT_COORDINATOR, missing partition -> COORDINATOR_NOT_AVAILABLE, too large ->
  UNKNOWN_SERVER_ERROR). A failed fsync after the records were appended and replayed also
  answers NOT_COORDINATOR; the log is offline from then on, so nothing else is written.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol
from uuid import UUID

from protocol.errors import ErrorCode
from protocol.messages import (
    delete_share_group_state_response as delete_rsp,
)
from protocol.messages import (
    initialize_share_group_state_response as init_rsp,
)
from protocol.messages import (
    read_share_group_state_response as read_rsp,
)
from protocol.messages import (
    read_share_group_state_summary_response as summary_rsp,
)
from protocol.messages import (
    write_share_group_state_response as write_rsp,
)

from .routing import partition_for
from .shard import CoordinatorRecord, ShareCoordinatorShard

log = logging.getLogger("kshare.share_coordinator")

NOT_ACTIVE_MESSAGE = "Share coordinator is not available."
# Errors.X.message() for the runtime's own exceptions.
_REASONS = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
    ErrorCode.NOT_COORDINATOR: "This is not the correct coordinator.",
}
# CoordinatorOperationExceptionHelper: what a failed write is answered with.
_WRITE_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


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


@dataclass(frozen=True)
class _Api:
    """The response classes of one state RPC and the words of its error messages."""

    response: type
    result: type
    partition: type
    operation: str  # "Unable to <operation>: ..."


INITIALIZE = _Api(init_rsp.InitializeShareGroupStateResponse, init_rsp.InitializeStateResult,
                   init_rsp.PartitionResult, "initialize share group state")
READ = _Api(read_rsp.ReadShareGroupStateResponse, read_rsp.ReadStateResult,
             read_rsp.PartitionResult, "read share group state")
WRITE = _Api(write_rsp.WriteShareGroupStateResponse, write_rsp.WriteStateResult,
              write_rsp.PartitionResult, "write share group state")
DELETE = _Api(delete_rsp.DeleteShareGroupStateResponse, delete_rsp.DeleteStateResult,
               delete_rsp.PartitionResult, "delete share group state")
SUMMARY = _Api(summary_rsp.ReadShareGroupStateSummaryResponse, summary_rsp.ReadStateSummaryResult,
                summary_rsp.PartitionResult, "read share group state summary")


def error_response(api: _Api, request, code: ErrorCode, message: str | None):
    """Every partition of ``request`` failed with ``code`` (also the state RPC handlers' answer
    to their own unexpected failure, Kafka's getErrorResponse)."""
    return api.response(results=[
        api.result(topic_id=t.topic_id, partitions=[
            api.partition(partition=p.partition, error_code=int(code), error_message=message)
            for p in t.partitions
        ])
        for t in request.topics
    ])


class ShareCoordinatorService:
    def __init__(
        self,
        *,
        num_partitions: int = 50,
        records_per_snapshot: int = 500,
        topic_partitions: Callable[[UUID], int | None] | None = None,
        clock_ms: Callable[[], int] | None = None,
        journal: Journal | None = None,
        active: bool = True,
    ) -> None:
        self.num_partitions = num_partitions
        self._records_per_snapshot = records_per_snapshot
        self._topic_partitions = topic_partitions
        self._clock_ms = clock_ms
        self.journal: Journal = journal or _MemoryJournal()
        self.shards: dict[int, ShareCoordinatorShard] = {}
        # Kafka's isActive: False before startup and after shutdown.
        self.active = active
        # State partitions this coordinator cannot serve yet (loading) or at all (failed).
        self._unavailable: dict[int, ErrorCode] = {}

    def shard(self, partition: int) -> ShareCoordinatorShard:
        s = self.shards.get(partition)
        if s is None:
            s = self.shards[partition] = ShareCoordinatorShard(
                self._records_per_snapshot, clock_ms=self._clock_ms, topic_partitions=self._topic_partitions
            )
        return s

    def partition_of(self, group_id: str, topic_id: UUID, partition: int) -> int:
        return partition_for(group_id, topic_id, partition, self.num_partitions)

    # --- which state partitions are served --------------------------------------------------

    def set_loading(self, partition: int) -> None:
        self._unavailable[partition] = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

    def set_loaded(self, partition: int) -> None:
        self._unavailable.pop(partition, None)

    def set_failed(self, partition: int) -> None:
        """A partition whose load failed: its shard is dropped and its keys are NOT_COORDINATOR."""
        self.shards.pop(partition, None)
        self._unavailable[partition] = ErrorCode.NOT_COORDINATOR

    def serving(self, partition: int) -> bool:
        return self.active and partition not in self._unavailable

    def loading(self) -> list[int]:
        return sorted(p for p, c in self._unavailable.items() if c == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)

    # --- the five state RPCs ------------------------------------------------------------------

    async def initialize_state(self, request):
        return await self._run(request, INITIALIZE, lambda s, r: s.initialize_state(r))

    async def read_state(self, request):
        return await self._run(request, READ, lambda s, r: s.read_state(r))

    async def write_state(self, request, version: int = 1):
        return await self._run(request, WRITE, lambda s, r: s.write_state(r, version))

    async def delete_state(self, request):
        return await self._run(request, DELETE, lambda s, r: s.delete_state(r))

    async def read_state_summary(self, request, version: int = 1):
        return await self._run(request, SUMMARY, lambda s, r: ([], s.read_state_summary(r, version)))

    # --- records written by the coordinator itself --------------------------------------------

    def write_records(self, partition: int, records: list[CoordinatorRecord]) -> Awaitable[None]:
        """Append and replay records the coordinator decided on by itself (snapshots, tombstones)
        now, not when a task gets to them: they were computed from the shard's state, and a
        request running in between would be undone by them (Kafka computes them inside a write
        operation). Returns what waits for their sync and raises a failure."""
        if not records or not self.serving(partition):
            return _completed()
        shard = self.shard(partition)
        try:
            offsets = self.journal.append(partition, records)
        except Exception as e:
            return _completed(e)
        for offset, rec in zip(offsets, records):
            shard.replay(offset, rec.key, rec.value)
        return self.journal.sync(partition, offsets)

    # --- plumbing -----------------------------------------------------------------------------

    def _split(self, request) -> dict[int, object]:
        """One sub-request per state partition, keeping the request's topic order. A topic named
        twice is one topic with the partitions of both, as Kafka keys its work by topic id."""
        if len(request.topics) == 1 and len(request.topics[0].partitions) == 1:  # a leader's write
            topic = request.topics[0]
            return {self.partition_of(request.group_id, topic.topic_id, topic.partitions[0].partition): request}
        parts: dict[int, dict[UUID, list]] = {}
        firsts: dict[UUID, object] = {}  # each topic id's first entry
        for topic in request.topics:
            firsts.setdefault(topic.topic_id, topic)
            for p in topic.partitions:
                sp = self.partition_of(request.group_id, topic.topic_id, p.partition)
                parts.setdefault(sp, {}).setdefault(topic.topic_id, []).append(p)
        return {
            sp: request.copy(topics=[firsts[tid].copy(partitions=ps) for tid, ps in parts[sp].items()])
            for sp in parts
        }

    async def _run(self, request, api: _Api, op):
        # ShareCoordinatorService's order: read and write answer a request naming nothing before
        # checking that the coordinator runs, the others after; initialize needs a group id and
        # topics only (one without partitions just gets no result).
        if not request.topics:
            return api.response()
        no_group = not request.group_id
        no_partitions = any(not t.partitions for t in request.topics)
        if (no_group or no_partitions) and (api is READ or api is WRITE):
            return api.response()
        if not self.active:
            return error_response(api, request, ErrorCode.COORDINATOR_NOT_AVAILABLE, NOT_ACTIVE_MESSAGE)
        if no_group or (no_partitions and api is not INITIALIZE):
            return api.response()
        responses: list = []
        pending: list[tuple[int, int, object, list[int]]] = []  # (index, state partition, sub, offsets)
        for sp, sub in self._split(request).items():
            code = self._unavailable.get(sp)
            if code is not None:
                responses.append(error_response(api, sub, code, f"Unable to {api.operation}: {_REASONS[code]}"))
                continue
            shard = self.shard(sp)
            try:
                records, response = op(shard, sub)
            except Exception as e:  # a bug or an unreadable record: Kafka's UNKNOWN_SERVER_ERROR
                log.exception("%s on %s failed", api.operation, sub)
                responses.append(error_response(api, sub, ErrorCode.UNKNOWN_SERVER_ERROR,
                                                 f"Unable to {api.operation}: {e}"))
                continue
            if records:
                try:
                    offsets = self.journal.append(sp, records)
                except Exception as e:
                    responses.append(self._write_failed(api, sub, e))
                    continue
                for offset, rec in zip(offsets, records):
                    shard.replay(offset, rec.key, rec.value)
                pending.append((len(responses), sp, sub, offsets))
            responses.append(response)
        if not responses:  # an initialize whose topics all came without partitions
            return api.response()
        if pending:
            if len(pending) == 1:  # a leader's write: no task for its one sync
                outcomes = [await _outcome(self.journal.sync(pending[0][1], pending[0][3]))]
            else:
                outcomes = await asyncio.gather(
                    *(self.journal.sync(sp, offsets) for _, sp, _, offsets in pending), return_exceptions=True
                )
            for (i, _, sub, _), outcome in zip(pending, outcomes):
                if isinstance(outcome, BaseException):
                    responses[i] = self._write_failed(api, sub, outcome)
        merged = _merge(responses)
        if len(request.topics) > 1 or len(request.topics[0].partitions) > 1:
            _one_per_partition(merged)
        return merged

    @staticmethod
    def _write_failed(api: _Api, sub, e: BaseException):
        code = getattr(e, "code", None)
        mapped = _WRITE_ERRORS.get(code, code) if code is not None else ErrorCode.UNKNOWN_SERVER_ERROR
        # A storage error is the log's to report (once, not per write; see broker.log.partition).
        level = logging.DEBUG if code == ErrorCode.KAFKA_STORAGE_ERROR else logging.WARNING
        log.log(level, "%s failed to write to the log: %s", api.operation, e)
        return error_response(api, sub, mapped, f"Unable to {api.operation}: {e}")


async def _completed(error: Exception | None = None) -> None:
    if error is not None:
        raise error


async def _outcome(aw):
    """``await aw``, returning an exception instead of raising it (gather's return_exceptions)."""
    try:
        return await aw
    except Exception as e:
        return e


def _one_per_partition(response) -> None:
    """Keep each topic's last result for a partition named more than once, where its first
    was: Kafka keys a request's work by topic id and partition, so such a partition is
    handled once per mention and answered once, with the last outcome."""
    for t in response.results:
        if len(t.partitions) > 1:
            last = {p.partition: p for p in t.partitions}
            if len(last) < len(t.partitions):
                t.partitions = list(last.values())


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
