"""Combine persisted state batches the way Kafka's share coordinator does.

A share-partition's durable state is a list of non-overlapping ``StateBatch`` ranges
(``first_offset..last_offset`` inclusive, a delivery state and a delivery count). A write
carries some batches; the coordinator folds them into what it has.

Where batches overlap, Kafka does not simply let the newest win: each offset takes the batch
with the highest *delivery priority*, i.e. the higher delivery count, then the higher delivery
state (AVAILABLE 0 < ACKNOWLEDGED 2 < ARCHIVED 4). Delivery counts only grow and terminal
states only come later, so that is "newest wins" for every real history, and it makes the
result independent of the order writes are folded in (a replay can never reorder a state).

The result is pruned below the start offset (a batch straddling it is cut), sorted, and has
neighbours with the same state and count joined into one batch.
"""

from __future__ import annotations

import heapq
from typing import Iterable, NamedTuple

__all__ = ["StateBatch", "combine", "AVAILABLE", "ACQUIRED", "ACKNOWLEDGED", "ARCHIVING", "ARCHIVED"]

AVAILABLE = 0
ACQUIRED = 1
ACKNOWLEDGED = 2
ARCHIVING = 3
ARCHIVED = 4


class StateBatch(NamedTuple):
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


def combine(current: Iterable[StateBatch], new: Iterable[StateBatch], start_offset: int) -> list[StateBatch]:
    """Fold ``new`` into ``current``; ``start_offset == -1`` means "do not prune"."""
    batches = []
    for b in (*current, *new):
        first, last = b.first_offset, b.last_offset
        if start_offset != -1:
            if last < start_offset:
                continue
            if first < start_offset:
                first = start_offset
        if first > last:
            continue
        batches.append((first, last, b.delivery_state, b.delivery_count))
    if len(batches) < 2:
        return [StateBatch(*b) for b in batches]

    batches.sort()
    # Sweep the boundaries left to right; a max-heap of the batches covering the current
    # offset (by priority) gives the winner of each elementary range. Batches that ended
    # are dropped lazily when they reach the top.
    bounds = sorted({p for f, l, _, _ in batches for p in (f, l + 1)})
    heap: list[tuple[int, int, int]] = []  # (-count, -state, last)
    out: list[StateBatch] = []
    i, n = 0, len(batches)
    for lo, hi in zip(bounds, bounds[1:]):
        while i < n and batches[i][0] == lo:
            _, last, state, count = batches[i]
            heapq.heappush(heap, (-count, -state, last))
            i += 1
        while heap and heap[0][2] < lo:
            heapq.heappop(heap)
        if not heap:
            continue
        neg_count, neg_state, _ = heap[0]
        state, count = -neg_state, -neg_count
        prev = out[-1] if out else None
        if prev is not None and prev.last_offset == lo - 1 and prev.delivery_state == state \
                and prev.delivery_count == count:
            out[-1] = prev._replace(last_offset=hi - 1)
        else:
            out.append(StateBatch(lo, hi - 1, state, count))
    return out
