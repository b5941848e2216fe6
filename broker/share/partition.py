"""The share-partition leader: in-flight record state of one (share group, topic-partition).

A sans-IO state machine (KIP-932 / KIP-1226, Kafka 4.2 behaviour). It never reads the log or
talks to the persister; the async shell around it does:

* ``next_fetch_offset()`` says where to read; the shell reads whole log batches from there and
  hands their ``(base_offset, last_offset)`` pairs to ``acquire``, which returns AcquiredRecords
  ranges and the slice of log batches to send back.
* ``acknowledge`` / ``release_member`` return a pending :class:`Transition` carrying the
  WriteShareGroupState payload. The shell writes it, then calls ``commit(t)`` or ``rollback(t)``.
  While pending, its records cannot be acquired or acked again and the SPSO cannot pass them.
* Acquisition locks are deadlines on the injected clock (milliseconds). The shell arms a timer
  for ``next_deadline()`` and calls ``expire_locks(now)``; expiry is applied at once (Kafka
  applies it whatever the write's outcome) and returns an already-final Transition to persist.
  Once that write is done, failed or not, the shell calls ``settle()`` to move the SPSO.

In-flight state lives in a SortedDict ``first_offset -> InFlightBatch``: one state per cached
range until an operation touches part of it, then per-offset lists (see inflight.py). Whole-range
acquisition and acknowledgement therefore cost O(ranges touched), not O(records).

Deliberate differences from Kafka 4.2:
* holes in the persisted state are cached as AVAILABLE ranges with delivery count 0 instead of
  Kafka's "persister read gap window"; they are fetched first, acquired like new records
  (``_acquire_hole``), and block the SPSO the same way;
* releasing a member's records keeps the delivery count (KAFKA-19972, NO_OP), so a record at
  the delivery limit is archived;
* a rollback after the lock expired makes the record AVAILABLE, or ARCHIVED if it is at the
  delivery limit (Kafka makes it AVAILABLE unconditionally and could redeliver past the limit);
* the SPSO is always advanced as far as possible (also after stale-batch archiving and
  rollbacks; after an LSO move, which sets it to the log start, once a write settles) and
  records left ACQUIRED below the SPSO by an LSO move do not block it;
* acquired per-offset ranges are merged when contiguous with equal delivery counts;
* delivery throttling (KAFKA-17541, in 4.2) only looks at AVAILABLE records with no write in
  flight when deciding whether a cached range is throttled.
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import add, contains, itemgetter, lt, sub

from sortedcontainers import SortedDict

from .ack_batches import validate_ack_batches
from .inflight import InFlightBatch
from .state import (
    ACK_TYPE_TO_STATE,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    INVALID_RECORD_STATE,
    INVALID_REQUEST,
    NONE,
    RENEW,
    AcquireMode,
)

DEFAULT_MAX_IN_FLIGHT_RECORDS = 2000  # group.share.partition.max.record.locks
DEFAULT_MAX_DELIVERY_COUNT = 5  # group.share.delivery.count.limit
DEFAULT_LOCK_DURATION_MS = 30_000  # group.share.record.lock.duration.ms
# The wire (AcquiredRecords.DeliveryCount) and the state records carry an int16 delivery count.
# Only a forged or corrupt WriteShareGroupState can load a count this high, and one more
# acquisition must not make a count that can be neither answered nor persisted (the fetch's
# connection closed and the release failed to persist, wedging the records); Kafka's ``(short)``
# casts wrap it to a negative count instead, which a load refuses, so it stops here.
MAX_DELIVERY_COUNT_VALUE = 0x7FFF

# SharePartition's messages for a refused acknowledgement
NOT_IN_CACHE = "Batch record not found. The request batch offsets are not found in the cache."
_PAST_FIRST = "Batch record not found. The first offset in request is past acquired records."
_PAST_LAST = "Batch record not found. The last offset in request is past acquired records."
_BATCH_NOT_ACQUIRED = "The batch cannot be acknowledged. The batch is not in the acquired state."
_NOT_BATCH_OWNER = "Member is not the owner of batch record"
_OFFSET_NOT_ACQUIRED = "The offset cannot be acknowledged. The offset is not acquired."
_NOT_OFFSET_OWNER = "Member is not the owner of offset"

StateBatch = tuple[int, int, int, int]  # (first_offset, last_offset, delivery_state, delivery_count)
AcquiredRange = tuple[int, int, int]  # (first_offset, last_offset, delivery_count)
LogBatch = tuple[int, int]  # (base_offset, last_offset) of one log record batch


class ShareStateError(ValueError):
    """Persisted state that cannot be loaded (Kafka fails the load: UNKNOWN_SERVER_ERROR)."""


@dataclass(slots=True)
class AcquireResult:
    """What one acquire produced for the ShareFetch response.

    ``ranges`` are the AcquiredRecords (first, last, delivery_count) in offset order; ``count``
    is the number of records acquired (for the request-wide MaxRecords budget);
    ``log_batches[batch_start:batch_end]`` are the whole log batches to return as Records.
    """

    ranges: list[AcquiredRange]
    count: int
    batch_start: int
    batch_end: int



ACKNOWLEDGE = "acknowledge"
RELEASE = "release"
EXPIRE = "expire"


class Transition:
    """A state change to persist with WriteShareGroupState.

    ``state_batches``, ``start_offset``, ``delivery_complete_count`` and ``state_epoch`` are the
    request's fields. ``error_code`` != 0 means an acknowledge was refused and nothing changed;
    ``error_message`` then says why, in Kafka's words.
    ``pending`` transitions must be finished with ``commit`` or ``rollback``; the others
    (errors, renew-only acks, lock expiry) are already final and those calls are no-ops.
    """

    __slots__ = (
        "id", "kind", "error_code", "error_message", "state_batches", "state_epoch", "start_offset",
        "delivery_complete_count", "_undo", "_open", "_scattered",
    )

    def __init__(self, tid: int, kind: str) -> None:
        self.id = tid
        self.kind = kind
        self.error_code = NONE
        self.error_message: str | None = None
        self.state_batches: list[StateBatch] = []
        self.state_epoch = 0
        self.start_offset = 0
        self.delivery_complete_count = 0
        # (entry key, i, j, old state, old count, old member): i = -1 for a whole batch-mode
        # entry, else offsets [i, j) of a split entry, which had one state, count and member
        self._undo: list[tuple[int, int, int, int, int, str | None]] = []
        self._open = False
        # the offsets' indexes when _undo is one-offset entries of one split entry (its key
        # is every entry's first item), as SharePartition._ack_scattered makes them; else None
        self._scattered: list[int] | None = None

    @property
    def pending(self) -> bool:
        return self._open

    @property
    def needs_write(self) -> bool:
        return bool(self.state_batches)

    def __repr__(self) -> str:
        return (f"Transition(#{self.id} {self.kind} error={self.error_code} "
                f"batches={self.state_batches} spso={self.start_offset} "
                f"dcc={self.delivery_complete_count} pending={self._open})")


class _Lock:
    """An acquisition lock shared by the holders (batch or offsets) of one cache entry."""

    __slots__ = ("deadline", "refs", "key", "lo", "hi")

    def __init__(self, deadline: float, refs: int, key: int, lo: int, hi: int) -> None:
        self.deadline = deadline
        self.refs = refs
        self.key = key
        self.lo = lo
        self.hi = hi


_first, _last, _types = itemgetter(0), itemgetter(1), itemgetter(2)  # of a state or ack batch
_FILLS = [bytes((state,)) for state in range(ARCHIVED + 1)]  # one record's state byte, per state


def _merge_state_batches(batches: list[StateBatch]) -> list[StateBatch]:
    """Sort and coalesce contiguous batches with the same state and delivery count.

    A transition touches each offset once, so the result is what the share coordinator's
    combiner calls normal, and the in-process persister hands it over as such."""
    if len(batches) <= 1:
        return batches
    # A redelivery's hundreds of one-offset batches come ascending, none touching the next:
    # nothing to sort or join, which this finds at C speed (a Python step per batch was a
    # tenth of acknowledging them).
    if all(map(lt, map(add, map(_last, batches), repeat(1)), map(_first, batches[1:]))):
        return batches
    batches.sort()
    out: list[StateBatch] = []
    cf, cl, cs, cc = batches[0]
    for f, l, s, c in batches[1:]:
        if f == cl + 1 and s == cs and c == cc:
            cl = l
        else:
            if f <= cl:
                raise AssertionError(f"state batches overlap at offset {f}")
            out.append((cf, cl, cs, cc))
            cf, cl, cs, cc = f, l, s, c
    out.append((cf, cl, cs, cc))
    return out


def _first_unsettled(states: bytearray, pendings: list[int], i: int) -> int:
    """The first index from ``i`` of a split entry's record that is AVAILABLE, ACQUIRED or has
    a write in flight; ``len(states)`` if there is none.

    The SPSO moves past hundreds of acknowledged records at a time: the states are searched
    as bytes, and the pending ids (0 but while a write is in flight) counted a slice at a time."""
    n = len(states)
    end = states.find(AVAILABLE, i, n)
    acquired = states.find(ACQUIRED, i, n if end < 0 else end)
    end = n if end < 0 else end
    if acquired >= 0:
        end = acquired
    if pendings[i:end].count(0) == end - i:
        return end
    while end - i > 16:  # a write is in flight in [i, end): halve down to it
        mid = (i + end) // 2
        if pendings[i:mid].count(0) == mid - i:
            i = mid
        else:
            end = mid
    while not pendings[i]:
        i += 1
    return i


def _available(e: InFlightBatch, i: int, end: int) -> Iterator[int]:
    """Indexes in [i, end) of a split entry's AVAILABLE records with no write in flight.

    A byte search finds each one: released records are a few among thousands of acknowledged
    ones, and every fetch looks for them."""
    states, pendings = e.states, e.pendings
    while i < end:
        try:
            i = states.index(AVAILABLE, i, end)
        except ValueError:
            return
        if not pendings[i]:
            yield i
        i += 1


class SharePartition:
    """In-flight records of one share partition; see the module docstring."""

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        lock_duration_ms: int | Callable[[], int] = DEFAULT_LOCK_DURATION_MS,
        max_delivery_count: int = DEFAULT_MAX_DELIVERY_COUNT,
        max_in_flight_records: int = DEFAULT_MAX_IN_FLIGHT_RECORDS,
    ) -> None:
        self._clock = clock
        self._lock_duration = lock_duration_ms
        self._max_delivery = max_delivery_count
        # KAFKA-17541: redeliveries from this count on are acquired in shrinking chunks.
        self._throttle_limit = max(2, -(-max_delivery_count // 2))
        self._max_in_flight = max_in_flight_records
        self._cache: SortedDict = SortedDict()
        self._spso = 0
        self._epoch = 0
        self._dcc = 0
        self._acquired = 0
        self._find_next = False
        self._stragglers = False  # live records may sit below the SPSO (after an LSO move)
        self._locks: dict[int, _Lock] = {}
        self._heap: list[tuple[float, int]] = []
        self._tokens = itertools.count(1)
        self._tids = itertools.count(1)
        self._open: dict[int, Transition] = {}

    # ------------------------------------------------------------------ views

    @property
    def start_offset(self) -> int:
        """SPSO."""
        return self._spso

    @property
    def end_offset(self) -> int:
        """Kafka's endOffset: last cached offset, or the SPSO when nothing is in flight."""
        cache = self._cache
        if not cache:
            return self._spso
        return max(cache.peekitem(-1)[1].last, self._spso)

    @property
    def state_epoch(self) -> int:
        return self._epoch

    @property
    def delivery_complete_count(self) -> int:
        """KIP-1226: terminal records at or above the SPSO."""
        return self._dcc

    @property
    def in_flight_count(self) -> int:
        """Span SPSO..endOffset (gaps and terminal records included): what the lock limit caps.

        As Kafka's numInFlightRecords, 1 while only records below a moved log start are cached
        (its endOffset is then the SPSO)."""
        return self.end_offset - self._spso + 1 if self._cache else 0

    @property
    def max_in_flight_records(self) -> int:
        """group.share.partition.max.record.locks: the limit ``in_flight_count`` is held to."""
        return self._max_in_flight

    @property
    def acquired_count(self) -> int:
        return self._acquired

    @property
    def batch_count(self) -> int:
        """Cached in-flight batches (Kafka's InFlightBatchCount)."""
        return len(self._cache)

    @property
    def pending_transitions(self) -> int:
        return len(self._open)

    @property
    def lock_duration_ms(self) -> int:
        d = self._lock_duration
        return d() if callable(d) else d

    # ------------------------------------------------------------ small helpers

    def _n_ge(self, first: int, last: int) -> int:
        """Number of offsets of [first, last] at or above the SPSO."""
        lo = first if first > self._spso else self._spso
        return last - lo + 1 if last >= lo else 0

    def _next_new_offset(self) -> int:
        cache = self._cache
        if not cache:
            return self._spso
        return max(self._spso, cache.peekitem(-1)[1].last + 1)

    def _has_live_at_or_after_start(self) -> bool:
        cache = self._cache
        return bool(cache) and cache.peekitem(-1)[1].last >= self._spso

    def _new_lock(self, key: int, deadline: float, refs: int, lo: int, hi: int) -> int:
        token = next(self._tokens)
        locks = self._locks
        locks[token] = _Lock(deadline, refs, key, lo, hi)
        heap = self._heap
        if len(heap) > 4 * len(locks) + 1024:
            # Released or renewed locks leave stale heap items; drop them in bulk now and then.
            heap[:] = [(lock.deadline, tok) for tok, lock in locks.items()]
            heapq.heapify(heap)
        else:
            heapq.heappush(heap, (deadline, token))
        return token

    def _unref(self, token: int, n: int = 1) -> None:
        if token:
            lock = self._locks.get(token)
            if lock is not None:
                lock.refs -= n
                if lock.refs <= 0:
                    del self._locks[token]

    def _split(self, e: InFlightBatch) -> None:
        token = e.lock
        e.split()
        if token:
            lock = self._locks.get(token)
            if lock is not None:
                lock.refs += e.size - 1

    def _deadline(self) -> float:
        return self._clock() + self.lock_duration_ms

    def _entry_index_at_or_after(self, offset: int) -> int:
        """Index of the entry containing ``offset``, else of the first entry after it."""
        cache = self._cache
        idx = cache.bisect_right(offset) - 1
        if idx < 0 or cache.peekitem(idx)[1].last < offset:
            idx += 1
        return idx

    def _new_transition(self, kind: str) -> Transition:
        return Transition(next(self._tids), kind)

    def _seal(self, t: Transition, sb: list[StateBatch], merged: bool = False) -> Transition:
        t.state_batches = sb if merged else _merge_state_batches(sb)
        t.state_epoch = self._epoch
        t.start_offset = self._spso
        t.delivery_complete_count = self._dcc
        if t._undo:
            t._open = True
            self._open[t.id] = t
        return t

    def stamp(self, t: Transition) -> Transition:
        """Set ``t``'s start offset and delivery-complete count to the current ones; the shell
        calls it just before sending the write.

        A write is not always sent when it is sealed (lock expiry's goes from a task of its
        own), so one sealed later may reach the share coordinator first. The coordinator takes
        the start offset as written: an older one would move its start back over records the
        other write had already pruned, and a restart would deliver them again. The SPSO only
        grows, so writes stamped when sent carry non-decreasing start offsets. (Kafka sends
        the write while it holds the partition lock, before the SPSO moves.)"""
        t.start_offset = self._spso
        t.delivery_complete_count = self._dcc
        return t

    # -------------------------------------------------------- initialization

    def initialize(
        self, start_offset: int, state_epoch: int, batches: Iterable[StateBatch] = ()
    ) -> None:
        """Load ReadShareGroupState's answer (start_offset already resolved, never -1).

        Persisted batches become batch-mode ranges with no member; holes between the SPSO and
        the last batch (fetched but never persisted before a leader change) become AVAILABLE
        ranges with delivery count 0 so they are delivered again first.
        """
        if start_offset < 0:
            raise ShareStateError("start offset must be resolved before initialize")
        cache: SortedDict = SortedDict()
        dcc = 0
        prev_last = start_offset - 1
        for first, last, state, count in batches:
            if first < start_offset:
                raise ShareStateError(f"state batch {first}-{last} below start offset {start_offset}")
            if last < first or first <= prev_last:
                raise ShareStateError(f"state batch {first}-{last} out of order or overlapping")
            if state not in (AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED) or count < 0:
                raise ShareStateError(f"state batch {first}-{last} has state {state} count {count}")
            if first > prev_last + 1:
                cache[prev_last + 1] = InFlightBatch(prev_last + 1, first - 1, AVAILABLE, 0)
            if state == ACQUIRED:  # never written by Kafka; nobody holds it after a load
                state = AVAILABLE
            cache[first] = InFlightBatch(first, last, state, count)
            if state >= ACKNOWLEDGED:
                dcc += last - first + 1
            prev_last = last
        self._cache = cache
        self._spso = start_offset
        self._epoch = state_epoch
        self._dcc = dcc
        self._acquired = 0
        self._find_next = bool(cache)
        self._stragglers = False
        self._locks.clear()
        self._heap.clear()
        self._open.clear()
        self._advance()

    # ---------------------------------------------------------------- fetch

    def next_fetch_offset(self) -> int:
        """Offset the next log read should start at: the first re-deliverable record, if any."""
        if self._find_next:
            cache = self._cache
            if cache:
                spso = self._spso
                for key in cache.islice(self._entry_index_at_or_after(spso)):
                    e = cache[key]
                    if e.states is None:
                        if e.state == AVAILABLE and not e.pending:
                            return max(e.first, spso)
                    else:
                        for i in _available(e, max(0, spso - e.first), len(e.states)):
                            return e.first + i
            self._find_next = False
        return self._next_new_offset()

    def can_acquire(self) -> bool:
        """Whether a read could acquire anything (Kafka skips the partition otherwise)."""
        return (self.next_fetch_offset() != self._next_new_offset()
                or self.in_flight_count < self._max_in_flight)

    def acquire(
        self,
        member_id: str,
        log_batches: Sequence[LogBatch],
        *,
        fetch_offset: int,
        max_records: int,
        batch_size: int,
        mode: int = AcquireMode.BATCH_OPTIMIZED,
        log_end: int | None = None,
    ) -> AcquireResult:
        """Acquire records of a log read that started at ``fetch_offset``.

        ``log_batches`` are the whole log batches the read returned, in order. Batch-optimized
        mode acquires whole log batches (MaxRecords is soft) and cuts new ranges into
        ``batch_size`` chunks at log-batch boundaries; record-limit mode acquires exactly
        ``max_records`` at most, as one range. ``log_end``, the log end offset when known, bounds
        the per-offset state an entry is split into (see ``_cut_at``).
        """
        if max_records <= 0 or not log_batches:
            return AcquireResult([], 0, 0, 0)
        first_base = log_batches[0][0]
        last_fetched = log_batches[-1][1]
        budget = min(max_records, self._max_in_flight - self.in_flight_count)
        last_to_acquire = last_fetched
        if budget <= 0:
            end = self.end_offset
            if not self._cache or fetch_offset > end:
                return AcquireResult([], 0, 0, 0)
            # At the lock limit: only re-acquire inside the window, never grow it.
            budget = min(max_records, end - fetch_offset + 1)
            last_to_acquire = min(last_fetched, end)

        archived = False
        if fetch_offset < first_base:
            archived = self._archive_stale(fetch_offset, first_base)

        record_limit = mode == AcquireMode.RECORD_LIMIT
        deadline = self._deadline()
        ranges: list[AcquiredRange] = []
        acquired = 0
        stopped = False
        cache = self._cache

        idx = cache.bisect_right(first_base) - 1
        start_key = first_base
        if idx >= 0:
            key = cache.keys()[idx]
            if cache[key].last >= first_base:
                start_key = key
        for key in list(cache.irange(start_key, last_to_acquire)):
            if acquired >= budget:
                break
            e = cache[key]
            full = e.first >= first_base and e.last <= last_to_acquire
            subset = record_limit and e.last - e.first + 1 > budget - acquired
            throttle = self._throttled(e, first_base, last_to_acquire)
            if throttle and acquired > 0:
                stopped = True  # deliver the suspect records apart from the others
                break
            if e.count == 0 and e.states is None and e.state == AVAILABLE and not e.pending:
                if e.first < first_base:
                    e = self._cut_hole(e, first_base, e.last)
                acquired += self._acquire_hole(e, min(e.last, last_to_acquire), member_id, log_batches,
                                               batch_size, record_limit, budget - acquired, deadline, ranges)
                continue
            if not full or e.states is not None or subset or throttle:
                if e.states is None:
                    if e.state != AVAILABLE or e.pending:
                        continue
                    if log_end is not None and not e.lock and e.first < log_end <= e.last:
                        self._cut_at(e, log_end)
                    self._split(e)
                n = self._acquire_offsets(e, member_id, first_base, last_to_acquire,
                                          record_limit, budget - acquired, deadline, ranges)
                acquired += n
                if throttle and n > 0:
                    stopped = True
                    break
                continue
            if e.state != AVAILABLE or e.pending:
                continue
            self._unref(e.lock)
            e.state = ACQUIRED
            if e.count < MAX_DELIVERY_COUNT_VALUE:
                e.count += 1
            e.member = member_id
            e.lock = self._new_lock(e.first, deadline, 1, e.first, e.last)
            size = e.last - e.first + 1
            self._acquired += size
            acquired += size
            ranges.append((e.first, e.last, e.count))

        if not stopped and acquired < budget:
            start = max(first_base, self._next_new_offset())
            if start <= last_to_acquire:
                acquired += self._acquire_new(member_id, log_batches, start, last_to_acquire,
                                              batch_size, record_limit, budget - acquired,
                                              deadline, ranges)
        if archived:
            self.settle()
        if not ranges:
            return AcquireResult([], 0, 0, 0)
        return AcquireResult(ranges, acquired, *self._covering_batches(log_batches, ranges))

    @staticmethod
    def _covering_batches(log_batches: Sequence[LogBatch], ranges: list[AcquiredRange]) -> tuple[int, int]:
        n = len(log_batches)
        if n == 1:
            return 0, 1
        first_acq = ranges[0][0]
        last_acq = ranges[-1][1]
        lasts = [b[1] for b in log_batches]
        bases = [b[0] for b in log_batches]
        start = bisect_right(lasts, first_acq - 1)  # first batch ending at/after first_acq
        end = bisect_right(bases, last_acq)  # batches starting after last_acq are dropped
        return start, max(end, start)

    def _throttled(self, e: InFlightBatch, lo: int, hi: int) -> bool:
        limit = self._throttle_limit
        if e.states is None:
            return e.state == AVAILABLE and not e.pending and e.count >= limit
        counts, first = e.counts, e.first
        return any(counts[i] >= limit for i in _available(e, max(lo, first) - first, min(hi, e.last) - first + 1))

    def _acquire_offsets(
        self, e: InFlightBatch, member_id: str, lo: int, hi: int, record_limit: bool,
        remaining: int, deadline: float, ranges: list[AcquiredRange],
    ) -> int:
        """Acquire AVAILABLE offsets of a split entry within [lo, hi] (Kafka's subset path)."""
        first = e.first
        states, counts, members, locks = e.states, e.counts, e.members, e.locks
        max_delivery = self._max_delivery
        throttle_limit = self._throttle_limit
        isolate_last_attempt = max_delivery > 2
        size = e.last - first + 1
        cap = -1
        n = 0
        lock: _Lock | None = None
        token = 0
        run_first = run_last = run_count = -1
        for i in _available(e, max(lo, first) - first, min(hi, e.last) - first + 1):
            count = counts[i]
            if isolate_last_attempt and count == max_delivery - 1 and n > 0:
                break  # its last attempt goes out alone in a later fetch
            if count >= throttle_limit and cap < 0:
                cap = max(1, size >> (count - throttle_limit + 1))
            offset = first + i
            if lock is None:
                token = self._new_lock(first, deadline, 0, offset, offset)
                lock = self._locks[token]
            self._unref(locks[i])
            states[i] = ACQUIRED
            if count < MAX_DELIVERY_COUNT_VALUE:
                count += 1
            counts[i] = count
            members[i] = member_id
            locks[i] = token
            lock.refs += 1
            lock.hi = offset
            if run_last == offset - 1 and run_count == count:
                run_last = offset
            else:
                if run_first >= 0:
                    ranges.append((run_first, run_last, run_count))
                run_first = run_last = offset
                run_count = count
            n += 1
            if isolate_last_attempt and count == max_delivery:
                break
            if record_limit and n == remaining:
                break
            if n == cap:
                break
        if run_first >= 0:
            ranges.append((run_first, run_last, run_count))
        self._acquired += n
        return n

    @staticmethod
    def _aligned_last(log_batches: Sequence[LogBatch], offset: int) -> int:
        """Last offset of the log batch holding ``offset`` (``offset`` itself if in a gap)."""
        lo, hi = 0, len(log_batches)
        while lo < hi:  # last batch with base <= offset
            mid = (lo + hi) // 2
            if log_batches[mid][0] <= offset:
                lo = mid + 1
            else:
                hi = mid
        if lo > 0 and offset <= log_batches[lo - 1][1]:
            return log_batches[lo - 1][1]
        return offset

    def _acquire_new(
        self, member_id: str, log_batches: Sequence[LogBatch], start: int, last: int,
        batch_size: int, record_limit: bool, remaining: int, deadline: float,
        ranges: list[AcquiredRange],
    ) -> int:
        """Acquire offsets never cached before, from ``start`` (whole log batches)."""
        if remaining < last - start + 1:
            last = min(self._aligned_last(log_batches, start + remaining - 1), last)
        if not self._has_live_at_or_after_start():
            self._spso = start  # nothing in flight: the SPSO follows the first new record
        cache = self._cache
        if record_limit:
            if last - start + 1 > remaining:
                # One entry for the aligned span; the records past the limit stay AVAILABLE.
                e = InFlightBatch(start, last, AVAILABLE, 0)
                e.split()
                token = self._new_lock(start, deadline, remaining, start, start + remaining - 1)
                for i in range(remaining):
                    e.states[i] = ACQUIRED
                    e.counts[i] = 1
                    e.members[i] = member_id
                    e.locks[i] = token
                cache[start] = e
                self._find_next = True
                ranges.append((start, start + remaining - 1, 1))
                self._acquired += remaining
                return remaining
            chunks = [(start, last)]
        else:
            chunks = []
            cur = start
            if batch_size > 0 and last - start + 1 > batch_size:
                for base, _ in log_batches:
                    if base > last:
                        break
                    if base - cur >= batch_size:
                        chunks.append((cur, base - 1))
                        cur = base
            chunks.append((cur, last))
        for a, b in chunks:
            token = self._new_lock(a, deadline, 1, a, b)
            cache[a] = InFlightBatch(a, b, ACQUIRED, 1, member_id, token)
            ranges.append((a, b, 1))
        n = last - start + 1
        self._acquired += n
        return n

    def _acquire_hole(
        self, e: InFlightBatch, last: int, member_id: str, log_batches: Sequence[LogBatch], batch_size: int,
        record_limit: bool, remaining: int, deadline: float, ranges: list[AcquiredRange],
    ) -> int:
        """Acquire from the start of a never-delivered hole a load left between persisted
        batches (``initialize``) up to ``last`` at most, where the read ends.

        Kafka acquires such offsets as new records (its gap window): up to ``remaining`` at a
        log-batch boundary, in BatchSize chunks or as record_limit's one range. What is left of
        the hole stays one hole, AVAILABLE with delivery count 0."""
        cache = self._cache
        del cache[e.first]
        n = self._acquire_new(member_id, log_batches, e.first, last, batch_size, record_limit, remaining,
                              deadline, ranges)
        rest = cache.peekitem(cache.bisect_right(last) - 1)[1].last + 1  # past what _acquire_new cached
        if rest <= e.last:
            cache[rest] = InFlightBatch(rest, e.last, AVAILABLE, 0)
            self._find_next = True
        return n

    def _cut_at(self, e: InFlightBatch, offset: int) -> None:
        """Leave [offset, e.last] of batch-mode entry ``e`` an entry of its own, same state.

        Persisted state (a forged or corrupt WriteShareGroupState, or a log truncated below
        its state) can hold a batch reaching far past the log end; Kafka materialises per-offset
        state for the whole batch (InFlightBatch.maybeInitializeOffsetStateUpdate), which for
        billions of offsets takes all the memory. Offsets past the log end hold no records,
        so only the part before it is split; the rest stays one range."""
        self._cache[offset] = InFlightBatch(offset, e.last, e.state, e.count, e.member)
        e.last = offset - 1

    def _cut_hole(self, e: InFlightBatch, lo: int, hi: int) -> InFlightBatch:
        """The part [lo, hi] of hole ``e`` as an entry of its own; the rest stays a hole.

        Splitting a hole into per-offset state would lose what makes it one: a part a read or
        compaction reaches would then be acquired as a cached subset (no MaxRecords, BatchSize
        or throttle size of its own) instead of as new records."""
        cache = self._cache
        last = e.last
        if e.first < lo:
            e.last = lo - 1
            e = cache[lo] = InFlightBatch(lo, last, AVAILABLE, 0)
        if hi < last:
            cache[hi + 1] = InFlightBatch(hi + 1, last, AVAILABLE, 0)
            e.last = hi
        return e

    def _archive_stale(self, fetch_offset: int, base_offset: int) -> bool:
        """Archive AVAILABLE records in [fetch_offset, base_offset): compaction removed them."""
        return self._archive_available(fetch_offset, base_offset - 1, count_terminal=True)

    def _archive_available(self, lo: int, hi: int, *, count_terminal: bool) -> bool:
        cache = self._cache
        if not cache or hi < lo:
            return False
        archived = False
        for key in list(cache.irange(cache.keys()[max(0, cache.bisect_right(lo) - 1)], hi)):
            e = cache[key]
            if e.last < lo:
                continue
            if e.states is None:
                if e.state != AVAILABLE or e.pending:
                    continue
                if e.count == 0 and not (e.first >= lo and e.last <= hi):
                    e = self._cut_hole(e, max(lo, e.first), min(hi, e.last))
                if e.first >= lo and e.last <= hi:
                    self._unref(e.lock)
                    e.lock = 0
                    e.state = ARCHIVED
                    e.member = None
                    if count_terminal:
                        self._dcc += self._n_ge(e.first, e.last)
                    archived = True
                    continue
                self._split(e)
            states, pendings = e.states, e.pendings
            first = e.first
            for i in range(max(lo, first) - first, min(hi, e.last) - first + 1):
                if states[i] == AVAILABLE and not pendings[i]:
                    states[i] = ARCHIVED
                    e.members[i] = None
                    if count_terminal and first + i >= self._spso:
                        self._dcc += 1
                    archived = True
        if archived:
            self._find_next = True
        return archived

    # ---------------------------------------------------------- acknowledge

    def acknowledge(
        self, member_id: str, batches: Iterable[tuple[int, int, Sequence[int]]], *, shape_checked: bool = False,
    ) -> Transition:
        """Start acknowledging ``(first, last, types)`` batches for ``member_id``.

        All-or-nothing per partition: on INVALID_RECORD_STATE (record not acquired by this
        member, or in a pending transition) or INVALID_REQUEST (offsets past the cached
        records, bad shape) nothing changes and the returned Transition carries the code.
        RENEW restarts locks at once and is never persisted. ``shape_checked``: the caller
        already applied ``validate_ack_batches`` to this list (the request handlers do).
        """
        if not shape_checked:
            batches = list(batches)
        t = self._new_transition(ACKNOWLEDGE)
        if not shape_checked and validate_ack_batches(batches, 2, True) is not None:
            t.error_code = INVALID_REQUEST
            return self._seal(t, [])
        if len(batches) > 1 and batches[0][0] == batches[0][1]:
            done = self._ack_scattered(member_id, batches, t)
            if done is not None:
                return done
        plan, error = self._plan_ack(member_id, batches)
        if error:
            t.error_code = error
            # Why, in SharePartition's words: only when Kafka would refuse with this code too.
            reason = self._ack_refusal(member_id, batches)
            t.error_message = reason[1] if reason is not None and reason[0] == error else None
            return self._seal(t, [])

        spso = self._spso
        sb: list[StateBatch] = []
        # (``RENEW in types`` for each batch, without a Python step per batch)
        deadline = self._deadline() if any(map(contains, map(_types, batches), repeat(RENEW))) else 0.0
        runs_of: InFlightBatch | None = None  # the split entry ``runs`` (a, b, target) belong to
        runs: list[tuple[int, int, int]] = []
        for item in plan:
            if len(item) == 2:  # (entry, runs [a, b) -> target) from _plan_ack
                e, more = item
                if e.states is None:
                    self._split(e)
                if e is not runs_of:
                    if runs:
                        self._begin_acked_runs(runs_of, runs, t, sb)
                    runs_of, runs = e, more
                else:
                    runs += more
                continue
            e, lo, hi, first, types = item
            if len(types) == 1:
                uniform = types[0]
            else:
                sub = types[lo - first:hi - first + 1]
                uniform = sub[0] if sub.count(sub[0]) == len(sub) else -1
            if e.states is None and lo == e.first and hi == e.last and e.first >= spso and uniform >= 0:
                if uniform == RENEW:
                    self._unref(e.lock)
                    e.lock = self._new_lock(e.first, deadline, 1, e.first, e.last)
                else:
                    self._begin_batch(e, ACK_TYPE_TO_STATE[uniform], t, sb)
                continue
            if e.states is None:
                self._split(e)
            efirst = e.first
            if uniform >= 0 and uniform != RENEW:
                if e is not runs_of:
                    if runs:
                        self._begin_acked_runs(runs_of, runs, t, sb)
                        runs = []
                    runs_of = e
                runs.append((lo - efirst, hi - efirst + 1, ACK_TYPE_TO_STATE[uniform]))
                continue
            if runs:
                self._begin_acked_runs(runs_of, runs, t, sb)
                runs = []
            renew_lock: _Lock | None = None
            renew_token = 0
            for i in range(lo - efirst, hi - efirst + 1):
                offset = efirst + i
                ack_type = uniform if uniform >= 0 else types[offset - first]
                if ack_type == RENEW:
                    if renew_lock is None:
                        renew_token = self._new_lock(efirst, deadline, 0, offset, offset)
                        renew_lock = self._locks[renew_token]
                    self._unref(e.locks[i])
                    e.locks[i] = renew_token
                    renew_lock.refs += 1
                    renew_lock.hi = offset
                else:
                    self._begin_run(e, i, i + 1, ACK_TYPE_TO_STATE[ack_type], t, sb)
        if runs:
            self._begin_acked_runs(runs_of, runs, t, sb)
        return self._seal(t, sb)

    def _ack_scattered(self, member_id: str, batches: list, t: Transition) -> Transition | None:
        """Acknowledge one-offset batches scattered over one split entry (ascending, none
        adjacent, no RENEW, all at or above the SPSO and held by ``member_id``); None, having
        changed nothing, for any other input, errors included: the general path answers those.

        librdkafka acknowledges 500 redelivered records as 500 one-offset batches. Planned,
        checked and begun a batch at a time they took ~530 us (best of 100, bare partition);
        as C-level passes over all of them and one tight loop of stores, ~330, and the whole
        request ~20% less. The outcome is the general path's to the byte: one-offset undo
        entries and state batches, in offset order."""
        firsts = list(map(_first, batches))
        cache = self._cache
        k = cache.bisect_right(firsts[0]) - 1
        if k < 0 or firsts[0] < self._spso or list(map(_last, batches)) != firsts:
            return None
        e = cache.peekitem(k)[1]
        states, counts, members, pendings = e.states, e.counts, e.members, e.pendings
        if states is None or e.last < firsts[-1]:
            return None
        efirst = e.first
        ii = list(map(sub, firsts, repeat(efirst)))
        jj = list(map(add, ii, repeat(1)))
        if not all(map(lt, jj, ii[1:])):
            return None  # not ascending, or two of them adjacent (their undo entries merge)
        n = len(ii)
        at = itemgetter(*ii)
        if at(states).count(ACQUIRED) != n or at(pendings).count(0) != n or at(members).count(member_id) != n:
            return None
        kinds = list(map(_first, map(_types, batches)))  # one type per one-offset batch
        kind = kinds[0]
        if kinds.count(kind) == n:
            if kind == RENEW:
                return None
            targets = [ACK_TYPE_TO_STATE[kind]] * n
        else:
            if RENEW in kinds:
                return None
            targets = list(map(ACK_TYPE_TO_STATE.__getitem__, kinds))
        old_counts = at(counts)
        max_delivery = self._max_delivery
        if AVAILABLE in targets and max(old_counts) >= max_delivery:
            targets = [ARCHIVED if s == AVAILABLE and c >= max_delivery else s for s, c in zip(targets, old_counts)]
        member = members[ii[0]]
        tid = t.id
        for i, s in zip(ii, targets):
            states[i] = s
            members[i] = None
            pendings[i] = tid
        t._undo = list(zip(repeat(efirst), ii, jj, repeat(ACQUIRED), old_counts, repeat(member)))
        t._scattered = ii
        self._acquired -= n
        self._dcc += n - targets.count(AVAILABLE)
        # Ascending, none adjacent: _merge_state_batches would return them as they are.
        return self._seal(t, list(zip(firsts, firsts, targets, old_counts)), merged=True)

    def _plan_ack(self, member_id: str, batches: list) -> tuple[list, int]:
        """Check every batch before touching anything; return the per-entry work or an error."""
        cache = self._cache
        spso = self._spso
        plan: list = []
        claimed_hi = -1  # highest offset this request already moved into a pending transition
        prev = None  # the entry the previous batch ended in: clients ack many runs of one entry
        # Adjacent batches in ``prev`` are checked together, as one stretch, when it ends.
        held_e: InFlightBatch | None = None
        held_lo = held_hi = -1
        runs_e: InFlightBatch | None = None  # the entry of the (e, runs) item that ends ``plan``
        runs: list[tuple[int, int, int]] = []
        pf, pl = 0, -1  # prev's first and last offsets (no batch is inside [0, -1])
        for first, last, types in batches:
            if last < spso:
                continue  # already below the SPSO: silently done
            p = first if first > spso else spso
            if pf <= p and last <= pl:
                if p <= claimed_hi:
                    return [], INVALID_RECORD_STATE  # acked twice in one request
                if prev is held_e and p == held_hi + 1:
                    held_hi = last
                else:
                    if held_e is not None:
                        if held_lo == held_hi and held_e.states is not None:  # _held_by's, inline:
                            a = held_lo - held_e.first  # a redelivery's stretches are one offset
                            if held_e.states[a] != ACQUIRED or held_e.pendings[a] or held_e.members[a] != member_id:
                                return [], INVALID_RECORD_STATE
                        elif not self._held_by(held_e, held_lo, held_hi, member_id):
                            return [], INVALID_RECORD_STATE
                    held_e, held_lo, held_hi = prev, p, last
                if len(types) == 1 and types[0] != RENEW and (prev.states is not None or p != pf or last != pl):
                    # One type over part of an entry (split by then): the run ``acknowledge``
                    # makes of it, added to the entry's list of them. Clients ack hundreds of
                    # runs of one entry: ~100 of a first delivery, 500 one-offset ones of a
                    # redelivery.
                    if runs_e is not prev:
                        runs_e, runs = prev, []
                        plan.append((prev, runs))
                    runs.append((p - pf, last - pf + 1, ACK_TYPE_TO_STATE[types[0]]))
                    claimed_hi = last
                    continue
                runs_e = None
                plan.append((prev, p, last, first, types))
                if (types[0] if len(types) == 1 else types[last - first]) != RENEW:
                    claimed_hi = last
                continue
            if held_e is not None:
                if not self._held_by(held_e, held_lo, held_hi, member_id):
                    return [], INVALID_RECORD_STATE
                held_e = None
            fi = cache.bisect_right(p) - 1
            if fi < 0:
                return [], INVALID_RECORD_STATE  # batch not found
            li = cache.bisect_right(last) - 1
            if cache.peekitem(li)[1].last < last:
                return [], INVALID_REQUEST  # offsets past the cached records
            floor = cache.peekitem(fi)[1]
            if floor.last >= p:
                start_i = fi
            else:  # ``p`` is in a gap of the cache
                start_i = fi + 1
                if floor.states is None and floor.last >= spso and self._gap_floor_refused(floor, member_id, plan):
                    return [], INVALID_RECORD_STATE
            for key in cache.islice(start_i, li + 1):
                e = cache[key]
                lo = e.first if e.first > p else p
                hi = e.last if e.last < last else last
                if lo <= claimed_hi:
                    return [], INVALID_RECORD_STATE  # acked twice in one request
                if not self._held_by(e, lo, hi, member_id):
                    return [], INVALID_RECORD_STATE
                plan.append((e, lo, hi, first, types))
                prev = e
                runs_e = None
            if prev is not None:
                pf, pl = prev.first, prev.last
            if (types[0] if len(types) == 1 else types[last - first]) != RENEW:
                claimed_hi = last
        if held_e is not None and not self._held_by(held_e, held_lo, held_hi, member_id):
            return [], INVALID_RECORD_STATE
        return plan, NONE

    def _gap_floor_refused(self, floor: InFlightBatch, member_id: str, plan: list) -> bool:
        """Whether Kafka refuses a batch that starts in a gap for the unsplit entry below it.

        SharePartition checks the owner of every unsplit batch from the floor entry of the
        acknowledged range on, so the batch below a gap must be this member's and still
        acquired; ``plan[-1]``: an earlier batch of this request that takes it out whole."""
        if not self._held_by(floor, floor.first, floor.last, member_id):
            return True
        if not plan or plan[-1][0] is not floor or len(plan[-1]) != 5:
            return False
        _, lo, hi, _, types = plan[-1]
        return lo == floor.first and hi == floor.last and len(types) == 1 and types[0] != RENEW

    def _ack_refusal(self, member_id: str, batches) -> tuple[int, str] | None:
        """The first failing check of SharePartition's fetchSubMapForAcknowledgementBatch and
        acknowledgeBatchRecords, in their order: per whole batch until a batch is acknowledged
        in part (then per offset), with what earlier batches of the request already moved. Run
        only after ``_plan_ack`` refused, so the state is unchanged; None for a refusal Kafka
        has no message of its own for."""
        cache, spso = self._cache, self._spso
        moved: set[int] = set()  # offsets earlier batches took out of ACQUIRED
        whole: set[int] = set()  # unsplit entries an earlier batch took out of ACQUIRED whole
        per_offset: set[int] = set()  # unsplit entries an earlier batch acknowledged in part
        for first, last, types in batches:
            if last < spso:
                continue
            fi = cache.bisect_right(first) - 1
            if fi < 0 and first < spso:
                fi = cache.bisect_right(spso) - 1
            if fi < 0:
                return INVALID_RECORD_STATE, NOT_IN_CACHE
            li = cache.bisect_right(last) - 1
            cached_last = cache.peekitem(li)[1].last
            if cached_last < first:
                return INVALID_REQUEST, _PAST_FIRST
            if last > cached_last:
                return INVALID_REQUEST, _PAST_LAST
            for key in cache.islice(fi, li + 1):
                e = cache[key]
                if e.last < spso:
                    continue
                if e.states is None and key not in per_offset:
                    if key in whole or e.state != ACQUIRED:
                        return INVALID_RECORD_STATE, _BATCH_NOT_ACQUIRED
                    if e.member != member_id:
                        return INVALID_RECORD_STATE, _NOT_BATCH_OWNER
                    if first <= e.first and e.last <= last and len(types) == 1 and spso <= e.first:
                        if types[0] != RENEW:
                            whole.add(key)
                        continue
                    per_offset.add(key)
                for o in range(max(first, e.first, spso), min(last, e.last) + 1):
                    state, member = ((e.state, e.member) if e.states is None
                                     else (e.states[o - e.first], e.members[o - e.first]))
                    if state != ACQUIRED or o in moved:
                        return INVALID_RECORD_STATE, _OFFSET_NOT_ACQUIRED
                    if member != member_id:
                        return INVALID_RECORD_STATE, _NOT_OFFSET_OWNER
                    if (types[0] if len(types) == 1 else types[o - first]) != RENEW:
                        moved.add(o)
        return None

    @staticmethod
    def _held_by(e: InFlightBatch, lo: int, hi: int, member_id: str) -> bool:
        """Whether ``member_id`` holds every record of [lo, hi] of ``e``, none with a write in flight."""
        if e.states is None:
            return e.member == member_id and not e.pending and e.state == ACQUIRED
        a, b = lo - e.first, hi - e.first + 1
        n = b - a
        if n == 1:
            return e.states[a] == ACQUIRED and not e.pendings[a] and e.members[a] == member_id
        return (e.states[a:b].count(ACQUIRED) == n and e.pendings[a:b].count(0) == n
                and e.members[a:b].count(member_id) == n)

    def _begin_batch(self, e: InFlightBatch, target: int, t: Transition, sb: list[StateBatch]) -> None:
        """First phase of a transition out of ACQUIRED for a whole batch-mode entry.

        The record keeps its lock until commit (the lock may still expire meanwhile, which
        decides what a rollback does). A pending batch-mode entry is never split: every split
        site requires no transition in flight.
        """
        t._undo.append((e.first, -1, -1, e.state, e.count, e.member))
        if target == AVAILABLE and (e.count >= self._max_delivery or e.last < self._spso):
            target = ARCHIVED
        self._acquired -= e.last - e.first + 1
        e.state = target
        e.member = None
        e.pending = t.id
        if target >= ACKNOWLEDGED:
            self._dcc += self._n_ge(e.first, e.last)
        sb.append((e.first, e.last, target, e.count))

    def _begin_acked_runs(self, e: InFlightBatch, runs: list[tuple[int, int, int]], t: Transition,
                          sb: list[StateBatch]) -> None:
        """``_begin_runs`` for the ascending runs [a, b) -> target of split entry ``e`` that one
        acknowledgement checked (ACQUIRED by one member, at or above the SPSO).

        librdkafka acknowledges a fetch's 500 records as ~100 adjacent runs when 10% are
        released, and 500 redelivered records as 500 one-offset runs. Adjacent runs of one
        delivery count share one undo entry, so that commit clears them with slice stores; when
        all the runs are such, the records are changed with slice stores too. Otherwise each
        run costs a few stores, not a call chain."""
        first = e.first
        states, counts, members, pendings = e.states, e.counts, e.members, e.pendings
        tid = t.id
        max_delivery = self._max_delivery
        undo = t._undo
        member = members[runs[0][0]]
        a0, b1 = runs[0][0], runs[-1][1]
        count = counts[a0]
        if len(runs) > 1 and runs[1][0] == runs[0][1] and [r[0] for r in runs[1:]] == [r[1] for r in runs[:-1]] \
                and counts[a0:b1].count(count) == b1 - a0:
            if count >= max_delivery:
                runs = [(a, b, ARCHIVED if s == AVAILABLE else s) for a, b, s in runs]
            states[a0:b1] = b"".join([_FILLS[s] * (b - a) for a, b, s in runs])
            members[a0:b1] = [None] * (b1 - a0)
            pendings[a0:b1] = [tid] * (b1 - a0)
            undo.append((first, a0, b1, ACQUIRED, count, member))
            sb += [(first + a, first + b - 1, s, count) for a, b, s in runs]
            self._acquired -= b1 - a0
            self._dcc += b1 - a0 - sum([b - a for a, b, s in runs if s == AVAILABLE])
            return
        span_a = span_b = -1
        span_count = -1
        acquired = terminal = 0
        for a, b, target in runs:
            n = b - a
            count = counts[a]
            if n > 1 and counts[a:b].count(count) != n:
                self._begin_runs(e, a, b, target, t, sb)  # rare: one run, several delivery counts
                continue
            if count != span_count or a != span_b:
                if span_a >= 0:
                    undo.append((first, span_a, span_b, ACQUIRED, span_count, member))
                span_a, span_count = a, count
            span_b = b
            if target == AVAILABLE and count >= max_delivery:
                target = ARCHIVED
            if n == 1:
                states[a] = target
                members[a] = None
                pendings[a] = tid
            else:
                states[a:b] = _FILLS[target] * n
                members[a:b] = [None] * n
                pendings[a:b] = [tid] * n
            acquired += n
            if target >= ACKNOWLEDGED:
                terminal += n
            sb.append((first + a, first + b - 1, target, count))
        if span_a >= 0:
            undo.append((first, span_a, span_b, ACQUIRED, span_count, member))
        self._acquired -= acquired
        self._dcc += terminal

    def _begin_runs(self, e: InFlightBatch, a: int, b: int, target: int, t: Transition,
                    sb: list[StateBatch]) -> None:
        """``_begin_run`` over offsets [a, b) of a split entry, a run per delivery count."""
        counts = e.counts
        if b - a == 1 or counts[a:b].count(counts[a]) == b - a:
            self._begin_run(e, a, b, target, t, sb)
            return
        i = a
        while i < b:
            c, j = counts[i], i + 1
            while j < b and counts[j] == c:
                j += 1
            self._begin_run(e, i, j, target, t, sb)
            i = j

    def _begin_run(self, e: InFlightBatch, a: int, b: int, target: int, t: Transition,
                   sb: list[StateBatch]) -> None:
        """``_begin_batch`` for offsets [a, b) of a split entry that are ACQUIRED by one
        member with one delivery count: slice operations, not a Python step per record."""
        first = e.first + a
        spso = self._spso
        if first < spso < e.first + b:  # the part below the SPSO ends differently
            self._begin_run(e, a, spso - e.first, target, t, sb)
            self._begin_run(e, spso - e.first, b, target, t, sb)
            return
        n = b - a
        count = e.counts[a]
        t._undo.append((e.first, a, b, e.states[a], count, e.members[a]))
        below = first < spso
        if target == AVAILABLE and (count >= self._max_delivery or below):
            target = ARCHIVED
        self._acquired -= n
        if n == 1:
            e.states[a] = target
            e.members[a] = None
            e.pendings[a] = t.id
        else:
            e.states[a:b] = _FILLS[target] * n
            e.members[a:b] = [None] * n
            e.pendings[a:b] = [t.id] * n
        if target >= ACKNOWLEDGED and not below:
            self._dcc += n
        sb.append((first, first + n - 1, target, count))

    # ------------------------------------------------------------ release

    def release_member(self, member_id: str) -> Transition:
        """Start releasing every record ``member_id`` holds (session close / member left).

        The delivery count is kept (the fetch counted as a delivery), so records at the limit
        and records below the SPSO are ARCHIVED; the rest become AVAILABLE.
        """
        t = self._new_transition(RELEASE)
        sb: list[StateBatch] = []
        spso = self._spso
        for key in list(self._cache):
            e = self._cache[key]
            if e.states is None:
                if e.state != ACQUIRED or e.member != member_id or e.pending:
                    continue
                if not (e.first < spso <= e.last):
                    self._begin_batch(e, AVAILABLE, t, sb)
                    continue
                self._split(e)
            states, members, pendings = e.states, e.members, e.pendings
            for i in range(len(states)):
                if states[i] == ACQUIRED and members[i] == member_id and not pendings[i]:
                    self._begin_run(e, i, i + 1, AVAILABLE, t, sb)
        return self._seal(t, sb)

    # ------------------------------------------------------- commit / rollback

    def _holders(self, t: Transition, undo: list | None = None,
                 ) -> Iterator[tuple[InFlightBatch, int, int, int, int, str | None]]:
        """(entry, i, j, old state, old count, old member) still pending for ``t``: i = -1
        for a whole batch-mode entry, else offsets [i, j) of a split entry. ``undo``: these
        of ``t``'s undo entries only."""
        cache = self._cache
        tid = t.id
        for key, i, j, old_state, old_count, old_member in t._undo if undo is None else undo:
            e = cache.get(key)
            if e is None:
                continue
            if i < 0:
                if e.pending == tid:
                    yield e, -1, -1, old_state, old_count, old_member
            elif (e.pendings[i] == tid) if j - i == 1 else (e.pendings[i:j].count(tid) == j - i):
                yield e, i, j, old_state, old_count, old_member
            else:
                for k in range(i, j):
                    if e.pendings[k] == tid:
                        yield e, k, k + 1, old_state, old_count, old_member

    def commit(self, t: Transition) -> None:
        """The write succeeded: make the transition final and move the SPSO."""
        if not t._open:
            return
        t._open = False
        self._open.pop(t.id, None)
        if t._scattered is None or not self._commit_scattered(t):
            self._commit_entries(t)
        self.settle()

    def _commit_entries(self, t: Transition) -> None:
        """``commit``'s work on the records of ``t``'s undo entries still pending under it:
        drop their write marks and lock references, and note any left AVAILABLE for fetches."""
        cache, tid = self._cache, t.id
        # One-offset undo entries (a redelivery's scattered acks: hundreds, mostly under one
        # lock) are finished here, their lock references dropped once per run of one token.
        run_token = run_n = 0
        multi: list = []  # the other undo entries, for _holders
        for u in t._undo:
            i = u[1]
            if u[2] - i != 1:
                multi.append(u)
                continue
            e = cache.get(u[0])
            if e is None:
                continue
            pendings = e.pendings
            if pendings[i] != tid:
                continue
            locks = e.locks
            token = locks[i]
            pendings[i] = locks[i] = 0
            if token != run_token:
                if run_n:
                    self._unref(run_token, run_n)
                run_token, run_n = token, 0
            run_n += 1
            if e.states[i] == AVAILABLE:
                self._find_next = True
        if run_n:
            self._unref(run_token, run_n)
        for e, i, j, _, _, _ in self._holders(t, multi):
            if i < 0:
                e.pending = 0
                self._unref(e.lock)
                e.lock = 0
                if e.state == AVAILABLE:
                    self._find_next = True
                continue
            n = j - i
            locks = e.locks
            token = locks[i]
            if n == 1 or locks[i:j].count(token) == n:
                self._unref(token, n)
            else:
                for token in locks[i:j]:
                    self._unref(token)
            if n == 1:
                e.pendings[i] = locks[i] = 0
            else:
                e.pendings[i:j] = locks[i:j] = [0] * n
            if (e.states[i] == AVAILABLE) if n == 1 else (AVAILABLE in e.states[i:j]):
                self._find_next = True

    def _commit_scattered(self, t: Transition) -> bool:
        """``_commit_entries`` for the one-offset undo entries of ``_ack_scattered`` when
        all are still pending under one lock token: C-level checks and one loop of stores
        (commit of 500 ~70 us, not ~130). False, having changed nothing, otherwise."""
        ii = t._scattered
        e = self._cache.get(t._undo[0][0])
        if e is None or e.states is None:
            return False
        n = len(ii)
        at = itemgetter(*ii)
        pendings, locks = e.pendings, e.locks
        tokens = at(locks)
        token = tokens[0]
        if at(pendings).count(t.id) != n or tokens.count(token) != n:
            return False
        for i in ii:
            pendings[i] = locks[i] = 0
        self._unref(token, n)
        if AVAILABLE in at(e.states):
            self._find_next = True
        return True

    def rollback(self, t: Transition) -> None:
        """The write failed: restore the records as they were before ``t``.

        A record whose acquisition lock expired meanwhile is not given back to its member: it
        becomes AVAILABLE (ARCHIVED at the delivery limit) with its old delivery count.
        """
        if not t._open:
            return
        t._open = False
        self._open.pop(t.id, None)
        for e, i, j, old_state, old_count, old_member in self._holders(t):
            for k in range(i, j) if i >= 0 else (-1,):
                self._undo_one(e, k, old_state, old_count, old_member)
        self.settle()

    def _undo_one(self, e: InFlightBatch, i: int, old_state: int, old_count: int, old_member: str | None) -> None:
        """Roll back a whole batch-mode entry (i = -1) or offset i of a split one."""
        if i < 0:
            new_state, lock, first, last = e.state, e.lock, e.first, e.last
        else:
            new_state, lock = e.states[i], e.locks[i]
            first = last = e.first + i
        if lock:
            state, member = old_state, old_member
        else:
            state = ARCHIVED if old_count >= self._max_delivery else AVAILABLE
            member = None
            if state == AVAILABLE:
                self._find_next = True
        if i < 0:
            e.state, e.count, e.member, e.pending = state, old_count, member, 0
        else:
            e.states[i], e.counts[i], e.members[i], e.pendings[i] = state, old_count, member, 0
        if state == ACQUIRED:
            self._acquired += last - first + 1
        was_terminal = new_state >= ACKNOWLEDGED
        if was_terminal != (state >= ACKNOWLEDGED):
            n = self._n_ge(first, last)
            self._dcc += -n if was_terminal else n

    # ---------------------------------------------------------- lock expiry

    def next_deadline(self) -> float | None:
        """Earliest live acquisition-lock deadline (clock ms), or None."""
        heap, locks = self._heap, self._locks
        while heap:
            deadline, token = heap[0]
            lock = locks.get(token)
            if lock is not None and lock.deadline == deadline:
                return deadline
            heapq.heappop(heap)
        return None

    def expire_locks(self, now: float | None = None) -> Transition | None:
        """Release every record whose lock deadline is <= ``now``; None if nothing changed.

        Expired records become AVAILABLE (ARCHIVED at the delivery limit or below the SPSO).
        Records in a pending transition only lose their lock (see ``rollback``). The change is
        final already; the returned Transition is what to persist, best effort, and the SPSO
        moves past records it finished when that write is done (``settle``).
        """
        if now is None:
            now = self._clock()
        heap, locks, cache = self._heap, self._locks, self._cache
        max_delivery = self._max_delivery
        sb: list[StateBatch] = []
        while heap and heap[0][0] <= now:
            deadline, token = heapq.heappop(heap)
            lock = locks.get(token)
            if lock is None or lock.deadline != deadline:
                continue
            e = cache.get(lock.key)
            if e is None:
                del locks[token]
                continue
            spso = self._spso
            if (e.states is None and e.lock == token and e.state == ACQUIRED and not e.pending
                    and e.first < spso <= e.last):
                self._split(e)  # the part below the SPSO is archived, the rest released
            del locks[token]
            if e.states is None:
                if e.lock != token:
                    continue
                e.lock = 0
                if e.pending or e.state != ACQUIRED:
                    continue
                target = ARCHIVED if e.count >= max_delivery or e.last < spso else AVAILABLE
                e.state = target
                e.member = None
                self._acquired -= e.last - e.first + 1
                if target == ARCHIVED:
                    self._dcc += self._n_ge(e.first, e.last)
                else:
                    self._find_next = True
                sb.append((e.first, e.last, target, e.count))
                continue
            states, counts, members, elocks, pendings = e.states, e.counts, e.members, e.locks, e.pendings
            first = e.first
            for i in range(lock.lo - first, lock.hi - first + 1):
                if elocks[i] != token:
                    continue
                elocks[i] = 0
                if pendings[i] or states[i] != ACQUIRED:
                    continue
                offset = first + i
                target = ARCHIVED if counts[i] >= max_delivery or offset < spso else AVAILABLE
                states[i] = target
                members[i] = None
                self._acquired -= 1
                if target == ARCHIVED:
                    if offset >= spso:
                        self._dcc += 1
                else:
                    self._find_next = True
                sb.append((offset, offset, target, counts[i]))
        if not sb:
            return None
        # Kafka writes the start offset and count as they are when the locks expire and
        # moves the SPSO once that write is done (``settle``): the record carries both
        # before the move.
        return self._seal(self._new_transition(EXPIRE), sb)

    def settle(self) -> None:
        """Move the SPSO past the finished records, dropping those left below it by a log start
        move once they are settled: after a commit, a rollback or an acquisition that archived,
        and when the shell reports a lock expiry's write done, whatever its outcome
        (SharePartition's maybeUpdateCachedStateAndOffsets after the expiry's
        writeShareGroupState). Until then the SPSO stays where the expiry found it, so writes
        sent meanwhile carry it, as in Kafka."""
        if self._stragglers:
            self._settle_below_start()
        self._advance()

    # ------------------------------------------------------- start offset

    def on_log_start_offset(self, log_start_offset: int) -> None:
        """The log start moved (retention, DeleteRecords): move the SPSO up to it.

        AVAILABLE records below it are archived; ACQUIRED ones stay until acked or expired and
        then end ARCHIVED. Nothing is persisted now: the next write carries the new SPSO. The
        SPSO stops at the log start even where finished records follow it, as Kafka's
        updateCacheAndOffsets leaves it; it passes them when a write next settles.
        """
        if log_start_offset <= self._spso:
            return
        cache = self._cache
        if cache and self._has_live_at_or_after_start():
            self._dcc -= self._count_terminal(self._spso, log_start_offset - 1)
        self._spso = log_start_offset
        if not cache:
            self._dcc = 0
            return
        self._stragglers = True
        self._settle_below_start()

    def _count_terminal(self, lo: int, hi: int) -> int:
        cache = self._cache
        n = 0
        for key in cache.islice(self._entry_index_at_or_after(lo)):
            e = cache[key]
            if e.first > hi:
                break
            a = max(lo, e.first)
            b = min(hi, e.last)
            if e.states is None:
                if e.state >= ACKNOWLEDGED:
                    n += b - a + 1
            else:
                states = e.states
                n += sum(1 for i in range(a - e.first, b - e.first + 1) if states[i] >= ACKNOWLEDGED)
        return n

    def _settle_below_start(self) -> None:
        """Archive AVAILABLE records below the SPSO and drop entries that are fully done."""
        cache = self._cache
        spso = self._spso
        if not cache or cache.peekitem(0)[1].first >= spso:
            self._stragglers = False
            return
        self._archive_available(cache.peekitem(0)[1].first, spso - 1, count_terminal=False)
        live = False
        for key in list(cache.irange(maximum=spso - 1)):
            e = cache[key]
            if e.states is None:
                done = e.state >= ACKNOWLEDGED and not e.pending
                if e.last >= spso:
                    live = live or not done
                    continue
            else:
                upto = min(e.last, spso - 1) - e.first + 1
                states, pendings = e.states, e.pendings
                done = all(states[i] >= ACKNOWLEDGED and not pendings[i] for i in range(upto))
                if e.last >= spso:
                    live = live or not done
                    continue
            if done:
                del cache[key]
            else:
                live = True
        self._stragglers = live

    def _advance(self) -> None:
        """Move the SPSO past the leading terminal records that have no write in flight."""
        cache = self._cache
        if not cache:
            return
        spso = self._spso
        new = spso
        passed = 0
        passed_keys: list[int] = []
        for key in cache.islice(self._entry_index_at_or_after(spso)):
            e = cache[key]
            if e.states is None:
                if e.pending or e.state < ACKNOWLEDGED:
                    new = max(new, e.first)
                    break
                passed += e.last - max(e.first, spso) + 1
                new = e.last + 1
                passed_keys.append(key)
            else:
                i0 = max(e.first, spso) - e.first
                i = _first_unsettled(e.states, e.pendings, i0)
                n = len(e.states)
                passed += i - i0
                if i < n:
                    new = e.first + i
                    break
                new = e.last + 1
                passed_keys.append(key)
        if new == spso:
            return
        self._spso = new
        self._dcc -= passed
        # Below the old SPSO everything is settled unless stragglers (live records left below
        # it by a log start move) exist; then _settle_below_start decides what goes.
        stragglers = self._stragglers
        for key in passed_keys:
            if not stragglers or cache[key].first >= spso or cache[key].states is None:
                del cache[key]
        if stragglers:
            self._settle_below_start()

    # ---------------------------------------------------------------- debug

    def _recount(self) -> int:
        """delivery_complete_count computed from scratch (tests only)."""
        spso = self._spso
        n = 0
        for e in self._cache.values():
            if e.states is None:
                if e.state >= ACKNOWLEDGED:
                    n += self._n_ge(e.first, e.last)
            else:
                n += sum(1 for i, s in enumerate(e.states) if s >= ACKNOWLEDGED and e.first + i >= spso)
        return n

    def _recount_acquired(self) -> int:
        n = 0
        for e in self._cache.values():
            if e.states is None:
                if e.state == ACQUIRED:
                    n += e.last - e.first + 1
            else:
                n += e.states.count(ACQUIRED)
        return n

    def iter_records(self) -> Iterator[tuple[int, int, int, str | None, float | None, int]]:
        """Every cached offset as (offset, state, count, member, lock deadline, pending id).

        O(records); for tests and debugging, never on a request path.
        """
        locks = self._locks
        for e in self._cache.values():
            if e.states is None:
                lock = locks.get(e.lock) if e.lock else None
                deadline = lock.deadline if lock is not None else None
                for offset in range(e.first, e.last + 1):
                    yield offset, e.state, e.count, e.member, deadline, e.pending
            else:
                for i, state in enumerate(e.states):
                    lock = locks.get(e.locks[i]) if e.locks[i] else None
                    yield (e.first + i, state, e.counts[i], e.members[i],
                           lock.deadline if lock is not None else None, e.pendings[i])

    def entries(self) -> list[InFlightBatch]:
        """The cached ranges, in offset order (read-only use: tests, describe)."""
        return list(self._cache.values())
