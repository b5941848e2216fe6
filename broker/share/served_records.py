"""The Records a ShareFetch sends for one partition.

The log batches covering the acquired records go out as zero-copy views, as Kafka sends them,
except a batch of at least ``MIN_CUT_BYTES`` of which at most half is acquired: that one goes
out as a copy holding only the acquired records (protocol/batch_subset.py). Redelivering a few
released records of a big producer batch then costs their bytes, not the whole batch's, to the
broker's socket and to the consumer's parser.
"""

from __future__ import annotations

from collections.abc import Sequence

from protocol.batch_subset import record_starts, subset

from ..log.store import ReadResult

MIN_CUT_BYTES = 16 * 1024
STARTS_CACHED = 8  # batches per share partition whose record positions are kept
_UNKNOWN: list = []


def served_records(rr: ReadResult, start: int, end: int, ranges: Sequence[tuple[int, int, int]],
                   starts_cache: dict) -> list:
    """Buffers for ``rr.batches[start:end]``, which cover the acquired ``ranges`` (ascending).

    ``starts_cache`` maps (base offset, crc) to a batch's record positions: the released
    records of one batch come back in several fetches, and finding the positions is the
    expensive part of a cut.
    """
    batches = rr.batches
    cuts: dict[int, bytes] = {}
    j, n_ranges = 0, len(ranges)
    for k in range(start, end):
        if batches[k].size < MIN_CUT_BYTES:
            continue
        h = batches[k].header
        base = h.base_offset
        last = base + h.last_offset_delta
        while j < n_ranges and ranges[j][1] < base:
            j += 1
        kept, i = 0, j
        while i < n_ranges and ranges[i][0] <= last:
            kept += min(ranges[i][1], last) - max(ranges[i][0], base) + 1
            i += 1
        if kept * 2 > h.records_count:
            continue
        (view,) = rr.views(k, k + 1)
        key = (base, h.crc)
        starts = starts_cache.get(key, _UNKNOWN)
        if starts is _UNKNOWN:
            if len(starts_cache) >= STARTS_CACHED:
                del starts_cache[next(iter(starts_cache))]
            starts = starts_cache[key] = record_starts(view, h)
        if starts is None:  # compressed, a control batch, or records that do not parse
            continue
        cut = subset(view, starts, base, ranges[j:i])
        if cut is not None:
            cuts[k] = cut
    if not cuts:
        return rr.views(start, end)
    return [cuts[k] if k in cuts else rr.views(k, k + 1)[0] for k in range(start, end)]
