"""The data path of a partition leader: validated appends with producer state, wake-ups, reads.

Kafka splits this between ``ReplicaManager``, ``Partition`` and ``UnifiedLog``; kshare has one
replica per partition, so one service does it. It owns the per-partition producer state (loaded
lazily on a partition's first append after start-up) and is the only place client batches are
appended. After every append it notifies ``data_key(topic, partition)`` on ``broker.waiters``,
which wakes long-polling fetches (and anyone else who waits for new data).

Append of one produced batch, in Kafka's order (ReplicaManager, Partition, UnifiedLog,
LogValidator, ProducerStateManager): an offline log, transactional batches (refused: no
transactions yet), the base offset, max.message.bytes, the CRC, the header's counts, control
flag and sequence, keys on compacted topics, timestamps, the rewrite into the topic's
compression.type when it names another codec than the batch's (and max.message.bytes again on
the result), segment.bytes, then the producer checks, then the write, then the producer-state
update. (acks=-1 adds no check: see ``append_produce``.) With compression.type=producer (the
default) or a matching codec the batch is stored as sent, with no per-record work.

Timestamps are checked from the batch header on the hot path (``baseTimestamp`` is the first
record's and ``maxTimestamp`` the largest): the records are decoded, to name the offending ones
as Kafka's per-record ``record_errors`` do, only when one of them is out of bounds or when
``message.timestamp.before.max.ms`` (default: unlimited) is bounded, since a later record may
be older than the first. The header's maxTimestamp is trusted to match the records (Kafka
recomputes it while validating).

Start-up cost of producer state is bounded: load the newest valid ``.snapshot`` above the log
start and at or below the log end (written when a segment rolls, at clean shutdown, and at the
log end after a load that replayed batches, as Kafka's rebuildProducerState; others are deleted,
as Kafka's truncateAndReload does), then replay batch headers after it, i.e. at most the active
segment after a crash. With no usable snapshot, the last ``REPLAY_SEGMENTS``
segments are replayed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from protocol.errors import ErrorCode
from protocol.records import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    NO_TIMESTAMP,
    TRANSACTIONAL_FLAG,
    CorruptRecordError,
    InvalidRecordError,
    UnknownCompressionIdError,
    check_base_offset,
    check_client_batch,
    check_record_framing,
    iter_records,
    parse_header,
    recompress_batch,
    set_create_time,
    validate_records,
)

from .log import KafkaStorageError, RecordTooLarge
from .log.config import LONG_MAX
from .producer_snapshots import SnapshotFiles
from .producer_state import CorruptSnapshotError, ProducerStateConfig, ProducerStateError, ProducerStateManager

if TYPE_CHECKING:
    from protocol.records import BatchHeader

    from .config import BrokerConfig
    from .log import LogStore, PartitionLog
    from .topics import Topic
    from .waiters import Waiters

log = logging.getLogger("kshare.partitions")

LEADER_EPOCH = 0  # a single broker leads every partition forever, with epoch 0
NO_LEADER = -1
REPLAY_SEGMENTS = 2  # segments replayed when no producer snapshot is usable
REPLAY_CHUNK_BYTES = 8 << 20
INVALID_TIMESTAMP_MESSAGE = "One or more records have been rejected due to invalid timestamp"
_NO_LOG_APPEND_TIME = "Producer should not set timestamp type to LogAppendTime."
TRANSACTIONS_UNSUPPORTED = "Transactions are not supported by this broker (kshare): transactional batches are refused"


def leader_of(store, node: int, topic: str, partition: int) -> tuple[ErrorCode, int, list[int]]:
    """``(error, leader, offline replicas)`` of a partition in Metadata and
    DescribeTopicPartitions. A log that went offline (a failed fsync or read) is shown as
    Kafka shows a partition whose only replica's log directory failed: no leader, so clients
    stop fetching from it and producing to it instead of retrying KAFKA_STORAGE_ERROR."""
    lg = store.get(topic, partition)
    if lg is not None and lg.offline:
        return ErrorCode.LEADER_NOT_AVAILABLE, NO_LEADER, [node]
    return ErrorCode.NONE, node, []


def data_key(topic: str, partition: int) -> tuple[str, int]:
    """The ``broker.waiters`` key notified after every append to ``topic``-``partition``."""
    return (topic, partition)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class AppendError(Exception):
    """A refused append: ``code`` and, where Kafka sends them, ``message`` and ``record_errors``.

    ``log_start_offset`` is -1 where Kafka answers with its unknown append info (size, CRC and
    storage errors) and the log start offset where Kafka reports it (validation and producer
    state errors).
    """

    def __init__(
        self,
        code: ErrorCode,
        message: str | None = None,
        *,
        record_errors: list[tuple[int, str]] | None = None,
        log_start_offset: int = -1,
        log_message: str | None = None,
    ) -> None:
        super().__init__(log_message or message or code.name)
        self.code = code
        self.message = message
        self.record_errors = record_errors or []
        self.log_start_offset = log_start_offset


@dataclass(slots=True)
class ProduceResult:
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    flush_upto: int | None = None  # await log.flush(flush_upto) before acknowledging
    duplicate: bool = False


@dataclass(slots=True)
class _ProducerSlot:
    """Producer state of one partition and the log object it was built from."""

    log: PartitionLog
    state: ProducerStateManager
    snapshots: SnapshotFiles | None
    active_base: int


class Partitions:
    def __init__(
        self,
        store: LogStore,
        waiters: Waiters,
        config: BrokerConfig,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.store = store
        self.waiters = waiters
        self.config = config
        self.clock_ms = clock_ms
        self._producers: dict[tuple[str, int], _ProducerSlot] = {}
        # Shared by every partition's state, so a dynamic producer.id.expiration.ms applies at once.
        self.producer_config = ProducerStateConfig(self._expiration_ms())
        config.on_change(self._config_changed)
        self.shutting_down = False
        self._waiting: dict[tuple, int] = {}  # keys of in-flight long polls (to wake them at shutdown)
        self._expiry_task: asyncio.Task | None = None
        # Kafka loads every log at start-up and expires producers only in its periodic check: a
        # state loaded later (kshare loads on first use) filters its snapshot as of the start and
        # drops the replayed producers only as of the last check (None: none ran yet).
        self._started_ms = clock_ms()
        self._last_expiry_check_ms: int | None = None

    # -- appends -------------------------------------------------------------------------------

    def append_produce(
        self,
        topic: Topic,
        lg: PartitionLog,
        data: memoryview,
        *,
        now_ms: int,
    ) -> ProduceResult:
        """Validate and append one client batch, which ``check_produce_request`` found to be one
        complete batch and nothing more.

        acks=all needs nothing more: Kafka checks the ISR against min(min.insync.replicas,
        replication factor) (Partition.effectiveMinIsr), and both are 1 on one broker."""
        if lg.offline:  # Kafka's getPartitionOrException, before the log sees the batch
            raise AppendError(ErrorCode.KAFKA_STORAGE_ERROR, log_message=f"{lg.topic}-{lg.partition} is offline")
        # Kafka verifies (ReplicaManager.handleProduceAppend) only transactional batches with a
        # producer id; one without is appended like any other.
        if (data[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG and len(data) >= HEADER_SIZE
                and parse_header(data).producer_id >= 0):
            raise AppendError(
                ErrorCode.INVALID_TXN_STATE, TRANSACTIONS_UNSUPPORTED, log_start_offset=lg.start_offset
            )
        configs = topic.configs
        cfg = lg.config
        try:
            check_base_offset(data)
        except InvalidRecordError as e:
            raise AppendError(ErrorCode(e.error_code), log_message=str(e), log_start_offset=lg.start_offset) from None
        if len(data) > cfg.max_message_bytes:
            raise AppendError(
                ErrorCode.MESSAGE_TOO_LARGE,
                log_message=f"batch of {len(data)} bytes exceeds max.message.bytes {cfg.max_message_bytes}",
            )
        try:
            h = check_client_batch(data)
        except (InvalidRecordError, UnknownCompressionIdError) as e:  # LogValidator's, or Kafka's catch-all
            # (an unknown codec): both report the log start offset
            raise AppendError(ErrorCode(e.error_code), log_message=str(e), log_start_offset=lg.start_offset) from None
        except CorruptRecordError as e:  # a bad CRC: Kafka's unknown append info
            raise AppendError(ErrorCode(e.error_code), log_message=str(e)) from None
        # Kafka's LogValidator reports each record's first fault, its key before its timestamp,
        # and answers INVALID_TIMESTAMP if any record's fault is its timestamp.
        keyless = None  # the InvalidRecordError naming the keyless records of a compacted topic
        if "compact" in cfg.cleanup_policy:
            try:
                validate_records(data, require_keys=True, partition=f"{lg.topic}-{lg.partition}")
            except InvalidRecordError as e:
                if not e.record_errors:  # records that do not parse
                    raise AppendError(ErrorCode(e.error_code), log_message=str(e),
                                      log_start_offset=lg.start_offset) from None
                keyless = e
            except CorruptRecordError as e:
                raise AppendError(ErrorCode(e.error_code), log_message=str(e)) from None
        else:
            try:
                check_record_framing(data, h)
            except CorruptRecordError as e:
                raise AppendError(
                    ErrorCode(e.error_code), log_message=str(e), log_start_offset=lg.start_offset
                ) from None
        if h.log_append_time and (cfg.log_append_time or h.max_timestamp == NO_TIMESTAMP):
            # Only a CreateTime topic takes a producer's LogAppendTime batch (below), and only
            # with a max timestamp, which Kafka reads as every record's timestamp.
            self._refuse_log_append_time(lg, data, keyless)
        if not cfg.log_append_time:
            self._check_timestamps(configs, lg, data, h, now_ms, keyless)
        if keyless is not None:
            raise AppendError(ErrorCode.INVALID_RECORD, str(keyless), record_errors=keyless.record_errors,
                              log_start_offset=lg.start_offset)
        if not cfg.log_append_time and h.log_append_time:
            set_create_time(data, 0)
            h = parse_header(data)
        if cfg.target_codec >= 0 and cfg.target_codec != h.compression:
            data, h = self._recompress(lg, data)
        if h.size > cfg.segment_bytes:  # it could never fit a segment (max.message.bytes may allow it)
            raise AppendError(
                ErrorCode.RECORD_LIST_TOO_LARGE,
                log_message=f"Message batch size is {h.size} bytes in append to partition {lg.topic}-{lg.partition}, "
                f"which exceeds the maximum configured segment size of {cfg.segment_bytes}.",
            )

        # Loaded on every partition's first append (not only idempotent ones) so that every later
        # segment roll leaves a snapshot: that is what bounds the next start-up's replay.
        slot = self._slot(lg)
        if h.producer_id >= 0:
            try:
                dup = slot.state.check(h, lg.end_offset)
            except ProducerStateError as e:
                raise AppendError(e.code, log_message=str(e), log_start_offset=lg.start_offset) from None
            if dup is not None:
                # A retry of a batch already in the log: the original offsets, nothing appended.
                # Kafka reports the batch's timestamp as its log append time here.
                durable = lg.recovery_point > dup.last_offset or cfg.flush_messages >= LONG_MAX
                return ProduceResult(
                    dup.first_offset, dup.timestamp, lg.start_offset,
                    flush_upto=None if durable else dup.last_offset + 1, duplicate=True,
                )
        info = self._append(lg, data, [h], slot)
        ts = info.log_append_time_ms if info.log_append_time_ms >= 0 else h.max_timestamp
        slot.state.update(h, info.first_offset, ts)
        return ProduceResult(
            info.first_offset, info.log_append_time_ms, info.start_offset,
            flush_upto=info.last_offset + 1 if info.needs_flush else None,
        )

    @staticmethod
    def _recompress(lg: PartitionLog, data) -> tuple[bytearray, BatchHeader]:
        """The batch in the topic's compression.type, checked against max.message.bytes again
        since its size changed (Kafka's UnifiedLog re-checks after LogValidator rebuilt it)."""
        cfg = lg.config
        try:
            data = recompress_batch(data, cfg.target_codec, cfg.compression_level)
        except CorruptRecordError as e:  # records that do not parse: Kafka's unknown append info
            raise AppendError(ErrorCode(e.error_code), log_message=str(e)) from None
        h = parse_header(data)
        if h.size > cfg.max_message_bytes:
            raise AppendError(
                ErrorCode.MESSAGE_TOO_LARGE,
                log_message=f"Message batch size is {h.size} bytes in append to partition {lg.topic}-"
                f"{lg.partition} which exceeds the maximum configured size of {cfg.max_message_bytes}.",
            )
        return data, h

    def append(self, lg: PartitionLog, data, headers: list[BatchHeader]):
        """Append already-validated batches (coordinators' internal records); wakes waiters.

        Stamps the leader epoch like every other append. Returns the log's ``AppendInfo``;
        the caller awaits ``lg.flush_if_needed(info)`` if it needs durability.
        """
        slot = self._producers.get((lg.topic, lg.partition))
        if slot is not None and slot.log is not lg:
            slot = None
        info = self._append(lg, data, headers, slot)
        if slot is not None:
            offset = info.first_offset
            for h in headers:
                slot.state.update(h, offset, h.max_timestamp)
                offset += h.last_offset_delta + 1
        return info

    def _append(self, lg: PartitionLog, data, headers, slot: _ProducerSlot | None):
        try:
            info = lg.append(data, headers, leader_epoch=LEADER_EPOCH)
        except RecordTooLarge as e:
            raise AppendError(ErrorCode.MESSAGE_TOO_LARGE, log_message=str(e)) from None
        except KafkaStorageError as e:
            raise AppendError(ErrorCode.KAFKA_STORAGE_ERROR, log_message=str(e)) from None
        if slot is not None:
            base = lg.segments[-1].base_offset
            if base != slot.active_base:
                # The append rolled a segment: snapshot the state as of the new segment's base,
                # i.e. before this append is applied (Kafka takes its snapshots at rolls too).
                slot.active_base = base
                if base == info.first_offset:
                    self._write_snapshot(slot, base)
        self.waiters.notify((lg.topic, lg.partition))
        return info

    def notify(self, topic: str, partition: int) -> None:
        """Wake whoever waits for data on this partition (e.g. after DeleteRecords)."""
        self.waiters.notify((topic, partition))

    @staticmethod
    def _records(lg: PartitionLog, data) -> list:
        """Every record of the batch, or the AppendError of one that does not parse."""
        try:
            return list(iter_records(data))
        except CorruptRecordError as e:
            raise AppendError(ErrorCode(e.error_code), log_message=str(e), log_start_offset=lg.start_offset) from None

    @staticmethod
    def _timestamp_errors(lg: PartitionLog, errors: list, keyless: InvalidRecordError | None) -> None:
        """Raise INVALID_TIMESTAMP if a record's first fault is its timestamp: each keyless
        record (``keyless``) reports its key instead, as Kafka's LogValidator.validateRecord."""
        if keyless is not None:
            keys = dict(keyless.record_errors)
            errors = [e for e in errors if e[0] not in keys]
            if errors:
                errors = sorted(errors + keyless.record_errors)
        if errors:
            raise AppendError(ErrorCode.INVALID_TIMESTAMP, INVALID_TIMESTAMP_MESSAGE, record_errors=errors,
                              log_start_offset=lg.start_offset)

    def _refuse_log_append_time(self, lg: PartitionLog, data, keyless: InvalidRecordError | None) -> None:
        errors = [
            (i, f"Invalid timestamp type in message DefaultRecord(offset={r.offset}, timestamp={r.timestamp}, "
                f"key={len(r.key or b'')} bytes, value={len(r.value or b'')} bytes). {_NO_LOG_APPEND_TIME}")
            for i, r in enumerate(self._records(lg, data))
        ]
        self._timestamp_errors(lg, errors, keyless)

    def _check_timestamps(self, configs: dict, lg: PartitionLog, data, h: BatchHeader, now_ms: int,
                          keyless: InvalidRecordError | None) -> None:
        before = _int_setting(configs, "message.timestamp.before.max.ms",
                              self.config["log.message.timestamp.before.max.ms"])
        after = _int_setting(configs, "message.timestamp.after.max.ms",
                             self.config["log.message.timestamp.after.max.ms"])

        def bad(ts: int) -> bool:
            return ts != -1 and (now_ms - ts > before or ts - now_ms > after)

        # The max timestamp bounds every record from above, and the first record's is the
        # batch's base; a later record may be older than the first, so a bounded
        # message.timestamp.before.max.ms means looking at every record, as Kafka does.
        if not (bad(h.base_timestamp) or bad(h.max_timestamp)) and before >= LONG_MAX:
            return
        # The offsets as the producer numbered them: Kafka validates before assigning. Its upper
        # bound is a Java long: message.timestamp.after.max.ms = Long.MAX_VALUE wraps it negative.
        upper = (now_ms + after + (1 << 63)) % (1 << 64) - (1 << 63)
        errors = [
            (i, f"Timestamp {rec.timestamp} of message with offset {rec.offset} is out of range. "
                f"The timestamp should be within [{now_ms - before}, {upper}]")
            for i, rec in enumerate(self._records(lg, data)) if bad(rec.timestamp)
        ]
        self._timestamp_errors(lg, errors, keyless)

    # -- producer state ------------------------------------------------------------------------

    def producer_state(self, lg: PartitionLog) -> ProducerStateManager:
        return self._slot(lg).state

    def _slot(self, lg: PartitionLog) -> _ProducerSlot:
        key = (lg.topic, lg.partition)
        slot = self._producers.get(key)
        if slot is None or slot.log is not lg:  # first use, or the topic was recreated
            slot = self._producers[key] = self._load(lg)
        return slot

    def _expiration_ms(self) -> int:
        return int(self.config["producer.id.expiration.ms"])

    def _config_changed(self, names: set[str]) -> None:
        """BrokerConfig listener: reconfigure the shared producer-state settings."""
        if "producer.id.expiration.ms" in names:
            new = self._expiration_ms()
            if new != self.producer_config.expiration_ms:
                log.info("Reconfigure producer.id.expiration.ms from %d to %d",
                         self.producer_config.expiration_ms, new)
                self.producer_config.expiration_ms = new

    def _load(self, lg: PartitionLog) -> _ProducerSlot:
        name = f"{lg.topic}-{lg.partition}"
        state = ProducerStateManager(name, self.producer_config)
        directory = getattr(lg, "directory", None)
        files = SnapshotFiles(directory) if directory else None
        end = lg.end_offset
        # As Kafka's truncateAndReload: a snapshot is usable only in (log start, log end]. One at
        # or below the log start describes records deleted (by DeleteRecords or retention), so the
        # producers it knows are forgotten, as after Kafka's restart. The log start is the one the
        # log was opened with: Kafka loads at start-up, and keeps in memory the producers whose
        # records are deleted while it runs.
        log_start = lg.opened_start_offset
        start = None
        if files is not None:
            usable = []
            for offset in files.offsets():
                if log_start < offset <= end:
                    usable.append(offset)
                else:
                    log.info("%s: dropping producer snapshot at %d outside (%d, %d]", name, offset, log_start, end)
                    files.delete(offset)
            for offset in reversed(usable):
                try:
                    state.load_snapshot(files.read(offset), offset, self._started_ms)
                except (CorruptSnapshotError, OSError) as e:
                    log.warning("%s: ignoring producer snapshot at %d: %s", name, offset, e)
                    files.delete(offset)
                    continue
                start = offset
                break
        segments = lg.segments
        snapshot_offset = lg.start_offset if start is None else start  # Kafka's lastSnapOffset
        if start is None:
            start = lg.start_offset if files is None else segments[max(0, len(segments) - REPLAY_SEGMENTS)].base_offset
        replayed = self._replay(lg, state, max(start, lg.start_offset))
        if self._last_expiry_check_ms is not None:
            state.remove_expired(self._last_expiry_check_ms)
        state.map_end_offset = end
        if files is not None and end > snapshot_offset:
            # Kafka's rebuildProducerState ends with a snapshot at the log end: what a crash
            # made it replay is kept, even once DeleteRecords or retention delete those records.
            self._write_snapshot_file(files, name, end, state)
        if replayed or start != end:
            log.info(
                "%s: loaded state of %d producer(s) from offset %d, replaying %d batch header(s)",
                name, len(state), start, replayed,
            )
        return _ProducerSlot(lg, state, files, segments[-1].base_offset)

    @staticmethod
    def _replay(lg: PartitionLog, state: ProducerStateManager, offset: int) -> int:
        n = 0
        end = lg.end_offset
        while offset < end:
            r = lg.read(offset, REPLAY_CHUNK_BYTES)
            if not r.batches:
                break
            for b in r.batches:
                if b.last_offset >= offset:
                    state.replay(b.header)
                    n += 1
            offset = r.next_offset
        return n

    def _write_snapshot(self, slot: _ProducerSlot, offset: int) -> None:
        if slot.snapshots is not None:
            self._write_snapshot_file(slot.snapshots, f"{slot.log.topic}-{slot.log.partition}", offset, slot.state)

    @staticmethod
    def _write_snapshot_file(files: SnapshotFiles, name: str, offset: int, state: ProducerStateManager) -> None:
        try:
            files.write(offset, state.encode_snapshot())
        except OSError as e:  # a missing snapshot only makes the next start-up replay more
            log.warning("%s: could not write producer snapshot: %s", name, e)

    def write_snapshots(self) -> None:
        """Snapshot every loaded partition at its log end (clean shutdown)."""
        for key, slot in list(self._producers.items()):
            lg = slot.log
            if self.store.get(*key) is not lg or getattr(lg, "closed", False):
                continue
            self._write_snapshot(slot, lg.end_offset)

    def remove_expired_producers(self, now_ms: int) -> int:
        self._last_expiry_check_ms = now_ms
        n = 0
        for key, slot in list(self._producers.items()):
            if self.store.get(*key) is not slot.log:
                del self._producers[key]  # the topic was deleted
                continue
            n += slot.state.remove_expired(now_ms)
        return n

    # -- long polls ------------------------------------------------------------------------------

    async def wait_for_data(self, keys: list[tuple], timeout_s: float) -> bool:
        """Sleep until one of ``keys`` (``data_key``) is notified; False on timeout or shutdown."""
        if self.shutting_down or timeout_s <= 0 or not keys:
            return False
        for k in keys:
            self._waiting[k] = self._waiting.get(k, 0) + 1
        try:
            return await self.waiters.wait(keys, timeout_s) and not self.shutting_down
        finally:
            for k in keys:
                n = self._waiting[k] - 1
                if n:
                    self._waiting[k] = n
                else:
                    del self._waiting[k]

    def topic_changed(self, changes: list[tuple[str, Topic | None]]) -> None:
        """TopicRegistry listener: deleted topics drop their producer state and wake their polls."""
        deleted = {name for name, topic in changes if topic is None}
        if not deleted:
            return
        for key in [k for k in self._producers if k[0] in deleted]:
            del self._producers[key]
        for key in [k for k in self._waiting if k[0] in deleted]:
            self.waiters.notify(key)

    def waiting(self, key: tuple) -> int:
        """How many long polls currently wait on ``key``."""
        return self._waiting.get(key, 0)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        interval = int(self.config["producer.id.expiration.check.interval.ms"])
        self._expiry_task = asyncio.get_running_loop().create_task(self._expire_loop(interval / 1000))

    async def _expire_loop(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                n = self.remove_expired_producers(self.clock_ms())
                if n:
                    log.info("expired %d idle producer id(s)", n)
            except Exception:
                log.exception("producer expiration failed")

    def begin_shutdown(self) -> None:
        """Stop long polls from waiting (they answer at once) so in-flight requests finish fast."""
        self.shutting_down = True
        self.waiters.wake_all()

    async def close(self) -> None:
        """After the server stopped: stop background work and snapshot producer state."""
        task, self._expiry_task = self._expiry_task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        self.write_snapshots()


def _int_setting(topic_configs: dict, name: str, default) -> int:
    value = topic_configs.get(name)
    return int(default) if value is None else int(value)
