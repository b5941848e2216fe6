"""The state-batch combiner against a per-offset brute force, plus Kafka's documented cases."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.share.combiner import (
    ACKNOWLEDGED,
    ARCHIVED,
    AVAILABLE,
    NormalBatches,
    StateBatch,
    _overlay,
    _swap,
    _sweep,
    combine,
)


def brute_force(current, new, start_offset):
    """Offset by offset: the covering batch with the highest (count, state) wins; then runs."""
    best: dict[int, tuple[int, int]] = {}
    for b in (*current, *new):
        for o in range(b.first_offset, b.last_offset + 1):
            if start_offset != -1 and o < start_offset:
                continue
            prio = (b.delivery_count, b.delivery_state)
            if o not in best or prio > best[o]:
                best[o] = prio
    out: list[StateBatch] = []
    for o in sorted(best):
        count, state = best[o]
        if out and out[-1].last_offset == o - 1 and (out[-1].delivery_count, out[-1].delivery_state) == (count, state):
            out[-1] = out[-1]._replace(last_offset=o)
        else:
            out.append(StateBatch(o, o, state, count))
    return out


@st.composite
def batch(draw):
    first = draw(st.integers(0, 40))
    return StateBatch(first, first + draw(st.integers(0, 12)),
                      draw(st.sampled_from([AVAILABLE, 1, ACKNOWLEDGED, ARCHIVED])), draw(st.integers(0, 3)))


batches = st.lists(batch(), max_size=6)
starts = st.one_of(st.just(-1), st.integers(0, 55))


@settings(max_examples=400, deadline=None)
@given(batches, batches, starts)
def test_matches_brute_force(current, new, start):
    got = combine(current, new, start)
    if len(current) + len(new) >= 2 or not got:
        assert got == brute_force(current, new, start)
    else:
        # Like Kafka, a single surviving batch comes back as it is (only pruned).
        (only,) = [b for b in (*current, *new) if start == -1 or b.last_offset >= start]
        assert got == [only._replace(first_offset=only.first_offset if start == -1 else max(start, only.first_offset))]


@settings(max_examples=200, deadline=None)
@given(batches, batches, batches, starts)
def test_order_of_folding_does_not_matter(a, b, c, start):
    one = combine(combine(a, b, start), c, start)
    other = combine(a, combine(c, b, start), start)
    assert brute_force(one, [], start) == brute_force(other, [], start)


@given(batches, batches, starts)
def test_result_is_sorted_disjoint_and_joined(current, new, start):
    got = combine(current, new, start)
    for x, y in zip(got, got[1:]):
        assert x.last_offset < y.first_offset
        assert not (x.last_offset + 1 == y.first_offset and x[2:] == y[2:])
    assert all(start == -1 or b.first_offset >= start for b in got)


def test_prune_cuts_a_straddling_batch():
    assert combine([StateBatch(100, 119, AVAILABLE, 1)], [], 110) == [StateBatch(110, 119, AVAILABLE, 1)]
    assert combine([StateBatch(100, 109, AVAILABLE, 1)], [StateBatch(120, 129, 2, 1)], 110) == [StateBatch(120, 129, 2, 1)]


def test_higher_delivery_count_then_state_wins_the_overlap():
    current = [StateBatch(100, 119, AVAILABLE, 1)]
    # Acked with the same count beats available: it splits the batch.
    assert combine(current, [StateBatch(105, 109, ACKNOWLEDGED, 1)], -1) == [
        StateBatch(100, 104, AVAILABLE, 1), StateBatch(105, 109, ACKNOWLEDGED, 1), StateBatch(110, 119, AVAILABLE, 1)]
    # A lower delivery count loses, even if it is written later (Kafka's priority rule).
    assert combine(current, [StateBatch(105, 109, ACKNOWLEDGED, 0)], -1) == current
    # Equal neighbours join into one batch.
    assert combine([StateBatch(0, 10, AVAILABLE, 1)], [StateBatch(11, 20, AVAILABLE, 1)], -1) == [
        StateBatch(0, 20, AVAILABLE, 1)]


@st.composite
def normal_state(draw):
    """A long state as combine returns it: sorted, disjoint, equal neighbours joined."""
    out, offset = [], draw(st.integers(0, 5))
    for _ in range(draw(st.integers(8, 30))):
        offset += draw(st.integers(0, 2))
        b = StateBatch(offset, offset + draw(st.integers(0, 3)),
                       draw(st.sampled_from([AVAILABLE, 1, ACKNOWLEDGED, ARCHIVED])), draw(st.integers(0, 3)))
        offset = b.last_offset + 1
        if out and out[-1].last_offset + 1 == b.first_offset and out[-1][2:] == b[2:]:
            out[-1] = out[-1]._replace(last_offset=b.last_offset)
        else:
            out.append(b)
    return out


@settings(max_examples=400, deadline=None)
@given(normal_state(), batches, starts)
def test_a_long_normal_state_spliced_matches_brute_force(current, new, start):
    """Long current states take the splice path; it must give what sweeping everything gives."""
    got = combine(current, new, start)
    if len(current) + len(new) >= 2 or not got:
        assert got == brute_force(current, new, start)


@st.composite
def later_writes(draw, state):
    """Sorted, disjoint batches as a share partition writes them: usually a later delivery
    or a final state of what they cover (painted over), sometimes not (swept)."""
    out, offset = [], draw(st.integers(0, 10))
    for _ in range(draw(st.integers(1, 12))):
        offset += draw(st.integers(0, 4))
        b = StateBatch(offset, offset + draw(st.integers(0, 4)),
                       draw(st.sampled_from([AVAILABLE, ACKNOWLEDGED, ARCHIVED])), draw(st.integers(1, 4)))
        out.append(b)
        offset = b.last_offset + 1
    return out


@settings(max_examples=600, deadline=None)
@given(st.data(), normal_state(), starts, st.booleans(), st.booleans())
def test_painting_later_writes_over_a_long_state_matches_brute_force(data, current, start, marked, new_marked):
    """The linear overlay (sorted, disjoint new batches over a normal state) and its fallback;
    new batches marked normal (as the shard passes a ShareUpdate's) skip their checks."""
    new = data.draw(later_writes(current))
    base = NormalBatches(current) if marked else current
    painted = NormalBatches(combine((), new, -1)) if new_marked else new
    assert combine(base, painted, start) == brute_force(current, new, start)


def test_painting_a_batch_equal_to_what_it_covers_joins_both_sides():
    """The front of a window batch left between two new batches joins the first of them when
    it has its state and count (a write that repeats part of the state)."""
    current = NormalBatches([StateBatch(k, k, ARCHIVED, k % 2) for k in range(8)]
                            + [StateBatch(10, 19, ACKNOWLEDGED, 1), StateBatch(20, 29, AVAILABLE, 1)])
    new = NormalBatches([StateBatch(12, 13, ACKNOWLEDGED, 1), StateBatch(16, 16, ARCHIVED, 2),
                         StateBatch(20, 20, AVAILABLE, 1)])
    got = combine(current, new, -1)
    assert got == brute_force(current, new, -1)
    assert got[8:] == [StateBatch(10, 15, ACKNOWLEDGED, 1), StateBatch(16, 16, ARCHIVED, 2),
                       StateBatch(17, 19, ACKNOWLEDGED, 1), StateBatch(20, 29, AVAILABLE, 1)]


@settings(max_examples=200, deadline=None)
@given(normal_state(), st.integers(-40, 40), starts)
def test_a_write_apart_from_a_long_state_matches_brute_force(current, shift, start):
    """A marked write that touches none of the state (a fetch past the pruned state) is
    spliced in as it is."""
    end = current[-1].last_offset
    new = [StateBatch(end + 2 + shift + 3 * k, end + 3 + shift + 3 * k, ACKNOWLEDGED, 1 + k % 2) for k in range(4)]
    assert combine(NormalBatches(current), NormalBatches(new), start) == brute_force(current, new, start)


def test_a_normal_update_alone_comes_back_as_it_is():
    new = [StateBatch(5, 9, ACKNOWLEDGED, 1), StateBatch(10, 10, AVAILABLE, 1), StateBatch(11, 19, ACKNOWLEDGED, 1)]
    assert combine((), new, 5) == new
    assert combine((), new, 7) == brute_force((), new, 7)
    # Marked normal (the in-process persister marks a share partition's writes): no check,
    # and still pruned when the start offset cuts into it.
    assert combine((), NormalBatches(new), 5) == new
    assert combine((), NormalBatches(new), 7) == brute_force((), new, 7)


def _joined(batches):
    out = []
    for b in batches:
        if out and out[-1].last_offset + 1 == b.first_offset and out[-1][2:] == b[2:]:
            out[-1] = out[-1]._replace(last_offset=b.last_offset)
        else:
            out.append(b)
    return out


@st.composite
def swap_case(draw):
    """A normal window of batches alternating with batches a write covers exactly (a
    redelivery's released records between acknowledged runs), and that write: mostly in
    ``_swap``'s shape, sometimes just off it (bounds moved, counts equal or lower, a
    neighbour of the same count, a batch the window lacks)."""
    window, new, offset = [], [], draw(st.integers(0, 5))
    lead = draw(st.booleans())  # the window starts with a batch no new one covers
    n = draw(st.integers(1, 10))
    for k in range(2 * n - 1 + lead + draw(st.integers(0, 1))):
        offset += draw(st.sampled_from([0, 0, 0, 1]))  # sometimes a gap
        b = StateBatch(offset, offset + draw(st.integers(0, 3)),
                       draw(st.sampled_from([AVAILABLE, ACKNOWLEDGED, ARCHIVED])), draw(st.integers(1, 3)))
        window.append(b)
        offset = b.last_offset + 1
        if (k - lead) % 2 == 0 and len(new) < n:
            first, last = b.first_offset, b.last_offset
            if draw(st.integers(0, 9)) == 0:
                first += draw(st.integers(-1, 1))
            if draw(st.integers(0, 9)) == 0:
                last += draw(st.integers(-1, 1))
            if first <= last and (not new or first > new[-1].last_offset):
                new.append(StateBatch(first, last, draw(st.sampled_from([AVAILABLE, ACKNOWLEDGED, ARCHIVED])),
                                      b.delivery_count + draw(st.sampled_from([1, 1, 1, 2, 0, -1]))))
    if draw(st.integers(0, 9)) == 0:
        new.append(StateBatch(offset + 1, offset + 1, ACKNOWLEDGED, 4))  # past the window
    return NormalBatches(_joined(window)), NormalBatches(new)


@settings(max_examples=1500, deadline=None)
@given(swap_case())
def test_swapping_new_batches_into_the_window_is_what_sweeping_gives(case):
    """``_swap``, where it answers, gives exactly what ``_sweep`` (and ``_overlay``) give;
    where it does not, the combined result is still the brute force's."""
    window, new = case
    if not new:
        return
    got = _swap(window, new)
    if got is not None:
        assert got == _sweep(window, new, -1) == brute_force(window, new, -1)
        assert got == _overlay(window, new, -1)
    for start in (-1, window[0].first_offset + 1):
        current = NormalBatches([StateBatch(k, k, ARCHIVED, 9) for k in range(-30, -13, 2)] + list(window))
        assert combine(current, new, start) == brute_force(current, new, start)


def test_a_redelivery_acknowledgement_is_swapped_in():
    """Released records between acknowledged runs, acknowledged on their next delivery: the
    shape ``_swap`` answers (so the general loop is not run), and the cases just off it."""
    window = NormalBatches([StateBatch(0, 2, ACKNOWLEDGED, 1)] + [
        b for o in range(3, 103, 10)
        for b in (StateBatch(o, o, AVAILABLE, 1), StateBatch(o + 1, o + 9, ACKNOWLEDGED, 1))])
    new = NormalBatches([StateBatch(o, o, ACKNOWLEDGED, 2) for o in range(3, 103, 10)])
    got = _swap(window, new)
    assert got is not None and got == _sweep(window, new, -1)
    assert got[1::2] == list(new) and got[::2] == list(window[::2])
    assert _swap(window[1:], new) == _sweep(window[1:], new, -1)  # no batch below the first new one
    assert _swap(window[:-1], new) == _sweep(window[:-1], new, -1)  # none above the last
    mixed = NormalBatches(b._replace(delivery_count=3) if k == 4 else b for k, b in enumerate(new))
    assert _swap(window, mixed) == _sweep(window, mixed, -1)  # one redelivered twice
    # Just off it: each falls back (None), and combine still gets it right.
    off = [
        [b._replace(last_offset=b.last_offset + 1) if k == 4 else b for k, b in enumerate(new)],  # overlaps more
        [b._replace(delivery_count=1) if k == 4 else b for k, b in enumerate(new)],  # does not outrank
        [b._replace(delivery_count=1, delivery_state=ARCHIVED) if k == 4 else b for k, b in enumerate(new)],
        list(new[:-1]) + [StateBatch(200, 200, ACKNOWLEDGED, 2)],  # past the window
    ]
    for n in off:
        assert _swap(window, NormalBatches(n)) is None
        assert combine(window, n, -1) == brute_force(window, n, -1)
    # A neighbour of the same count might join: not swapped, even where it does not touch.
    near = NormalBatches([*window[:4], window[4]._replace(delivery_count=2), *window[5:]])
    assert _swap(near, new) is None
    assert combine(near, new, -1) == brute_force(near, new, -1)
