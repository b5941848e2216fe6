"""The group-coordinator runtime: the one owner of the share-group coordinators in a broker.

Like Kafka's coordinator runtime there is one coordinator *shard* per ``__consumer_offsets``
partition (a ``ShareGroupCoordinator`` holding the groups that hash there). Each shard is a
sans-IO state machine; this shell gives it its inputs and carries out what it asks for:

* records: every record a shard returns goes through ``_persist`` (one record batch appended
  to the shard's partition, flushed as the topic's flush policy asks) in the order it was
  produced, one write at a time per shard; a request is answered only after its records
  (and all earlier ones of its shard) are persisted. If a write fails, the shard is rebuilt
  from its log, as on a restart, and the writes queued behind the failed one are dropped
  (they were computed on state that never reached the log): like the failed one, their
  requests answer NOT_COORDINATOR, Kafka's answer to a storage error (``write_error_code``).
  Writes that keep failing (a full disk) reload it less and less often
  (``REBUILD_BACKOFF_MS``) instead of in a loop of catch-up writes;
* loading: at start every non-empty partition is replayed in the background (``loader``);
  until its shard is loaded, requests for its groups answer COORDINATOR_LOAD_IN_PROGRESS.
  A loaded shard gives its members fresh session deadlines and catches up with topic
  changes made while it was away (``on_loaded``);
* share-partition state (with a persister): partitions are assigned only once the share
  coordinator holds state for them. A heartbeat that finds subscribed partitions without
  state writes them as initializing (Kafka's record sequence), calls InitializeShareGroupState
  through the persister, writes them as initialized (or drops them on failure), and then
  heartbeats once more on the member's behalf so the new partitions are in the same response
  (Kafka leaves them to the member's next heartbeat). Topic changes and loading start the
  same initialisation ahead of any heartbeat, and heartbeats wait for it;
* time: ``now_ms`` for every operation, and one timer armed at the earliest session deadline
  of all shards (re-armed after every operation) that fences silent members;
* topics: a ``TopicLookup`` snapshot of the broker's TopicRegistry, handed to every loaded
  shard on every registry change (``on_metadata_change``: the next heartbeat of a group
  subscribed to a changed topic may bump its epoch);
* group configs: overrides from the ``GroupConfigStore`` layered on the broker's ``group.*``
  properties (``group_settings``), also used by the share-partition leaders;
* departures: members that leave or whose session expires are reported, after their
  records are persisted, to the callbacks registered with ``on_member_departed``;
* compaction (kshare has no log cleaner): a partition mostly of superseded records gets its
  groups' current records appended and its log start moved past the rest (``compact``).

Everything runs on the event loop's thread and a shard is only touched between awaits, so no
operation sees another's half-done state.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
import uuid
from typing import TYPE_CHECKING, Awaitable, Callable, Iterable, Mapping, Protocol, Union

from broker.log.store import KafkaStorageError, RecordTooLarge
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.share_group_heartbeat_response import ShareGroupHeartbeatResponse

from .broker_defaults import BROKER_CONFIG_DEFS, broker_value, validate_broker_config
from .config_store import GroupConfigStore
from .configs import EffectiveGroupConfig, effective
from .loader import DEFAULT_LOAD_BUFFER_BYTES, LoadSummary, load_partition
from .model import STATE_DEAD
from .offsets_topic import (
    COMPRESSION_CODEC_CONFIG,
    CONSUMER_OFFSETS,
    LOAD_BUFFER_SIZE_CONFIG,
    OffsetsTopic,
    topic_configs,
)
from .records import CoordinatorRecord
from .share_group import GroupDescription, HeartbeatResult, ShareGroupCoordinator, validate_request
from .share_offsets import AlteredTopic, DeletedTopic, TopicOffsets
from .share_state import StateRequest
from .topics import TopicInfo, TopicsImage

if TYPE_CHECKING:
    from broker.broker import Broker
    from broker.topics import Topic, TopicRegistry
    from persister.api import Persister

    from .model import Assignment, ShareGroupMember

log = logging.getLogger("kshare.group_coordinator")

# A partition is compacted only from this many records on (Kafka's cleaner never touches the
# active segment, 100 MiB of __consumer_offsets): below it a load is quick anyway.
COMPACT_MIN_RECORDS = 10_000

DepartureListener = Callable[[str, str], None]
# Told that share-partition state of a group was replaced or deleted behind the leaders' backs
# (group id, the (topic id, partition) pairs or None for all of the group's): leaders drop it.
StateInvalidator = Callable[[str, "list[tuple[uuid.UUID, int]] | None"], None]
LOAD_IN_PROGRESS_MESSAGE = "The coordinator is loading and hence can't process requests."
NOT_COORDINATOR_MESSAGE = "This is not the correct coordinator."
INITIALIZATION_WAIT_S = 5.0  # a heartbeat waits at most this long for its group's share-state initialisation
# A shard whose writes fail again right after a rebuild (a full disk) reloads after this long,
# doubling up to the second value: its catch-up writes would otherwise fail and rebuild it in a loop.
REBUILD_BACKOFF_MS = (100, 5_000)


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Milliseconds for the coordinator, and timers at such a time."""

    def now_ms(self) -> int: ...

    def call_at(self, when_ms: int, callback: Callable[[], None]) -> TimerHandle: ...


class LoopClock:
    """Monotonic milliseconds with timers on the running event loop. Session deadlines must
    not move with the wall clock (an NTP step, a laptop resuming from sleep would expire every
    member at once); Kafka's coordinator timers run on nanoTime too. No record carries them."""

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def call_at(self, when_ms: int, callback: Callable[[], None]) -> TimerHandle:
        loop = asyncio.get_running_loop()
        return loop.call_at(loop.time() + max(0, when_ms - self.now_ms()) / 1000, callback)


def group_broker_properties(static: Mapping[str, str], dynamic_default: Mapping[str, str] | None = None,
                            dynamic: Mapping[str, str] | None = None) -> dict[str, str]:
    """The broker's group-coordinator properties as set (not defaults), dynamic layers winning."""
    layered = {**static, **(dynamic_default or {}), **(dynamic or {})}
    return {k: str(v) for k, v in layered.items() if k in BROKER_CONFIG_DEFS}


class RegistryTopics:
    """Adapts the broker's TopicRegistry to the coordinator's ``TopicLookup``: an immutable
    snapshot, so one coordinator operation never sees a topic change half-way.

    It applies the registry's changes to its two lookups (``changed``) and a snapshot copies
    them: rebuilding every TopicInfo at each change made creating N topics O(N^2)."""

    def __init__(self, registry: TopicRegistry) -> None:
        self._by_name: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self._image: TopicsImage | None = None
        self.changed([(t.name, t) for t in registry])

    def changed(self, changes: list[tuple[str, Topic | None]]) -> None:
        """A TopicRegistry change: [(name, topic or None if deleted)]."""
        for name, topic in changes:
            old = self._by_name.pop(name, None)
            if old is not None:
                del self._by_id[old.topic_id]
            if topic is not None:
                self._by_name[name] = self._by_id[topic.topic_id] = TopicInfo(topic.topic_id, name, topic.partitions)
        self._image = None

    def snapshot(self) -> TopicsImage:
        if self._image is None:
            self._image = TopicsImage.of(self._by_name, self._by_id)
        return self._image


class ShardState(enum.Enum):
    LOADING = "loading"  # replaying its partition (or waiting for start): requests get 14
    ACTIVE = "active"
    FAILED = "failed"  # its partition could not be loaded: requests get 16


class StaleWrite(Exception):
    """A write computed on state that an earlier failed write invalidated; never persisted."""


class _Shard:
    """One ``__consumer_offsets`` partition's coordinator and its write queue."""

    __slots__ = ("partition", "coordinator", "state", "tail", "generation", "loading", "backlog", "failures")

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.coordinator: ShareGroupCoordinator | None = None
        self.state = ShardState.LOADING
        self.tail: asyncio.Future | None = None  # resolves when the last queued write is done
        self.generation = 0  # bumped by every rebuild: older queued writes are stale
        self.loading: asyncio.Task | None = None
        self.backlog: list[CoordinatorRecord] = []  # produced while no event loop ran
        self.failures = 0  # writes failed since the last one that succeeded


PersisterSource = Union["Persister", Callable[[], "Persister"], None]
OffsetsSource = Union[OffsetsTopic, Callable[[], OffsetsTopic], None]


class GroupCoordinatorRuntime:
    def __init__(
        self,
        topics: TopicRegistry,
        broker_config: Mapping[str, str],
        config_store: GroupConfigStore,
        clock: Clock | None = None,
        *,
        offsets: OffsetsSource = None,
        persister: PersisterSource = None,
        load_buffer_bytes: int = DEFAULT_LOAD_BUFFER_BYTES,
        compact_interval_s: Callable[[], float] | None = None,
        cleanable_ratio: Callable[[], float] | None = None,
    ) -> None:
        """``broker_config``: the broker's group-coordinator properties (``group_broker_properties``).

        ``offsets``: the ``__consumer_offsets`` partitions, or a factory called by ``start``
        (a broker creates the topic then); None keeps the records in memory. Partitions that
        already hold records are loaded by ``start``; empty ones are usable at once.
        ``persister`` (or a factory for it): where share-partition state is initialised and
        deleted; without one every partition is assignable at once and no
        ShareGroupStatePartitionMetadata is written.
        ``compact_interval_s`` (None: never) gives the dynamic ``log.cleaner.backoff.ms`` (how
        often each partition is offered to ``compact``, in seconds); ``cleanable_ratio``
        replaces the topic's ``min.cleanable.dirty.ratio`` (tests).
        """
        self._clock: Clock = clock or LoopClock()
        self._topics = RegistryTopics(topics)
        self.config_store = config_store
        self.broker_config = dict(broker_config)
        self._persister_source = persister
        self._track = persister is not None
        self._load_buffer_bytes = load_buffer_bytes
        self._compact_interval_s = compact_interval_s
        self._cleanable_ratio = cleanable_ratio
        self._compactor: asyncio.Task | None = None
        self.compact_min_records = COMPACT_MIN_RECORDS
        self._offsets_factory = offsets if callable(offsets) and not isinstance(offsets, OffsetsTopic) else None
        self._offsets: OffsetsTopic | None = None
        self._shards: list[_Shard] = []
        self.coordinator = Coordinators(self)
        self._departure_listeners: list[DepartureListener] = []
        self._timer: TimerHandle | None = None
        self._timer_deadline: int | None = None
        self._tasks: set[asyncio.Task] = set()
        self._initializing: dict[str, set[asyncio.Future]] = {}  # group id -> share-state initialisations under way
        self._stopped = False
        topics.on_change(self._topic_changed)
        if self._offsets_factory is None:
            self._open(offsets if isinstance(offsets, OffsetsTopic) else OffsetsTopic.in_memory())

    # ------------------------------------------------------------------ lifecycle

    def _new_coordinator(self) -> ShareGroupCoordinator:
        return ShareGroupCoordinator(self._topics.snapshot(), broker_config=self.broker_config,
                                     group_config=self.config_store.get, track_share_state=self._track)

    def _open(self, offsets: OffsetsTopic) -> None:
        self._offsets = offsets
        shards = []
        for p in range(offsets.num_partitions):
            shard = _Shard(p)
            if offsets.is_empty(p):  # nothing to load
                shard.coordinator = self._new_coordinator()
                shard.state = ShardState.ACTIVE
            shards.append(shard)
        self._shards = shards

    async def start(self) -> None:
        """Open ``__consumer_offsets``, start loading its non-empty partitions in the
        background, and bring the already usable shards up (session deadlines for loaded
        members, share-state initialisation, the expiry timer)."""
        self._stopped = False
        if self._offsets is None:
            self._open(self._offsets_factory())
        for shard in self._shards:
            if shard.state is ShardState.ACTIVE:
                self._activate(shard)
            elif shard.state is ShardState.LOADING and shard.loading is None:
                self._start_loading(shard)
        self._rearm()
        if self._compact_interval_s is not None and self._compactor is None:
            self._compactor = asyncio.get_running_loop().create_task(self._compact_loop())

    async def stop(self) -> None:
        """Stop loading, disarm the timer and wait for queued writes and share-state work
        (their departures are still reported)."""
        self._stopped = True
        if self._compactor is not None:
            self._compactor.cancel()
            self._compactor = None
        for shard in self._shards:
            if shard.loading is not None:
                shard.loading.cancel()
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_deadline = None, None
        await self.flush()

    async def flush(self) -> None:
        """Wait until every write and background task started so far is done."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def wait_loaded(self) -> None:
        """Wait until every partition that was loading has loaded (or failed to)."""
        while True:
            loading = [s.loading for s in self._shards if s.loading is not None and not s.loading.done()]
            if not loading:
                return
            await asyncio.gather(*loading, return_exceptions=True)

    def shard_state(self, group_id: str) -> ShardState | None:
        """The state of the shard that owns ``group_id`` (None before ``start`` opened them)."""
        shard = self._shard(group_id)
        return None if shard is None else shard.state

    @property
    def num_partitions(self) -> int:
        return len(self._shards)

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition of a group (Kafka's ``partitionFor``)."""
        if self._offsets is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return self._offsets.partition_for(group_id)

    # ------------------------------------------------------------------ loading

    def _start_loading(self, shard: _Shard, delay_ms: int = 0) -> None:
        shard.state = ShardState.LOADING
        shard.coordinator = None
        task = asyncio.get_running_loop().create_task(self._load(shard, delay_ms))
        shard.loading = task
        self._track_task(task)

    async def _load(self, shard: _Shard, delay_ms: int = 0) -> None:
        generation = shard.generation
        try:
            if delay_ms:
                await self._sleep_ms(delay_ms)
            coordinator = self._new_coordinator()
            started = time.monotonic()
            summary = await self._load_partition(shard.partition, coordinator)
        except asyncio.CancelledError:
            shard.loading = None
            raise
        except Exception as e:
            # An offline log is already reported by the log itself; its traceback would say nothing more.
            log.error("loading %s-%d failed; its share groups stay unavailable: %s", CONSUMER_OFFSETS,
                      shard.partition, e, exc_info=not isinstance(e, KafkaStorageError))
            if shard.generation == generation:
                shard.state, shard.loading = ShardState.FAILED, None
            return
        if shard.generation != generation or self._stopped:
            return
        shard.coordinator, shard.state, shard.loading = coordinator, ShardState.ACTIVE, None
        log.log(logging.INFO if generation == 0 else logging.DEBUG,  # later loads are rebuilds after failed writes
                "loaded %s-%d: %d share group(s) from %d record(s) up to offset %d in %.0f ms", CONSUMER_OFFSETS,
                shard.partition, len(coordinator.group_ids()), summary.replayed, summary.end_offset,
                (time.monotonic() - started) * 1000)
        self._activate(shard)

    async def _load_partition(self, partition: int, coordinator: ShareGroupCoordinator) -> LoadSummary:
        """Replay one partition into ``coordinator`` (a seam for tests that hold loading)."""
        return await load_partition(self._offsets, partition, coordinator, chunk_bytes=self._load_buffer_bytes)

    async def _sleep_ms(self, delay_ms: int) -> None:
        """Wait ``delay_ms`` on the coordinator's clock."""
        waiter = asyncio.get_running_loop().create_future()
        timer = self._clock.call_at(self._clock.now_ms() + delay_ms,
                                    lambda: waiter.done() or waiter.set_result(None))
        try:
            await waiter
        finally:
            timer.cancel()

    def _activate(self, shard: _Shard) -> None:
        """A shard became usable: members get session deadlines, topic changes made while
        it was away bump epochs at the groups' next heartbeats, share state missing for
        subscribed partitions is set up."""
        coordinator = shard.coordinator
        records = shard.backlog + coordinator.on_loaded(self._clock.now_ms(), self._topics.snapshot())
        shard.backlog = []
        self._rearm()
        if records:
            self._queue(shard, records)
        self._initialize_groups(shard, coordinator.group_ids())

    # ------------------------------------------------------------------ routing

    def _shard(self, group_id: str) -> _Shard | None:
        if not self._shards:
            return None
        return self._shards[self._offsets.partition_for(group_id)]

    def _active_shard(self, group_id: str) -> _Shard:
        """The loaded shard of ``group_id``; raises KafkaError COORDINATOR_LOAD_IN_PROGRESS
        while it loads, COORDINATOR_NOT_AVAILABLE before start, NOT_COORDINATOR if it failed to
        load (Kafka's runtime: a partition neither active nor loading is not its to coordinate)."""
        shard = self._shard(group_id)
        if shard is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if shard.state is ShardState.FAILED:
            raise KafkaError(ErrorCode.NOT_COORDINATOR, NOT_COORDINATOR_MESSAGE)
        if shard.state is ShardState.LOADING:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, LOAD_IN_PROGRESS_MESSAGE)
        return shard

    def _active_shards(self) -> list[_Shard]:
        return [s for s in self._shards if s.state is ShardState.ACTIVE]

    # ------------------------------------------------------------------ API

    async def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        rack_id: str | None,
        subscribed_topic_names: Iterable[str] | None,
        client_id: str,
        client_host: str,
    ) -> ShareGroupHeartbeatResponse:
        """One ShareGroupHeartbeat (join with epoch 0, leave with -1), answered once its
        records are persisted (and, if it set up share state, once that is done too)."""
        if subscribed_topic_names is not None:
            subscribed_topic_names = list(subscribed_topic_names)
        problem = validate_request(group_id, member_id, member_epoch, rack_id, subscribed_topic_names)
        if problem is not None:
            return HeartbeatResult.failed(ErrorCode.INVALID_REQUEST, problem).to_response()
        try:
            self._active_shard(group_id)
            await self._initialized(group_id)
            shard = self._active_shard(group_id)
        except KafkaError as e:
            return HeartbeatResult.failed(e.code, e.message).to_response()
        result = shard.coordinator.heartbeat(group_id, member_id, member_epoch, rack_id, subscribed_topic_names,
                                             client_id, client_host, self._clock.now_ms())
        self._rearm_for(shard, group_id, member_id)
        pending = self._begin_initialization(result.initialize)
        try:
            await self._settled(self._queue(shard, result.records, result.departed))
        except Exception as e:
            if pending is not None:
                pending.set_result(False)
            return HeartbeatResult.failed(write_error_code(e), None).to_response()
        if pending is not None:
            initialized = await asyncio.shield(self._initialize_soon(result.initialize, pending))
            if initialized and result.error_code == 0:
                result = await self._heartbeat_again(result, group_id, member_id, client_id, client_host)
        return result.to_response()

    async def _heartbeat_again(self, first: HeartbeatResult, group_id: str, member_id: str, client_id: str,
                               client_host: str) -> HeartbeatResult:
        """After the heartbeat's share partitions were initialised: the heartbeat the member
        would send next (its new epoch, nothing changed), so the response already carries
        the partitions. Its records are what Kafka writes for that next heartbeat."""
        try:
            shard = self._active_shard(group_id)
        except KafkaError:
            return first
        again = shard.coordinator.heartbeat(group_id, member_id, first.member_epoch, None, None, client_id,
                                            client_host, self._clock.now_ms())
        self._rearm_for(shard, group_id, member_id)
        if again.error_code:
            return first
        pending = self._begin_initialization(again.initialize)
        try:
            await self._settled(self._queue(shard, again.records, again.departed))
        except Exception:
            if pending is not None:
                pending.set_result(False)
            return first  # that state was rebuilt from the log, where the first one is
        if pending is not None:
            self._initialize_soon(again.initialize, pending)
        if again.assignment is None:
            again.assignment = first.assignment
        again.initialize = None
        return again

    async def delete_group(self, group_id: str, *, invalidate: StateInvalidator | None = None) -> None:
        """DeleteGroups for a share group; raises KafkaError GROUP_ID_NOT_FOUND /
        NON_EMPTY_GROUP (or a coordinator or persister error). With a persister its share
        partitions' state is deleted first (DeleteShareGroupState), as Kafka does;
        ``invalidate(group_id, None)`` is called once it is gone."""
        self._active_shard(group_id)
        await self._initialized(group_id)  # no share state may appear behind the delete
        shard = self._active_shard(group_id)
        if self._track:
            plan = shard.coordinator.prepare_group_deletion(group_id)
            await self._written(shard, plan.records)
            if plan.request is not None:
                try:
                    await self._delete_state(plan.request)
                finally:
                    if invalidate is not None:
                        invalidate(group_id, None)
            shard = self._active_shard(group_id)
        await self._written(shard, shard.coordinator.delete_group(group_id))

    async def _written(self, shard: _Shard, records: list[CoordinatorRecord]) -> None:
        """Queue ``records`` and wait until they are persisted. A write that fails (or was
        computed on state an earlier failed write took back) is the request's error
        (``write_error_code``), as for heartbeats, never an exception out of its handler."""
        try:
            await self._settled(self._queue(shard, records))
        except Exception as e:
            raise KafkaError(write_error_code(e)) from None

    async def _delete_state(self, request: StateRequest) -> None:
        try:
            results = await self._persister().delete_state(request.group_id, request.pairs())
        except KafkaError:
            raise
        except Exception:  # GroupCoordinatorService.deleteShareGroup: this group's error, not the request's
            log.exception("deleting the share state of group %s failed", request.group_id)
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR) from None
        for (topic_id, partition), (code, message) in sorted(results.items()):
            if code:
                log.error("deleting the share state of %s-%d for group %s failed: %s %s", topic_id, partition,
                          request.group_id, ErrorCode(code).name, message)
                raise KafkaError(code, message)

    # ------------------------------------------------------------------ share-group admin

    def active_coordinator(self, group_id: str) -> ShareGroupCoordinator:
        """The loaded coordinator of ``group_id``'s shard; raises KafkaError
        COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR like every request does."""
        return self._active_shard(group_id).coordinator

    async def committed_coordinator(self, group_id: str) -> ShareGroupCoordinator:
        """``active_coordinator`` once every write queued on the group's shard is persisted.
        Kafka's read operations (ShareGroupDescribe, DescribeShareGroupOffsets, DescribeGroups)
        see the state at the last committed offset: a member whose join is still being written
        is not shown, nor what a failed write then takes back (the shard is rebuilt before its
        tail resolves)."""
        await self._drained(self._active_shard(group_id))
        return self.active_coordinator(group_id)

    async def committed_groups(self) -> list[tuple[str, str]] | None:
        """``(group id, state)`` of every group once the writes queued on the loaded shards are
        persisted, as Kafka's ListGroups reads each shard at its last committed offset; None
        while a shard is loading (a failed write may have started a rebuild meanwhile)."""
        for shard in self._active_shards():
            await self._drained(shard)
        return None if self.loading() else self.coordinator.list_groups()

    def loading(self) -> bool:
        """Whether some ``__consumer_offsets`` partition is still being loaded (ListGroups
        then answers COORDINATOR_LOAD_IN_PROGRESS, as Kafka's read-all operation does)."""
        return any(s.state is ShardState.LOADING for s in self._shards)

    async def share_group_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None
                                  ) -> list[TopicOffsets]:
        """DescribeShareGroupOffsets' data: the share-state summary (start offset, leader epoch,
        delivery-complete count) of the named partitions, or with ``topics`` None of every
        initialized share partition of the group, read through the persister
        (ReadShareGroupStateSummary). Like Kafka, the group's existence is not checked; a topic
        that does not exist or a partition whose read failed is reported without a summary.
        Raises KafkaError when the shard is not available (``topics`` None) or the persister
        fails outright."""
        coordinator = await self.committed_coordinator(group_id) if topics is None else None
        snapshot = self._topics.snapshot()
        out: list[TopicOffsets] = []
        wanted: list[tuple[TopicInfo, list[int]]] = []
        if topics is None:
            for topic_id, partitions in coordinator.initialized_partitions(group_id).items():
                topic = snapshot.topic_by_id(topic_id)
                if topic is not None:
                    wanted.append((topic, sorted(partitions)))
        else:
            named: dict[str, tuple[TopicInfo, set[int]]] = {}
            for name, partitions in topics:
                topic = snapshot.topic_by_name(name)
                if topic is None:
                    out.append(TopicOffsets(name, None, [(p, None) for p in partitions]))
                else:
                    named.setdefault(name, (topic, set()))[1].update(partitions)
            # Kafka's persister answers from maps keyed by topic id and partition: each once,
            # the partitions ascending.
            wanted = [(topic, sorted(ps)) for topic, ps in named.values()]
        if wanted and (not group_id or any(not ps or min(ps) < 0 for _, ps in wanted)):
            # Kafka's DefaultStatePersister refuses such a summary read outright
            # (validateGroupTopicPartitionData), which fails the group.
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "invalid share state summary request")
        pairs = [(t.topic_id, p) for t, ps in wanted for p in ps]
        if not pairs:
            return out
        try:
            summaries = await self._persister().read_summary(group_id, pairs)
        except KafkaError:
            raise
        except Exception as e:
            log.exception("reading the share state summary of group %s failed", group_id)
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(e)) from None
        found = [TopicOffsets(t.name, t.topic_id, [(p, summaries.get((t.topic_id, p))) for p in ps])
                 for t, ps in wanted]
        return sorted(found, key=lambda t: t.name) + out

    async def alter_share_group_offsets(self, group_id: str, topics: list[tuple[str, list[tuple[int, int]]]], *,
                                        invalidate: StateInvalidator | None = None) -> list[AlteredTopic]:
        """AlterShareGroupOffsets: reset the start offset of share partitions of an empty (or
        new) share group. As in Kafka the partitions are recorded as initializing, the share
        coordinator re-initialises their state (InitializeShareGroupState with the new start
        offset and state epoch = group epoch: no state batches, delivery-complete count 0),
        and on success they are recorded as initialized; if any partition fails they all stay
        initializing (a later heartbeat retries). ``invalidate`` drops the leaders' in-flight
        state for those partitions, before and after the reset, so they reload it.
        Raises KafkaError for group-level errors."""
        self._active_shard(group_id)
        await self._initialized(group_id)
        shard = self._active_shard(group_id)
        plan = shard.coordinator.prepare_offsets_alter(group_id, topics, self._clock.now_ms())
        results = [AlteredTopic(name, tid, [(p, int(code), None) for p, code in rows])
                   for name, tid, rows in plan.results]
        if plan.request is None:  # nothing to initialise; a named topic may still be recorded
            await self._written(shard, plan.records)
            return results
        pending = self._begin_initialization(plan.request)
        ok = False
        try:
            await self._written(shard, plan.records)
            pairs = plan.request.pairs()
            if invalidate is not None:
                invalidate(group_id, pairs)
            failures = await self._initialize_offsets(plan.request, plan.offsets)
            if invalidate is not None:
                invalidate(group_id, pairs)
            if failures:
                for topic in results:
                    topic.partitions = [(p, *failures.get((topic.topic_id, p), (code, msg)))
                                        for p, code, msg in topic.partitions]
                return results
            shard = self._active_shard(group_id)
            records = shard.coordinator.initialize_share_state(group_id, plan.request.partitions)
            await self._written(shard, records)
            ok = True
            return results
        finally:
            if not pending.done():
                pending.set_result(ok)

    async def _initialize_offsets(self, request: StateRequest, offsets: Mapping[tuple[uuid.UUID, int], int]
                                  ) -> dict[tuple[uuid.UUID, int], tuple[int, str | None]]:
        """InitializeShareGroupState for each partition with its new start offset; returns
        the failed ones (error code, message). A persister that raises fails them all."""
        persister = self._persister()
        pairs = request.pairs()
        outcomes = await asyncio.gather(
            *(persister.initialize_state(request.group_id, t, p, state_epoch=request.state_epoch,
                                         start_offset=offsets[(t, p)]) for t, p in pairs),
            return_exceptions=True,
        )
        failures = {}
        for pair, outcome in zip(pairs, outcomes):
            if isinstance(outcome, BaseException):
                log.error("resetting the share state of %s-%d for group %s failed: %r", *pair, request.group_id, outcome)
                failures[pair] = (int(ErrorCode.UNKNOWN_SERVER_ERROR), str(outcome))
            elif outcome[0] != ErrorCode.NONE:
                failures[pair] = (int(outcome[0]), outcome[1])
        return failures

    async def delete_share_group_offsets(self, group_id: str, topic_names: list[str], *,
                                         invalidate: StateInvalidator | None = None) -> list[DeletedTopic]:
        """DeleteShareGroupOffsets: delete the share state of whole topics of an empty share
        group, Kafka's way: the topics' initialized partitions move to deleting, their state
        is deleted (DeleteShareGroupState), and the topics whose state is gone leave the
        deleting set. Answers the deleted topics first, then the failed ones. Raises KafkaError
        for group-level errors (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, coordinator errors)."""
        self._active_shard(group_id)
        await self._initialized(group_id)
        shard = self._active_shard(group_id)
        step = shard.coordinator.prepare_offsets_delete(group_id, topic_names)
        errors = [DeletedTopic(name, None, int(code), msg) for name, code, msg in step.errors]
        await self._written(shard, step.records)
        if not step.to_delete:
            return errors
        pairs = [(t, p) for t, (_, ps) in sorted(step.to_delete.items()) for p in sorted(ps)]
        try:
            results = await self._persister().delete_state(group_id, pairs)
        except Exception as e:  # Kafka answers Errors.forException(e) with the code's default message
            log.exception("deleting share state of group %s failed", group_id)
            raise KafkaError(e.code if isinstance(e, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR) from None
        finally:
            if invalidate is not None:
                invalidate(group_id, pairs)
        deleted, failed = [], []
        for topic_id, (name, partitions) in sorted(step.to_delete.items(), key=lambda kv: kv[1][0]):
            codes = [results.get((topic_id, p), (ErrorCode.NONE, None))[0] for p in sorted(partitions)]
            bad = next((c for c in codes if c), ErrorCode.NONE)
            if bad:
                failed.append(DeletedTopic(name, topic_id, int(bad), None))
            else:
                deleted.append(DeletedTopic(name, topic_id))
        if deleted:
            shard = self._active_shard(group_id)
            records = shard.coordinator.complete_offsets_delete(group_id, [t.topic_id for t in deleted])
            await self._written(shard, records)
        return deleted + errors + failed

    def group_settings(self, group_id: str) -> EffectiveGroupConfig:
        """The configs a group runs with: its overrides on the broker's ``group.*`` values.
        Changes apply from the next call (a heartbeat, a lock acquired afterwards)."""
        shard = self._shard(group_id)
        if shard is not None and shard.coordinator is not None:
            return shard.coordinator.settings(group_id)
        return effective(dict(self.config_store.get(group_id)), self.broker_config)

    def group_configs(self, group_id: str) -> Mapping[str, str]:
        return self.config_store.get(group_id)

    def set_group_configs(self, group_id: str, props: Mapping[str, str]) -> None:
        """Replace a group's overrides (already validated) and persist them."""
        if self.config_store.replace(group_id, props):
            log.info("configs of group %s set to %s", group_id, dict(props))

    def on_member_departed(self, callback: DepartureListener) -> None:
        """``callback(group_id, member_id)`` after a member left or was fenced by session
        expiry, once the records removing it are persisted. Called on the event loop; it
        must not block (schedule a task for async work)."""
        self._departure_listeners.append(callback)

    # ------------------------------------------------------------------ share-partition state

    def _persister(self) -> Persister:
        source = self._persister_source
        return source() if callable(source) and not hasattr(source, "initialize_state") else source

    def _begin_initialization(self, request: StateRequest | None) -> asyncio.Future | None:
        """Register an initialisation of ``request``'s group now, before any await, so that
        heartbeats of the group arriving meanwhile wait for it (``_initialized``)."""
        if request is None:
            return None
        future = asyncio.get_running_loop().create_future()
        pending = self._initializing.setdefault(request.group_id, set())
        pending.add(future)

        def done(f: asyncio.Future, group_id: str = request.group_id) -> None:
            waiting = self._initializing.get(group_id)
            if waiting is not None:
                waiting.discard(f)
                if not waiting:
                    del self._initializing[group_id]

        future.add_done_callback(done)
        return future

    async def _initialized(self, group_id: str) -> None:
        """Wait (a bounded time) for share-state initialisations of the group under way."""
        pending = self._initializing.get(group_id)
        if pending:
            await asyncio.wait(list(pending), timeout=INITIALIZATION_WAIT_S)

    def _initialize_soon(self, request: StateRequest, pending: asyncio.Future) -> asyncio.Task:
        """``_initialize`` as a task of its own: a request that goes away (its connection
        closed) must not leave partitions initializing half-way."""
        task = asyncio.get_running_loop().create_task(self._initialize(request, pending))
        self._track_task(task)
        return task

    async def _initialize(self, request: StateRequest, pending: asyncio.Future) -> bool:
        """InitializeShareGroupState for every partition of ``request`` (state epoch = the
        group epoch, start offset -1), then record the outcome: all initialized, or (if any
        failed, as Kafka treats the whole request) none initializing. True on success."""
        ok = False
        try:
            persister = self._persister()
            outcomes = await asyncio.gather(
                *(persister.initialize_state(request.group_id, topic_id, partition, state_epoch=request.state_epoch,
                                             start_offset=-1)
                  for topic_id, partition in request.pairs()),
                return_exceptions=True,
            )
            failures = [(pair, o) for pair, o in zip(request.pairs(), outcomes)
                        if isinstance(o, BaseException) or o[0] != ErrorCode.NONE]
            for (topic_id, partition), outcome in failures[:3]:
                log.warning("initializing the share state of %s-%d for group %s failed: %s", topic_id, partition,
                            request.group_id, outcome if isinstance(outcome, BaseException)
                            else f"{ErrorCode(outcome[0]).name} {outcome[1] or ''}")
            try:
                shard = self._active_shard(request.group_id)
            except KafkaError:
                return False  # being rebuilt: the partitions stay initializing and are retried
            coordinator = shard.coordinator
            if failures:
                records = coordinator.uninitialize_share_state(request.group_id, request.partitions)
            else:
                records = coordinator.initialize_share_state(request.group_id, request.partitions)
            try:
                await self._settled(self._queue(shard, records))
            except Exception:
                return False
            ok = not failures
            return ok
        finally:
            if not pending.done():
                pending.set_result(ok)

    def _initialize_groups(self, shard: _Shard, group_ids: Iterable[str]) -> None:
        """Start share-state initialisation for groups whose subscribed partitions lack it
        (after loading, after topic changes), without waiting for their heartbeats."""
        if not self._track or self._stopped:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # done when the shard is activated
        now = self._clock.now_ms()
        for group_id in group_ids:
            plan = shard.coordinator.maybe_initialize(group_id, now)
            if plan.request is None:
                continue
            pending = self._begin_initialization(plan.request)
            write = self._queue(shard, plan.records)
            self._track_task(loop.create_task(self._initialize_after(write, plan.request, pending)))

    async def _initialize_after(self, write: Awaitable[None], request: StateRequest, pending: asyncio.Future) -> None:
        try:
            await self._settled(write)
        except Exception:
            pending.set_result(False)
            return
        await self._initialize(request, pending)

    # ------------------------------------------------------------------ records

    async def _persist(self, records: list[CoordinatorRecord]) -> None:
        """The one place records leave a shard: one batch appended to the partition of the
        groups they belong to (all of one shard), flushed per the topic's flush policy.
        Called in production order, one call at a time per shard."""
        partition = self._offsets.partition_for(records[0].key.group_id)
        await self._offsets.append(partition, records)

    async def compact(self, partition: int, *, min_records: int | None = None) -> bool:
        """Compact one partition the way Kafka's log cleaner leaves ``__consumer_offsets``:
        once it holds ``min_records`` (default ``compact_min_records``) records or more and at
        least the cleanable ratio of them are superseded, append every group's current records
        (the latest value of each live key) and, once they are flushed, move the log start past
        everything before them. A load then replays about one record per live key instead of
        the whole history. Returns whether it compacted."""
        shard = self._shards[partition]
        lg = self._offsets.log(partition)
        min_records = self.compact_min_records if min_records is None else min_records
        if lg.end_offset - lg.start_offset < min_records:
            return False
        await self._drained(shard)
        if shard.state is not ShardState.ACTIVE:
            return False
        records = shard.coordinator.snapshot_records()
        total = lg.end_offset - lg.start_offset
        # the topic's own ratio, as LogCleanerManager.grabFilthiestCompactedLog reads the log's config
        ratio = lg.config.min_cleanable_ratio if self._cleanable_ratio is None else self._cleanable_ratio()
        if total < min_records or total - len(records) < ratio * total:
            return False
        generation, start = shard.generation, lg.end_offset
        try:
            if records:
                self._offsets.write(partition, records)  # now: no write of the shard runs
            await lg.flush()  # the current records are durable before the old ones go
        except Exception as e:  # a full disk: the log reports it, once, not every backoff
            log.log(logging.DEBUG if _storage_error(e) else logging.WARNING, "compacting %s-%d failed: %s",
                    CONSUMER_OFFSETS, partition, e)
            return False
        if shard.generation != generation or shard.state is not ShardState.ACTIVE:
            return False  # a failed write has it reloading from the log: leave the log whole
        lg.delete_records_before(start)
        log.info("compacted %s-%d: kept the %d current record(s) of %d", CONSUMER_OFFSETS, partition,
                 len(records), total)
        return True

    async def _compact_loop(self) -> None:
        while True:
            await asyncio.sleep(self._compact_interval_s())
            for shard in list(self._shards):
                try:
                    await self.compact(shard.partition)
                except Exception:
                    log.exception("compacting %s-%d failed", CONSUMER_OFFSETS, shard.partition)

    def _queue(self, shard: _Shard, records: list[CoordinatorRecord],
               departed: Iterable[tuple[str, str]] = ()) -> Awaitable[None]:
        """Take the next place in the shard's write order now, synchronously, and return what
        completes that write: ``records`` persisted after every earlier write of the shard,
        then ``departed`` reported. The write runs as its own task, so a caller that stops
        waiting (a closed connection) cannot leave a hole in the order. Awaiting it raises
        what ``_persist`` raised (after the shard was rebuilt from its log), or StaleWrite
        if an earlier write failed."""
        departed = list(departed)
        previous = shard.tail
        if not records and (previous is None or previous.done()):
            self._notify(departed)
            return _DONE
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # e.g. a topic changed before the broker's loop runs
            shard.backlog.extend(records)
            self._notify(departed)
            return _DONE
        done = loop.create_future()
        shard.tail = done
        generation = shard.generation

        async def write() -> None:
            persisted = False
            try:
                if previous is not None:
                    await previous
                if shard.generation != generation:
                    raise StaleWrite(f"{CONSUMER_OFFSETS}-{shard.partition} was rebuilt after a failed write")
                if records:
                    try:
                        await self._persist(records)
                        shard.failures = 0
                    except Exception as e:
                        shard.failures += 1
                        quiet = _storage_error(e)  # a full disk: the log reports it, once, not per write
                        log.log(logging.DEBUG if quiet else logging.ERROR, "persisting %d share-group record(s) "
                                "to %s-%d failed; rebuilding its groups from the log", len(records),
                                CONSUMER_OFFSETS, shard.partition, exc_info=not quiet)
                        await self._rebuild(shard)
                        raise
                persisted = True
            finally:
                done.set_result(None)
                if persisted:
                    self._notify(departed)

        task = loop.create_task(write())
        self._track_task(task)
        return task

    async def _rebuild(self, shard: _Shard) -> None:
        """Throw the shard's state away and replay its log (what a restart would do): at once
        after one failed write, backed off after several in a row (the reload's own catch-up
        writes, such as initialisations it sets up again, would fail and rebuild it in a loop)."""
        shard.generation += 1
        if shard.loading is not None:
            shard.loading.cancel()
        shard.state, shard.coordinator = ShardState.LOADING, None
        if self._stopped:
            return
        first, most = REBUILD_BACKOFF_MS
        delay = 0 if shard.failures <= 1 else min(first << min(shard.failures - 2, 16), most)
        self._start_loading(shard, delay)
        if not delay:  # (a backed-off reload is not waited for: its groups answer LOAD_IN_PROGRESS)
            await asyncio.shield(shard.loading)

    @staticmethod
    async def _drained(shard: _Shard) -> None:
        """Wait until every write queued on ``shard`` so far is done (persisted, or failed and
        the shard rebuilt), without being able to cancel them."""
        while shard.tail is not None and not shard.tail.done():
            await asyncio.shield(shard.tail)

    @staticmethod
    async def _settled(write: Awaitable[None]) -> None:
        """Wait for a write without being able to cancel it."""
        if write is not _DONE:
            await asyncio.shield(write)

    def _track_task(self, task: asyncio.Task) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # logged where it happened; retrieved so asyncio does not warn again

    def _notify(self, departed: list[tuple[str, str]]) -> None:
        for group_id, member_id in departed:
            for listener in self._departure_listeners:
                try:
                    listener(group_id, member_id)
                except Exception:
                    log.exception("departure listener failed for member %s of group %s", member_id, group_id)

    # ------------------------------------------------------------------ session timer

    def _next_deadline(self) -> int | None:
        deadlines = [d for s in self._active_shards() if (d := s.coordinator.next_deadline()) is not None]
        return min(deadlines) if deadlines else None

    def _rearm(self) -> None:
        """Keep a timer at or before the earliest session deadline. A later deadline
        leaves the armed timer alone (it fires early, finds nothing, re-arms), so steady
        heartbeats do not cancel and re-create timers."""
        if self._stopped:
            return
        deadline = self._next_deadline()
        if deadline is None:
            return
        if self._timer is not None and self._timer_deadline is not None and self._timer_deadline <= deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_deadline = deadline
        self._timer = self._clock.call_at(deadline, self._on_timer)

    def _rearm_for(self, shard: _Shard, group_id: str, member_id: str) -> None:
        """After a heartbeat, which moves no deadline but its member's: an armed timer that fires
        no later than that deadline stays, without looking at every shard (each heartbeat did:
        about a quarter of a steady heartbeat's cost with Kafka's 50 partitions)."""
        deadline = shard.coordinator.session_deadline(group_id, member_id)
        if self._timer is not None and (deadline is None or self._timer_deadline <= deadline):
            return
        self._rearm()

    def _on_timer(self) -> None:
        self._timer, self._timer_deadline = None, None
        if self._stopped:
            return
        now = self._clock.now_ms()
        for shard in self._active_shards():
            result = shard.coordinator.expire_sessions(now)
            if result.records:
                for group_id, member_id in result.departed:
                    log.info("session of member %s of share group %s expired", member_id, group_id)
                self._queue(shard, result.records, result.departed)
        self._rearm()

    # ------------------------------------------------------------------ topics

    def _topic_changed(self, changes: list[tuple[str, Topic | None]]) -> None:
        self._topics.changed(changes)
        if self._stopped:
            return
        snapshot = self._topics.snapshot()
        names = [name for name, _ in changes]
        for shard in self._active_shards():
            records = shard.coordinator.on_metadata_change(snapshot, names)
            if records:
                self._queue(shard, records)
            self._initialize_groups(shard, shard.coordinator.groups_subscribed_to(names))


def write_error_code(e: BaseException) -> ErrorCode:
    """The answer to a request whose records could not be written, as Kafka's
    CoordinatorOperationExceptionHelper maps the append's error: a storage error (and a write
    queued behind one, computed on state the rebuild took back) is NOT_COORDINATOR, a record
    too large UNKNOWN_SERVER_ERROR; anything else COORDINATOR_NOT_AVAILABLE."""
    if isinstance(e, (StaleWrite, OSError)) or _storage_error(e):  # Kafka's log wraps any I/O error
        return ErrorCode.NOT_COORDINATOR
    if isinstance(e, RecordTooLarge):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE


def _storage_error(e: Exception) -> bool:
    return isinstance(e, KafkaStorageError) or getattr(e, "code", None) == ErrorCode.KAFKA_STORAGE_ERROR


class Coordinators:
    """Read access to the shards' groups by group id (``runtime.coordinator``): groups of a
    shard that is not loaded look absent."""

    def __init__(self, runtime: GroupCoordinatorRuntime) -> None:
        self._runtime = runtime

    def for_group(self, group_id: str) -> ShareGroupCoordinator | None:
        shard = self._runtime._shard(group_id)
        return shard.coordinator if shard is not None and shard.state is ShardState.ACTIVE else None

    def has_group(self, group_id: str) -> bool:
        c = self.for_group(group_id)
        return c is not None and c.has_group(group_id)

    def member(self, group_id: str, member_id: str) -> ShareGroupMember | None:
        c = self.for_group(group_id)
        return None if c is None else c.member(group_id, member_id)

    def target_assignment(self, group_id: str, member_id: str) -> Assignment | None:
        c = self.for_group(group_id)
        return None if c is None else c.target_assignment(group_id, member_id)

    def session_deadline(self, group_id: str, member_id: str) -> int | None:
        c = self.for_group(group_id)
        return None if c is None else c.session_deadline(group_id, member_id)

    def describe_group(self, group_id: str) -> GroupDescription | None:
        c = self.for_group(group_id)
        return None if c is None else c.describe_group(group_id)

    def group_state(self, group_id: str) -> str:
        c = self.for_group(group_id)
        return STATE_DEAD if c is None else c.group_state(group_id)

    def group_ids(self) -> list[str]:
        return sorted(g for s in self._runtime._active_shards() for g in s.coordinator.group_ids())

    def group_summaries(self) -> list[tuple[str, str, int]]:
        """``(group id, state, member count)`` of the share groups of the loaded shards, read
        when metrics are scraped (groups of a shard still loading are not counted yet)."""
        return [row for s in self._runtime._active_shards() for row in s.coordinator.group_summaries()]

    def list_groups(self, states: Iterable[str] | None = None) -> list[tuple[str, str]]:
        states = None if states is None else list(states)
        return sorted(g for s in self._runtime._active_shards() for g in s.coordinator.list_groups(states))

    def next_deadline(self) -> int | None:
        return self._runtime._next_deadline()

    def snapshot(self) -> dict:
        out = {}
        for shard in self._runtime._active_shards():
            out.update(shard.coordinator.snapshot())
        return dict(sorted(out.items()))


class _Done:
    """An already-finished write (awaiting it does not yield)."""

    def __await__(self):
        return iter(())


_DONE = _Done()


def check_broker_config(cfg) -> int:
    """Kafka's start-up checks of the broker's group-coordinator properties (GroupCoordinatorConfig,
    ShareGroupConfig); raises ConfigError, else returns the offsets topic's compression codec.
    The command runs them before it opens the data directory, as Kafka's KafkaConfig does."""
    from broker.config import ConfigError

    props = group_broker_properties(cfg.static, cfg.dynamic_default, cfg.dynamic)
    try:
        validate_broker_config(props)
        codec = broker_value(COMPRESSION_CODEC_CONFIG, props)
        OffsetsTopic(1, lambda p: None, compression=codec)  # Kafka refuses an unknown codec id at start-up
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return codec


def install(broker: Broker) -> GroupCoordinatorRuntime:
    """Build the runtime for ``broker`` and register it: ``broker.group_coordinator``, the
    topic-change listener and the GROUP config resource. Checks the broker's group-coordinator
    properties the way Kafka does at start-up (raises ConfigError). ``__consumer_offsets``
    is created (if missing) and loaded by ``start``; share state goes through the broker's
    persister (``broker.share_manager.persister``)."""
    from broker import group_configs_provider  # noqa: F401  (registers the GROUP provider)

    cfg = broker.config
    props = group_broker_properties(cfg.static, cfg.dynamic_default, cfg.dynamic)
    codec = check_broker_config(cfg)

    def open_offsets() -> OffsetsTopic:
        topic = broker.internal_topic(CONSUMER_OFFSETS, cfg["offsets.topic.num.partitions"],
                                      topic_configs(cfg["offsets.topic.segment.bytes"]))
        return OffsetsTopic(topic.partitions, lambda p: broker.store.get(CONSUMER_OFFSETS, p),
                            append=lambda lg, data, headers: broker.partitions.append(lg, data, headers),
                            compression=codec)

    runtime = GroupCoordinatorRuntime(
        broker.topics, props, GroupConfigStore(broker.data_dir),
        offsets=open_offsets, persister=lambda: broker.share_manager.persister,
        load_buffer_bytes=broker_value(LOAD_BUFFER_SIZE_CONFIG, props),
        compact_interval_s=(lambda: cfg["log.cleaner.backoff.ms"] / 1000) if cfg["log.cleaner.enable"] else None,
    )
    broker.group_coordinator = runtime
    return runtime
