"""The share-partition manager: the async shell around every ``SharePartition`` of this broker.

It owns the share partitions (one per group x topic-partition) and does their I/O: loading
state from the persister (and resolving ``share.auto.offset.reset``), reading whole log
batches for acquisition, writing each transition through the persister before committing it
(acknowledgements are answered only after that write), arming acquisition-lock timers, and
waking long-polling share fetches when records may have become available.

Wake-ups use ``broker.waiters``: produce notifies ``(topic, partition)``; this manager
notifies ``share_key(group, topic, partition)`` after releases, lock expiry and rollbacks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable
from uuid import UUID

from coordinator.group.configs import EffectiveGroupConfig, effective
from protocol.errors import ErrorCode, KafkaError

from ..log import READ_ERRORS
from ..metrics import ShareGroupStats, SharePartitionStats, per_topic
from ..partitions import data_key
from .offset_reset import resolve_start_offset
from .partition import NOT_IN_CACHE, AcquireResult, SharePartition, ShareStateError, Transition
from .served_records import served_records

if TYPE_CHECKING:
    from persister.api import Persister

    from ..broker import Broker

log = logging.getLogger("kshare.share")

Key = tuple[str, UUID, int]  # (group id, topic id, partition)
LEADER_EPOCH = 0
# An acknowledgement for a partition with no share partition loaded: SharePartitionManager
# answers with the exception's message, Errors.java's default text.
_NO_SHARE_PARTITION = "This server does not host this topic-partition."

# Persister errors as the leader reports them (Kafka's SharePartition initialisation mapping).
_LOAD_ERRORS = {
    ErrorCode.NOT_COORDINATOR: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.GROUP_ID_NOT_FOUND: ErrorCode.GROUP_ID_NOT_FOUND,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.FENCED_LEADER_EPOCH: ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_STATE_EPOCH: ErrorCode.NOT_LEADER_OR_FOLLOWER,
}
# Load failures that a later fetch gets past without anyone acting (a state partition still
# loading, a topic being deleted): logged at INFO, the others at WARNING.
_TRANSIENT_LOAD_ERRORS = (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
# Write errors after which the cached share partition is stale (Kafka's
# fencedSharePartitionHandler): it is dropped, and the next fetch reads the state again.
_FENCING_ERRORS = frozenset((
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_STATE_EPOCH, ErrorCode.GROUP_ID_NOT_FOUND,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
))


def share_key(group_id: str, topic: str, partition: int) -> tuple:
    """Keyed by topic name, not id: a fetch parks on one per partition, and hashing a UUID
    calls Python code. A recreated topic's fetches may be woken for the old one: harmless."""
    return ("share", group_id, topic, partition)


@dataclass
class FetchParams:
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    max_records: int
    batch_size: int
    acquire_mode: int = 0


@dataclass
class PartitionFetch:
    """One partition's share-fetch result: raw batches (zero-copy views, or cut copies: see
    served_records.py) and acquired ranges."""

    error_code: int = ErrorCode.NONE
    records: list = field(default_factory=list)
    acquired: list[tuple[int, int, int]] = field(default_factory=list)


class _Leader:
    """A SharePartition with its timer handle and metrics; ``loaded`` completes once state is loaded."""

    __slots__ = (
        "key", "sp", "topic", "timer", "timer_at", "loaded", "stats", "bytes_per_record", "record_starts", "dropped",
        "fenced",
    )

    def __init__(self, key: Key, topic: str) -> None:
        self.key = key
        self.topic = topic
        self.sp: SharePartition | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0  # the armed deadline (ms): uvloop's handle for a due deadline has no when()
        self.loaded: asyncio.Future = asyncio.get_running_loop().create_future()
        self.stats = SharePartitionStats()
        self.bytes_per_record = 0.0  # of the last read: sizes the next one
        self.record_starts: dict = {}  # served_records' cache
        self.dropped = False  # forgotten (topic deleted, state reset): fetches holding it must not use it
        self.fenced = False  # dropped after a fenced write: fetches holding it leave it out


READ_PROBE_BYTES = 64 * 1024


def _read_size(leader: _Leader, params: FetchParams, budget_bytes: int, records: int = 0) -> int:
    """How much log to read for one share fetch: about what ``records`` (MaxRecords by default)
    records take (twice the last read's bytes per record), not the whole byte budget. A
    consumer asks for 500 records with fetch.max.bytes of 50 MiB; reading 50 MiB to acquire
    500 records would copy the rest of the log on every fetch. At least one whole batch is
    always read."""
    records = records or params.max_records
    want = max(READ_PROBE_BYTES, params.min_bytes, int(2 * records * leader.bytes_per_record))
    return min(budget_bytes, want)


def _load_error(e: BaseException) -> KafkaError:
    """What every fetch waiting on a failed share-partition load answers."""
    if isinstance(e, KafkaError):
        return e
    if isinstance(e, READ_ERRORS):  # e.g. a by_duration reset reading a damaged log
        return KafkaError(ErrorCode(e.error_code), str(e))
    return KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR)


def _has_acquirable(lg, sp: SharePartition) -> bool:
    """Whether a read of ``lg`` could acquire anything for ``sp`` now: a fetch skips the
    partition otherwise, and a parked fetch is not woken for it."""
    return sp.can_acquire() and sp.next_fetch_offset() < lg.end_offset


def _read(lg, leader: _Leader, params: FetchParams, budget_bytes: int):
    """``_read_next`` sized by ``_read_size``. A read that the estimate cut short of
    MaxRecords records while more log follows (the first read has no estimate; the records
    may have grown) is made once more, sized by what it found: Kafka reads the whole budget.
    A read starting at a released record inside the in-flight window counts MaxRecords from
    the window's end, with room under the lock limit: held records in between are not
    acquired, and Kafka's whole-budget read acquires new records after them in the same fetch."""
    sp = leader.sp
    size = _read_size(leader, params, budget_bytes)
    offset, rr = _read_next(lg, sp, size)
    if rr is None or not rr.batches:
        return offset, rr
    _note_density(leader, rr)
    last = rr.batches[-1].last_offset
    window = sp.end_offset - offset + 1 if sp.in_flight_count < sp.max_in_flight_records else 0
    records = params.max_records + max(window, 0)
    if last - offset + 1 < records and last + 1 < lg.end_offset:
        bigger = _read_size(leader, params, budget_bytes, records)
        if bigger > size:
            offset, rr = _read_next(lg, leader.sp, bigger)
            if rr is not None and rr.batches:
                _note_density(leader, rr)
    return offset, rr


def _fitting(batches, max_bytes: int, min_one: bool) -> tuple[int, int]:
    """(count, bytes) of the leading ``batches`` within ``max_bytes``; at least one if ``min_one``."""
    n = size = 0
    for b in batches:
        if size + b.size > max_bytes and (n or not min_one):
            break
        n += 1
        size += b.size
    return n, size


def _note_density(leader: _Leader, rr) -> None:
    leader.bytes_per_record = rr.size / (rr.batches[-1].last_offset - rr.batches[0].base_offset + 1)


def _read_next(lg, sp: SharePartition, read_bytes: int):
    """``(offset, read)`` from the share partition's next fetch offset (read None at the log
    end). The caller has checked that the offset is not below the log start."""
    offset = sp.next_fetch_offset()
    return offset, (lg.read(offset, read_bytes) if offset < lg.end_offset else None)


async def _gather(aws) -> None:
    await asyncio.gather(*aws)


class SharePartitionManager:
    def __init__(
        self,
        broker: Broker,
        persister: Persister,
        *,
        settings: Callable[[str], EffectiveGroupConfig] | None = None,
        stats: ShareGroupStats | None = None,
    ) -> None:
        """``stats``: where share-group metrics are counted (broker/metrics.py)."""
        self.broker = broker
        self.stats = stats if stats is not None else ShareGroupStats()
        self.persister = persister
        cfg = broker.config
        self.max_delivery_count: int = cfg["group.share.delivery.count.limit"]
        self.max_in_flight: int = cfg["group.share.partition.max.record.locks"]
        self._settings = settings or (lambda _group: effective({}, cfg.raw_properties()))
        self._leaders: dict[Key, _Leader] = {}
        self._by_group: dict[str, dict[Key, _Leader]] = {}  # the same leaders, per group
        self._writes: set[asyncio.Task] = set()

    # --- clock and settings ---------------------------------------------------------------------

    @staticmethod
    def _now() -> float:
        """Lock deadlines are on the event loop's monotonic clock, in milliseconds."""
        return asyncio.get_running_loop().time() * 1000

    def settings(self, group_id: str) -> EffectiveGroupConfig:
        return self._settings(group_id)

    def lock_duration_ms(self, group_id: str) -> int:
        return self.settings(group_id).share_record_lock_duration_ms

    # --- loading --------------------------------------------------------------------------------

    def cached(self, group_id: str, topic_id: UUID, partition: int) -> SharePartition | None:
        leader = self._leaders.get((group_id, topic_id, partition))
        return leader.sp if leader is not None else None

    async def partition(self, group_id: str, topic_id: UUID, partition: int, topic: str) -> SharePartition:
        """The loaded share partition, loading it on first use; raises KafkaError on failure."""
        return (await self._loaded(group_id, topic_id, partition, topic)).sp

    async def _loaded(self, group_id: str, topic_id: UUID, partition: int, topic: str) -> _Leader:
        key = (group_id, topic_id, partition)
        leader = self._leaders.get(key)
        if leader is None:
            leader = self._add(key, _Leader(key, topic))
            started = time.perf_counter()
            try:
                leader.sp = await self._load(key, topic)
                leader.loaded.set_result(None)
                self.stats.partition_load_ms.observe((time.perf_counter() - started) * 1000)
            except BaseException as e:
                if isinstance(e, Exception):  # a failed load is timed too, as Kafka's processShareFetch does
                    self.stats.partition_load_ms.observe((time.perf_counter() - started) * 1000)
                if self._leaders.get(key) is leader:  # (an admin request may have dropped it meanwhile)
                    self._drop(key)
                error = _load_error(e)
                leader.loaded.set_exception(error)
                leader.loaded.exception()  # retrieved: waiters re-raise it
                if error is not e and isinstance(e, Exception):  # the first caller gets the same answer
                    if not isinstance(e, READ_ERRORS):  # (a log reports its own failure)
                        log.exception("share partition %s: loading failed", key)
                    raise error from e
                if isinstance(e, KafkaError):  # as Kafka's maybeInitialize logs the failure it answers
                    log.log(logging.INFO if e.code in _TRANSIENT_LOAD_ERRORS else logging.WARNING,
                            "share partition %s: loading failed: %s %s", key, ErrorCode(e.code).name, e.message or "")
                raise
        elif not leader.loaded.done():
            await asyncio.shield(leader.loaded)
        return leader

    async def _load(self, key: Key, topic: str) -> SharePartition:
        group_id, topic_id, partition = key
        state = await self.persister.read_state(group_id, topic_id, partition, leader_epoch=LEADER_EPOCH)
        # A partition never initialised (INVALID_REQUEST from the share coordinator) is not part of
        # any share group (KIP-932): only the group coordinator initialises it, before assigning it.
        # The leader does not, or any group id in a ShareFetch would create durable state; like
        # Kafka's SharePartition.maybeInitialize it fails the load (UNKNOWN_SERVER_ERROR).
        if state.error_code:
            raise KafkaError(_LOAD_ERRORS.get(state.error_code, ErrorCode.UNKNOWN_SERVER_ERROR), state.error_message)
        # By id: the topic may have been deleted, and created again under its name, meanwhile.
        t = self.broker.topics.by_id(topic_id)
        lg = self.broker.store.get(topic, partition) if t is not None and t.name == topic else None
        if lg is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        start = state.start_offset
        if start < 0:
            start = resolve_start_offset(
                self.settings(group_id).share_auto_offset_reset,
                log_start_offset=lg.start_offset,
                log_end_offset=lg.end_offset,
                offset_for_timestamp=lambda ts: (r[1] if (r := lg.offset_for_timestamp(ts)) else None),
                now_ms=int(time.time() * 1000),
            )
            if start is None:
                raise KafkaError(ErrorCode.OFFSET_NOT_AVAILABLE, "No offset found for share.auto.offset.reset")
        sp = SharePartition(
            clock=self._now,
            lock_duration_ms=lambda: self.lock_duration_ms(group_id),
            max_delivery_count=self.max_delivery_count,
            max_in_flight_records=self.max_in_flight,
        )
        try:
            sp.initialize(start, state.state_epoch, state.batches)
        except ShareStateError as e:
            log.error("share partition %s: unusable persisted state: %s", key, e)
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(e)) from None
        return sp  # (a log start past the SPSO is applied by the first fetch: see _acquire)

    # --- fetch ----------------------------------------------------------------------------------

    async def fetch(
        self, group_id: str, member_id: str, partitions: list[tuple[UUID, int, str]], params: FetchParams,
        gone: Callable[[], bool] = lambda: False,
    ) -> dict[tuple[UUID, int], PartitionFetch]:
        """Acquire records for ``member_id`` from ``partitions`` ((topic id, partition, topic name),
        in the order to serve them), long-polling up to MaxWaitMs until MinBytes are available.
        Answers the partitions that have records or an error. A fetch woken after ``gone()``
        (its client disconnected) acquires nothing and hands the wake-up on.

        Asked for no records or no bytes, it answers nothing at once, loading and counting
        nothing (TotalShareFetchRequests), as Kafka's SharePartitionManager.processShareFetch."""
        if params.max_records == 0 or params.max_bytes == 0:
            return {}
        # Counted before the fetch waits, as processShareFetch marks them: counted at the answer, a
        # fetch parked across its topic's deletion would give the deleted topic its counters back.
        self.stats.share_requests(self.stats.fetch_requests, per_topic((topic, 0) for _, _, topic in partitions))
        results = await self._fetch(group_id, member_id, partitions, params, gone)
        if failed := {tp for tp, f in results.items() if f.error_code}:
            self.stats.share_requests_failed(self.stats.fetch_requests, dict.fromkeys(
                topic for topic_id, p, topic in partitions if (topic_id, p) in failed))
        return results

    async def _fetch(self, group_id, member_id, partitions, params: FetchParams, gone):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(params.max_wait_ms, 0) / 1000
        results: dict[tuple[UUID, int], PartitionFetch] = {}
        leaders: list[tuple[UUID, int, str, _Leader]] = []
        for topic_id, p, topic in partitions:
            leader = self._leaders.get((group_id, topic_id, p))
            if leader is None or leader.sp is None:  # not loaded yet
                try:
                    leader = await self._loaded(group_id, topic_id, p, topic)
                except KafkaError as e:
                    results[(topic_id, p)] = PartitionFetch(e.code)  # the load logged why
                    continue
            leaders.append((topic_id, p, topic, leader))
        if not leaders or params.max_records <= 0 or params.max_bytes <= 0:
            return results
        keys = [(share_key(group_id, topic, p), data_key(topic, p)) for _, p, topic, _ in leaders]

        def more(key) -> bool:  # (only for the keys that woke this fetch)
            _, _, topic, p = key
            return self._servable(next(lr for _, lp, t, lr in leaders if lp == p and t == topic))

        with self.broker.waiters.turn(keys) as turn:
            while True:
                final = loop.time() >= deadline or self.broker.partitions.shutting_down
                got = self._acquire(member_id, leaders, params, final=final)
                turn.pass_on(more)
                if got is not None:
                    results.update(got)
                    return results
                await turn.wait(deadline - loop.time())
                if gone():
                    return results

    def _servable(self, leader: _Leader) -> bool:
        """Whether a fetch parked on the share partition could acquire something now. True when
        unsure (the partition went away): the fetch then answers for itself."""
        if leader.dropped or leader.sp is None:
            return True
        lg = self.broker.store.get(leader.topic, leader.key[2])
        return lg is None or _has_acquirable(lg, leader.sp)

    def _acquire(self, member_id, leaders, params: FetchParams, *, final: bool):
        """Read and acquire synchronously; None means "not enough yet, keep waiting". Only
        partitions with records or an error are answered: a fetch often lists many idle ones."""
        reads = []
        total = 0
        store = self.broker.store
        # As in Kafka, the partitions with room under the lock limit share MaxBytes, and
        # MinBytes 0 is met at once if there is one, even with nothing to read.
        with_room = []
        for topic_id, p, topic, leader in leaders:
            if leader.dropped and (leader.fenced or self.broker.topics.by_id(topic_id) is None):
                # Fenced by a write, or its topic was deleted, while this fetch waited: as Kafka's
                # fenced share partition (SharePartition.maybeAcquireFetchLock refuses it, so
                # DelayedShareFetch neither completes for it nor answers it), it is left out and
                # the fetch waits on.
                continue
            lg = store.get(topic, p)
            if lg is None or leader.dropped:
                # Dropped by an admin reset while this fetch waited (records taken from this
                # copy would be delivered again from the reloaded state), or its log is gone.
                reads.append((topic_id, p, leader, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            if lg.offline:  # as Fetch: Kafka's getPartitionOrError, even with nothing to read
                reads.append((topic_id, p, leader, None, ErrorCode.KAFKA_STORAGE_ERROR))
                continue
            if leader.sp.can_acquire():
                with_room.append((topic_id, p, leader, lg))
        budget_bytes = max(params.max_bytes // max(len(with_room), 1), 1)
        older = False  # a read starts in a segment older than the log end's
        out_of_range = False
        for topic_id, p, leader, lg in with_room:
            sp = leader.sp
            offset = sp.next_fetch_offset()
            if offset < lg.start_offset:
                # Kafka's read fails OFFSET_OUT_OF_RANGE; processFetchResponse then moves the
                # share partition to the log start (updateCacheAndOffsets) and answers it
                # without records, and the read error completes the fetch at once. The SPSO
                # follows the log start only so: while consumers hold every record below it,
                # they still count under the lock limit, and writes carry the old SPSO.
                sp.on_log_start_offset(lg.start_offset)
                out_of_range = True
                continue
            if offset >= lg.end_offset:
                continue
            try:
                offset, rr = _read(lg, leader, params, budget_bytes)
            except READ_ERRORS as e:  # a damaged log, which has reported it
                reads.append((topic_id, p, leader, None, ErrorCode(e.error_code)))
                continue
            if rr is not None and rr.batches:
                total += min(rr.size, budget_bytes)  # Kafka counts a partition's bytes up to its share
                reads.append((topic_id, p, leader, (offset, rr, lg.end_offset), ErrorCode.NONE))
                older = older or offset < lg.active_segment_base
        # Like a log read error (an offset out of range too), a vanished partition answers at once.
        failed = out_of_range or any(r[4] for r in reads)
        # Kafka's isMinBytesSatisfied counts bytes only within the log end's segment: a fetch
        # offset on an older one (the partition rolled, or the fetch fell behind) is enough.
        if not final and not failed and not older and (total < params.min_bytes or (total == 0 and not with_room)):
            return None
        out: dict[tuple[UUID, int], PartitionFetch] = {}
        records_left = params.max_records
        # What Kafka's ReplicaManager.readFromLog hands over (KIP-74): each partition its share,
        # capped by what the earlier ones left of MaxBytes; only the first partition with
        # records may exceed that, by its first batch.
        bytes_left, min_one = params.max_bytes, True
        for topic_id, p, leader, read, error in reads:
            if error:
                out[(topic_id, p)] = PartitionFetch(error)
                continue
            if records_left <= 0:
                continue
            offset, rr, log_end = read
            n, size = _fitting(rr.batches, min(budget_bytes, bytes_left), min_one)
            if not n:
                continue
            bytes_left, min_one = max(0, bytes_left - size), False
            batches = [(b.base_offset, b.last_offset) for b in rr.batches[:n]]
            res: AcquireResult = leader.sp.acquire(
                member_id, batches, fetch_offset=offset, max_records=records_left,
                batch_size=params.batch_size, mode=params.acquire_mode, log_end=log_end,
            )
            records_left -= res.count
            if res.ranges:
                records = served_records(rr, res.batch_start, res.batch_end, res.ranges, leader.record_starts)
                out[(topic_id, p)] = PartitionFetch(records=records, acquired=res.ranges)
                leader.stats.acquired += res.count
                self._arm(leader)
        return out

    # --- acknowledge and release ----------------------------------------------------------------

    async def acknowledge(
        self, group_id: str, member_id: str, acks: dict[tuple[UUID, int], list]
    ) -> dict[tuple[UUID, int], tuple[int, str | None]]:
        """Apply each partition's batches atomically; answers after the state is persisted.

        ``acks`` come from ``split_acks``: lists whose shape is already checked."""
        results: dict[tuple[UUID, int], tuple[int, str | None]] = {}
        pending = []
        topics: list[tuple[str, int]] = []  # (topic, error code) per partition, for metrics
        stats = self.stats
        for (topic_id, p), batches in acks.items():
            leader = self._leaders.get((group_id, topic_id, p))
            if leader is None:
                results[(topic_id, p)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, _NO_SHARE_PARTITION)
                topic = self.broker.topics.by_id(topic_id)
                if topic is not None:
                    topics.append((topic.name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            if leader.sp is None:
                # Still loading: Kafka caches a share partition before reading its state, so the
                # acknowledgement meets an empty cache (SharePartition.acknowledge).
                results[(topic_id, p)] = (ErrorCode.INVALID_RECORD_STATE, NOT_IN_CACHE)
                topics.append((leader.topic, ErrorCode.INVALID_RECORD_STATE))
                continue
            t = leader.sp.acknowledge(member_id, batches, shape_checked=True)  # split_acks did
            if t.error_code:
                results[(topic_id, p)] = (t.error_code, t.error_message)
                topics.append((leader.topic, t.error_code))
            elif t.pending:
                pending.append(((topic_id, p), leader, t, batches))
            else:
                results[(topic_id, p)] = (ErrorCode.NONE, None)
                topics.append((leader.topic, ErrorCode.NONE))
                stats.records_acknowledged(batches)
                self._arm(leader)  # a renew moved the lock deadline
        if len(pending) == 1:  # the usual case: no task per write
            outcomes = [await self._persist(pending[0][1], pending[0][2])]
        else:
            outcomes = await asyncio.gather(*(self._persist(leader, t) for _, leader, t, _ in pending))
        for (tp, leader, _, batches), outcome in zip(pending, outcomes):
            results[tp] = outcome
            topics.append((leader.topic, outcome[0]))
            if not outcome[0]:
                stats.records_acknowledged(batches)
        stats.share_requests(stats.ack_requests, per_topic(topics))
        return results

    async def release(self, group_id: str, member_id: str, partitions=None) -> None:
        """Release ``member_id``'s acquired records (session close, leaving the group).

        ``partitions`` limits it to those (topic id, partition) pairs; None means all of the group's.
        Either way only the group's share partitions are visited: when a thousand consumers
        disconnect at once, scanning every share partition for each took seconds.
        """
        jobs = self._release(group_id, member_id, partitions)
        if jobs:
            await asyncio.gather(*jobs)

    def release_soon(self, group_id: str, member_id: str, partitions=None) -> None:
        """``release`` for callbacks that cannot await (connection close, a member's departure):
        the records are released now, as Kafka does; only their write runs in a task. Released
        when the task ran, records the member acquired meanwhile went too."""
        jobs = self._release(group_id, member_id, partitions)
        if jobs:
            self._track(asyncio.get_running_loop().create_task(_gather(jobs)))

    def _release(self, group_id: str, member_id: str, partitions) -> list:
        """Start the release of ``member_id``'s records; returns the writes that finish it."""
        if partitions is None:
            leaders = list(self._by_group.get(group_id, {}).values())
        else:
            leaders = [self._leaders.get((group_id, topic_id, p)) for topic_id, p in partitions]
        jobs = []
        for leader in leaders:
            if leader is None or leader.sp is None:
                continue
            t = leader.sp.release_member(member_id)
            if t.pending:
                jobs.append(self._persist(leader, t))
        return jobs

    async def _persist(self, leader: _Leader, t: Transition) -> tuple[int, str | None]:
        """Write a pending transition, then commit it, or roll it back if the write failed."""
        group_id, topic_id, p = leader.key
        sp = leader.sp
        sp.stamp(t)  # (a write in a task of its own may be sent after a later one)
        try:
            code, msg = await self.persister.write_state(
                group_id, topic_id, p, state_epoch=t.state_epoch, leader_epoch=LEADER_EPOCH,
                start_offset=t.start_offset, delivery_complete_count=t.delivery_complete_count,
                batches=t.state_batches,
            )
        except Exception as e:  # the persister failed in an unexpected way: treat as a failed write
            log.exception("share partition %s: state write failed", leader.key)
            code, msg = ErrorCode.UNKNOWN_SERVER_ERROR, str(e)
        if code:
            sp.rollback(t)
            if code in _FENCING_ERRORS and self._leaders.get(leader.key) is leader:
                log.info("share partition %s is fenced (%s); it is read again at the next fetch",
                         leader.key, ErrorCode(code).name)
                leader.fenced = True
                self._forget(leader.key, leader)
                return _LOAD_ERRORS[code], msg
            code = _LOAD_ERRORS.get(code, ErrorCode.UNKNOWN_SERVER_ERROR)
        else:
            sp.commit(t)
        self._arm(leader)
        if self._servable(leader):  # released records, or room under the in-flight limit
            self._notify(leader)
        return code, msg

    # --- acquisition locks ----------------------------------------------------------------------

    def _arm(self, leader: _Leader) -> None:
        """(Re)arm the lock timer for the partition's earliest deadline."""
        deadline = leader.sp.next_deadline() if leader.sp is not None else None
        if leader.timer is not None:
            if deadline is not None and leader.timer_at <= deadline:
                return  # already armed early enough; it re-arms itself when it fires
            leader.timer.cancel()
            leader.timer = None
        if deadline is not None:
            leader.timer = asyncio.get_running_loop().call_at(deadline / 1000, self._expire, leader)
            leader.timer_at = deadline

    def _expire(self, leader: _Leader) -> None:
        leader.timer = None
        if self._leaders.get(leader.key) is not leader or leader.sp is None:
            return
        t = leader.sp.expire_locks(self._now())
        self._arm(leader)
        if t is None:
            return
        leader.stats.lock_timeouts += sum(last - first + 1 for first, last, _, _ in t.state_batches)
        self._notify(leader)
        if t.needs_write:
            self._track(asyncio.get_running_loop().create_task(self._write_final(leader, t)))

    async def _write_final(self, leader: _Leader, t: Transition) -> None:
        """Expiry is already applied; its write is best effort, as in Kafka, which moves the
        SPSO once the write is done whatever its outcome (``settle``). Writes sent since the
        SPSO moved (an acknowledgement's commit moves it too) carry the new one: so must this
        one (``stamp``)."""
        group_id, topic_id, p = leader.key
        sp = leader.sp
        sp.stamp(t)
        try:
            code, msg = await self.persister.write_state(
                group_id, topic_id, p, state_epoch=t.state_epoch, leader_epoch=LEADER_EPOCH,
                start_offset=t.start_offset, delivery_complete_count=t.delivery_complete_count,
                batches=t.state_batches,
            )
            if code:
                log.warning("share partition %s: writing lock expiry failed: %s %s",
                            leader.key, ErrorCode(code).name, msg)
        finally:
            sp.settle()
        if self._servable(leader):  # the SPSO moved: room under the in-flight limit
            self._notify(leader)

    def _track(self, task: asyncio.Task) -> None:
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    # --- lifecycle ------------------------------------------------------------------------------

    def forget_topic(self, topic_id: UUID) -> None:
        """A deleted topic's share partitions go away with it. A fetch parked on one leaves it
        out of its answer and waits on for its other partitions, as in Kafka."""
        for key, leader in list(self._leaders.items()):
            if key[1] == topic_id:
                self._forget(key, leader)

    def forget_share_state(self, group_id: str, partitions=None) -> None:
        """The share-partition state of ``group_id`` was replaced or deleted by an admin request
        (AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups): drop the cached share
        partitions (their in-flight records, delivery counts and lock timers) so the next fetch
        reloads the state from the persister. ``partitions`` limits it to those (topic id,
        partition) pairs. A write already in flight for a dropped partition still reaches the
        share coordinator (a reset's newer state epoch fences it); its commit only touches the
        dropped object."""
        wanted = None if partitions is None else set(partitions)
        for key, leader in list(self._by_group.get(group_id, {}).items()):
            if wanted is not None and (key[1], key[2]) not in wanted:
                continue
            self._forget(key, leader)

    def metrics_view(self) -> list[_Leader]:
        """The share-partition leaders (``key``, ``topic``, ``sp``, ``stats``), for a scrape that
        may read them over several turns of the loop: by then some may be ``dropped``, or still
        loading (``sp`` None)."""
        return list(self._leaders.values())

    def share_partitions(self, group_id: str | None = None):
        """(key, SharePartition) of the loaded share partitions (of ``group_id`` if given)."""
        leaders = self._leaders if group_id is None else self._by_group.get(group_id, {})
        return [(key, leader.sp) for key, leader in leaders.items() if leader.sp is not None]

    def _add(self, key: Key, leader: _Leader) -> _Leader:
        self._leaders[key] = self._by_group.setdefault(key[0], {})[key] = leader
        return leader

    def _notify(self, leader: _Leader) -> None:
        """Records may have become available (or the partition went away): wake a parked fetch."""
        self.broker.waiters.notify(share_key(leader.key[0], leader.topic, leader.key[2]))

    def _forget(self, key: Key, leader: _Leader) -> None:
        """Drop a loaded share partition (its lock timer with it) and wake its parked fetches."""
        if leader.timer is not None:
            leader.timer.cancel()
            leader.timer = None
        self._drop(key)
        self._notify(leader)

    def _drop(self, key: Key) -> None:
        self._leaders.pop(key).dropped = True
        group = self._by_group[key[0]]
        del group[key]
        if not group:
            del self._by_group[key[0]]

    async def close(self) -> None:
        for leader in self._leaders.values():
            if leader.timer is not None:
                leader.timer.cancel()
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
