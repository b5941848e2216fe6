"""Reading topics over the Kafka protocol for the Spark jobs: topics, offsets, fetched records.

Everything goes through ``protocol.client.KafkaClient``: versions are negotiated per broker, so
the same code reads from kshare and from Apache Kafka 4.2. Partition requests (ListOffsets,
Fetch) go to each partition's leader as Metadata names it; when a leader moves (or a broker
answers NOT_LEADER_OR_FOLLOWER and friends) the metadata is refreshed and the request retried,
a bounded number of times.

Fetch v13+ names topics by id and older versions by name; both are handled. Records come out
of ``protocol.records.iter_records`` (CRC check, decompression, record decoding): control
batches are skipped, and the next fetch starts after each batch's last offset, so offsets
removed by compaction are stepped over as a consumer would.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator
from typing import NamedTuple
from uuid import UUID

import numpy as np

from protocol.client import KafkaClient
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from protocol.messages.list_offsets_request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from protocol.records import (
    CONTROL_FLAG,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    Record,
    iter_records,
    walk_headers,
)

from .offsets import OffsetRange, data_loss_message

__all__ = ["TopicInfo", "Cluster", "DataLossError", "LogStartMovedError", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP"]

LATEST_TIMESTAMP = -1   # ListOffsets: the log end offset (read_uncommitted: the high watermark)
EARLIEST_TIMESTAMP = -2  # ListOffsets: the log start offset
FETCH_VERSION_TOPIC_IDS = 13
READ_UNCOMMITTED = 0
_MAX_FETCH_BYTES = 1 << 30
_LENGTH = struct.Struct(">i")  # a batch's length, at byte 8

# Answers after which fresh metadata may name the right leader.
_STALE_METADATA = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR, ErrorCode.REQUEST_TIMED_OUT,
})


class DataLossError(RuntimeError):
    """Records a read was planned to cover are gone (deleted by retention or truncated)."""


class LogStartMovedError(DataLossError):
    """The records a read was at were deleted while it read: the partition's log start moved
    past them (retention, DeleteRecords, the share coordinator pruning its state topic).
    ``log_start`` is the new log start offset. Readers that can start over from the log start
    catch it; for everyone else it is a ``DataLossError`` like any other."""

    def __init__(self, message: str, topic: str, partition: int, offset: int, log_start: int) -> None:
        super().__init__(message)
        self.topic, self.partition, self.offset, self.log_start = topic, partition, offset, log_start


class TopicInfo(NamedTuple):
    name: str
    topic_id: UUID
    leaders: dict[int, int]  # partition -> leader node id (-1 when there is none)
    internal: bool


class Cluster:
    """Topic metadata and partition requests routed to leaders, over one ``KafkaClient``."""

    def __init__(self, bootstrap: str, *, client_id: str = "kshare-spark", timeout_s: float = 30.0,
                 retries: int = 8, retry_backoff_s: float = 0.1) -> None:
        self.client = KafkaClient(bootstrap, client_id=client_id, timeout_s=timeout_s)
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self._topics: dict[str, TopicInfo] = {}
        self._cluster_id: str | None = None

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()

    # --- metadata -------------------------------------------------------------------------------

    def refresh(self, names: Iterable[str] | None = None) -> dict[str, TopicInfo]:
        """Fetch metadata for ``names`` (None: every topic) and remember it."""
        resp = self.client.metadata(None if names is None else list(names))
        self._cluster_id = resp.cluster_id
        found = {}
        for t in resp.topics:
            if t.error_code:
                continue
            found[t.name] = self._topics[t.name] = TopicInfo(
                t.name, t.topic_id, {p.partition_index: p.leader_id for p in t.partitions}, t.is_internal)
        return found

    def cluster_id(self) -> str | None:
        """The cluster id Metadata answers (what Kafka clients and DescribeCluster show; None if
        the broker has none)."""
        if self._cluster_id is None:
            self.refresh([])
        return self._cluster_id

    def topic(self, name: str) -> TopicInfo:
        info = self._topics.get(name) or self.refresh([name]).get(name)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        return info

    def topic_names_by_id(self) -> dict[UUID, str]:
        """Every topic's id -> name (share-state keys name topics by id)."""
        return {info.topic_id: name for name, info in self.refresh(None).items()}

    # --- ListOffsets ----------------------------------------------------------------------------

    def list_offsets(self, wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """``{(topic, partition): timestamp}`` -> offset, asked of each partition's leader.

        Timestamp -1 gives the log end offset, -2 the log start offset, and t >= 0 the offset of
        the first record whose timestamp is >= t, or -1 when there is none (Kafka's answer).
        """
        out: dict[tuple[str, int], int] = {}
        todo = dict(wanted)
        for attempt in range(self.retries + 1):
            retry: dict[tuple[str, int], int] = {}
            last_error = None
            for leader, pairs in self._by_leader(todo).items():
                if leader < 0:
                    retry.update(pairs)
                    last_error = ErrorCode.LEADER_NOT_AVAILABLE
                    continue
                by_topic: dict[str, list] = {}
                for (topic, partition), ts in pairs.items():
                    by_topic.setdefault(topic, []).append(
                        ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=ts))
                req = ListOffsetsRequest(replica_id=-1, isolation_level=READ_UNCOMMITTED, timeout_ms=30000,
                                         topics=[ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
                resp = self.client.send(req, node=leader)
                for t in resp.topics:
                    for p in t.partitions:
                        key = (t.name, p.partition_index)
                        if p.error_code == 0:
                            out[key] = p.offset
                        elif p.error_code in _STALE_METADATA:
                            retry[key] = pairs[key]
                            last_error = p.error_code
                        else:
                            raise KafkaError(p.error_code, f"ListOffsets {t.name}-{p.partition_index}")
            if not retry:
                return out
            if attempt == self.retries:
                raise KafkaError(last_error, f"ListOffsets kept failing for {sorted(retry)}")
            todo = retry
            self._backoff(attempt, {t for t, _ in retry})
        return out

    def _by_leader(self, pairs: dict[tuple[str, int], int]) -> dict[int, dict[tuple[str, int], int]]:
        out: dict[int, dict] = {}
        for (topic, partition), value in pairs.items():
            leader = self.topic(topic).leaders.get(partition)
            if leader is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has no partition {partition}")
            out.setdefault(leader, {})[(topic, partition)] = value
        return out

    def _backoff(self, attempt: int, topics: set[str]) -> None:
        time.sleep(self.retry_backoff_s * (attempt + 1))
        self.refresh(topics)

    def offset_bounds(self, topic: str) -> tuple[dict[int, int], dict[int, int]]:
        """(log start offsets, log end offsets) of every partition of ``topic``."""
        info = self.topic(topic)
        wanted = {}
        for p in info.leaders:
            wanted[(topic, p)] = EARLIEST_TIMESTAMP
        earliest = {p: o for (_, p), o in self.list_offsets(wanted).items()}
        wanted = {k: LATEST_TIMESTAMP for k in wanted}
        latest = {p: o for (_, p), o in self.list_offsets(wanted).items()}
        return earliest, latest

    # --- Fetch ----------------------------------------------------------------------------------

    def fetch_once(self, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int = 500):
        """One Fetch of one partition from its leader: the response's partition data."""
        info = self.topic(topic)
        leader = info.leaders.get(partition, -1)
        if leader < 0:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition} has no leader")
        conn = self.client.node(leader)
        version = conn.version(1)
        part = FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                              log_start_offset=-1, partition_max_bytes=max_bytes)
        if version >= FETCH_VERSION_TOPIC_IDS:
            ft = FetchTopic(topic_id=info.topic_id, partitions=[part])
        else:
            ft = FetchTopic(topic=topic, partitions=[part])
        req = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes,
                           isolation_level=READ_UNCOMMITTED, session_id=0, session_epoch=-1, topics=[ft])
        resp = conn.send(req, version)
        if resp.error_code:
            return _TopLevelError(resp.error_code)
        for t in resp.responses:
            for p in t.partitions:
                if p.partition_index == partition:
                    return p
        return _TopLevelError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    def read_range(self, r: OffsetRange, *, max_bytes: int = 8 << 20,
                   fail_on_data_loss: bool = True) -> Iterator[tuple[BatchHeader, list[Record]]]:
        """The records of ``[r.start, r.end)`` in offset order, a log batch at a time:
        ``(batch header, its records in the range)``."""
        for buf, pos, stop, offset, _starts in self.read_range_raw(r, max_bytes=max_bytes,
                                                                   fail_on_data_loss=fail_on_data_loss):
            for p, h in walk_headers(buf, pos, stop):
                next_offset = h.last_offset + 1
                if h.is_control or h.last_offset < offset:
                    offset = max(offset, next_offset)
                    continue
                records = [rec for rec in iter_records(buf, p) if offset <= rec.offset < r.end]
                offset = next_offset
                if records:
                    yield h, records

    def read_range_raw(self, r: OffsetRange, *, max_bytes: int = 8 << 20,
                       fail_on_data_loss: bool = True) -> Iterator[tuple[bytes, int, int, int, list[int]]]:
        """The fetched bytes of ``[r.start, r.end)``, undecoded: ``(buf, pos, stop, offset,
        starts)`` where ``buf[pos:stop]`` holds whole batches, ``starts`` their positions, and
        ``offset`` is where the read stood before them. A reader walks them as ``read_range`` does: a control batch, or one
        ending below the current offset, only moves the offset past it; any other batch
        contributes its records at or above the offset and below ``r.end``, and moves the
        offset to the batch's end. Batches after the one that reaches ``r.end`` are left out."""
        offset = r.start
        attempt = 0
        while offset < r.end:
            p = self.fetch_once(r.topic, r.partition, offset, max_bytes)
            code = p.error_code
            if code in _STALE_METADATA:
                if attempt >= self.retries:
                    raise KafkaError(code, f"Fetch {r.topic}-{r.partition} at {offset} kept failing")
                self._backoff(attempt, {r.topic})
                attempt += 1
                continue
            if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                start = self.list_offsets({(r.topic, r.partition): EARLIEST_TIMESTAMP})[(r.topic, r.partition)]
                if not fail_on_data_loss:
                    if offset >= start:  # past the log end (truncated): Spark skips the rest
                        return
                    offset = start
                    continue
                message = data_loss_message(r.topic, r.partition, offset, r.end)  # as KafkaDataConsumer.get
                if offset < start:  # deleted from the front while we read
                    raise LogStartMovedError(message, r.topic, r.partition, offset, start)
                raise DataLossError(message)
            if code:
                raise KafkaError(code, f"Fetch {r.topic}-{r.partition} at {offset}")
            buf = p.records
            before = offset
            if buf is not None and len(buf):
                buf = bytes(buf)
                starts, stop, offset, done = _frame(buf, offset, r.end)
                pos = 0
                if stop == 0:  # one batch larger than max_bytes: ask for more
                    if max_bytes >= _MAX_FETCH_BYTES:
                        raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE,
                                         f"{r.topic}-{r.partition}: a batch at {offset} is over {max_bytes} bytes")
                    max_bytes *= 2
                    continue
                yield buf, pos, stop, before, starts
                if done:
                    return
            if offset > before:
                attempt = 0
                continue
            if offset >= p.high_watermark:
                if not fail_on_data_loss:  # as Spark's KafkaDataConsumer.getEarliestAvailableOffsetBetween
                    return
                raise DataLossError(data_loss_message(r.topic, r.partition, offset, r.end))
            if attempt >= self.retries:
                raise DataLossError(f"{r.topic}-{r.partition}: no records at offset {offset} below the "
                                    f"high watermark {p.high_watermark}")
            attempt += 1
            time.sleep(self.retry_backoff_s)


def _frame(buf: bytes, offset: int, end: int) -> tuple[list[int], int, int, bool]:
    """Walk the complete batches of a fetched buffer as ``read_range`` does: (their positions
    up to and including the one that reaches ``end``, where they stop, the offset after them,
    whether ``end`` was reached). A control batch, or one ending below the offset, only moves
    the offset past it; any other batch moves it to the batch's end."""
    starts = []
    stop, size_of, limit = 0, _LENGTH.unpack_from, len(buf) - HEADER_SIZE
    while stop <= limit:  # the framing only, as walk_headers checks it
        length = size_of(buf, stop + 8)[0]
        if length < HEADER_SIZE - LOG_OVERHEAD or stop + length + LOG_OVERHEAD > len(buf):
            break
        starts.append(stop)
        stop += length + LOG_OVERHEAD
    if not starts:
        return starts, 0, offset, False
    at = np.array(starts, dtype=np.int64)
    u8 = np.frombuffer(buf, dtype=np.uint8)
    base = _be(u8, at, 8)
    last = base + _be(u8, at + 23, 4)
    control = (_be(u8, at + 21, 2) & CONTROL_FLAG) != 0
    if len(at) > 1 and np.any(base[1:] <= last[:-1]):  # not in offset order: one by one
        for i, p in enumerate(starts):
            nxt = int(last[i]) + 1
            if control[i] or nxt - 1 < offset:
                offset = max(offset, nxt)
                continue
            offset = nxt
            if offset >= end:
                return starts[:i + 1], p + int(_be(u8, at[i:i + 1] + 8, 4)[0]) + LOG_OVERHEAD, offset, True
        return starts, stop, offset, False
    # In offset order the offset before batch k is max(the first offset, batch k-1's end).
    before = np.maximum(offset, np.concatenate(([offset], last[:-1] + 1)))
    kept = ~control & (last >= before)
    reached = np.flatnonzero(kept & (last + 1 >= end))
    if len(reached):
        i = int(reached[0])
        return starts[:i + 1], starts[i + 1] if i + 1 < len(starts) else stop, int(last[i]) + 1, True
    return starts, stop, max(offset, int(last[-1]) + 1), False


def _be(u8: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """Big-endian signed integers of ``width`` bytes at positions ``at``."""
    idx = at[:, None] + np.arange(width, dtype=np.int64)
    return u8[idx].view(f">i{width}").ravel().astype(np.int64)


class _TopLevelError(NamedTuple):
    error_code: int
