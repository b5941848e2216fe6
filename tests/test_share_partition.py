"""Unit tests for the share-partition leader state machine (broker/share/partition.py)."""

from __future__ import annotations

import pytest

from broker.share.ack_batches import validate_ack_batches
from broker.share.offset_reset import resolve_start_offset
from broker.share.partition import SharePartition, ShareStateError
from broker.share.state import (
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    INVALID_RECORD_STATE,
    INVALID_REQUEST,
    AcquireMode,
)

GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
LOCK_MS = 30_000


class FakeClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make(start: int = 0, *, clock: FakeClock | None = None, **kw) -> tuple[SharePartition, FakeClock]:
    clock = clock or FakeClock()
    kw.setdefault("lock_duration_ms", LOCK_MS)
    sp = SharePartition(clock=clock, **kw)
    sp.initialize(start, 0, [])
    return sp, clock


def acquire(sp, member, batches, *, max_records=500, batch_size=500, mode=0, fetch_offset=None):
    if fetch_offset is None:
        fetch_offset = sp.next_fetch_offset()
    return sp.acquire(member, batches, fetch_offset=fetch_offset, max_records=max_records,
                      batch_size=batch_size, mode=mode)


def ack(sp, member, *batches, commit=True):
    t = sp.acknowledge(member, list(batches))
    assert t.error_code == 0, t
    if commit:
        sp.commit(t)
    return t


def rec(sp, offset):
    for o, state, count, member, _deadline, _pending in sp.iter_records():
        if o == offset:
            return state, count, member
    return None


def check_counts(sp):
    assert sp.delivery_complete_count == sp._recount()
    assert sp.acquired_count == sp._recount_acquired()


# ----------------------------------------------------------------------------- KIP-932 example


def kip_view(sp):
    """(SPSO, SPEO as the KIP writes it, [(first, last, state, count)] runs at/after the SPSO)."""
    spso = sp.start_offset
    speo = sp.end_offset + 1 if sp.in_flight_count else sp.end_offset
    runs = []
    for o, state, count, _m, _d, _p in sp.iter_records():
        if o < spso:
            continue
        if runs and runs[-1][1] == o - 1 and runs[-1][2:] == (state, count):
            runs[-1] = (runs[-1][0], o, state, count)
        else:
            runs.append((o, o, state, count))
    return spso, speo, runs


def test_kip932_example_table():
    """The KIP-932 example for offsets 100-121, in its revised (three consumer) form.

    The revision (KIP-932 "persistence and state") says which consumer holds what, which is
    what makes "lock timeout elapsed 111, 112" possible while 113-118 stay acquired.
    """
    sp, clock = make(100)  # topic-partition with latest offset 100
    assert kip_view(sp) == (100, 100, [])

    # Fetch records 100-109.
    r = acquire(sp, "c1", [(100, 109)])
    assert r.ranges == [(100, 109, 1)]
    assert kip_view(sp) == (100, 110, [(100, 109, ACQUIRED, 1)])

    # Acknowledge 100-109.
    t = ack(sp, "c1", (100, 109, [ACCEPT]))
    assert t.state_batches == [(100, 109, ACKNOWLEDGED, 1)]
    assert kip_view(sp) == (110, 110, [])

    # Fetch records 110-119: consumer 1 gets 110-112, consumer 2 113-118, consumer 3 119.
    log = [(110, 112), (113, 118), (119, 119)]
    assert acquire(sp, "c1", log, max_records=3).ranges == [(110, 112, 1)]
    clock.now = 1_000
    assert acquire(sp, "c2", log[1:], max_records=6).ranges == [(113, 118, 1)]
    assert acquire(sp, "c3", log[2:], max_records=1).ranges == [(119, 119, 1)]
    assert kip_view(sp) == (110, 120, [(110, 119, ACQUIRED, 1)])

    # Release 110 (consumer 1).
    t = ack(sp, "c1", (110, 110, [RELEASE]))
    assert t.state_batches == [(110, 110, AVAILABLE, 1)]
    assert kip_view(sp) == (110, 120, [(110, 110, AVAILABLE, 1), (111, 119, ACQUIRED, 1)])

    # Acknowledge 119 (consumer 3).
    t = ack(sp, "c3", (119, 119, [ACCEPT]))
    assert t.state_batches == [(119, 119, ACKNOWLEDGED, 1)]
    assert kip_view(sp) == (110, 120, [
        (110, 110, AVAILABLE, 1), (111, 118, ACQUIRED, 1), (119, 119, ACKNOWLEDGED, 1)])

    # Fetch records 110, 120 (consumer 1).
    clock.now = 2_000
    log.append((120, 120))
    assert sp.next_fetch_offset() == 110
    r = acquire(sp, "c1", log)
    assert r.ranges == [(110, 110, 2), (120, 120, 1)]
    assert kip_view(sp) == (110, 121, [
        (110, 110, ACQUIRED, 2), (111, 118, ACQUIRED, 1), (119, 119, ACKNOWLEDGED, 1),
        (120, 120, ACQUIRED, 1)])

    # Lock timeout elapsed 111, 112 (consumer 1's records).
    clock.now = LOCK_MS
    assert sp.next_deadline() == LOCK_MS
    t = sp.expire_locks(clock.now)
    assert t.state_batches == [(111, 112, AVAILABLE, 1)]
    assert not t.pending
    assert kip_view(sp) == (110, 121, [
        (110, 110, ACQUIRED, 2), (111, 112, AVAILABLE, 1), (113, 118, ACQUIRED, 1),
        (119, 119, ACKNOWLEDGED, 1), (120, 120, ACQUIRED, 1)])

    # Acknowledge 113-118 (consumer 2).
    t = ack(sp, "c2", (113, 118, [ACCEPT]))
    assert t.state_batches == [(113, 118, ACKNOWLEDGED, 1)]
    assert kip_view(sp) == (110, 121, [
        (110, 110, ACQUIRED, 2), (111, 112, AVAILABLE, 1), (113, 119, ACKNOWLEDGED, 1),
        (120, 120, ACQUIRED, 1)])

    # Fetch records 111, 112 (consumer 3).
    assert sp.next_fetch_offset() == 111
    assert acquire(sp, "c3", log).ranges == [(111, 112, 2)]
    assert kip_view(sp) == (110, 121, [
        (110, 112, ACQUIRED, 2), (113, 119, ACKNOWLEDGED, 1), (120, 120, ACQUIRED, 1)])

    # Acknowledge 110 (consumer 1).
    t = ack(sp, "c1", (110, 110, [ACCEPT]))
    assert t.state_batches == [(110, 110, ACKNOWLEDGED, 2)]
    assert kip_view(sp) == (111, 121, [
        (111, 112, ACQUIRED, 2), (113, 119, ACKNOWLEDGED, 1), (120, 120, ACQUIRED, 1)])

    # Acknowledge 111, 112 (consumer 3).
    ack(sp, "c3", (111, 112, [ACCEPT]))
    assert kip_view(sp) == (120, 121, [(120, 120, ACQUIRED, 1)])
    assert [(e.first, e.last) for e in sp.entries()] == [(120, 120)]
    check_counts(sp)


# ------------------------------------------------------------------------- state diagram


def test_acquire_then_accept_reject_gap_release():
    sp, _ = make()
    acquire(sp, "m", [(0, 3)])
    t = sp.acknowledge("m", [(0, 3, [ACCEPT, REJECT, GAP, RELEASE])])
    assert t.error_code == 0 and t.pending
    assert t.state_batches == [(0, 0, ACKNOWLEDGED, 1), (1, 2, ARCHIVED, 1), (3, 3, AVAILABLE, 1)]
    # The new states show at once, but the SPSO waits for the write.
    assert sp.start_offset == 0
    assert sp.delivery_complete_count == 3
    sp.commit(t)
    assert sp.start_offset == 3
    assert rec(sp, 3) == (AVAILABLE, 1, None)
    assert sp.delivery_complete_count == 0
    assert sp.next_fetch_offset() == 3
    check_counts(sp)


@pytest.mark.parametrize("state_setup", ["available", "acknowledged", "archived", "other_member"])
def test_ack_of_record_not_acquired_by_member_is_invalid_record_state(state_setup):
    sp, _ = make()
    acquire(sp, "m", [(0, 9)])
    if state_setup == "available":
        ack(sp, "m", (0, 9, [RELEASE]))
    elif state_setup == "acknowledged":
        ack(sp, "m", (5, 9, [ACCEPT]))
    elif state_setup == "archived":
        ack(sp, "m", (5, 9, [REJECT]))
    before = list(sp.iter_records())
    member = "other" if state_setup == "other_member" else "m"
    t = sp.acknowledge(member, [(5, 9, [ACCEPT])])
    assert t.error_code == INVALID_RECORD_STATE
    assert t.error_message == {  # SharePartition's words: per batch until it splits, then per offset
        "available": "The batch cannot be acknowledged. The batch is not in the acquired state.",
        "acknowledged": "The offset cannot be acknowledged. The offset is not acquired.",
        "archived": "The offset cannot be acknowledged. The offset is not acquired.",
        "other_member": "Member is not the owner of batch record",
    }[state_setup]
    assert not t.pending and not t.needs_write
    assert list(sp.iter_records()) == before


@pytest.mark.parametrize("batches, message", [
    ([(0, 9, [ACCEPT]), (9, 9, [ACCEPT])], "The batch cannot be acknowledged. The batch is not in the acquired state."),
    ([(0, 3, [ACCEPT]), (3, 5, [ACCEPT])], "The offset cannot be acknowledged. The offset is not acquired."),
    ([(0, 3, [ACCEPT]), (3, 5, [ACCEPT]), (10, 12, [ACCEPT])],
     "The offset cannot be acknowledged. The offset is not acquired."),
])
def test_an_offset_acknowledged_twice_in_one_request_is_refused_as_kafka_words_it(batches, message):
    """Kafka applies a request's batches in turn, so a repeated offset finds its batch (or
    offset) already moved out of ACQUIRED by the earlier one."""
    sp, _ = make()
    acquire(sp, "m", [(0, 9)])
    acquire(sp, "n", [(10, 19)])
    t = sp.acknowledge("m", batches)
    assert (t.error_code, t.error_message) == (INVALID_RECORD_STATE, message)


NOT_OWNER = "Member is not the owner of batch record"
NOT_ACQUIRED = "The batch cannot be acknowledged. The batch is not in the acquired state."


@pytest.mark.parametrize("floor_holder, earlier, batch, message", [
    ("a", [], (7, 14, [ACCEPT]), NOT_OWNER),  # the batch below the gap is another member's
    ("b", [], (7, 14, [ACCEPT]), None),  # it is this member's: checked, not acknowledged
    ("b", [(0, 4, [ACCEPT])], (7, 14, [ACCEPT]), NOT_ACQUIRED),  # this request took it out whole
    ("b", [(0, 4, [RENEW])], (7, 14, [ACCEPT]), None),  # a renewal keeps it acquired
    ("b", [(0, 2, [ACCEPT])], (7, 14, [ACCEPT]), None),  # in part: Kafka tracks it per offset
    ("b", [(0, 4, [ACCEPT, ACCEPT, ACCEPT, ACCEPT, ACCEPT])], (7, 14, [ACCEPT]), None),  # per offset too
    ("a", [], (3, 14, [ACCEPT]), NOT_OWNER),  # (not in a gap: refused for the records it names)
])
def test_an_ack_starting_in_a_gap_is_checked_against_the_batch_below_as_kafka_does(
        floor_holder, earlier, batch, message):
    """SharePartition starts from the floor entry of the first offset, so an acknowledgement
    that starts in a gap of the cache (5-9 here) is refused when the batch below is not this
    member's acquired one, though it names none of its records."""
    sp, _ = make()
    acquire(sp, floor_holder, [(0, 4)])
    acquire(sp, "b", [(10, 14)], fetch_offset=10)
    before = list(sp.iter_records())
    t = sp.acknowledge("b", [*earlier, batch])
    if message is None:
        assert t.error_code == 0
        assert rec(sp, 12) == (ACKNOWLEDGED, 1, None)
    else:
        assert (t.error_code, t.error_message) == (INVALID_RECORD_STATE, message)
        assert list(sp.iter_records()) == before


def test_acquire_skips_acquired_and_terminal_records():
    sp, _ = make()
    acquire(sp, "a", [(0, 4), (5, 9)], batch_size=5)
    ack(sp, "a", (5, 9, [ACCEPT]))
    r = acquire(sp, "b", [(0, 4), (5, 9)], fetch_offset=0)
    assert r.ranges == [] and r.count == 0
    assert rec(sp, 0) == (ACQUIRED, 1, "a")


def test_ack_is_atomic_per_partition():
    sp, _ = make()
    acquire(sp, "m", [(0, 9)])
    acquire(sp, "n", [(10, 19)])
    before = list(sp.iter_records())
    # First batch fine, second belongs to another member: nothing may change.
    t = sp.acknowledge("m", [(0, 4, [ACCEPT]), (10, 12, [ACCEPT])])
    assert t.error_code == INVALID_RECORD_STATE
    assert list(sp.iter_records()) == before
    assert sp.delivery_complete_count == 0
    # Renew in a failing request does not restart the lock either.
    t = sp.acknowledge("m", [(0, 4, [RENEW]), (20, 25, [ACCEPT])])
    assert t.error_code == INVALID_REQUEST
    assert list(sp.iter_records()) == before
    check_counts(sp)


def test_ack_lookup_errors():
    sp, _ = make(10)
    t = sp.acknowledge("m", [(10, 12, [ACCEPT])])  # nothing cached
    assert (t.error_code, t.error_message) == (
        INVALID_RECORD_STATE, "Batch record not found. The request batch offsets are not found in the cache.")
    acquire(sp, "m", [(10, 19)])
    # Below the SPSO: silently done.
    t = sp.acknowledge("m", [(0, 9, [ACCEPT])])
    assert t.error_code == 0 and not t.needs_write
    # Starts below the first cached record (and the SPSO is not inside): not found.
    sp2, _ = make(10)
    acquire(sp2, "m", [(20, 29)], fetch_offset=10)
    assert sp2.start_offset == 20
    # Past the cached records.
    t = sp.acknowledge("m", [(15, 25, [ACCEPT])])
    assert (t.error_code, t.error_message) == (
        INVALID_REQUEST, "Batch record not found. The last offset in request is past acquired records.")
    t = sp.acknowledge("m", [(20, 25, [ACCEPT])])
    assert (t.error_code, t.error_message) == (
        INVALID_REQUEST, "Batch record not found. The first offset in request is past acquired records.")
    # Bad shape (the handler checks this too, and answers without a message).
    t = sp.acknowledge("m", [(15, 14, [ACCEPT])])
    assert (t.error_code, t.error_message) == (INVALID_REQUEST, None)
    assert sp.acknowledge("m", [(10, 12, [ACCEPT, ACCEPT])]).error_code == INVALID_REQUEST
    assert sp.acknowledge("m", [(10, 12, [7])]).error_code == INVALID_REQUEST
    # Straddling the SPSO: the part below is skipped.
    ack(sp, "m", (10, 12, [ACCEPT]))
    assert sp.start_offset == 13
    t = ack(sp, "m", (5, 14, [ACCEPT]))
    assert t.state_batches == [(13, 14, ACKNOWLEDGED, 1)]
    assert sp.start_offset == 15


def test_same_offset_twice_in_one_request():
    sp, _ = make()
    acquire(sp, "m", [(0, 9)])
    t = sp.acknowledge("m", [(0, 5, [ACCEPT]), (5, 9, [ACCEPT])])
    assert t.error_code == INVALID_RECORD_STATE
    # Renew then accept on the shared offset is fine (renew starts no transition).
    t = sp.acknowledge("m", [(0, 5, [RENEW]), (5, 9, [ACCEPT])])
    assert t.error_code == 0
    assert t.state_batches == [(5, 9, ACKNOWLEDGED, 1)]


def test_per_offset_types_all_equal_do_not_split():
    sp, _ = make()
    acquire(sp, "m", [(0, 4)])
    t = ack(sp, "m", (0, 4, [ACCEPT] * 5))
    assert t.state_batches == [(0, 4, ACKNOWLEDGED, 1)]
    assert sp.start_offset == 5


# --------------------------------------------------------------------- delivery count limit


def test_poison_record_archived_after_five_deliveries():
    sp, _ = make()
    for delivery in range(1, 6):
        r = acquire(sp, "m", [(0, 0), (1, 1)], max_records=1)
        assert r.ranges == [(0, 0, delivery)]
        ack(sp, "m", (0, 0, [RELEASE]))
    assert rec(sp, 0) is None  # archived, then passed by the SPSO
    assert sp.start_offset == 1
    assert acquire(sp, "m", [(1, 1)]).ranges == [(1, 1, 1)]


def test_poison_record_expiry_at_limit_is_archived():
    sp, clock = make(max_delivery_count=3)
    for delivery in range(1, 4):
        assert acquire(sp, "m", [(0, 0)]).ranges == [(0, 0, delivery)]
        clock.now += LOCK_MS
        t = sp.expire_locks(clock.now)
        expected = ARCHIVED if delivery == 3 else AVAILABLE
        assert t.state_batches == [(0, 0, expected, delivery)]
    assert (sp.start_offset, sp.delivery_complete_count) == (0, 1)  # until the write is done
    sp.settle()
    assert sp.start_offset == 1
    assert sp.delivery_complete_count == 0


def test_throttled_redelivery_isolates_records():
    """KAFKA-17541: from count 3 (limit 5) chunks halve; the last attempt goes out alone."""
    sp, _ = make()
    batch = [(0, 9)]
    for delivery in (1, 2, 3):  # whole batch while below the throttle limit
        assert acquire(sp, "m", batch).ranges == [(0, 9, delivery)]
        ack(sp, "m", (0, 9, [RELEASE]))
    # Count 3 >= throttle limit 3: 10 >> 1 = 5 records per fetch.
    assert acquire(sp, "m", batch).ranges == [(0, 4, 4)]
    assert sp.next_fetch_offset() == 5
    assert acquire(sp, "m", batch).ranges == [(5, 9, 4)]
    ack(sp, "m", (0, 9, [RELEASE]))
    # Count 4 == limit - 1: each record alone.
    for offset in range(10):
        assert sp.next_fetch_offset() == offset
        assert acquire(sp, "m", batch).ranges == [(offset, offset, 5)]
        ack(sp, "m", (offset, offset, [RELEASE]))  # at the limit -> archived
    assert sp.start_offset == 10
    check_counts(sp)


def test_throttled_entry_stops_after_other_records():
    sp, _ = make()
    acquire(sp, "m", [(0, 4), (5, 9)], batch_size=5)
    for _ in range(2):
        ack(sp, "m", (5, 9, [RELEASE]))
        acquire(sp, "m", [(5, 9)])
    ack(sp, "m", (5, 9, [RELEASE]))  # 5-9 AVAILABLE at count 3 (throttled)
    ack(sp, "m", (0, 4, [RELEASE]))  # 0-4 AVAILABLE at count 1
    # Records already acquired in this call: the throttled entry waits for the next fetch.
    assert acquire(sp, "m", [(0, 4), (5, 9)]).ranges == [(0, 4, 2)]
    # Then it goes out on its own, 5 >> 1 = 2 records at a time.
    assert acquire(sp, "m", [(5, 9), (10, 14)]).ranges == [(5, 6, 4)]
    assert acquire(sp, "m", [(5, 9), (10, 14)]).ranges == [(7, 8, 4)]
    assert acquire(sp, "m", [(5, 9), (10, 14)]).ranges == [(9, 9, 4)]
    assert acquire(sp, "m", [(10, 14)]).ranges == [(10, 14, 1)]
    check_counts(sp)


def test_last_attempt_is_not_added_to_other_records():
    sp, _ = make()
    acquire(sp, "m", [(0, 9)])
    for _ in range(3):  # offset 5 alone goes round to delivery count 4
        ack(sp, "m", (5, 5, [RELEASE]))
        acquire(sp, "m", [(0, 9)])
    assert rec(sp, 5) == (ACQUIRED, 4, "m")
    ack(sp, "m", (0, 9, [RELEASE]))
    assert acquire(sp, "m", [(0, 9)]).ranges == [(0, 4, 2)]
    assert acquire(sp, "m", [(0, 9)]).ranges == [(5, 5, 5)]
    assert acquire(sp, "m", [(0, 9)]).ranges == [(6, 9, 2)]
    check_counts(sp)


# --------------------------------------------------------------------------- locks


def test_lock_expiry_then_redelivery_counts_up():
    sp, clock = make()
    acquire(sp, "m", [(0, 9)])
    assert sp.next_deadline() == LOCK_MS
    assert sp.expire_locks(LOCK_MS - 1) is None
    t = sp.expire_locks(LOCK_MS)
    assert t.state_batches == [(0, 9, AVAILABLE, 1)]
    assert sp.next_deadline() is None
    assert sp.acknowledge("m", [(0, 9, [ACCEPT])]).error_code == INVALID_RECORD_STATE
    clock.now = LOCK_MS
    assert acquire(sp, "n", [(0, 9)]).ranges == [(0, 9, 2)]
    assert sp.next_deadline() == 2 * LOCK_MS


def test_expiry_write_carries_the_start_offset_before_the_move():
    """Kafka writes the expiry's state with the start offset and delivery-complete count of
    that moment (also when the write is sent a little later, ``stamp``), and moves the SPSO
    once the write is done (``settle``)."""
    sp, clock = make(max_delivery_count=1)
    acquire(sp, "m", [(0, 9)])
    ack(sp, "m", (0, 4, [ACCEPT]))
    assert (sp.start_offset, sp.delivery_complete_count) == (5, 0)
    t = sp.expire_locks(LOCK_MS)
    assert (t.start_offset, t.delivery_complete_count, t.state_batches) == (5, 5, [(5, 9, ARCHIVED, 1)])
    assert (sp.start_offset, sp.delivery_complete_count) == (5, 5)
    sp.stamp(t)
    assert (t.start_offset, t.delivery_complete_count) == (5, 5)
    sp.settle()
    assert (sp.start_offset, sp.delivery_complete_count) == (10, 0)


def test_lock_duration_is_read_at_each_schedule():
    durations = iter([1_000, 5_000])
    sp, clock = make(lock_duration_ms=lambda: next(durations))
    acquire(sp, "m", [(0, 0)])
    assert sp.next_deadline() == 1_000
    sp.acknowledge("m", [(0, 0, [RENEW])])
    assert sp.next_deadline() == 5_000


def test_renew_restarts_lock_without_state_change_or_write():
    sp, clock = make()
    acquire(sp, "m", [(0, 9)])
    clock.now = 20_000
    t = sp.acknowledge("m", [(0, 9, [RENEW])])
    assert t.error_code == 0 and not t.needs_write and not t.pending
    assert rec(sp, 0) == (ACQUIRED, 1, "m")
    assert sp.next_deadline() == 20_000 + LOCK_MS
    assert sp.expire_locks(LOCK_MS) is None
    # Partial renew: 0-4 renewed again, 5-9 keep the earlier deadline.
    clock.now = 40_000
    ack(sp, "m", (0, 4, [RENEW]))
    t = sp.expire_locks(50_000)
    assert t.state_batches == [(5, 9, AVAILABLE, 1)]
    assert rec(sp, 0) == (ACQUIRED, 1, "m")
    assert sp.next_deadline() == 40_000 + LOCK_MS
    # Renew of records not held fails like any ack.
    assert sp.acknowledge("m", [(5, 9, [RENEW])]).error_code == INVALID_RECORD_STATE


def test_stale_lock_entries_do_not_pile_up():
    sp, clock = make()
    acquire(sp, "m", [(0, 0)])
    for i in range(10_000):
        clock.now = i
        sp.acknowledge("m", [(0, 0, [RENEW])])
    assert len(sp._heap) < 1100
    assert sp.next_deadline() == 9_999 + LOCK_MS
    assert sp.expire_locks(9_998 + LOCK_MS) is None
    assert sp.expire_locks(9_999 + LOCK_MS).state_batches == [(0, 0, AVAILABLE, 1)]


def test_split_keeps_remaining_lock_time():
    sp, clock = make()
    acquire(sp, "m", [(0, 9)])
    clock.now = 10_000
    ack(sp, "m", (0, 0, [ACCEPT]))  # splits the batch
    t = sp.expire_locks(LOCK_MS)
    assert t.state_batches == [(1, 9, AVAILABLE, 1)]


# ---------------------------------------------------------------------- release member


def test_release_member_keeps_count_and_archives_at_limit():
    sp, _ = make()
    acquire(sp, "a", [(0, 0)])
    for _ in range(4):
        ack(sp, "a", (0, 0, [RELEASE]))
        acquire(sp, "a", [(0, 0)])
    assert rec(sp, 0) == (ACQUIRED, 5, "a")
    acquire(sp, "a", [(1, 4)])
    acquire(sp, "b", [(5, 9)])
    t = sp.release_member("a")
    assert t.pending
    assert t.state_batches == [(0, 0, ARCHIVED, 5), (1, 4, AVAILABLE, 1)]
    assert rec(sp, 5) == (ACQUIRED, 1, "b")
    sp.commit(t)
    assert sp.start_offset == 1
    assert sp.next_fetch_offset() == 1
    assert acquire(sp, "b", [(1, 4)]).ranges == [(1, 4, 2)]
    # Nothing held: an empty, non-pending transition.
    t = sp.release_member("a")
    assert not t.pending and not t.needs_write
    check_counts(sp)


# -------------------------------------------------------------------------- two phase


def test_pending_transition_blocks_acquire_ack_and_spso():
    sp, _ = make()
    acquire(sp, "m", [(0, 9)])
    t = sp.acknowledge("m", [(0, 9, [RELEASE])])
    assert rec(sp, 0) == (AVAILABLE, 1, None)
    assert sp.next_fetch_offset() == 10  # pending AVAILABLE is not re-delivered yet
    assert acquire(sp, "n", [(0, 9)], fetch_offset=0).ranges == []
    assert sp.acknowledge("m", [(0, 9, [ACCEPT])]).error_code == INVALID_RECORD_STATE
    sp.commit(t)
    assert sp.next_fetch_offset() == 0
    t = ack(sp, "n", (0, 9, [ACCEPT]), commit=False) if acquire(sp, "n", [(0, 9)]).ranges else None
    assert sp.start_offset == 0  # terminal but pending
    sp.commit(t)
    assert sp.start_offset == 10


def test_rollback_restores_exactly():
    sp, _ = make()
    acquire(sp, "m", [(0, 4), (5, 9)], batch_size=5)
    before = list(sp.iter_records())
    t = sp.acknowledge("m", [(0, 9, [ACCEPT, ACCEPT, REJECT, GAP, RELEASE] * 2)])
    assert sp.delivery_complete_count == 8
    sp.rollback(t)
    assert list(sp.iter_records()) == before
    assert sp.delivery_complete_count == 0
    assert sp.acquired_count == 10
    sp.rollback(t)  # idempotent
    sp.commit(t)
    assert list(sp.iter_records()) == before
    check_counts(sp)


def test_runs_of_one_type_with_mixed_delivery_counts():
    """librdkafka acknowledges a fetch as adjacent batches of one type each; the records in
    them may have been delivered different numbers of times."""
    sp, _ = make(max_delivery_count=2)
    acquire(sp, "m", [(0, 9)])
    ack(sp, "m", (3, 3, [RELEASE]), (5, 5, [RELEASE]))
    assert acquire(sp, "m", [(0, 9)]).ranges == [(3, 3, 2), (5, 5, 2)]
    before = list(sp.iter_records())
    # counts 1 1 1 2 1 2 1 1 1 1; 5-9 mixes counts in one batch; 4 is released at count 1.
    runs = [(0, 2, [ACCEPT]), (3, 3, [ACCEPT]), (4, 4, [RELEASE]), (5, 9, [REJECT])]
    t = sp.acknowledge("m", runs)
    assert t.state_batches == [(0, 2, ACKNOWLEDGED, 1), (3, 3, ACKNOWLEDGED, 2), (4, 4, AVAILABLE, 1),
                               (5, 5, ARCHIVED, 2), (6, 9, ARCHIVED, 1)]
    sp.rollback(t)
    assert list(sp.iter_records()) == before
    check_counts(sp)
    # Again, with a release at the delivery limit (archived) and a commit.
    t = sp.acknowledge("m", [(0, 2, [ACCEPT]), (3, 3, [RELEASE]), (4, 4, [RELEASE]), (5, 9, [ACCEPT])])
    sp.commit(t)
    assert [(o, s, c) for o, s, c, *_ in sp.iter_records() if o >= sp.start_offset] == [
        (4, AVAILABLE, 1), (5, ACKNOWLEDGED, 2), (6, ACKNOWLEDGED, 1), (7, ACKNOWLEDGED, 1),
        (8, ACKNOWLEDGED, 1), (9, ACKNOWLEDGED, 1)]
    assert rec(sp, 3) == (ARCHIVED, 2, None)
    assert sp.start_offset == 4 and sp.next_fetch_offset() == 4
    check_counts(sp)


def test_adjacent_runs_of_one_delivery_count_at_the_limit():
    """One fetch's records acknowledged as adjacent runs: a release at the delivery limit
    archives, and a rollback restores every record."""
    sp, _ = make(max_delivery_count=2)
    acquire(sp, "m", [(0, 9)])
    ack(sp, "m", (0, 9, [RELEASE]))
    assert acquire(sp, "m", [(0, 9)]).ranges == [(0, 9, 2)]
    before = list(sp.iter_records())
    runs = [(0, 3, [ACCEPT]), (4, 4, [RELEASE]), (5, 6, [REJECT]), (7, 9, [ACCEPT])]
    t = sp.acknowledge("m", runs)
    assert t.state_batches == [(0, 3, ACKNOWLEDGED, 2), (4, 6, ARCHIVED, 2), (7, 9, ACKNOWLEDGED, 2)]
    assert sp.delivery_complete_count == 10 and sp.acquired_count == 0
    sp.rollback(t)
    assert list(sp.iter_records()) == before
    check_counts(sp)
    sp.commit(sp.acknowledge("m", runs))
    assert sp.start_offset == 10 and sp.delivery_complete_count == 0
    check_counts(sp)


def test_lock_expiry_during_pending_ack_then_rollback():
    sp, clock = make(max_delivery_count=2)
    acquire(sp, "m", [(0, 4)])
    t = sp.acknowledge("m", [(0, 4, [ACCEPT])])
    clock.now = LOCK_MS
    # The lock passes while the write is in flight: nothing changes yet, but the lock is gone.
    assert sp.expire_locks(clock.now) is None
    assert rec(sp, 0) == (ACKNOWLEDGED, 1, None)
    assert sp.next_deadline() is None
    sp.rollback(t)
    # The member lost its lock: the records are AVAILABLE again, count unchanged.
    assert rec(sp, 0) == (AVAILABLE, 1, None)
    assert sp.next_fetch_offset() == 0
    assert sp.delivery_complete_count == 0
    # At the delivery limit the same sequence archives.
    assert acquire(sp, "m", [(0, 4)]).ranges == [(0, 4, 2)]
    t = sp.acknowledge("m", [(0, 4, [ACCEPT])])
    assert sp.expire_locks(clock.now + LOCK_MS) is None
    sp.rollback(t)
    assert sp.start_offset == 5
    check_counts(sp)


def test_lock_expiry_during_pending_then_commit():
    sp, clock = make()
    acquire(sp, "m", [(0, 4)])
    t = sp.acknowledge("m", [(0, 4, [ACCEPT])])
    assert sp.expire_locks(LOCK_MS) is None
    sp.commit(t)
    assert sp.start_offset == 5


def test_rollback_with_live_lock_returns_records_to_member():
    sp, clock = make()
    acquire(sp, "m", [(0, 4)])
    t = sp.release_member("m")
    sp.rollback(t)
    assert rec(sp, 2) == (ACQUIRED, 1, "m")
    assert sp.next_deadline() == LOCK_MS
    ack(sp, "m", (0, 4, [ACCEPT]))
    assert sp.start_offset == 5


def test_expire_transition_is_final():
    sp, clock = make()
    acquire(sp, "m", [(0, 4)])
    t = sp.expire_locks(LOCK_MS)
    sp.rollback(t)  # no-op: expiry is applied whatever the write's result
    assert rec(sp, 0) == (AVAILABLE, 1, None)


# --------------------------------------------------------------------- acquire shapes


def test_batch_optimized_acquires_whole_log_batches():
    sp, _ = make()
    r = acquire(sp, "m", [(0, 4), (5, 9), (10, 14)], max_records=6)
    assert r.ranges == [(0, 9, 1)] and r.count == 10  # MaxRecords is soft
    assert (r.batch_start, r.batch_end) == (0, 2)
    assert sp.next_fetch_offset() == 10


def test_batch_size_chunks_at_log_batch_boundaries():
    sp, _ = make()
    batches = [(0, 2), (3, 5), (6, 8), (9, 11), (12, 12)]
    r = acquire(sp, "m", batches, batch_size=5)
    assert r.ranges == [(0, 5, 1), (6, 11, 1), (12, 12, 1)]
    assert [(e.first, e.last) for e in sp.entries()] == [(0, 5), (6, 11), (12, 12)]
    # Each chunk is its own entry: acking one costs no split.
    t = ack(sp, "m", (6, 11, [ACCEPT]))
    assert t.state_batches == [(6, 11, ACKNOWLEDGED, 1)]
    assert all(not e.is_split for e in sp.entries())


def test_record_limit_mode_is_exact():
    sp, _ = make()
    batches = [(0, 9), (10, 19)]
    r = acquire(sp, "m", batches, max_records=3, mode=AcquireMode.RECORD_LIMIT)
    assert r.ranges == [(0, 2, 1)] and r.count == 3
    assert (r.batch_start, r.batch_end) == (0, 1)
    assert rec(sp, 3) == (AVAILABLE, 0, None)  # rest of the log batch stays available
    assert sp.end_offset == 9
    assert sp.next_fetch_offset() == 3
    r = acquire(sp, "n", batches, max_records=4, mode=AcquireMode.RECORD_LIMIT)
    assert r.ranges == [(3, 6, 1)]
    r = acquire(sp, "n", batches, max_records=5, mode=AcquireMode.RECORD_LIMIT)
    assert r.ranges == [(7, 9, 1), (10, 11, 1)]
    assert sp.next_fetch_offset() == 12
    check_counts(sp)


def test_reacquire_merges_contiguous_offsets_with_equal_count():
    sp, _ = make()
    acquire(sp, "m", [(0, 9)])
    ack(sp, "m", (0, 9, [RELEASE, ACCEPT, RELEASE, RELEASE, ACCEPT, RELEASE, RELEASE, RELEASE,
                          ACCEPT, RELEASE]))
    r = acquire(sp, "n", [(0, 9)])
    assert r.ranges == [(0, 0, 2), (2, 3, 2), (5, 7, 2), (9, 9, 2)]


def test_max_record_locks_limit():
    sp, _ = make(max_in_flight_records=10)
    r = acquire(sp, "m", [(0, 5), (6, 11), (12, 17)], max_records=100)
    assert r.ranges == [(0, 11, 1)]  # soft at log-batch granularity
    assert sp.in_flight_count == 12
    assert not sp.can_acquire()
    assert acquire(sp, "m", [(12, 17)]).ranges == []
    # Re-acquiring released records inside the window still works, capped at the window end.
    ack(sp, "m", (4, 5, [RELEASE]))
    assert sp.can_acquire()
    r = acquire(sp, "n", [(0, 5), (6, 11), (12, 17)], fetch_offset=sp.next_fetch_offset())
    assert r.ranges == [(4, 5, 2)]
    assert sp.end_offset == 11
    ack(sp, "m", (0, 3, [ACCEPT]))
    # Window has room again: 12-17 acquired.
    assert acquire(sp, "m", [(12, 17)]).ranges == [(12, 17, 1)]


def test_records_left_below_a_moved_log_start_take_one_lock_of_the_window():
    """Kafka's endOffset becomes the SPSO when the log start passes every cached record while
    some are still acquired, so numInFlightRecords is 1, not 0, and the window one smaller."""
    sp, _ = make(max_in_flight_records=20)
    acquire(sp, "a", [(0, 9)])
    sp.on_log_start_offset(10)
    assert (sp.start_offset, sp.in_flight_count) == (10, 1)
    assert acquire(sp, "b", [(o, o) for o in range(10, 40)]).ranges == [(10, 28, 1)]


def test_fetch_from_middle_of_log_batch_on_empty_cache():
    sp, _ = make(105)
    r = acquire(sp, "m", [(100, 109)], fetch_offset=105)
    assert r.ranges == [(105, 109, 1)]
    assert sp.start_offset == 105


def test_compacted_away_available_records_are_archived():
    sp, _ = make()
    acquire(sp, "m", [(0, 4), (5, 9)], batch_size=5)
    ack(sp, "m", (0, 9, [RELEASE]))
    # 0-4 vanished from the log: the read at 0 starts at 5.
    r = acquire(sp, "n", [(5, 9), (10, 14)], fetch_offset=0)
    assert r.ranges == [(5, 9, 2), (10, 14, 1)]
    assert sp.start_offset == 5
    assert sp.delivery_complete_count == 0
    check_counts(sp)


def test_log_batches_slice():
    sp, _ = make()
    acquire(sp, "m", [(0, 4), (5, 9), (10, 14)], batch_size=5)
    ack(sp, "m", (5, 7, [RELEASE]))
    r = acquire(sp, "n", [(0, 4), (5, 9), (10, 14)], fetch_offset=5)
    assert r.ranges == [(5, 7, 2)]
    assert (r.batch_start, r.batch_end) == (1, 2)


# ------------------------------------------------------------------------- LSO / init


def test_log_start_offset_moves_past_in_flight_records():
    sp, clock = make()
    acquire(sp, "m", [(0, 4), (5, 9), (10, 14)], batch_size=5)
    ack(sp, "m", (0, 4, [RELEASE]))
    ack(sp, "m", (10, 10, [ACCEPT]))
    assert sp.delivery_complete_count == 1
    sp.on_log_start_offset(12)
    assert sp.start_offset == 12
    assert rec(sp, 0) is None  # available records below the LSO are archived (and dropped)
    assert [(e.first, e.last) for e in sp.entries()] == [(5, 9), (10, 14)]
    assert rec(sp, 5) == (ACQUIRED, 1, "m")  # acquired ones stay until acked / expired
    assert sp.delivery_complete_count == 0
    # Acks below the SPSO are skipped; straddling ones apply above it.
    t = ack(sp, "m", (5, 13, [ACCEPT]))
    assert t.state_batches == [(12, 13, ACKNOWLEDGED, 1)]
    assert sp.start_offset == 14
    t = sp.expire_locks(LOCK_MS)
    assert t.state_batches == [(5, 9, ARCHIVED, 1), (11, 11, ARCHIVED, 1), (14, 14, AVAILABLE, 1)]
    sp.settle()
    assert [(e.first, e.last) for e in sp.entries()] == [(10, 14)]
    assert sp.next_fetch_offset() == 14
    check_counts(sp)


def test_log_start_offset_stops_the_spso_at_it_until_a_write_settles():
    """Kafka's updateCacheAndOffsets sets the SPSO to the new log start and no further, even
    where finished records follow it; the next write (here an ack) carries that start offset,
    and only once it is done does the SPSO pass them (maybeUpdateCachedStateAndOffsets). So
    DescribeShareGroupOffsets shows the log start after that write, as from Kafka."""
    sp, _ = make()
    acquire(sp, "m", [(0, 4), (5, 9)], batch_size=5)
    ack(sp, "m", (0, 0, [RELEASE]), (1, 1, [ACCEPT]), (2, 3, [ACCEPT]), (4, 4, [RELEASE]))
    assert sp.start_offset == 0
    sp.on_log_start_offset(2)
    assert (sp.start_offset, sp.delivery_complete_count) == (2, 2)  # 2-3 accepted, not passed yet
    check_counts(sp)
    t = ack(sp, "m", (5, 9, [ACCEPT]), commit=False)
    assert (t.start_offset, t.delivery_complete_count) == (2, 7)  # lag: 10 - 2 - 7 = 1 (offset 4)
    sp.commit(t)
    assert (sp.start_offset, sp.delivery_complete_count) == (4, 5)
    check_counts(sp)


def test_log_start_offset_past_everything():
    sp, _ = make()
    acquire(sp, "m", [(0, 9)])
    ack(sp, "m", (0, 4, [RELEASE]))
    sp.on_log_start_offset(20)
    assert sp.start_offset == 20 and sp.end_offset == 20
    assert sp.in_flight_count == 1  # 5-9 are still acquired
    assert sp.next_fetch_offset() == 20
    assert acquire(sp, "n", [(18, 25)], fetch_offset=20).ranges == [(20, 25, 1)]
    sp.expire_locks(LOCK_MS)
    sp.settle()
    assert [(e.first, e.last) for e in sp.entries()] == [(20, 25)]
    check_counts(sp)


def test_an_acquisition_that_archives_drops_settled_records_below_the_start_offset():
    """Records a log start move left below the SPSO, archived by a lock expiry whose write is
    still out, go when the next step settles: here an acquisition that archives records the
    log no longer has, though the SPSO does not move (found by the hypothesis model)."""
    sp, clock = make()
    acquire(sp, "m", [(0, 4)])
    clock.now = 1_000
    acquire(sp, "n", [(5, 9)])
    ack(sp, "n", (7, 9, [RELEASE]))
    sp.on_log_start_offset(5)  # 0-4 stay, acquired by m
    clock.now = LOCK_MS
    t = sp.expire_locks(clock.now)
    assert t.state_batches == [(0, 4, ARCHIVED, 1)]
    assert [(e.first, e.last) for e in sp.entries()][0] == (0, 4)  # until the write is done
    assert acquire(sp, "n", [(10, 12)], fetch_offset=7).ranges == [(10, 12, 1)]  # 7-9 compacted away
    assert sp.start_offset == 5  # 5-6 are still n's
    assert [(e.first, e.last) for e in sp.entries()][0] == (5, 9)
    check_counts(sp)


def test_initialize_from_persisted_state():
    sp = SharePartition(clock=FakeClock(), lock_duration_ms=LOCK_MS)
    sp.initialize(100, 3, [(100, 104, ACKNOWLEDGED, 1), (110, 114, AVAILABLE, 2),
                           (115, 119, ARCHIVED, 5)])
    assert sp.state_epoch == 3
    assert sp.start_offset == 105  # leading terminal batch passed
    assert sp.delivery_complete_count == 5
    assert sp.end_offset == 119
    # The hole 105-109 was fetched but never persisted: delivered again first.
    assert sp.next_fetch_offset() == 105
    r = acquire(sp, "m", [(100, 109), (110, 119), (120, 121)])
    assert r.ranges == [(105, 109, 1), (110, 114, 3), (120, 121, 1)]
    assert (r.batch_start, r.batch_end) == (0, 3)
    check_counts(sp)


def test_a_hole_left_by_a_load_is_acquired_like_new_records():
    """Kafka acquires the offsets between persisted batches as new records: up to MaxRecords at
    a log-batch boundary, in BatchSize chunks. It was handed out whole, as one range."""
    sp = SharePartition(clock=FakeClock(), lock_duration_ms=LOCK_MS)
    sp.initialize(0, 1, [(1000, 1009, ACKNOWLEDGED, 1)])
    log = [(b, b + 99) for b in range(0, 1000, 100)] + [(1000, 1009)]
    r = acquire(sp, "m", log, max_records=450, batch_size=200)
    assert r.ranges == [(0, 199, 1), (200, 399, 1), (400, 499, 1)]
    assert sp.next_fetch_offset() == 500
    r = acquire(sp, "n", log[5:], max_records=500, batch_size=500)
    assert r.ranges == [(500, 999, 1)]
    ack(sp, "m", (0, 499, [ACCEPT]))
    ack(sp, "n", (500, 999, [ACCEPT]))
    assert (sp.start_offset, sp.delivery_complete_count) == (1010, 0)
    check_counts(sp)


def test_a_read_reaching_part_of_a_hole_acquires_that_part_like_new_records():
    """A read that covers a hole only in part (reads are sized from MaxRecords) still acquires
    it as Kafka's gap window does: MaxRecords at a log-batch boundary, BatchSize chunks, and
    record_limit's one range. Split per offset instead, it went out as one uncapped range."""
    log = [(0, 4), (5, 9), (10, 14), (15, 19), (20, 29)]
    sp, _ = make()
    sp.initialize(0, 1, [(20, 29, ACKNOWLEDGED, 1)])
    assert acquire(sp, "m", log[:1]).ranges == [(0, 4, 1)]
    assert acquire(sp, "m", log[1:], max_records=3).ranges == [(5, 9, 1)]
    assert acquire(sp, "n", log[2:], batch_size=5).ranges == [(10, 14, 1), (15, 19, 1)]
    sp, _ = make()
    sp.initialize(0, 1, [(20, 29, ACKNOWLEDGED, 1)])
    assert acquire(sp, "m", log[:2], max_records=3, mode=1).ranges == [(0, 2, 1)]
    assert acquire(sp, "n", log, max_records=9, mode=1).ranges == [(3, 4, 1), (5, 11, 1)]
    assert sp.next_fetch_offset() == 12
    check_counts(sp)


def test_a_hole_acquired_in_parts_throttles_by_the_size_of_its_part():
    """The throttle cap is half the cached batch (KAFKA-17541): the part a read acquired, not
    the whole hole it came from."""
    sp, _ = make(max_delivery_count=5)
    sp.initialize(0, 1, [(20, 29, ACKNOWLEDGED, 1)])
    for count in (1, 2, 3):
        assert acquire(sp, "m", [(0, 9)], fetch_offset=0).ranges == [(0, 9, count)]
        ack(sp, "m", (0, 9, [RELEASE]))
    assert acquire(sp, "m", [(0, 9)], fetch_offset=0).ranges == [(0, 4, 4)]


def test_compaction_inside_a_hole_leaves_the_rest_a_hole():
    """Records compaction removed from a hole are archived; the rest is still acquired as new
    records, within MaxRecords."""
    sp, _ = make()
    sp.initialize(0, 1, [(30, 39, ACKNOWLEDGED, 1)])
    r = acquire(sp, "m", [(10, 14), (15, 19), (20, 29)], fetch_offset=0, max_records=3)
    assert r.ranges == [(10, 14, 1)]
    assert sp.start_offset == 10  # 0-9 archived and passed
    assert acquire(sp, "m", [(15, 19), (20, 29)], max_records=3).ranges == [(15, 19, 1)]
    check_counts(sp)
    # So does a log start moved into a hole.
    sp, _ = make()
    sp.initialize(0, 1, [(30, 39, ACKNOWLEDGED, 1)])
    sp.on_log_start_offset(7)
    assert acquire(sp, "m", [(5, 9), (10, 14), (15, 19)], max_records=3).ranges == [(7, 9, 1)]
    assert acquire(sp, "m", [(10, 14), (15, 19)], max_records=3).ranges == [(10, 14, 1)]
    check_counts(sp)


def test_initialize_rejects_bad_state():
    sp = SharePartition(clock=FakeClock())
    with pytest.raises(ShareStateError):
        sp.initialize(10, 0, [(5, 12, AVAILABLE, 1)])
    with pytest.raises(ShareStateError):
        sp.initialize(-1, 0, [])
    with pytest.raises(ShareStateError):
        sp.initialize(0, 0, [(0, 5, AVAILABLE, 1), (3, 8, AVAILABLE, 1)])


def test_initialize_all_terminal():
    sp = SharePartition(clock=FakeClock())
    sp.initialize(0, 1, [(0, 9, ACKNOWLEDGED, 1)])
    assert (sp.start_offset, sp.end_offset, sp.delivery_complete_count) == (10, 10, 0)
    assert sp.entries() == []


def test_transition_carries_write_fields():
    sp = SharePartition(clock=FakeClock())
    sp.initialize(0, 7, [])
    acquire(sp, "m", [(0, 9)])
    t = sp.acknowledge("m", [(0, 4, [ACCEPT])])
    assert (t.state_epoch, t.start_offset, t.delivery_complete_count) == (7, 0, 5)
    sp.commit(t)
    t = sp.acknowledge("m", [(5, 9, [ACCEPT])])
    assert (t.start_offset, t.delivery_complete_count) == (5, 5)


# --------------------------------------------------------------------- pure helpers


@pytest.mark.parametrize("batches, version, renew, expected", [
    ([(0, 9, [1])], 2, False, None),
    ([(0, 2, [1, 2, 3])], 1, False, None),
    ([(5, 4, [1])], 2, False, INVALID_REQUEST),
    ([(0, 5, [1]), (5, 9, [1])], 2, False, None),  # one-offset overlap passes
    ([(0, 5, [1]), (4, 9, [1])], 2, False, INVALID_REQUEST),
    ([(0, 5, [])], 2, False, INVALID_REQUEST),
    ([(0, 5, None)], 2, False, INVALID_REQUEST),
    ([(0, 2, [1, 1])], 2, False, INVALID_REQUEST),
    ([(0, 2, [-1])], 2, False, INVALID_REQUEST),
    ([(0, 2, [4])], 1, True, INVALID_REQUEST),
    ([(0, 2, [4])], 2, False, INVALID_REQUEST),
    ([(0, 2, [4])], 2, True, None),
    ([(0, 2, [1, 4, 1])], 2, True, None),  # mixing is allowed
    ([(0, 2, [1, 4, 1])], 2, False, INVALID_REQUEST),
    ([(0, 2, [1, 4, 1])], 1, True, INVALID_REQUEST),
    ([(0, 2, [1, 5, 1])], 2, True, INVALID_REQUEST),
    ([(0, 2, [1, -1, 1])], 2, True, INVALID_REQUEST),
    ([(0, 2, [5])], 2, True, INVALID_REQUEST),
    ([(-5, -3, [1])], 2, False, INVALID_REQUEST),  # the first batch is compared with -1
    ([(-1, 0, [1])], 2, False, None),
])
def test_validate_ack_batches(batches, version, renew, expected):
    assert validate_ack_batches(batches, version, renew) == expected


def test_auto_offset_reset():
    lookups = []

    def by_ts(ts):
        lookups.append(ts)
        return 42 if ts <= 1_000_000 else None

    kw = dict(log_start_offset=5, log_end_offset=99, offset_for_timestamp=by_ts, now_ms=1_000_000)
    assert resolve_start_offset("latest", **kw) == 99
    assert resolve_start_offset("earliest", **kw) == 5
    assert resolve_start_offset(("by_duration", 3_600_000), **kw) == 42
    assert lookups == [1_000_000 - 3_600_000]
    assert resolve_start_offset(("by_duration", 0), **{**kw, "now_ms": 2_000_000}) is None


def test_runs_acked_inside_a_split_range_are_written_and_undone_run_by_run():
    """A client acks a split range as runs of one type (librdkafka sends 0-0 release, 1-9
    accept, ...): each run is one state batch, and a rollback gives every record back."""
    sp, _ = make()
    acquire(sp, "m", [(0, 29)])
    runs = [(o, o, [RELEASE]) if o % 10 == 0 else (o, o + 8, [ACCEPT]) for o in range(0, 30) if o % 10 in (0, 1)]
    t = sp.acknowledge("m", runs)
    assert t.error_code == 0
    assert t.state_batches == [(0, 0, AVAILABLE, 1), (1, 9, ACKNOWLEDGED, 1), (10, 10, AVAILABLE, 1),
                               (11, 19, ACKNOWLEDGED, 1), (20, 20, AVAILABLE, 1), (21, 29, ACKNOWLEDGED, 1)]
    assert sp.delivery_complete_count == 27 and sp.acquired_count == 0
    sp.rollback(t)
    assert [rec(sp, o) for o in (0, 5, 29)] == [(ACQUIRED, 1, "m")] * 3
    assert sp.delivery_complete_count == 0 and sp.acquired_count == 30
    t = sp.acknowledge("m", runs)
    sp.commit(t)
    assert sp.start_offset == 0 and sp.next_fetch_offset() == 0
    redelivered = acquire(sp, "m", [(0, 29)])
    assert redelivered.ranges == [(0, 0, 2), (10, 10, 2), (20, 20, 2)]
    ack(sp, "m", (0, 0, [ACCEPT]), (10, 10, [ACCEPT]), (20, 20, [ACCEPT]))
    assert sp.start_offset == 30 and sp.delivery_complete_count == 0


def test_one_offset_acks_of_a_split_range():
    """Redeliveries come back acked one offset at a time: a release at the delivery limit is
    archived, a reject is archived, and one offset the member does not hold (or that is in a
    pending write) fails the whole request with nothing changed."""
    sp, _ = make(max_delivery_count=2)
    acquire(sp, "m", [(0, 9)])
    ack(sp, "m", *[(o, o, [RELEASE]) if o % 3 == 0 else (o, o, [ACCEPT]) for o in range(10)])
    assert acquire(sp, "m", [(0, 9)]).ranges == [(0, 0, 2), (3, 3, 2), (6, 6, 2), (9, 9, 2)]
    before = [rec(sp, o) for o in range(10)]
    for bad in ([(0, 0, [ACCEPT]), (1, 1, [ACCEPT])], [(3, 3, [ACCEPT]), (6, 6, [ACCEPT])]):
        if bad[0][0] == 3:
            pending = sp.acknowledge("m", [(6, 6, [ACCEPT])])
        t = sp.acknowledge("m", bad)
        assert t.error_code == INVALID_RECORD_STATE and not t.state_batches
        assert [rec(sp, o) for o in range(10) if o != 6] == [b for o, b in enumerate(before) if o != 6]
    sp.rollback(pending)
    t = sp.acknowledge("m", [(0, 0, [RELEASE]), (3, 3, [REJECT]), (6, 6, [ACCEPT]), (9, 9, [RELEASE])])
    assert t.state_batches == [(0, 0, ARCHIVED, 2), (3, 3, ARCHIVED, 2), (6, 6, ACKNOWLEDGED, 2), (9, 9, ARCHIVED, 2)]
    sp.commit(t)
    assert sp.start_offset == 10 and sp.acquired_count == 0


# --- the end of the settled run that moves the SPSO ----------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from broker.share.partition import _first_unsettled  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_first_unsettled_is_the_first_live_or_pending_record(data):
    n = data.draw(st.integers(0, 2000))
    settled = data.draw(st.integers(0, n))  # a long settled run first, as after acknowledgements
    states = bytearray(data.draw(st.lists(st.sampled_from([ACKNOWLEDGED, ARCHIVED]), min_size=settled,
                                          max_size=settled)))
    states += bytearray(data.draw(st.lists(st.sampled_from([AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED]),
                                           min_size=n - settled, max_size=n - settled)))
    pendings = [0] * n
    for k in data.draw(st.lists(st.integers(0, n - 1), max_size=3)) if n else []:
        pendings[k] = data.draw(st.integers(1, 9))
    i = data.draw(st.integers(0, n))
    expected = i
    while expected < n and states[expected] >= ACKNOWLEDGED and not pendings[expected]:
        expected += 1
    assert _first_unsettled(states, pendings, i) == expected


@pytest.mark.parametrize("mode,max_records", [(AcquireMode.BATCH_OPTIMIZED, 500), (AcquireMode.RECORD_LIMIT, 2)])
def test_a_loaded_delivery_count_at_the_int16_limit_stays_encodable(mode, max_records):
    """A WriteShareGroupState may persist delivery count 32767. Acquiring it made 32768, which
    neither the ShareFetch response nor the state record can hold: the fetch's connection was
    closed and every release failed to persist, so the records stayed stuck (wire fuzzing)."""
    sp = SharePartition(clock=FakeClock(), lock_duration_ms=LOCK_MS)
    sp.initialize(0, 1, [(0, 4, AVAILABLE, 0x7FFF)])
    r = acquire(sp, "m", [(0, 4)], max_records=max_records, mode=mode)
    assert r.ranges and all(count == 0x7FFF for _f, _l, count in r.ranges)
    t = sp.acknowledge("m", [(r.ranges[0][0], r.ranges[-1][1], [RELEASE])])
    assert t.error_code == 0
    assert t.state_batches and all(state == ARCHIVED and count == 0x7FFF for _f, _l, state, count in t.state_batches)
    sp.commit(t)
    check_counts(sp)


def test_a_loaded_batch_reaching_far_past_the_log_end_is_split_only_up_to_it():
    """State written with a batch of 10**12 offsets over a 5-record log: acquiring its first
    records split the whole batch into per-offset state, a MemoryError for every fetch (and for
    a batch of a few hundred million offsets, gigabytes). Past the log end it stays one range."""
    sp = SharePartition(clock=FakeClock(), lock_duration_ms=LOCK_MS)
    sp.initialize(0, 1, [(0, 10**12, AVAILABLE, 1)])
    r = sp.acquire("m", [(0, 4)], fetch_offset=0, max_records=500, batch_size=500, log_end=5)
    assert r.ranges == [(0, 4, 2)]
    assert [(e.first, e.last, e.is_split) for e in sp.entries()] == [(0, 4, True), (5, 10**12, False)]
    ack(sp, "m", (0, 4, [ACCEPT]))
    assert sp.start_offset == 5
    r = sp.acquire("m", [(5, 6)], fetch_offset=5, max_records=500, batch_size=500, log_end=7)
    assert r.ranges == [(5, 6, 2)]
