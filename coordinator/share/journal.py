"""The share coordinator's journal on the log: one record batch per request part.

``append`` encodes a shard's records as Kafka's coordinator runtime does (key and value in
the ``coordinator_serde`` layout, one batch, CreateTime = now on every record, producer id
and epoch -1, base sequence 0, the configured compression) and appends the batch to the
``__share_group_state`` partition at once, so the offsets it returns are final and the
service can replay the records before anything else runs. ``sync`` then waits for the
group-committed flush when ``log.flush.interval.messages`` asks for one, exactly as an
acknowledged produce does; otherwise the batch is in the page cache, as Kafka's is.

Failures are raised as ``AppendError`` (the data path's), whose code the service maps onto
the coordinator errors Kafka answers with.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.log import KafkaStorageError
from broker.partitions import AppendError
from protocol.coordinator_serde import SHARE_GROUP_STATE_TOPIC, encode_key, encode_value
from protocol.errors import ErrorCode
from protocol.records import build_batch, parse_header

if TYPE_CHECKING:
    from broker.log import LogStore
    from broker.partitions import Partitions

    from .shard import CoordinatorRecord

__all__ = ["LogJournal"]

# Kafka's CoordinatorRuntime builds its batches with these (non-transactional writes).
_NO_PRODUCER_ID = -1
_NO_PRODUCER_EPOCH = -1
_BASE_SEQUENCE = 0


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class LogJournal:
    def __init__(
        self,
        store: LogStore,
        partitions: Partitions,
        *,
        topic: str = SHARE_GROUP_STATE_TOPIC,
        compression: int = 0,
        clock_ms: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        self.store = store
        self.partitions = partitions
        self.topic = topic
        self.compression = compression
        self.clock_ms = clock_ms
        # (partition, last offset) of appends that must be fsynced before they are answered.
        self._to_flush: set[tuple[int, int]] = set()
        # Per partition, the end of the last append that asked for an fsync (``committed``).
        self._flush_wanted: dict[int, int] = {}
        # Records appended per partition: the state checkpoints check that every record the
        # log gained since a load came from here (``checkpoint.Checkpointer``).
        self.appended: dict[int, int] = {}

    def encode(self, records: list[CoordinatorRecord]) -> bytearray:
        """One batch holding ``records`` (base offset 0; the log assigns the real one)."""
        return bytearray(build_batch(
            [(encode_key(r.key), encode_value(r.value), None) for r in records],
            compression=self.compression,
            producer_id=_NO_PRODUCER_ID,
            producer_epoch=_NO_PRODUCER_EPOCH,
            base_sequence=_BASE_SEQUENCE,
            timestamp_ms=self.clock_ms(),
        ))

    def append(self, partition: int, records: list[CoordinatorRecord]) -> list[int]:
        lg = self.store.get(self.topic, partition)
        if lg is None:
            raise AppendError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              log_message=f"{self.topic}-{partition} does not exist")
        batch = self.encode(records)
        info = self.partitions.append(lg, batch, [parse_header(batch)])
        if info.needs_flush:
            self._to_flush.add((partition, info.last_offset))
            self._flush_wanted[partition] = info.last_offset + 1
        self.appended[partition] = self.appended.get(partition, 0) + info.last_offset + 1 - info.first_offset
        return list(range(info.first_offset, info.last_offset + 1))

    async def sync(self, partition: int, offsets: list[int]) -> None:
        if not offsets or (partition, offsets[-1]) not in self._to_flush:
            return
        self._to_flush.discard((partition, offsets[-1]))
        await self._flush(partition, offsets[-1] + 1)

    async def committed(self, partition: int) -> None:
        """Return once every append to ``partition`` so far is committed: the fsyncs they
        asked for are done (raises ``AppendError`` if one failed)."""
        upto = self._flush_wanted.get(partition)
        if upto is not None:
            await self._flush(partition, upto)

    async def _flush(self, partition: int, upto: int) -> None:
        lg = self.store.get(self.topic, partition)
        if lg is None:
            raise AppendError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              log_message=f"{self.topic}-{partition} does not exist")
        try:
            await lg.flush(upto)
        except KafkaStorageError as e:
            raise AppendError(ErrorCode.KAFKA_STORAGE_ERROR, log_message=str(e)) from None
