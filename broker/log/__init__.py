"""Log store: Kafka-format partition logs (file backend) and an in-memory twin for tests."""

from .config import LogConfig
from .file import FileLogStore
from .memory import MemoryLogStore
from .partition import Log
from .store import (
    READ_ERRORS,
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
    "READ_ERRORS",
    "ReadBatch",
    "ReadResult",
    "RecordTooLarge",
]
