"""Log store: Kafka-format partition logs (file backend) and an in-memory twin for tests."""

from .config import LogConfig
from .file import FileLogStore
from .memory import MemoryLogStore
from .partition import Log
from .store import (
    AppendInfo,
    InconsistentTopicId,
    KafkaStorageError,
    LogError,
    LogStore,
    OffsetOutOfRange,
    PartitionLog,
    ReadBatch,
    ReadResult,
    RecordTooLarge,
)

__all__ = [
    "AppendInfo",
    "FileLogStore",
    "InconsistentTopicId",
    "KafkaStorageError",
    "Log",
    "LogConfig",
    "LogError",
    "LogStore",
    "MemoryLogStore",
    "OffsetOutOfRange",
    "PartitionLog",
    "ReadBatch",
    "ReadResult",
    "RecordTooLarge",
]
