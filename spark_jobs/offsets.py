"""Which offsets a batch read covers, and how it is cut into Spark input partitions (pure).

The options follow Spark's own Kafka source so that a job can switch between the two:
``startingOffsets`` / ``endingOffsets`` are ``earliest``, ``latest`` or JSON such as
``{"topic": {"0": 23, "1": -2}}`` where -2 means earliest and -1 latest. As in Spark's batch
queries, a read cannot start at ``latest`` nor end at ``earliest``; partitions the JSON leaves
out start at earliest and end at latest.

A topic-partition's range ``[start, end)`` becomes one input partition, or several when it
holds more than ``max_offsets_per_split`` offsets or when ``min_partitions`` asks for more
splits than there are topic-partitions (Spark's ``minPartitions``: the largest ranges are cut
first, in proportion to their size).
"""

from __future__ import annotations

import json
import math
from typing import NamedTuple

__all__ = ["EARLIEST", "LATEST", "OffsetRange", "Timestamps", "parse_offsets", "parse_timestamps", "check_assigned",
           "check_batch_limits", "check_limits", "resolve_offsets", "bound_range", "data_loss_message",
           "split_ranges"]

EARLIEST = -2
LATEST = -1


class OffsetRange(NamedTuple):
    """Offsets ``start <= offset < end`` of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


class Timestamps(NamedTuple):
    """Offsets given as timestamps: one for every partition (``startingTimestamp``) or per
    partition as ``{topic: {partition: timestamp}}`` (``startingOffsetsByTimestamp``)."""

    value: int | dict[str, dict[int, int]]


def parse_timestamps(options: dict, prefix: str) -> Timestamps | None:
    """Spark's ``<prefix>Timestamp`` (preferred) or ``<prefix>OffsetsByTimestamp`` from the
    lower-cased ``options``; None when neither is set."""
    if f"{prefix}timestamp" in options:
        text = str(options[f"{prefix}timestamp"]).strip()
        try:
            return Timestamps(int(text))
        except ValueError:
            raise ValueError(f"Expected a single long value, got {text}") from None
    if f"{prefix}offsetsbytimestamp" in options:
        text = str(options[f"{prefix}offsetsbytimestamp"]).strip()
        spec = _partition_json(text)
        if spec is None:  # JsonUtils.partitionTimestamps
            raise ValueError('Expected e.g. {"topicA": {"0": 123456789, "1": 123456789},\n'
                             f'"topicB": {{"0": 123456789, "1": 123456789}}}}, got {text}')
        return Timestamps(spec)
    return None


def check_assigned(spec, assigned: set[tuple[str, int]], what: str) -> None:
    """Per-partition JSON must name exactly the partitions read (Spark's
    ``KafkaOffsetReaderAdmin.fetchPartitionOffsets``)."""
    if isinstance(spec, Timestamps):
        spec = spec.value
    if not isinstance(spec, dict):
        return
    given = {(t, p) for t, parts in spec.items() for p in parts}
    if given != assigned:
        raise ValueError(f"{what} must specify all TopicPartitions (use -1 for latest, -2 for earliest). "
                         f"Specified: {sorted(given)} Assigned: {sorted(assigned)}")


def check_batch_limits(starting, ending) -> None:
    """Spark's ``KafkaSourceProvider.validateBatchOptions``: a batch read cannot start at latest
    nor end at earliest, refused with Spark's messages before any broker is asked."""
    if starting == LATEST:
        raise ValueError("starting offset can't be latest for batch queries on Kafka")
    if isinstance(starting, dict):
        for t, p in sorted((t, p) for t, parts in starting.items() for p, o in parts.items() if o == LATEST):
            raise ValueError(f"startingOffsets for {t}-{p} can't be latest for batch queries on Kafka")
    if ending == EARLIEST:
        raise ValueError("ending offset can't be earliest for batch queries on Kafka")
    if isinstance(ending, dict):
        for t, p in sorted((t, p) for t, parts in ending.items() for p, o in parts.items() if o == EARLIEST):
            raise ValueError(f"ending offset for {t}-{p} can't be earliest for batch queries on Kafka")


def check_limits(starting, ending) -> None:
    """Spark's ``KafkaSourceProvider.checkOffsetLimitValidity``: per-partition starting and
    ending offsets (or timestamps) must name the same partitions, and none may start after it
    ends (offsets -1 / -2 aside)."""
    if isinstance(starting, Timestamps) and isinstance(ending, Timestamps):
        starting, ending, what = starting.value, ending.value, "timestamp"
    elif isinstance(starting, Timestamps) or isinstance(ending, Timestamps):
        return
    else:
        what = "offset"
    if not isinstance(starting, dict) or not isinstance(ending, dict):
        return
    start = {(t, p): o for t, parts in starting.items() for p, o in parts.items()}
    end = {(t, p): o for t, parts in ending.items() for p, o in parts.items()}
    if set(start) != set(end):
        raise ValueError(f"The starting and ending offsets name different partitions: starting {sorted(start)}, "
                         f"ending {sorted(end)}")
    for (t, p), o in sorted(start.items()):
        if o > end[(t, p)] >= 0:
            raise ValueError(f"{t}-{p}: starting {what} {o} is after ending {what} {end[(t, p)]}")


def parse_offsets(text: str | None, default: int) -> int | dict[str, dict[int, int]]:
    """``earliest`` / ``latest`` as EARLIEST / LATEST, or the per-partition JSON as
    ``{topic: {partition: offset}}``; ``None`` (the option unset) gives ``default``. Anything
    else, blank included, fails with JsonUtils.partitionOffsets' message, as in Spark."""
    if text is None:
        return default
    word = text.strip().lower()
    if word == "earliest":
        return EARLIEST
    if word == "latest":
        return LATEST
    spec = _partition_json(text.strip())
    if spec is None:
        raise ValueError(f'Expected e.g. {{"topicA":{{"0":23,"1":-1}},"topicB":{{"0":-2}}}}, got {text.strip()}')
    return spec


def _partition_json(text: str) -> dict[str, dict[int, int]] | None:
    """``{topic: {partition: number}}`` from JSON, or None when ``text`` is not that."""
    try:
        raw = json.loads(text)
        if isinstance(raw, dict) and all(isinstance(parts, dict) for parts in raw.values()):
            return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in raw.items()}
    except (ValueError, TypeError):
        pass
    return None


def resolve_offsets(
    spec: int | dict[str, dict[int, int]],
    topic: str,
    earliest: dict[int, int],
    latest: dict[int, int],
    *,
    ending: bool,
) -> dict[int, int]:
    """Concrete offsets per partition of ``topic`` (the keys of ``latest``): -2 is the log start
    (``earliest``), -1 the log end (``latest``), any other offset is kept as given, inside the
    log or not (``bound_range`` then tells what a range outside the log reads)."""
    if isinstance(spec, int):
        chosen = {p: spec for p in latest}
    else:
        given = spec.get(topic, {})
        unknown = sorted(set(given) - set(latest))
        if unknown:
            raise ValueError(f"topic {topic!r} has no partition(s) {unknown}")
        chosen = {p: given.get(p, LATEST if ending else EARLIEST) for p in latest}
    out = {}
    for p, o in chosen.items():
        if o == EARLIEST:
            if ending:
                raise ValueError("ending offsets cannot be earliest (-2) in a batch read")
            o = earliest[p]
        elif o == LATEST:
            if not ending:
                raise ValueError("starting offsets cannot be latest (-1) in a batch read")
            o = latest[p]
        elif o < 0:
            raise ValueError(f"invalid offset {o} for {topic}-{p}: use -2 (earliest), -1 (latest) or >= 0")
        out[p] = o
    return out


def data_loss_message(topic: str, partition: int, start: int, end: int) -> str:
    """Spark's KAFKA_DATA_LOSS.COULD_NOT_READ_OFFSET_RANGE text for ``[start, end)`` (no
    consumer group here: Spark's ``null``)."""
    return ("Some data may have been lost because they are not available in Kafka any more;\n"
            "either the data was aged out by Kafka or the topic may have been deleted before all the data in the\n"
            "topic was processed.\n"
            "If you don't want your streaming query to fail on such cases, set the source option failOnDataLoss "
            "to false.\n"
            f"Reason: Could not read records in offset [{start}, {end}) for topic partition {topic}-{partition}\n"
            "with consumer group null.")


def bound_range(topic: str, partition: int, start: int, end: int, log_start: int, log_end: int, *,
                fail_on_data_loss: bool = True) -> OffsetRange:
    """``[start, end)`` of one partition as Spark's batch read takes it (``KafkaSourceRDD.compute``
    with ``KafkaDataConsumer.get``): a start after the end fails, whatever ``failOnDataLoss``; an
    empty range reads nothing wherever it lies; a non-empty one reaching outside the log
    ``[log_start, log_end)`` is lost data: an error (here when planning rather than once the
    read gets there), or cut to the log with ``fail_on_data_loss`` off (possibly to nothing)."""
    if start > end:
        raise ValueError(f"Beginning offset {start} is after the ending offset {end} for topic {topic} partition "
                         f"{partition}. You either provided an invalid fromOffset, or the Kafka topic has been damaged")
    if start < end and (start < log_start or end > log_end):
        if fail_on_data_loss:
            # where Spark's read would stop: at the start below the log, else at the log end
            at = start if start < log_start or start >= log_end else log_end
            raise ValueError(data_loss_message(topic, partition, at, end))
        start, end = max(start, log_start), min(end, log_end)
    return OffsetRange(topic, partition, start, end)


def split_ranges(ranges: list[OffsetRange], max_offsets_per_split: int | None = None,
                 min_partitions: int | None = None) -> list[OffsetRange]:
    """Cut ``ranges`` into input partitions; empty ranges are dropped. Pieces of one range
    are contiguous, in order, and differ in size by at most one offset."""
    ranges = [r for r in ranges if r.size > 0]
    if max_offsets_per_split is not None and max_offsets_per_split < 1:
        raise ValueError("max offsets per split must be at least 1")
    pieces = {r: 1 for r in ranges}
    if max_offsets_per_split:
        for r in ranges:
            pieces[r] = math.ceil(r.size / max_offsets_per_split)
    total = sum(r.size for r in ranges)
    if min_partitions and sum(pieces.values()) < min_partitions and total:
        for r in ranges:
            want = max(1, math.floor(r.size * min_partitions / total))
            pieces[r] = min(r.size, max(pieces[r], want))
        # Rounding down can leave a few short: cut the ranges with the biggest pieces again.
        while sum(pieces.values()) < min_partitions:
            r = max(ranges, key=lambda x: x.size / pieces[x])
            if r.size <= pieces[r]:
                break
            pieces[r] += 1
    out = []
    for r in ranges:
        n = pieces[r]
        step, extra = divmod(r.size, n)
        start = r.start
        for i in range(n):
            end = start + step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return out
