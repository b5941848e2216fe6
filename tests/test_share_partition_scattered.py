"""SharePartition._ack_scattered (and commit's _commit_scattered) against the general path.

Two partitions are driven through the same operations; one has the fast path switched off.
After every step everything must be equal: per-offset state, counts, members, lock tokens,
pending ids, the lock table, SPSO, delivery-complete and acquired counts, and every
Transition (error code, state batches, undo entries) -- so commit and rollback of what the
fast path began are checked against the general path's too.
"""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from broker.share.partition import SharePartition
from broker.share.state import ACQUIRED, ARCHIVED, INVALID_RECORD_STATE
from tests.test_share_partition import FakeClock

GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
LOCK_MS = 1_000
MEMBERS = ("m1", "m2")


def pair(max_delivery: int) -> tuple[SharePartition, SharePartition, FakeClock]:
    clock = FakeClock()
    fast = SharePartition(clock=clock, lock_duration_ms=LOCK_MS, max_delivery_count=max_delivery,
                          max_in_flight_records=10_000)
    slow = SharePartition(clock=clock, lock_duration_ms=LOCK_MS, max_delivery_count=max_delivery,
                          max_in_flight_records=10_000)
    slow._ack_scattered = lambda member_id, batches, t: None  # the general path only
    for sp in (fast, slow):
        sp.initialize(0, 0, [])
    return fast, slow, clock


def snapshot(sp: SharePartition):
    entries = []
    for e in sp.entries():
        if e.states is None:
            entries.append((e.first, e.last, e.state, e.count, e.member, e.lock, e.pending))
        else:
            entries.append((e.first, e.last, bytes(e.states), list(e.counts), list(e.members),
                            list(e.locks), list(e.pendings)))
    locks = {tok: (lk.deadline, lk.refs, lk.key, lk.lo, lk.hi) for tok, lk in sp._locks.items()}
    return (sp.start_offset, sp.delivery_complete_count, sp.acquired_count, entries, locks,
            sp._find_next, sorted(sp._open), sp.next_fetch_offset(), sp.next_deadline())


def trans(t):
    if t is None:
        return None
    return (t.id, t.kind, t.error_code, list(t.state_batches), t.state_epoch, t.start_offset,
            t.delivery_complete_count, list(t._undo), t.pending)


def held(sp: SharePartition, member: str) -> list[int]:
    return [o for o, state, _c, m, _d, pending in sp.iter_records()
            if state == ACQUIRED and m == member and not pending]


def scattered_batches(data, sp: SharePartition, member: str) -> list:
    offsets = held(sp, member)
    if offsets and data.draw(st.integers(0, 3)):  # mostly those of one entry
        e = data.draw(st.sampled_from([e for e in sp.entries() if e.first <= offsets[-1] and e.last >= offsets[0]]))
        offsets = [o for o in offsets if e.first <= o <= e.last]
    if offsets:
        offsets = data.draw(st.lists(st.sampled_from(offsets), unique=True, max_size=40))
    offsets.sort()
    if data.draw(st.integers(0, 3)):  # mostly none adjacent: the fast path's shape
        spaced: list[int] = []
        for o in offsets:
            if not spaced or o > spaced[-1] + 1:
                spaced.append(o)
        offsets = spaced
    if data.draw(st.integers(0, 3)) == 0:  # one not held, below the SPSO, past the end, or twice
        cached = [o for o, *_ in sp.iter_records()]
        end = cached[-1] if cached else 0
        extra = data.draw(st.sampled_from(
            [sp.start_offset - 1, end + 1, end + 3, *cached[:60]] + (offsets[-1:] * 2)))
        if extra >= 0:
            offsets = sorted([*offsets, extra])
    if data.draw(st.booleans()):
        kind = data.draw(st.sampled_from([ACCEPT, ACCEPT, RELEASE, RELEASE, REJECT, GAP]))
        return [(o, o, [kind]) for o in offsets]
    kinds = [ACCEPT, RELEASE, REJECT, GAP] + ([RENEW] if data.draw(st.integers(0, 4)) == 0 else [])
    return [(o, o, [data.draw(st.sampled_from(kinds))]) for o in offsets]


def other_batches(data, sp: SharePartition, member: str) -> list:
    """Acks that split entries: parts of held runs, several types each or one type per run."""
    offsets = held(sp, member)
    if not offsets:
        return []
    first = data.draw(st.sampled_from(offsets))
    last = first
    while last + 1 in offsets and last - first < 30 and data.draw(st.integers(0, 5)):
        last += 1
    if data.draw(st.booleans()):
        return [(first, last, [data.draw(st.sampled_from([ACCEPT, RELEASE, REJECT, RENEW]))
                               for _ in range(first, last + 1)])]
    return [(first, last, [data.draw(st.sampled_from([ACCEPT, RELEASE, REJECT]))])]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), max_delivery=st.integers(2, 4), sizes=st.lists(st.integers(1, 80), min_size=1, max_size=3))
def test_scattered_acks_match_general_path(data, max_delivery, sizes):
    fast, slow, clock = pair(max_delivery)
    log = []
    for size in sizes:
        base = log[-1][1] + 1 if log else 0
        log.append((base, base + size - 1))
    pending = []
    for n in range(data.draw(st.integers(5, 40))):
        step = "acquire" if n == 0 else data.draw(st.sampled_from(
            ["acquire", "acquire", "scattered", "scattered", "scattered", "split", "finish", "finish",
             "tick", "release", "log_start"]))
        holders = sorted({m for _o, state, _c, m, _d, p in fast.iter_records() if state == ACQUIRED and not p})
        member = data.draw(st.sampled_from(holders if holders and data.draw(st.integers(0, 3)) else MEMBERS))
        if step == "acquire":
            fetch = fast.next_fetch_offset()
            assert fetch == slow.next_fetch_offset()
            batches = [b for b in log if b[1] >= fetch]
            if batches:
                max_records = data.draw(st.integers(1, 200))
                mode = data.draw(st.sampled_from([0, 1]))
                got = [sp.acquire(member, batches, fetch_offset=fetch, max_records=max_records,
                                  batch_size=500, mode=mode) for sp in (fast, slow)]
                assert (got[0].ranges, got[0].count) == (got[1].ranges, got[1].count)
        elif step in ("scattered", "split"):
            make = scattered_batches if step == "scattered" else other_batches
            batches = make(data, fast, member)
            if batches:
                ts = [sp.acknowledge(member, [(f, la, list(ty)) for f, la, ty in batches]) for sp in (fast, slow)]
                assert trans(ts[0]) == trans(ts[1]), batches
                if ts[0]._scattered is not None:
                    event("fast path")
                elif ts[0].error_code == INVALID_RECORD_STATE:
                    event("invalid record state")
                if ts[0].pending:
                    pending.append(ts)
        elif step == "finish" and pending:
            ts = pending.pop(data.draw(st.integers(0, len(pending) - 1)))
            if data.draw(st.integers(0, 2)):
                fast.commit(ts[0])
                slow.commit(ts[1])
            else:
                fast.rollback(ts[0])
                slow.rollback(ts[1])
        elif step == "tick":
            clock.now += data.draw(st.sampled_from([1, 500, LOCK_MS, LOCK_MS + 1]))
            assert trans(fast.expire_locks()) == trans(slow.expire_locks())
        elif step == "release":
            ts = [sp.release_member(member) for sp in (fast, slow)]
            assert trans(ts[0]) == trans(ts[1])
            if ts[0].pending:
                pending.append(ts)
        elif step == "log_start":
            to = fast.start_offset + data.draw(st.integers(1, 20))
            fast.on_log_start_offset(to)
            slow.on_log_start_offset(to)
        assert snapshot(fast) == snapshot(slow), step
        assert fast.delivery_complete_count == fast._recount()
        assert fast.acquired_count == fast._recount_acquired()


def redelivered(max_delivery: int = 5):
    """500 records delivered, every 10th released and redelivered to m1: one split entry."""
    fast, slow, clock = pair(max_delivery)
    for sp in (fast, slow):
        sp.acquire("m1", [(0, 4999)], fetch_offset=0, max_records=5000, batch_size=5000, mode=0)
        t = sp.acknowledge("m1", [(o, o, [RELEASE if o % 10 == 0 else ACCEPT]) for o in range(5000)])
        sp.commit(t)
        sp.acquire("m1", [(0, 4999)], fetch_offset=sp.next_fetch_offset(), max_records=5000,
                   batch_size=5000, mode=0)
    return fast, slow, clock


def test_redelivery_takes_the_fast_path_and_matches():
    fast, slow, _ = redelivered()
    batches = [(o, o, [REJECT if o % 30 == 0 else ACCEPT]) for o in range(0, 5000, 10)]
    ts = [sp.acknowledge("m1", batches) for sp in (fast, slow)]
    assert ts[0]._scattered is not None and ts[1]._scattered is None
    assert trans(ts[0]) == trans(ts[1])
    assert len(ts[0].state_batches) == len(ts[0]._undo) == 500
    assert snapshot(fast) == snapshot(slow)
    fast.commit(ts[0])
    slow.commit(ts[1])
    assert snapshot(fast) == snapshot(slow)
    assert fast.start_offset == 5000 and fast.acquired_count == 0


def test_release_at_the_delivery_limit_archives():
    fast, slow, _ = redelivered(max_delivery=2)  # the redelivered records are at count 2
    batches = [(o, o, [RELEASE if o % 20 == 0 else ACCEPT]) for o in range(0, 5000, 10)]
    ts = [sp.acknowledge("m1", batches) for sp in (fast, slow)]
    assert ts[0]._scattered is not None
    assert trans(ts[0]) == trans(ts[1])
    assert {s for _f, _l, s, _c in ts[0].state_batches} == {ARCHIVED, 2}
    fast.rollback(ts[0])
    slow.rollback(ts[1])
    assert snapshot(fast) == snapshot(slow)
    assert fast.acquired_count == 500


def test_one_not_held_refuses_all():
    fast, slow, _ = redelivered()
    for bad in (5, 4999, 5003):  # acknowledged already, past the end
        batches = sorted([*((o, o, [ACCEPT]) for o in range(0, 5000, 10)), (bad, bad, [ACCEPT])])
        ts = [sp.acknowledge("m1", batches) for sp in (fast, slow)]
        assert trans(ts[0]) == trans(ts[1])
        assert ts[0].error_code != 0 and not ts[0].pending
        assert snapshot(fast) == snapshot(slow)
    assert fast.acquired_count == 500


def test_commit_after_lock_expiry_matches():
    fast, slow, clock = redelivered()
    batches = [(o, o, [RELEASE]) for o in range(0, 5000, 20)]
    ts = [sp.acknowledge("m1", batches) for sp in (fast, slow)]
    clock.now += LOCK_MS + 1
    assert trans(fast.expire_locks()) == trans(slow.expire_locks())  # the pending ones lose their lock
    fast.commit(ts[0])
    slow.commit(ts[1])
    assert snapshot(fast) == snapshot(slow)
