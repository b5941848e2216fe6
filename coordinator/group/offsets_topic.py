"""``__consumer_offsets`` as the group coordinator uses it: where a group's records live, how
a write becomes a record batch on the partition log, and how the log is read back.

Kafka maps a group to partition ``Utils.abs(groupId.hashCode()) % partitions`` (Java's
``String.hashCode``) and creates the topic with ``cleanup.policy=compact``,
``compression.type=producer`` and ``segment.bytes=offsets.topic.segment.bytes``. Each write
of its coordinator runtime is one v2 batch: CreateTime, no producer id (-1/-1, base
sequence 0), every record stamped with the write's time, compressed with
``offsets.topic.compression.codec`` (0 = none). kshare writes the same bytes.

kshare has no log cleaner: the coordinator runtime compacts each partition itself
(``GroupCoordinatorRuntime.compact``). Retention does not apply: ``delete`` is not in the policy.
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import TYPE_CHECKING, Callable

from broker.log.config import LogConfig
from broker.log.memory import MemoryLogStore
from coordinator.share.routing import partition_for_key
from protocol.records import build_batch, check_batches

from .records import CoordinatorRecord, encode

if TYPE_CHECKING:
    from broker.log import PartitionLog
    from broker.log.store import AppendInfo, ReadResult

CONSUMER_OFFSETS = "__consumer_offsets"
NUM_PARTITIONS_CONFIG = "offsets.topic.num.partitions"
SEGMENT_BYTES_CONFIG = "offsets.topic.segment.bytes"
COMPRESSION_CODEC_CONFIG = "offsets.topic.compression.codec"
LOAD_BUFFER_SIZE_CONFIG = "offsets.load.buffer.size"
COMPRESSION_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}  # Kafka's CompressionType ids

_COORDINATOR_BASE_SEQUENCE = 0  # Kafka's coordinator runtime builds its batches with base sequence 0


def topic_configs(segment_bytes: int) -> dict[str, str]:
    """The topic configs Kafka creates ``__consumer_offsets`` with (groupMetadataTopicConfigs)."""
    return {"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": str(segment_bytes)}


@lru_cache(maxsize=1 << 12)
def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group (Kafka's ``partitionFor``).

    Cached: every share fetch and acknowledgement looks up its group's settings through it."""
    return partition_for_key(group_id, num_partitions)


Appender = Callable[["PartitionLog", bytearray, list], "AppendInfo"]


def _plain_append(lg: PartitionLog, data: bytearray, headers: list) -> AppendInfo:
    return lg.append(data, headers, leader_epoch=0)


class OffsetsTopic:
    """The partitions of ``__consumer_offsets``: ``log_for(p)`` gives partition ``p``'s log,
    ``append(lg, data, headers)`` writes validated batches to it (the broker's internal
    append, which also wakes fetches waiting on the partition)."""

    def __init__(
        self,
        num_partitions: int,
        log_for: Callable[[int], PartitionLog | None],
        *,
        append: Appender = _plain_append,
        compression: int = 0,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        if compression not in COMPRESSION_CODECS:
            raise ValueError(f"Unknown compression type id: {compression}")
        self.num_partitions = num_partitions
        self._log_for = log_for
        self._append = append
        self.compression = compression
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)

    @classmethod
    def in_memory(cls, num_partitions: int = 50, **kwargs) -> OffsetsTopic:
        """A topic whose partitions live in memory (a runtime without a broker, and tests)."""
        store = MemoryLogStore()
        config = LogConfig().with_overrides(topic_configs(104857600))
        logs = [store.create(CONSUMER_OFFSETS, p, None, config) for p in range(num_partitions)]
        return cls(num_partitions, logs.__getitem__, **kwargs)

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def log(self, partition: int) -> PartitionLog:
        lg = self._log_for(partition)
        if lg is None:
            raise RuntimeError(f"{CONSUMER_OFFSETS}-{partition} has no log")
        return lg

    def is_empty(self, partition: int) -> bool:
        lg = self.log(partition)
        return lg.end_offset == lg.start_offset

    def encode_batches(self, records: list[CoordinatorRecord], max_bytes: int) -> bytearray:
        """The records as one batch, or as several consecutive ones if one would exceed
        ``max_bytes`` (max.message.bytes) — still written with a single append."""
        now = self._clock_ms()
        pending = [records]
        out = bytearray()
        while pending:
            chunk = pending.pop(0)
            batch = build_batch(
                [(*encode(r), None, now) for r in chunk],
                compression=self.compression, base_sequence=_COORDINATOR_BASE_SEQUENCE, timestamp_ms=now,
            )
            if len(batch) > max_bytes and len(chunk) > 1:
                half = len(chunk) // 2
                pending[:0] = [chunk[:half], chunk[half:]]
                continue
            out += batch
        return out

    async def append(self, partition: int, records: list[CoordinatorRecord]) -> None:
        """Write ``records`` to the partition, then wait for the flush its policy asks for
        (``flush.messages``). Raises what the log raises (AppendError, KafkaStorageError)."""
        if records:
            await self.log(partition).flush_if_needed(self.write(partition, records))

    def write(self, partition: int, records: list[CoordinatorRecord]) -> AppendInfo:
        """Append non-empty ``records`` now, without waiting for any flush."""
        lg = self.log(partition)
        data = self.encode_batches(records, lg.config.max_message_bytes)
        return self._append(lg, data, check_batches(data))

    def read(self, partition: int, offset: int, max_bytes: int) -> ReadResult:
        return self.log(partition).read(offset, max_bytes)
