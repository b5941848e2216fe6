"""Idempotent-producer state of one partition: epochs, sequences and the last batches appended.

A pure state machine (no I/O, time passed in), modelled on Kafka's ``ProducerStateManager``:

* ``check(header, next_offset)`` runs before an append. It returns the metadata of a batch
  already in the log when the incoming one is a retry of one of that producer's last
  ``BATCHES_TO_RETAIN`` batches (same epoch, same first and last sequence): the caller answers
  with the original offsets and does not append. Otherwise it raises ``ProducerStateError``
  with Kafka 4.2's error code (INVALID_PRODUCER_EPOCH for an older epoch,
  OUT_OF_ORDER_SEQUENCE_NUMBER for a gap or for a new epoch not starting at 0), or accepts.
* ``update(header, first_offset, timestamp)`` records an appended batch.
* ``replay(header)`` rebuilds state from batch headers read back from the log at start-up,
  without validation (Kafka's replication origin).

State survives restarts through Kafka's ``.snapshot`` file format (``encode_snapshot`` /
``decode_snapshot``): the last batch of every producer, taken at a log offset; batches after that
offset are replayed from their headers. A producer unknown to the partition (new, expired, or
whose history was lost) is accepted at any sequence, as Kafka does.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

from crc32c import crc32c

from protocol.errors import ErrorCode
from protocol.records import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader

BATCHES_TO_RETAIN = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN (= max.in.flight per connection)
INT32_MAX = 0x7FFFFFFF

SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
# producer id, epoch, last sequence, last offset, offset delta, timestamp, coordinator epoch,
# current transaction first offset: Kafka's ProducerSnapshot v1, CRC-32C over the entries array.


class ProducerStateError(Exception):
    """An append refused for its producer state; ``code`` is the Kafka error to answer with."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class CorruptSnapshotError(ValueError):
    pass


class BatchMetadata(NamedTuple):
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


def decrement_sequence(seq: int, by: int) -> int:
    """Sequences wrap from INT32_MAX to 0, so stepping back wraps the other way."""
    return seq - by if seq >= by else INT32_MAX - (by - seq) + 1


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: deque = field(default_factory=lambda: deque(maxlen=BATCHES_TO_RETAIN))
    last_timestamp: int = -1
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def add_batch(self, epoch: int, meta: BatchMetadata) -> None:
        if epoch != self.epoch:  # a new epoch starts a new history
            self.epoch = epoch
            self.batches.clear()
        self.batches.append(meta)
        self.last_timestamp = meta.timestamp

    def find_duplicate(self, h: BatchHeader) -> BatchMetadata | None:
        if h.producer_epoch != self.epoch:
            return None
        first, last = h.base_sequence, h.last_sequence
        for b in self.batches:
            if b.last_seq == last and b.first_seq == first:
                return b
        return None


@dataclass(slots=True)
class ProducerStateConfig:
    """Settings shared by every partition's ``ProducerStateManager`` and read at each use.

    One object per broker, as Kafka's ``ProducerStateManagerConfig``: a dynamic change of
    ``producer.id.expiration.ms`` sets it here and applies at once to every loaded partition.
    """

    expiration_ms: int


class ProducerStateManager:
    """Producer entries of one partition; ``map_end_offset`` is the log offset they reflect.
    ``config`` is the broker's shared ``ProducerStateConfig``."""

    def __init__(self, partition: str, config: ProducerStateConfig) -> None:
        self.partition = partition  # "topic-N", for messages
        self.config = config
        self.producers: dict[int, ProducerEntry] = {}
        self.map_end_offset = 0

    def __len__(self) -> int:
        return len(self.producers)

    @property
    def expiration_ms(self) -> int:
        return self.config.expiration_ms

    # -- the produce path ----------------------------------------------------------------------

    def check(self, h: BatchHeader, next_offset: int) -> BatchMetadata | None:
        """Validate a client batch about to be appended at ``next_offset``.

        Returns the already-appended batch if ``h`` duplicates one of the producer's last five,
        raises ``ProducerStateError`` if Kafka would refuse it, and returns None to append.
        """
        entry = self.producers.get(h.producer_id)
        if entry is None:
            return None  # unknown producer: any epoch and sequence start a history
        dup = entry.find_duplicate(h)
        if dup is not None:
            return dup
        pid, epoch, seq = h.producer_id, h.producer_epoch, h.base_sequence
        current = entry.epoch
        if epoch < current:
            raise ProducerStateError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"Epoch of producer {pid} at offset {next_offset} in {self.partition} is {epoch}, "
                f"which is smaller than the last seen epoch {current}",
            )
        if current == NO_PRODUCER_EPOCH:
            return None
        if epoch != current:
            if seq != 0:
                raise ProducerStateError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"Invalid sequence number for new epoch of producer {pid} at offset {next_offset} in "
                    f"partition {self.partition}: {epoch} (request epoch), {seq} (seq. number), "
                    f"{current} (current producer epoch)",
                )
            return None
        last = entry.last_seq
        if not (seq == last + 1 or (seq == 0 and last == INT32_MAX)):
            raise ProducerStateError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"Out of order sequence number for producer {pid} at offset {next_offset} in partition "
                f"{self.partition}: {seq} (incoming seq. number), {last} (current end sequence number)",
            )
        return None

    def update(self, h: BatchHeader, first_offset: int, timestamp: int) -> None:
        """Record batch ``h`` appended at ``first_offset`` (``timestamp``: its max timestamp)."""
        last_offset = first_offset + h.last_offset_delta
        if h.producer_id >= 0 and not h.is_control:
            entry = self.producers.get(h.producer_id)
            if entry is None:
                entry = self.producers[h.producer_id] = ProducerEntry(h.producer_id)
            entry.add_batch(
                h.producer_epoch, BatchMetadata(h.last_sequence, last_offset, h.last_offset_delta, timestamp)
            )
        self.map_end_offset = last_offset + 1

    def replay(self, h: BatchHeader) -> None:
        """Apply a batch header read back from the log (already validated when appended)."""
        if h.producer_id >= 0 and h.is_control:
            # No transactions yet: a marker only moves the epoch (Kafka bumps it the same way).
            entry = self.producers.setdefault(h.producer_id, ProducerEntry(h.producer_id))
            if h.producer_epoch > entry.epoch:
                entry.epoch = h.producer_epoch
                entry.batches.clear()
            self.map_end_offset = h.base_offset + h.last_offset_delta + 1
            return
        self.update(h, h.base_offset, h.max_timestamp)

    # -- housekeeping --------------------------------------------------------------------------

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers idle for ``producer.id.expiration.ms``; returns how many."""
        limit = self.expiration_ms
        expired = [pid for pid, e in self.producers.items() if now_ms - e.last_timestamp >= limit]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    # -- snapshots -----------------------------------------------------------------------------

    def encode_snapshot(self) -> bytes:
        return encode_snapshot(self.producers.values())

    def load_snapshot(self, data: bytes, offset: int, now_ms: int) -> None:
        """Replace the state with a snapshot taken at ``offset`` (expired producers dropped)."""
        self.producers = {
            e.producer_id: e
            for e in decode_snapshot(data)
            if now_ms - e.last_timestamp < self.expiration_ms
        }
        self.map_end_offset = offset


def encode_snapshot(entries: Iterable[ProducerEntry]) -> bytes:
    body = bytearray()
    count = 0
    for e in entries:
        if e.batches:
            b = e.batches[-1]
            last_seq, last_offset, delta = b.last_seq, b.last_offset, b.offset_delta
        else:
            last_seq, last_offset, delta = NO_SEQUENCE, -1, 0
        body += _SNAPSHOT_ENTRY.pack(
            e.producer_id, e.epoch, last_seq, last_offset, delta, e.last_timestamp, e.coordinator_epoch, -1
        )
        count += 1
    covered = struct.pack(">i", count) + bytes(body)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(covered)) + covered


def decode_snapshot(data: bytes) -> list[ProducerEntry]:
    if len(data) < _SNAPSHOT_HEAD.size:
        raise CorruptSnapshotError("snapshot shorter than its header")
    version, crc, count = _SNAPSHOT_HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    if crc32c(memoryview(data)[6:]) != crc:
        raise CorruptSnapshotError("snapshot CRC mismatch")
    if count < 0 or len(data) != _SNAPSHOT_HEAD.size + count * _SNAPSHOT_ENTRY.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes cannot hold {count} entries")
    entries = []
    for i in range(count):
        pid, epoch, last_seq, last_offset, delta, ts, coord, _txn = _SNAPSHOT_ENTRY.unpack_from(
            data, _SNAPSHOT_HEAD.size + i * _SNAPSHOT_ENTRY.size
        )
        entry = ProducerEntry(pid, epoch, last_timestamp=ts, coordinator_epoch=coord)
        if last_offset >= 0:
            entry.batches.append(BatchMetadata(last_seq, last_offset, delta, ts))
        entries.append(entry)
    return entries
