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
"""

from __future__ import annotations

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
from coordinator.share.combiner import StateBatch, _normal

LOCK_MS = 1_000
MEMBERS = ("m1", "m2", "m3")


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
    )
    def setup(self, max_delivery, max_in_flight, start, initial_log):
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
        last = self.m_last()
        return last - self.spso + 1 if last is not None and last >= self.spso else 0

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
        if fetch < first_base:  # compacted away: archive what was waiting there
            for o in range(fetch, first_base):
                r = self.recs.get(o)
                if r is not None and r.state == AVAILABLE and not r.pending:
                    r.state = ARCHIVED

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
        if runs and data.draw(st.integers(0, 4)) > 0:
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

        t = self.sp.acknowledge(member, batches)
        error, undo, changes = self.m_acknowledge(member, batches, t.id)
        assert t.error_code == error, (t, error, batches)
        event(f"ack error={error} pending={bool(undo)}")
        if error:
            assert not t.pending and not t.state_batches
            return
        assert expand(t.state_batches) == changes
        assert (t.start_offset, t.delivery_complete_count) == (self.spso, self.m_dcc())
        assert t.pending == bool(undo)
        if undo:
            self.pending.append((t, undo))

    def m_acknowledge(self, member, batches, tid):
        if validate_ack_batches(batches, 2, True) is not None:
            return INVALID_REQUEST, [], {}
        ops = []
        claimed_hi = -1
        for first, last, types in batches:
            if last < self.spso:
                continue
            p = max(first, self.spso)
            if not any(o <= p for o in self.recs):
                return INVALID_RECORD_STATE, [], {}
            if last not in self.recs:
                return INVALID_REQUEST, [], {}
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
        if undo:
            self.pending.append((t, undo))

    @rule(member=st.sampled_from(MEMBERS))
    def release_and_commit(self, member):
        """Session close whose write succeeds at once: drives records up to the limit."""
        before = len(self.pending)
        self.release_member(member)
        if len(self.pending) > before:
            t, undo = self.pending.pop()
            self.sp.commit(t)
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
            for o, _, _, _ in undo:
                r = self.recs[o]
                if r.pending == t.id:
                    r.pending, r.deadline = 0, None
        else:
            self.sp.rollback(t)
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

    @rule(step=st.sampled_from([0, 1, 250, 999, 1000, 1001, 1500]))
    def tick(self, step):
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
        self.m_advance()
        if not changes:
            assert t is None
            return
        assert not t.pending
        assert expand(t.state_batches) == changes
        assert (t.start_offset, t.delivery_complete_count) == written

    @precondition(lambda self: self.lso < self.log_end)
    @rule(data=st.data())
    def move_log_start(self, data):
        lso = data.draw(st.integers(self.lso + 1, self.log_end))
        self.lso = lso
        self.log = [b for b in self.log if b[1] >= lso]
        self.sp.on_log_start_offset(lso)
        if lso > self.spso:
            self.spso = lso
            for o, r in self.recs.items():
                if o < lso and r.state == AVAILABLE and not r.pending:
                    r.state = ARCHIVED
            self.m_advance()

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
        assert got == {o: r.key() for o, r in self.recs.items()}
        # Nothing is kept that lies wholly below the SPSO and is settled.
        for e in sp._cache.values():
            if e.last < self.spso:
                assert any(o in self.recs for o in range(e.first, e.last + 1)), e
        deadlines = [r.deadline for r in self.recs.values() if r.deadline is not None]
        assert sp.next_deadline() == (min(deadlines) if deadlines else None)
        assert sp.next_fetch_offset() == self.m_next_fetch()
        assert sp.pending_transitions == len(self.pending)


SharePartitionMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestSharePartitionModel = SharePartitionMachine.TestCase
