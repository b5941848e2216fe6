"""KIP-1226 share-partition lag, and the tables built from it (pure: no Spark, no sockets).

KIP-1226 defines ``lag = highest offset - start offset + 1 - delivery-complete count``; with
the log end offset (the next offset to be written, what ListOffsets answers for "latest") in
place of the highest offset the +1 goes away. Kafka's group coordinator computes exactly
``log end offset - start offset - delivery complete count`` for DescribeShareGroupOffsets v1
(in Java longs, which wrap: so does this), and answers -1 (unknown) when the start offset is
still uninitialised (-1) or the delivery-complete count was never written (-1: a
ShareSnapshot / ShareUpdate without the tagged field, e.g. from a WriteShareGroupState v0).
A negative result (a start offset past the log end, or a wrapped long) is unknown too, as
Kafka's admin client and ``kafka-share-groups.sh`` show it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping

import pandas as pd

from coordinator.group.share_offsets import java_long, share_partition_lag as describe_lag

__all__ = ["share_partition_lag", "end_offset_at", "lag_table", "lag_totals", "group_history",
           "LAG_COLUMNS"]

LAG_COLUMNS = ["group", "topic", "partition", "start_offset", "log_end_offset", "delivery_complete_count", "lag"]


def share_partition_lag(log_end_offset: int | None, start_offset: int | None,
                        delivery_complete_count: int | None) -> int | None:
    """The lag DescribeShareGroupOffsets answers (the broker's own formula), or None when it is
    unknown: no log end, or the broker's -1 for an uninitialised start offset or count."""
    if log_end_offset is None or log_end_offset < 0 or start_offset is None or delivery_complete_count is None:
        return None
    lag = describe_lag(log_end_offset, start_offset, delivery_complete_count)
    # Kafka's admin client (ListShareGroupOffsetsHandler) reads a negative lag as no lag, and
    # kafka-share-groups.sh shows "-": a start offset altered past the log end is not a credit
    # to subtract from the group's total.
    return lag if lag >= 0 else None


def end_offset_at(first_at_or_after: int, log_start: int, log_end: int) -> int | None:
    """A partition's log end offset at a past time t, from ListOffsets by timestamp t (the first
    record at or after t, -1 if none) and today's log start and end offsets; None when the
    records that would tell were deleted (DeleteRecords, retention).

    The first record at or after t is where the log ended at t, unless it is the log start:
    deleted records before it may have come after t too. With no record at or after t, the log
    ended at t where it ends today, unless nothing is left of it."""
    if first_at_or_after < 0:
        return log_end if log_end == 0 or log_start < log_end else None
    if first_at_or_after == log_start and log_start > 0:
        return None
    return first_at_or_after


def _nullable_int(values) -> pd.Series:
    return pd.Series(pd.array(list(values), dtype="Int64"))


def lag_table(latest: pd.DataFrame, names_by_id: Mapping[str, str],
              end_offsets: Mapping[tuple[str, int], int]) -> pd.DataFrame:
    """One row per share-partition of ``latest`` (``fold.LATEST_SCHEMA`` rows), with the topic
    name (the id itself when the topic no longer exists), the log end offset (None when
    unknown) and the lag (None when unknown). Sorted by group, topic, partition.

    ``names_by_id``: topic id (Kafka's text form) -> name; ``end_offsets``: (name, partition)
    -> log end offset."""
    rows = []
    for r in latest.itertuples(index=False):
        name = names_by_id.get(r.topic_id)
        leo = end_offsets.get((name, int(r.partition))) if name is not None else None
        rows.append({
            "group": r.group_id, "topic": name if name is not None else r.topic_id, "topic_id": r.topic_id,
            "partition": int(r.partition), "start_offset": int(r.start_offset), "log_end_offset": leo,
            "delivery_complete_count": int(r.delivery_complete_count),
            "lag": share_partition_lag(leo, int(r.start_offset), int(r.delivery_complete_count)),
            "leader_epoch": int(r.leader_epoch), "state_epoch": int(r.state_epoch),
        })
    out = pd.DataFrame(rows, columns=[*LAG_COLUMNS, "topic_id", "leader_epoch", "state_epoch"])
    for col in ("log_end_offset", "lag"):  # from the rows: beside a None the frame's column is float64
        out[col] = _nullable_int(r[col] for r in rows)
    return out.sort_values(["group", "topic", "partition"], kind="stable").reset_index(drop=True)


def lag_totals(table: pd.DataFrame) -> pd.DataFrame:
    """Per group and topic, then per group (topic ``*``): partitions, partitions whose lag is
    unknown, and the sum of the known lags."""
    out = []
    for (group, topic), part in table.groupby(["group", "topic"], sort=True):
        out.append(_total(group, topic, part))
    for group, part in table.groupby("group", sort=True):
        out.append(_total(group, "*", part))
    cols = ["group", "topic", "partitions", "unknown_partitions", "lag"]
    frame = pd.DataFrame(out, columns=cols)
    frame["lag"] = _nullable_int(frame["lag"])
    return frame.sort_values(["group", "topic"], kind="stable").reset_index(drop=True)


def _total(group: str, topic: str, part: pd.DataFrame) -> dict:
    known = part["lag"].dropna()
    return {"group": group, "topic": topic, "partitions": len(part), "unknown_partitions": len(part) - len(known),
            "lag": int(known.sum()) if len(known) else None}


def _int_or_none(value) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def group_history(points: Iterable[dict], names_by_id: Mapping[str, str],
                  end_offset_at: Mapping[tuple[str, int, int], int]) -> pd.DataFrame:
    """Lag over time per share-partition and per group.

    ``points``: dicts with group_id, topic_id, partition, at_ms, start_offset and
    delivery_complete_count (the state at the end of a time bucket, ``fold.history_points``).
    ``end_offset_at``: (topic name, partition, at_ms) -> the log end offset at that time.
    A share-partition keeps its last state until its next point (a null start offset: its
    state was deleted), so every group total at a time sums the lag of each of its partitions
    known by then. Columns: group, at_ms, lag (sum of the known lags, None if there is none),
    partitions (how many were known)."""
    by_key: dict[tuple, list] = {}
    times_by_group: dict[str, set] = {}
    for p in points:
        key = (p["group_id"], p["topic_id"], int(p["partition"]))
        by_key.setdefault(key, []).append((int(p["at_ms"]), _int_or_none(p["start_offset"]),
                                           _int_or_none(p["delivery_complete_count"])))
        times_by_group.setdefault(p["group_id"], set()).add(int(p["at_ms"]))
    rows = []
    for group, times in times_by_group.items():
        keys = [k for k in by_key if k[0] == group]
        series = {k: sorted(by_key[k], key=lambda x: x[0]) for k in keys}
        for t in sorted(times):
            total, known = 0, 0
            for k in keys:
                pts = series[k]
                i = bisect.bisect_right(pts, t, key=lambda x: x[0]) - 1
                if i < 0:
                    continue  # no state yet
                _, start, dcc = pts[i]
                name = names_by_id.get(k[1])
                leo = end_offset_at.get((name, k[2], t)) if name is not None else None
                lag = share_partition_lag(leo, start, dcc)
                if lag is not None:
                    total += lag
                    known += 1
            rows.append({"group": group, "at_ms": t, "lag": java_long(total) if known else None, "partitions": known})
    frame = pd.DataFrame(rows, columns=["group", "at_ms", "lag", "partitions"])
    frame["lag"] = _nullable_int(frame["lag"])
    return frame.sort_values(["group", "at_ms"], kind="stable").reset_index(drop=True)
