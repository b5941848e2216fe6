"""Model-based test: SharePartition against a naive per-offset model.

The model keeps one dict entry per in-flight offset (state, count, member, lock deadline,
pending transition id) and implements acknowledge, release, lock expiry, commit / rollback,
SPSO advance, LSO moves and compaction archiving offset by offset. Which records an acquire
picks is policy (whole batches, chunking, throttling), so for acquire the model checks the
choice instead of predicting it: only available or brand-new records inside the read, delivery
counts one up, new offsets contiguous from the next new offset, record-limit exactness, and
that something is acquired whenever something could be. Everything else is compared exactly
after every step: per-offset state, SPSO, SPEO, delivery_complete_count (also against a
recount), acquired count, next fetch offset, next lock deadline and the persisted batches.

The ``crash_and_reload`` rule checks the durable side: what a broker restart (or kill -9)
would load. Every write is sent to the share coordinator when its transition is sealed, as
the manager does, and the coordinator applies the successful ones in that order; at a crash
each write still in flight may or may not have been applied (a failed one never was). The
rule folds those writes through a real ShareCoordinatorShard (WriteShareGroupState, replay:
the combiner), reads the state back (ReadShareGroupState) and loads it into a fresh
SharePartition as the manager does. The loaded partition must equal the per-offset
expectation (last applied write per offset; holes AVAILABLE with count 0) and keep Kafka's
promises against the in-memory model: terminal records whose write was applied stay
terminal, AVAILABLE ones stay AVAILABLE, ACQUIRED ones come back AVAILABLE with their last
persisted delivery count (0 if never persisted), the loaded SPSO passes only records that
were finished in memory, and the delivery-complete count matches the loaded records.
"""

from __future__ import annotations

import os
import uuid

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from broker.share.ack_batches import validate_ack_batches
from broker.share.partition import SharePartition
from broker.share.state import (
    ACK_TYPE_TO_STATE,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    INVALID_RECORD_STATE,
    INVALID_REQUEST,
    RENEW,
)
from coordinator.share.combiner import NormalBatches, StateBatch, _normal
from coordinator.share.shard import ShareCoordinatorShard
from protocol.messages import initialize_share_group_state_request as ireq
from protocol.messages import read_share_group_state_request as rreq
from protocol.messages import write_share_group_state_request as wreq

LOCK_MS = 1_000
MEMBERS = ("m1", "m2", "m3")
GROUP, TOPIC = "g", uuid.UUID(int=0x5117)
STATE_EPOCH = 1
LEADER_EPOCH = 0  # broker.share.manager.LEADER_EPOCH
APPLIED, FAILED, IN_FLIGHT = "applied", "failed", "in flight"


class Rec:
    __slots__ = ("state", "count", "member", "deadline", "pending")

    def __init__(self, state, count, member=None, deadline=None, pending=0):
        self.state = state
        self.count = count
        self.member = member
        self.deadline = deadline
        self.pending = pending

    def key(self):
        return (self.state, self.count, self.member, self.deadline, self.pending)


def terminal(state):
    return state in (ACKNOWLEDGED, ARCHIVED)


class Write:
    """One WriteShareGroupState the shell sent, in send order, and what became of it."""

    __slots__ = ("t", "status", "start_offset", "delivery_complete_count")

    def __init__(self, t, status):
        self.t = t
        self.status = status
        # The request's fields, as the manager fills them in when it sends the write.
        self.start_offset = t.start_offset
        self.delivery_complete_count = t.delivery_complete_count


def outranks(a, b):
    """Whether (state, count) ``a`` wins over ``b`` where two writes cover one offset: the
    later delivery, then the later state (what the share coordinator's combiner keeps)."""
    return b is None or (a[1], a[0]) > (b[1], b[0])


def expand(state_batches):
    """{offset: (state, count)} of a transition's batches, which must be in the combiner's
    normal form: the in-process persister hands them over as NormalBatches."""
    assert _normal([StateBatch(*b) for b in state_batches]), state_batches
    out = {}
    for first, last, state, count in state_batches:
        for o in range(first, last + 1):
            assert o not in out, f"offset {o} twice in {state_batches}"
            out[o] = (state, count)
    return out


class SharePartitionMachine(RuleBasedStateMachine):
    @initialize(
        max_delivery=st.sampled_from([2, 3, 5, 5, 6]),
        max_in_flight=st.sampled_from([12, 40, 2000]),
        start=st.integers(0, 5),
        initial_log=st.lists(st.integers(1, 8), min_size=1, max_size=8),
        per_snapshot=st.sampled_from([0, 1, 3, 500]),
        wire=st.booleans(),
    )
    def setup(self, max_delivery, max_in_flight, start, initial_log, per_snapshot, wire):
        self.now = 0
        self.max_delivery = max_delivery
        self.max_in_flight = max_in_flight
        self.sp = SharePartition(clock=lambda: self.now, lock_duration_ms=LOCK_MS,
                                 max_delivery_count=max_delivery,
                                 max_in_flight_records=max_in_flight)
        self.sp.initialize(start, 1, [])
        self.recs: dict[int, Rec] = {}
        self.spso = start
        self.log: list[tuple[int, int]] = []  # live log batches
        self.log_end = start
        self.lso = start
        self.pending: list[tuple] = []  # (transition, undo list)
        # The durable side: every write in send order, and per offset the (state, count) the
        # applied writes covering it leave (the newest delivery's latest state, whatever the
        # order they were applied in).
        self.initial_start = start
        self.writes: list[Write] = []
        self.unsent: list = []  # expiry transitions whose write task has not run yet
        self.folds: dict[tuple, tuple] = {}  # coordinator_state by the applied writes' ids
        self.by_tid: dict[int, Write] = {}
        self.written: dict[int, tuple[int, int]] = {}
        self.per_snapshot = per_snapshot  # share.coordinator.snapshot.update.records.per.snapshot
        self.wire = wire  # batches as decoded request objects, else as the in-process persister passes them
        self.append(initial_log)

    # ---------------------------------------------------------------- model helpers

    def m_last(self):
        return max(self.recs) if self.recs else None

    def m_next_new(self):
        last = self.m_last()
        return self.spso if last is None else max(self.spso, last + 1)

    def m_end(self):
        last = self.m_last()
        return self.spso if last is None else max(last, self.spso)

    def m_span(self):
        return self.m_end() - self.spso + 1 if self.recs else 0

    def m_dcc(self):
        return sum(1 for o, r in self.recs.items() if o >= self.spso and terminal(r.state))

    def m_next_fetch(self):
        avail = [o for o, r in self.recs.items()
                 if o >= self.spso and r.state == AVAILABLE and not r.pending]
        return min(avail) if avail else self.m_next_new()

    def m_settle(self):
        """AVAILABLE below the SPSO is archived; done records below it are forgotten."""
        for o in list(self.recs):
            r = self.recs[o]
            if o < self.spso:
                if r.state == AVAILABLE and not r.pending:
                    r.state = ARCHIVED
                if terminal(r.state) and not r.pending:
                    del self.recs[o]

    def m_advance(self):
        new = self.spso
        for o in sorted(x for x in self.recs if x >= self.spso):
            r = self.recs[o]
            if terminal(r.state) and not r.pending:
                new = o + 1
            else:
                new = o
                break
        self.spso = new
        self.m_settle()

    def sent(self, t, status=IN_FLIGHT):
        self.sp.stamp(t)  # as the manager does when it sends the write
        w = Write(t, status)
        self.writes.append(w)
        self.by_tid[t.id] = w
        if status == APPLIED:
            self.apply(w)

    def apply(self, w):
        w.status = APPLIED
        self.paint(self.written, w)

    @staticmethod
    def paint(durable, w):
        for o, sc in expand(w.t.state_batches).items():
            if outranks(sc, durable.get(o)):
                durable[o] = sc

    def read(self, offset, n):
        return [b for b in self.log if b[1] >= offset][:n]

    # -------------------------------------------------------------------------- rules

    @rule(sizes=st.lists(st.integers(1, 8), min_size=1, max_size=4))
    def append(self, sizes):
        for size in sizes:
            self.log.append((self.log_end, self.log_end + size - 1))
            self.log_end += size

    @precondition(lambda self: len(self.log) > 1)
    @rule(data=st.data())
    def compact(self, data):
        """Compaction removes a whole log batch (never the last one)."""
        i = data.draw(st.integers(0, len(self.log) - 2))
        del self.log[i]

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 25),
          batch_size=st.integers(1, 12), mode=st.sampled_from([0, 1]), n=st.integers(1, 5))
    def acquire(self, member, max_records, batch_size, mode, n):
        fetch = self.sp.next_fetch_offset()
        assert fetch == self.m_next_fetch()
        batches = self.read(fetch, n)
        result = self.sp.acquire(member, batches, fetch_offset=fetch, max_records=max_records,
                                 batch_size=batch_size, mode=mode)
        if not batches:
            assert result.ranges == []
            return
        first_base, last_to_acquire = batches[0][0], batches[-1][1]
        budget = min(max_records, self.max_in_flight - self.m_span())
        if budget <= 0:
            end = self.m_end()
            if not self.recs or fetch > end:
                assert result.ranges == []
                return
            budget = min(max_records, end - fetch + 1)
            last_to_acquire = min(last_to_acquire, end)
        archived = False
        if fetch < first_base:  # compacted away: archive what was waiting there
            for o in range(fetch, first_base):
                r = self.recs.get(o)
                if r is not None and r.state == AVAILABLE and not r.pending:
                    r.state = ARCHIVED
                    archived = True

        start_new = max(first_base, self.m_next_new())
        acquirable = start_new <= last_to_acquire or any(
            first_base <= o <= last_to_acquire and r.state == AVAILABLE and not r.pending
            for o, r in self.recs.items())
        acquired = []
        prev_last = None
        for first, last, count in result.ranges:
            assert first <= last
            assert prev_last is None or first > prev_last, result.ranges
            prev_last = last
            acquired += [(o, count) for o in range(first, last + 1)]
        assert result.count == len(acquired)
        if acquirable:
            assert acquired, "records were acquirable but none were acquired"
        if mode == 1:
            assert len(acquired) <= budget
        new = [o for o, _ in acquired if o not in self.recs]
        assert new == list(range(start_new, start_new + len(new))), (new, start_new)
        if new and not any(o >= self.spso for o in self.recs):
            self.spso = start_new
        deadline = self.now + LOCK_MS
        for o, count in acquired:
            assert first_base <= o <= last_to_acquire
            r = self.recs.get(o)
            if r is None:
                assert count == 1
                self.recs[o] = Rec(ACQUIRED, 1, member, deadline)
            else:
                assert r.state == AVAILABLE and not r.pending, (o, r.key())
                assert count == r.count + 1
                r.state, r.count, r.member, r.deadline = ACQUIRED, count, member, deadline
        if new:  # record-limit mode keeps the rest of the cut log batch, available
            last_new = new[-1]
            aligned = SharePartition._aligned_last(batches, last_new)
            for o in range(last_new + 1, min(aligned, last_to_acquire) + 1):
                self.recs[o] = Rec(AVAILABLE, 0)
        if acquired:
            # Whole log batches from the one holding the first acquired offset to the last
            # one starting at or before the last acquired offset.
            first_acq, last_acq = acquired[0][0], acquired[-1][0]
            if len(batches) == 1:
                assert (result.batch_start, result.batch_end) == (0, 1)
            else:
                assert result.batch_start == sum(1 for b in batches if b[1] < first_acq)
                assert result.batch_end == sum(1 for b in batches if b[0] <= last_acq)
        if archived:  # (else nothing new is finished: an expiry's records wait for its write)
            self.m_advance()

    def held_runs(self, member):
        runs = []
        for o in sorted(self.recs):
            r = self.recs[o]
            if r.state == ACQUIRED and r.member == member and not r.pending:
                if runs and runs[-1][1] == o - 1:
                    runs[-1][1] = o
                else:
                    runs.append([o, o])
        return runs

    def draw_types(self, data, length):
        if data.draw(st.integers(0, 3)) == 0:
            return [data.draw(st.sampled_from([0, 1, 2, 3, 4])) for _ in range(length)]
        return [data.draw(st.sampled_from([1, 1, 2, 2, 3, 0, 4]))]

    @rule(data=st.data())
    def acknowledge(self, data):
        holders = sorted({r.member for r in self.recs.values()
                          if r.state == ACQUIRED and not r.pending})
        if holders and data.draw(st.integers(0, 4)) > 0:
            member = data.draw(st.sampled_from(holders))
        else:
            member = data.draw(st.sampled_from(MEMBERS))
        self.ack_as(data, member)

    @rule(data=st.data(), member=st.sampled_from(MEMBERS), max_records=st.integers(1, 25),
          batch_size=st.integers(1, 12), mode=st.sampled_from([0, 1]), n=st.integers(1, 5))
    def consume(self, data, member, max_records, batch_size, mode, n):
        """The usual client loop: fetch, then acknowledge what came back."""
        self.append([data.draw(st.integers(1, 8))])
        self.acquire(member, max_records, batch_size, mode, n)
        self.ack_as(data, member)

    def ack_as(self, data, member):
        runs = self.held_runs(member)
        batches = []
        if runs and data.draw(st.integers(0, 3)) == 0:
            # As librdkafka acknowledges redelivered records: one-offset batches, mostly with
            # gaps between them (SharePartition._ack_scattered), now and then one not held.
            held = [o for a, b in runs for o in range(a, b + 1)]
            split = [e for e in self.sp.entries() if e.states is not None and e.first <= held[-1] and e.last >= held[0]]
            if split and data.draw(st.integers(0, 3)):  # mostly those of one split entry
                e = data.draw(st.sampled_from(split))
                held = [o for o in held if e.first <= o <= e.last] or held
            offsets = sorted(data.draw(st.sets(st.sampled_from(held), min_size=min(2, len(held)), max_size=12)))
            if data.draw(st.integers(0, 3)):
                offsets = [o for k, o in enumerate(offsets) if k == 0 or o > offsets[k - 1] + 1]
            if data.draw(st.integers(0, 4)) == 0:
                offsets = sorted({*offsets, data.draw(st.integers(max(0, self.spso - 2), self.m_next_new() + 2))})
            kinds = [1, 2, 3, 0] if data.draw(st.integers(0, 5)) else [1, 2, 4]
            for o in offsets:
                batches.append((o, o, [data.draw(st.sampled_from(kinds))]))
        elif runs and data.draw(st.integers(0, 4)) > 0:
            # Mostly valid: whole or partial runs of records this member holds.
            for run in sorted(data.draw(st.lists(st.sampled_from(runs), min_size=1, max_size=3,
                                                 unique_by=tuple))):
                if data.draw(st.booleans()):
                    first, last = run
                else:
                    first = data.draw(st.integers(run[0], run[1]))
                    last = data.draw(st.integers(first, run[1]))
                if last > first and data.draw(st.booleans()):
                    # As librdkafka sends them: adjacent batches of one type each.
                    cuts = sorted(data.draw(st.sets(st.integers(first + 1, last), max_size=4)))
                    for a, b in zip([first, *cuts], [*cuts, last + 1]):
                        batches.append((a, b - 1, [data.draw(st.sampled_from([1, 2, 3]))]))
                    continue
                batches.append((first, last, self.draw_types(data, last - first + 1)))
            if data.draw(st.integers(0, 3)) == 0:  # shares its first offset with the last batch
                last = batches[-1][1]
                batches.append((last, last + data.draw(st.integers(0, 3)), [data.draw(st.sampled_from([1, 4]))]))
        else:
            start = data.draw(st.integers(max(0, self.spso - 3), self.m_next_new() + 3))
            for _ in range(data.draw(st.integers(1, 3))):
                length = data.draw(st.integers(1, 8))
                batches.append((start, start + length - 1, self.draw_types(data, length)))
                start = start + length - 1 + data.draw(st.sampled_from([0, 1, 1, 2, 4]))
            if data.draw(st.integers(0, 9)) == 0:
                batches.reverse()

        # Kafka checks the batch below a gap, so its bounds (and whether it is tracked per
        # offset) are part of the contract.
        entries = [(e.first, e.last, e.states is None) for e in self.sp.entries()]
        t = self.sp.acknowledge(member, batches)
        error, undo, changes = self.m_acknowledge(member, batches, t.id, entries)
        assert t.error_code == error, (t, error, batches)
        event(f"ack error={error} pending={bool(undo)}")
        if error:
            assert not t.pending and not t.state_batches
            return
        assert expand(t.state_batches) == changes
        assert (t.start_offset, t.delivery_complete_count) == (self.spso, self.m_dcc())
        assert t.pending == bool(undo)
        assert t.needs_write == bool(undo)
        if undo:
            self.pending.append((t, undo))
            self.sent(t)

    def m_acknowledge(self, member, batches, tid, entries):
        if validate_ack_batches(batches, 2, True) is not None:
            return INVALID_REQUEST, [], {}
        ops = []
        claimed_hi = -1
        whole = set()  # unsplit batches an earlier batch of the request acknowledged whole
        for first, last, types in batches:
            if last < self.spso:
                continue
            p = max(first, self.spso)
            if not any(o <= p for o in self.recs):
                return INVALID_RECORD_STATE, [], {}
            if last not in self.recs:
                return INVALID_REQUEST, [], {}
            a, b, unsplit = max(e for e in entries if e[0] <= p)
            if self.spso <= b < p and unsplit:  # ``p`` is in a gap: the batch below is checked
                if a in whole or any(self.recs[o].state != ACQUIRED or self.recs[o].pending
                                     or self.recs[o].member != member for o in range(a, b + 1)):
                    return INVALID_RECORD_STATE, [], {}
            if len(types) == 1 and types[0] != RENEW:
                whole.update(a for a, b, unsplit in entries if unsplit and max(first, self.spso) <= a and b <= last)
            for o in range(p, last + 1):
                r = self.recs.get(o)
                if r is None:
                    continue
                if o <= claimed_hi:
                    return INVALID_RECORD_STATE, [], {}
                if r.state != ACQUIRED or r.pending or r.member != member:
                    return INVALID_RECORD_STATE, [], {}
                ops.append((o, types[0] if len(types) == 1 else types[o - first]))
            if (types[0] if len(types) == 1 else types[last - first]) != RENEW:
                claimed_hi = last
        undo, changes = [], {}
        for o, ack_type in ops:
            r = self.recs[o]
            if ack_type == RENEW:
                r.deadline = self.now + LOCK_MS
                continue
            target = ACK_TYPE_TO_STATE[ack_type]
            if target == AVAILABLE and r.count >= self.max_delivery:
                target = ARCHIVED
            undo.append((o, r.state, r.count, r.member))
            r.state, r.member, r.pending = target, None, tid
            changes[o] = (target, r.count)
        return 0, undo, changes

    @rule(member=st.sampled_from(MEMBERS))
    def release_member(self, member):
        t = self.sp.release_member(member)
        undo, changes = [], {}
        for o in sorted(self.recs):
            r = self.recs[o]
            if r.state == ACQUIRED and r.member == member and not r.pending:
                target = ARCHIVED if o < self.spso or r.count >= self.max_delivery else AVAILABLE
                undo.append((o, r.state, r.count, r.member))
                r.state, r.member, r.pending = target, None, t.id
                changes[o] = (target, r.count)
        assert t.error_code == 0
        assert expand(t.state_batches) == changes
        assert (t.start_offset, t.delivery_complete_count) == (self.spso, self.m_dcc())
        assert t.pending == bool(undo)
        assert t.needs_write == bool(undo)
        if undo:
            self.pending.append((t, undo))
            self.sent(t)

    @rule(member=st.sampled_from(MEMBERS))
    def release_and_commit(self, member):
        """Session close whose write succeeds at once: drives records up to the limit."""
        before = len(self.pending)
        self.release_member(member)
        if len(self.pending) > before:
            t, undo = self.pending.pop()
            self.sp.commit(t)
            self.apply(self.by_tid[t.id])
            for o, _, _, _ in undo:
                r = self.recs[o]
                if r.pending == t.id:
                    r.pending, r.deadline = 0, None
            self.m_advance()

    @precondition(lambda self: self.pending)
    @rule(data=st.data(), commit=st.booleans(), wait=st.sampled_from([0, 500, 1000, 1000]))
    def finish(self, data, commit, wait):
        if wait:  # the write is slow: locks may expire while it is in flight
            self.tick(wait)
        i = data.draw(st.integers(0, len(self.pending) - 1))
        t, undo = self.pending.pop(i)
        event(f"finish commit={commit} expired={any(self.recs[o].deadline is None and self.recs[o].pending == t.id for o, *_ in undo)}")
        if commit:
            self.sp.commit(t)
            self.apply(self.by_tid[t.id])
            for o, _, _, _ in undo:
                r = self.recs[o]
                if r.pending == t.id:
                    r.pending, r.deadline = 0, None
        else:
            self.sp.rollback(t)
            self.by_tid[t.id].status = FAILED  # the coordinator did not apply it
            for o, old_state, old_count, old_member in undo:
                r = self.recs[o]
                if r.pending != t.id:
                    continue
                if r.deadline is not None:
                    r.state, r.count, r.member = old_state, old_count, old_member
                else:
                    r.count, r.member = old_count, None
                    r.state = ARCHIVED if old_count >= self.max_delivery else AVAILABLE
                r.pending = 0
        self.m_advance()
        # Finishing twice is harmless.
        self.sp.commit(t)
        self.sp.rollback(t)

    @rule(step=st.sampled_from([0, 1, 250, 999, 1000, 1001, 1500]), lost=st.sampled_from([False] * 3 + [True]),
          later=st.booleans())
    def tick(self, step, lost=False, later=False):
        self.now += step
        t = self.sp.expire_locks(self.now)
        changes = {}
        for o in sorted(self.recs):
            r = self.recs[o]
            if r.deadline is None or r.deadline > self.now:
                continue
            r.deadline = None
            if r.pending or r.state != ACQUIRED:
                continue
            target = ARCHIVED if o < self.spso or r.count >= self.max_delivery else AVAILABLE
            r.state, r.member = target, None
            changes[o] = (target, r.count)
        written = (self.spso, self.m_dcc())  # Kafka writes these before the SPSO moves
        if not changes:
            assert t is None
            return
        assert not t.pending
        assert expand(t.state_batches) == changes
        assert (t.start_offset, t.delivery_complete_count) == written
        # Expiry is final; its write is best effort (the manager only logs a failure), and
        # sent from a task of its own: writes sealed meanwhile may reach the coordinator first.
        # The SPSO moves once the write is done, whatever its outcome.
        if later and not lost:
            self.unsent.append(t)
        else:
            self.sent(t, FAILED if lost else APPLIED)
            self.expiry_written()

    @precondition(lambda self: self.unsent)
    @rule()
    def send_expiry(self):
        """The oldest expiry write task runs (tasks run in the order they were created)."""
        self.sent(self.unsent.pop(0), APPLIED)
        self.expiry_written()

    def expiry_written(self):
        self.sp.settle()
        self.m_advance()

    @precondition(lambda self: self.lso < self.log_end)
    @rule(data=st.data())
    def move_log_start(self, data):
        lso = data.draw(st.integers(self.lso + 1, self.log_end))
        self.lso = lso
        self.log = [b for b in self.log if b[1] >= lso]
        self.sp.on_log_start_offset(lso)
        if lso > self.spso:
            self.spso = lso  # and no further, as Kafka's updateCacheAndOffsets
            for o, r in self.recs.items():
                if o < lso and r.state == AVAILABLE and not r.pending:
                    r.state = ARCHIVED
            self.m_settle()

    # ------------------------------------------------------------- crash and reload

    def coordinator_state(self, applied):
        """Initialise a real share coordinator shard, apply the ``applied`` writes in send
        order (WriteShareGroupState, then replay of its records, as the coordinator runtime
        does) and answer ReadShareGroupState: (start offset, state epoch, batches)."""
        key = tuple(w.t.id for w in applied)
        if key not in self.folds:
            self.folds[key] = self.fold(applied)
        return self.folds[key]

    def fold(self, applied):
        shard = ShareCoordinatorShard(self.per_snapshot, clock_ms=lambda: 0)

        def run(records):
            for offset, r in enumerate(records, start=len(run.log)):
                shard.replay(offset, r.key, r.value)
            run.log.extend(records)
        run.log = []

        records, rsp = shard.initialize_state(ireq.InitializeShareGroupStateRequest(GROUP, [
            ireq.InitializeStateData(TOPIC, [ireq.PartitionData(0, STATE_EPOCH, self.initial_start)])]))
        assert rsp.results[0].partitions[0].error_code == 0
        run(records)
        for w in applied:
            t = w.t
            if self.wire:
                batches = [wreq.StateBatch(*b) for b in t.state_batches]
            else:  # persister.in_process: the shard's own tuples, marked normal
                batches = NormalBatches(StateBatch(*b) for b in t.state_batches)
            records, rsp = shard.write_state(wreq.WriteShareGroupStateRequest(GROUP, [wreq.WriteStateData(TOPIC, [
                wreq.PartitionData(0, t.state_epoch, LEADER_EPOCH, w.start_offset, w.delivery_complete_count,
                                   batches)])]), 1)
            row = rsp.results[0].partitions[0]
            assert row.error_code == 0, (row.error_code, row.error_message)
            run(records)
        records, rsp = shard.read_state(rreq.ReadShareGroupStateRequest(GROUP, [
            rreq.ReadStateData(TOPIC, [rreq.PartitionData(0, LEADER_EPOCH)])]))
        run(records)
        row = rsp.results[0].partitions[0]
        assert row.error_code == 0, (row.error_code, row.error_message)
        return row.start_offset, row.state_epoch, [
            (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in row.state_batches]

    @rule(data=st.data())
    def crash_and_reload(self, data):
        """The broker dies now, with some of the writes in flight applied."""
        in_flight = [w for w in self.writes if w.status == IN_FLIGHT]
        self.check_reload({id(w) for w in in_flight if data.draw(st.booleans(), label=f"write #{w.t.id} applied")})

    @invariant()
    def reloads(self):
        """The broker dies now, with none or all of the writes in flight applied."""
        if not hasattr(self, "writes"):
            return
        self.check_reload(set())
        in_flight = {id(w) for w in self.writes if w.status == IN_FLIGHT}
        if in_flight:
            self.check_reload(in_flight)

    def check_reload(self, landed):
        """Load what the coordinator holds, the writes in flight whose ids are in ``landed``
        applied, into a fresh SharePartition (as SharePartitionManager._load does) and check
        it. The machine itself goes on."""
        in_flight = [w for w in self.writes if w.status == IN_FLIGHT]
        applied = [w for w in self.writes if w.status == APPLIED or id(w) in landed]
        event(f"crash: {len(applied)} writes, {len(landed)}/{len(in_flight)} in flight applied")

        # What must be durable: per offset the last applied write, and its start offset.
        durable = dict(self.written)
        for w in applied:
            if id(w) in landed:
                self.paint(durable, w)
        persisted_start = applied[-1].start_offset if applied else self.initial_start

        start, epoch, batches = self.coordinator_state(applied)
        assert (start, epoch) == (persisted_start, STATE_EPOCH)
        sp = SharePartition(clock=lambda: self.now, lock_duration_ms=LOCK_MS,
                            max_delivery_count=self.max_delivery, max_in_flight_records=self.max_in_flight)
        sp.initialize(start, epoch, batches)
        if self.lso > sp.start_offset:
            sp.on_log_start_offset(self.lso)

        # The exact expectation: batches from the persisted start on, holes AVAILABLE with
        # count 0; the SPSO moves past leading terminal records, then up to the log start.
        last = max((o for o in durable if o >= persisted_start), default=None)
        expect = {} if last is None else {
            o: durable.get(o, (AVAILABLE, 0)) for o in range(persisted_start, last + 1)}
        spso = persisted_start

        def advance(spso):
            while spso in expect and terminal(expect[spso][0]):
                spso += 1
            return spso
        spso = advance(spso)
        if self.lso > spso:
            spso = self.lso  # finished records from the log start on stay until a write settles
        expect = {o: sc for o, sc in expect.items() if o >= spso}
        got = {}
        for o, state, count, member, deadline, pending in sp.iter_records():
            assert (member, deadline, pending) == (None, None, 0), (o, member, deadline, pending)
            if o >= sp.start_offset:
                got[o] = (state, count)
            else:
                assert terminal(state), f"offset {o} below the loaded SPSO is still deliverable"
        assert sp.start_offset == spso, (sp.start_offset, spso, batches)
        assert got == expect, (batches, got, expect)
        assert sp.end_offset == (spso if last is None else max(last, spso))
        dcc = sum(1 for state, _ in got.values() if terminal(state))
        assert sp.delivery_complete_count == dcc == sp._recount()
        assert sp.acquired_count == 0 and sp.pending_transitions == 0 and sp.next_deadline() is None
        avail = [o for o, (state, _) in got.items() if state == AVAILABLE]
        assert sp.next_fetch_offset() == (min(avail) if avail else max(spso, (last or -1) + 1))

        # Kafka's promises, against the in-memory model.
        def finished(o):
            r = self.recs.get(o)
            if r is None or not terminal(r.state):
                return False
            return not r.pending or id(self.by_tid[r.pending]) in landed

        assert sp.start_offset >= persisted_start
        for o in range(self.spso, sp.start_offset):
            assert finished(o), f"the loaded SPSO {sp.start_offset} skips unfinished offset {o}"
        if not landed:
            assert sp.start_offset <= self.spso
        for o, r in self.recs.items():
            if o < sp.start_offset:
                continue
            state, count = got.get(o, (AVAILABLE, 0))  # not cached: a new record
            written = durable.get(o)
            assert state != ACQUIRED
            if r.pending:
                continue  # either outcome, checked exactly above
            if terminal(r.state):
                if written == (r.state, r.count):
                    assert (state, count) == written, f"terminal offset {o} {written} came back {state, count}"
            elif r.state == AVAILABLE:
                assert state == AVAILABLE and count <= r.count, (o, r.key(), state, count)
                if written == (AVAILABLE, r.count):
                    assert count == r.count
            else:  # ACQUIRED: acquisitions are not persisted
                assert state == AVAILABLE and count < r.count, (o, r.key(), state, count)
                assert count == (written[1] if written else 0), (o, r.key(), written, count)

    # --------------------------------------------------------------------- invariants

    @invariant()
    def same_state(self):
        sp = self.sp
        assert sp.start_offset == self.spso
        assert sp.end_offset == self.m_end()
        assert sp.in_flight_count == self.m_span()
        assert sp.delivery_complete_count == self.m_dcc() == sp._recount()
        acquired = sum(1 for r in self.recs.values() if r.state == ACQUIRED)
        assert sp.acquired_count == acquired == sp._recount_acquired()
        got = {}
        for o, state, count, member, deadline, pending in sp.iter_records():
            if o >= self.spso or not terminal(state) or pending:
                got[o] = (state, count, member, deadline, pending)
        # (finished records below the SPSO are dropped when it next moves: after a lock
        # expiry's write is done, they wait for it)
        assert got == {o: r.key() for o, r in self.recs.items()
                       if o >= self.spso or not terminal(r.state) or r.pending}
        # Nothing is kept that lies wholly below the SPSO and is settled.
        for e in sp._cache.values():
            if e.last < self.spso:
                assert any(o in self.recs for o in range(e.first, e.last + 1)), e
        deadlines = [r.deadline for r in self.recs.values() if r.deadline is not None]
        assert sp.next_deadline() == (min(deadlines) if deadlines else None)
        assert sp.next_fetch_offset() == self.m_next_fetch()
        assert sp.pending_transitions == len(self.pending)


SharePartitionMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("SHARE_MODEL_EXAMPLES", 150)),  # more for a long soak
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestSharePartitionModel = SharePartitionMachine.TestCase
