"""The share coordinator for one ``__share_group_state`` partition, as a pure state machine.

Request methods never change state. They validate, decide which records the request needs
(a ShareSnapshot, a ShareUpdate or a tombstone per share-partition) and build the response;
the runtime appends the records, calls ``replay`` for each at its log offset, and only then
sends the response. ``replay`` is the only code that mutates state, so loading the partition
at start-up and serving requests build exactly the same state.

Kafka 4.2 behaviour followed here (``ShareCoordinatorShard``):

- InitializeShareGroupState writes a snapshot (snapshot epoch 0, or one more than the
  existing state's), leader epoch 0, no batches, and delivery-complete count -1 while the
  start offset is still -1 (0 once it is known).
- WriteShareGroupState writes a ShareUpdate holding only the written batches, unless
  ``share.coordinator.snapshot.update.records.per.snapshot`` updates were written since the
  last snapshot; then it writes a full snapshot, created and written now. In requests, -1
  means "unchanged" for the start offset and skips the epoch fences. The delivery-complete
  count is taken as written (-1 from a version 0 request, which makes it unknown again).
- Epochs (KAFKA-19456): only InitializeShareGroupState sets the state epoch and only a read
  with a newer leader epoch records that epoch; a write's records carry the current ones.
  A leader epoch below the recorded one fails with FENCED_LEADER_EPOCH, a state epoch below
  it with FENCED_STATE_EPOCH (so the old leader's writes are fenced after a newer read).
- Reading or writing state that was never initialised fails with INVALID_REQUEST; the
  summary of such state is no error with start offset -1; deleting it is a no-op success.
- DeleteShareGroupState writes a tombstone: the ShareSnapshot key with a null value.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from functools import partial
from operator import attrgetter
from typing import Callable, Iterable, Iterator, NamedTuple, Protocol
from uuid import UUID

from protocol.coordinator_records.share_snapshot_key import ShareSnapshotKey
from protocol.coordinator_records.share_snapshot_value import ShareSnapshotValue
from protocol.coordinator_records.share_snapshot_value import StateBatch as SnapshotBatch
from protocol.coordinator_records.share_update_key import ShareUpdateKey
from protocol.coordinator_records.share_update_value import ShareUpdateValue
from protocol.errors import ErrorCode
from protocol.messages import (
    delete_share_group_state_response as delete_rsp,
    initialize_share_group_state_response as init_rsp,
    read_share_group_state_response as read_rsp,
    read_share_group_state_summary_response as summary_rsp,
    write_share_group_state_response as write_rsp,
)

from .combiner import NormalBatches, StateBatch, combine

__all__ = [
    "SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_CONFIG", "SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_DEFAULT",
    "SharePartitionKey", "SharePartitionState", "KeyEntry", "CoordinatorRecord", "PendingKey", "LoadView",
    "ShareCoordinatorShard",
]

SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_CONFIG = "share.coordinator.snapshot.update.records.per.snapshot"
SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_DEFAULT = 500

# Kafka's constants (ShareGroupOffset / PartitionFactory).
UNINITIALIZED_START_OFFSET = -1
UNINITIALIZED_DELIVERY_COMPLETE_COUNT = -1
UNINITIALIZED_EPOCH = 0
DEFAULT_STATE_EPOCH = 0
DEFAULT_LEADER_EPOCH = 0

# Kafka's messages: ShareCoordinatorShard's validation messages and the Errors defaults.
NEGATIVE_PARTITION_ID = "The partition id cannot be a negative number."
WRITE_UNINITIALIZED_SHARE_PARTITION = "Write operation on uninitialized share partition not allowed."
READ_UNINITIALIZED_SHARE_PARTITION = "Read operation on uninitialized share partition not allowed."
FENCED_LEADER_EPOCH_MESSAGE = "The leader epoch in the request is older than the epoch on the broker."
FENCED_STATE_EPOCH_MESSAGE = ("The share coordinator rejected the request because the share-group "
                              "state epoch did not match.")
UNKNOWN_TOPIC_OR_PARTITION_MESSAGE = "This server does not host this topic-partition."
# Not a Kafka check: a batch must not end before it starts.
INVERTED_STATE_BATCH = "A state batch's first offset cannot be greater than its last offset."


class SharePartitionKey(NamedTuple):
    group_id: str
    topic_id: UUID
    partition: int


@dataclass(frozen=True, slots=True)
class SharePartitionState:
    """What Kafka calls ``ShareGroupOffset``: the accumulated durable state of one key."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    state_batches: tuple[StateBatch, ...]
    create_timestamp: int = 0
    write_timestamp: int = 0


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """Everything the shard knows about one key; replaced whole on every replay.

    The fences are the highest epochs replayed for the key (Kafka's leaderEpochMap and
    stateEpochMap), ``None`` when none was seen; they can be above the state's own epochs.
    """

    state: SharePartitionState
    leader_epoch_fence: int | None
    state_epoch_fence: int | None
    updates_since_snapshot: int


class CoordinatorRecord(NamedTuple):
    """One record for ``__share_group_state``; ``value is None`` is a tombstone."""

    key: ShareSnapshotKey | ShareUpdateKey
    value: ShareSnapshotValue | ShareUpdateValue | None


class PendingKey(Protocol):
    """A key read from the log but not replayed yet (``coordinator.share.loader``)."""

    first_offset: int  # offset of its oldest record still needed (its latest snapshot)
    # The entry replaying the records up to some offset built (from a state checkpoint), or
    # None: ``records`` then start from its latest snapshot (or first update).
    base: KeyEntry | None

    def records(self) -> Iterable[tuple]:
        """Its decoded (key, value) records in log order after ``base`` (from that snapshot on)."""
        ...

    def summary(self) -> tuple[int, int, int, int]:
        """(state epoch, leader epoch, start offset, delivery-complete count) after them."""
        ...


class LoadView:
    """A shard's keys as loading the log up to ``last_offset`` would build them.

    ``items()`` yields, per key, the offset of its oldest needed record and either its entry
    (with the fences a load rebuilds) or, if it was not replayed yet, its pending records.
    Entries and pending keys are never mutated, so the view stays valid while the shard moves
    on and may be walked a slice at a time."""

    __slots__ = ("_entries", "_fences", "_needed", "_pending", "last_offset")

    def __init__(self, last_offset: int, entries: dict, pending: dict, needed: dict, fences: dict) -> None:
        self.last_offset = last_offset
        self._entries, self._pending, self._needed, self._fences = entries, pending, needed, fences

    def __len__(self) -> int:
        return len(self._entries) + len(self._pending)

    def items(self) -> Iterator[tuple[SharePartitionKey, int, KeyEntry | PendingKey]]:
        needed, fences = self._needed, self._fences
        for key, e in self._entries.items():
            f = fences.get(key)
            if f is not None:
                e = replace(e, leader_epoch_fence=f[0], state_epoch_fence=f[1])
            yield key, needed[key], e
        for key, p in self._pending.items():
            yield key, needed[key], p


class _PartitionError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


_batch_fields = attrgetter("first_offset", "last_offset", "delivery_state", "delivery_count")
_new_batch = partial(tuple.__new__, StateBatch)


def _batches(raw: Iterable) -> tuple[StateBatch, ...]:
    """StateBatch tuples of decoded batches; a tuple of StateBatch (from the in-process
    persister) is taken as it is."""
    if (type(raw) is tuple or type(raw) is NormalBatches) and (not raw or type(raw[0]) is StateBatch):
        return raw
    return tuple(map(_new_batch, map(_batch_fields, raw)))


def _max(a: int | None, b: int) -> int:
    return b if a is None or b > a else a


def _apply(entry: KeyEntry | None, key, value, batches: tuple[StateBatch, ...] | None = None) -> KeyEntry | None:
    """The state of a key after one record: the heart of ``replay``, shared with the
    request methods so that a request touching a key twice sees its own first record.
    ``batches`` are the value's state batches if the caller has them as StateBatch already."""
    if value is None:
        return None
    if batches is None:
        batches = _batches(value.state_batches)
    if isinstance(key, ShareSnapshotKey):
        state = SharePartitionState(
            value.snapshot_epoch, value.state_epoch, value.leader_epoch, value.start_offset,
            value.delivery_complete_count, batches,
            value.create_timestamp, value.write_timestamp)
        if entry is None:
            return KeyEntry(state, value.leader_epoch, value.state_epoch, 0)
        return KeyEntry(state, _max(entry.leader_epoch_fence, value.leader_epoch),
                        _max(entry.state_epoch_fence, value.state_epoch), 0)
    # ShareUpdate: an increment on top of the current state; it has no state epoch.
    if entry is None:
        state = SharePartitionState(value.snapshot_epoch, UNINITIALIZED_EPOCH, value.leader_epoch,
                                    value.start_offset, value.delivery_complete_count,
                                    tuple(combine((), batches, value.start_offset)))
        return KeyEntry(state, value.leader_epoch, None, 1)
    cur = entry.state
    start = cur.start_offset if value.start_offset == -1 else value.start_offset
    # The constructor, not dataclasses.replace (several us slower: it walks the fields).
    state = SharePartitionState(
        snapshot_epoch=cur.snapshot_epoch, state_epoch=cur.state_epoch,
        leader_epoch=cur.leader_epoch if value.leader_epoch == -1 else value.leader_epoch,
        start_offset=start, delivery_complete_count=value.delivery_complete_count,
        state_batches=NormalBatches(combine(cur.state_batches, batches, start)),
        create_timestamp=cur.create_timestamp, write_timestamp=cur.write_timestamp)
    return KeyEntry(state, _max(entry.leader_epoch_fence, value.leader_epoch),
                    entry.state_epoch_fence, entry.updates_since_snapshot + 1)


def _snapshot_record(key: SharePartitionKey, state: SharePartitionState) -> CoordinatorRecord:
    return CoordinatorRecord(
        ShareSnapshotKey(key.group_id, key.topic_id, key.partition),
        ShareSnapshotValue(
            snapshot_epoch=state.snapshot_epoch, state_epoch=state.state_epoch,
            leader_epoch=state.leader_epoch, start_offset=state.start_offset,
            delivery_complete_count=state.delivery_complete_count,
            create_timestamp=state.create_timestamp, write_timestamp=state.write_timestamp,
            state_batches=[SnapshotBatch(*b) for b in state.state_batches]))


def _resnapshot(key: SharePartitionKey, state: SharePartitionState, now: int) -> CoordinatorRecord:
    """The same state as a new snapshot: snapshot epoch + 1, written now, created when it was."""
    return _snapshot_record(key, replace(state, snapshot_epoch=state.snapshot_epoch + 1, write_timestamp=now))


class _Overlay:
    """The shard's entries as they will be once this request's records are replayed.

    Each record's resulting entry is staged on the shard, so that ``replay``, which runs
    right after the append, takes it instead of combining the same batches again."""

    __slots__ = ("_lookup", "_changed", "_staged")

    def __init__(self, shard: ShareCoordinatorShard) -> None:
        self._lookup = shard._get
        self._changed: dict[SharePartitionKey, KeyEntry | None] = {}
        self._staged = shard._staged
        self._staged.clear()

    def get(self, key: SharePartitionKey) -> KeyEntry | None:
        if key in self._changed:
            return self._changed[key]
        return self._lookup(key)

    def record(self, key: SharePartitionKey, record: CoordinatorRecord, out: list,
               batches: tuple[StateBatch, ...] | None = None) -> None:
        before = self.get(key)
        after = self._changed[key] = _apply(before, record.key, record.value, batches)
        if record.value is not None:
            self._staged[id(record.value)] = (record.value, before, after)
        out.append(record)


class ShareCoordinatorShard:
    """State of every share-partition key routed to one ``__share_group_state`` partition.

    ``topic_partitions(topic_id)`` (optional) returns a topic's partition count, or None if
    the topic does not exist; requests for unknown topic-partitions then fail with
    UNKNOWN_TOPIC_OR_PARTITION as in Kafka. ``clock_ms`` supplies the timestamps written
    into snapshots.
    """

    def __init__(
        self,
        records_per_snapshot: int = SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_DEFAULT,
        *,
        clock_ms: Callable[[], int] | None = None,
        topic_partitions: Callable[[UUID], int | None] | None = None,
    ) -> None:
        if not 0 <= records_per_snapshot <= 500:
            raise ValueError(f"{SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT_CONFIG} must be between [0, 500]")
        self.records_per_snapshot = records_per_snapshot
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._topic_partitions = topic_partitions
        self._entries: dict[SharePartitionKey, KeyEntry] = {}
        # Keys loaded from the log but not replayed yet (see ``load``): replayed on first use.
        self._pending: dict[SharePartitionKey, PendingKey] = {}
        # Pruning: per key, the log offset of its latest snapshot (or of its first record if
        # it began with an update). Everything below the minimum has been superseded.
        self._needed_from: dict[SharePartitionKey, int] = {}
        # The fences a load from the log would rebuild (from the key's latest snapshot on),
        # for the keys whose live fences are higher because of older records: a state
        # checkpoint holds what a load would build (``load_view``).
        self._load_fences: dict[SharePartitionKey, tuple[int | None, int | None]] = {}
        # Entries computed by the request in progress, keyed by id(record value) (``_Overlay``).
        self._staged: dict[int, tuple] = {}
        self._last_offset = -1

    # ------------------------------------------------------------------ inspection

    def entry(self, key: SharePartitionKey) -> KeyEntry | None:
        return self._get(key)

    def state(self, key: SharePartitionKey) -> SharePartitionState | None:
        e = self._get(key)
        return None if e is None else e.state

    def entries(self) -> dict[SharePartitionKey, KeyEntry]:
        for key in list(self._pending):
            self._get(key)
        return dict(self._entries)

    def keys(self) -> list[SharePartitionKey]:
        """Every key with state, replayed or pending."""
        return [*self._entries, *self._pending]

    def key_count(self) -> int:
        """Keys with state, replayed or pending."""
        return len(self._entries) + len(self._pending)

    def pending_count(self) -> int:
        return len(self._pending)

    def pending_keys(self) -> list[SharePartitionKey]:
        """Keys loaded but not replayed yet (``entry(key)`` replays one)."""
        return list(self._pending)

    def _get(self, key: SharePartitionKey) -> KeyEntry | None:
        """The key's entry, replaying its pending records first if it was loaded lazily."""
        e = self._entries.get(key)
        if e is None and self._pending:
            pending = self._pending.get(key)
            if pending is not None:
                e = getattr(pending, "base", None)
                for k, v in pending.records():  # a record that does not decode raises: the key stays pending
                    e = _apply(e, k, v)
                del self._pending[key]
                if e is not None:
                    self._entries[key] = e
        return e

    def _summary(self, key: SharePartitionKey) -> tuple[int, int, int, int] | None:
        """(state epoch, leader epoch, start offset, delivery-complete count), without
        replaying a pending key's state batches."""
        e = self._entries.get(key)
        if e is not None:
            st = e.state
            return st.state_epoch, st.leader_epoch, st.start_offset, st.delivery_complete_count
        pending = self._pending.get(key)
        return None if pending is None else pending.summary()

    # ------------------------------------------------------------------ replay

    def load(self, pending: dict[SharePartitionKey, PendingKey], last_offset: int) -> None:
        """Adopt keys read from the log whose records are replayed only when first used.

        Loading then costs a pass over record keys; the state batches of a key are combined
        when a request needs them (a summary does not). ``pending`` holds each key's records
        from its latest snapshot on (or from its first record), so the state replayed later
        is the state a full replay would build, except that the epoch fences only reflect
        records from that snapshot on: the same as in Kafka once the log was pruned there.
        """
        for key, p in pending.items():
            self._entries.pop(key, None)
            self._load_fences.pop(key, None)
            self._pending[key] = p
            self._needed_from[key] = p.first_offset
        if last_offset > self._last_offset:
            self._last_offset = last_offset

    def replay(self, offset: int, key, value) -> None:
        """Apply one record read from (or just appended to) the partition at ``offset``.

        Records of other types are ignored, as Kafka does."""
        if not isinstance(key, (ShareSnapshotKey, ShareUpdateKey)):
            return
        k = SharePartitionKey(key.group_id, key.topic_id, key.partition)
        before = self._get(k)
        staged = self._staged.pop(id(value), None)
        if staged is not None and staged[0] is value and staged[1] is before:
            after = staged[2]  # what the request computed from this very state
        else:
            after = _apply(before, key, value)
        if after is None:
            self._entries.pop(k, None)
            self._needed_from.pop(k, None)
            self._load_fences.pop(k, None)
        else:
            self._entries[k] = after
            if isinstance(key, ShareSnapshotKey) or before is None:
                self._needed_from[k] = offset
            if before is not None:
                # An update's fences are the load's when the key had none apart: skip the check.
                if k in self._load_fences or isinstance(key, ShareSnapshotKey):
                    self._note_load_fences(k, before, after, key, value)
            else:  # a key's first record: what a load builds too
                self._load_fences.pop(k, None)
        if offset > self._last_offset:
            self._last_offset = offset

    def _note_load_fences(self, k: SharePartitionKey, before: KeyEntry, after: KeyEntry, key, value) -> None:
        """Track the fences a load would rebuild where they differ from the live ones (which
        also remember the epochs of records before the key's latest snapshot)."""
        if isinstance(key, ShareSnapshotKey):
            fences = (value.leader_epoch, value.state_epoch)
        else:
            leader, state = self._load_fences.get(k, (before.leader_epoch_fence, before.state_epoch_fence))
            fences = (_max(leader, value.leader_epoch), state)
        if fences == (after.leader_epoch_fence, after.state_epoch_fence):
            self._load_fences.pop(k, None)
        else:
            self._load_fences[k] = fences

    def load_view(self) -> LoadView:
        """What loading the log up to its end would build, for a state checkpoint (see
        ``LoadView``). Takes shallow copies only: O(keys) at C speed."""
        return LoadView(self._last_offset, dict(self._entries), dict(self._pending),
                        dict(self._needed_from), dict(self._load_fences))

    def last_redundant_offset(self) -> int | None:
        """Records below this offset are superseded: the log may be truncated up to it.

        It is the offset of the oldest record any key still needs (its latest snapshot; its
        later updates come after it). When no key is left, it is the offset of the last record,
        the tombstone that deleted the last key: as Kafka's ShareCoordinatorOffsetsManager,
        which counts a tombstone's offset before it forgets the key, the log keeps that
        tombstone. ``None`` while nothing is redundant."""
        if self._needed_from:
            value = min(self._needed_from.values())
        elif self._last_offset >= 0:
            value = self._last_offset
        else:
            return None
        return value if value > 0 else None

    # ------------------------------------------------------------------ helpers

    def _check_topic(self, topic_id: UUID, partition: int) -> None:
        if self._topic_partitions is None:
            return
        count = self._topic_partitions(topic_id)
        if count is None or partition >= count:
            raise _PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION_MESSAGE)

    @staticmethod
    def _check_partition(partition: int) -> None:
        if partition < 0:
            raise _PartitionError(ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID)

    def _state_record(self, key: SharePartitionKey, entry: KeyEntry, *, leader_epoch: int, start_offset: int,
                      delivery_complete_count: int,
                      batches: tuple[StateBatch, ...]) -> tuple[CoordinatorRecord, tuple[StateBatch, ...]]:
        """A ShareUpdate with just these batches, or a full snapshot when one is due; and
        the record's state batches. A ShareUpdate carries the combiner's StateBatch tuples as
        they are: they have the fields its encoder reads, and a redelivery write has hundreds.

        As in Kafka since KAFKA-19456, only InitializeShareGroupState changes the state epoch
        and only a read changes the leader epoch: a write's records keep the current ones
        (its caller passes the current leader epoch)."""
        cur = entry.state
        if entry.updates_since_snapshot >= self.records_per_snapshot:
            start = cur.start_offset if start_offset == -1 else start_offset
            state_batches = tuple(combine(cur.state_batches, batches, start))
            now = self._clock_ms()
            return _snapshot_record(key, SharePartitionState(
                snapshot_epoch=cur.snapshot_epoch + 1,
                state_epoch=cur.state_epoch,
                leader_epoch=leader_epoch,
                start_offset=start,
                delivery_complete_count=delivery_complete_count,
                state_batches=state_batches,
                create_timestamp=now,
                write_timestamp=now,
            )), state_batches
        batches = NormalBatches(combine((), batches, start_offset))  # write_state refused inverted ones
        return CoordinatorRecord(
            ShareUpdateKey(key.group_id, key.topic_id, key.partition),
            ShareUpdateValue(
                snapshot_epoch=cur.snapshot_epoch, leader_epoch=leader_epoch,
                start_offset=start_offset, delivery_complete_count=delivery_complete_count,
                state_batches=list(batches))), batches

    # ------------------------------------------------------------------ requests

    def initialize_state(self, request) -> tuple[list[CoordinatorRecord], object]:
        """InitializeShareGroupState: a fresh snapshot per partition (state epoch fenced)."""
        records: list[CoordinatorRecord] = []
        response = init_rsp.InitializeShareGroupStateResponse()
        if not request.group_id:
            return records, response
        overlay = _Overlay(self)
        for topic in request.topics:
            result = init_rsp.InitializeStateResult(topic.topic_id)
            for p in topic.partitions:
                key = SharePartitionKey(request.group_id, topic.topic_id, p.partition)
                try:
                    self._check_partition(p.partition)
                    entry = overlay.get(key)
                    if p.state_epoch != -1 and entry is not None and entry.state_epoch_fence is not None \
                            and entry.state_epoch_fence > p.state_epoch:  # -1: not fenced, as Kafka
                        raise _PartitionError(ErrorCode.FENCED_STATE_EPOCH, FENCED_STATE_EPOCH_MESSAGE)
                    self._check_topic(topic.topic_id, p.partition)
                except _PartitionError as e:
                    result.partitions.append(init_rsp.PartitionResult(p.partition, int(e.code), e.message))
                    continue
                now = self._clock_ms()
                state = SharePartitionState(
                    snapshot_epoch=0 if entry is None else entry.state.snapshot_epoch + 1,
                    state_epoch=p.state_epoch,
                    leader_epoch=UNINITIALIZED_EPOCH,
                    start_offset=p.start_offset,
                    delivery_complete_count=(UNINITIALIZED_DELIVERY_COMPLETE_COUNT
                                             if p.start_offset == UNINITIALIZED_START_OFFSET else 0),
                    state_batches=(),
                    create_timestamp=now, write_timestamp=now)
                overlay.record(key, _snapshot_record(key, state), records)
                result.partitions.append(init_rsp.PartitionResult(p.partition))
            response.results.append(result)
        return records, response

    def write_state(self, request, version: int = 1) -> tuple[list[CoordinatorRecord], object]:
        """WriteShareGroupState (v0 carries no delivery-complete count: it becomes -1)."""
        records: list[CoordinatorRecord] = []
        response = write_rsp.WriteShareGroupStateResponse()
        if not request.group_id:
            return records, response
        overlay = _Overlay(self)
        for topic in request.topics:
            result = write_rsp.WriteStateResult(topic.topic_id)
            for p in topic.partitions:
                key = SharePartitionKey(request.group_id, topic.topic_id, p.partition)
                try:
                    self._check_partition(p.partition)
                    entry = overlay.get(key)
                    if entry is None:
                        raise _PartitionError(ErrorCode.INVALID_REQUEST, WRITE_UNINITIALIZED_SHARE_PARTITION)
                    if p.leader_epoch != -1 and entry.leader_epoch_fence is not None \
                            and entry.leader_epoch_fence > p.leader_epoch:
                        raise _PartitionError(ErrorCode.FENCED_LEADER_EPOCH, FENCED_LEADER_EPOCH_MESSAGE)
                    if p.state_epoch != -1 and entry.state_epoch_fence is not None \
                            and entry.state_epoch_fence > p.state_epoch:
                        raise _PartitionError(ErrorCode.FENCED_STATE_EPOCH, FENCED_STATE_EPOCH_MESSAGE)
                    self._check_topic(topic.topic_id, p.partition)
                    batches = _batches(p.state_batches)
                    if type(batches) is not NormalBatches and any(b.first_offset > b.last_offset for b in batches):
                        raise _PartitionError(ErrorCode.INVALID_REQUEST, INVERTED_STATE_BATCH)
                except _PartitionError as e:
                    result.partitions.append(write_rsp.PartitionResult(p.partition, int(e.code), e.message))
                    continue
                dcc = p.delivery_complete_count if version >= 1 else UNINITIALIZED_DELIVERY_COMPLETE_COUNT
                record, record_batches = self._state_record(
                    key, entry, leader_epoch=entry.state.leader_epoch,
                    start_offset=p.start_offset, delivery_complete_count=dcc, batches=batches)
                overlay.record(key, record, records, record_batches)
                result.partitions.append(write_rsp.PartitionResult(p.partition))
            response.results.append(result)
        return records, response

    def read_state(self, request) -> tuple[list[CoordinatorRecord], object]:
        """ReadShareGroupState. A read with a newer leader epoch also records that epoch
        (Kafka's readStateAndMaybeUpdateLeaderEpoch), hence the records."""
        records: list[CoordinatorRecord] = []
        response = read_rsp.ReadShareGroupStateResponse()
        if not request.group_id:
            return records, response
        overlay = _Overlay(self)
        for topic in request.topics:
            result = read_rsp.ReadStateResult(topic.topic_id)
            for p in topic.partitions:
                key = SharePartitionKey(request.group_id, topic.topic_id, p.partition)
                try:
                    self._check_partition(p.partition)
                    entry = overlay.get(key)
                    if entry is None:
                        raise _PartitionError(ErrorCode.INVALID_REQUEST, READ_UNINITIALIZED_SHARE_PARTITION)
                    if p.leader_epoch != -1 and entry.leader_epoch_fence is not None \
                            and entry.leader_epoch_fence > p.leader_epoch:
                        raise _PartitionError(ErrorCode.FENCED_LEADER_EPOCH, FENCED_LEADER_EPOCH_MESSAGE)
                    self._check_topic(topic.topic_id, p.partition)
                except _PartitionError as e:
                    result.partitions.append(read_rsp.PartitionResult(p.partition, int(e.code), e.message))
                    continue
                st = entry.state
                result.partitions.append(read_rsp.PartitionResult(
                    p.partition, state_epoch=st.state_epoch, start_offset=st.start_offset,
                    state_batches=[read_rsp.StateBatch(*b) for b in st.state_batches]))
                if p.leader_epoch != -1 and entry.leader_epoch_fence != p.leader_epoch:
                    record, record_batches = self._state_record(
                        key, entry, leader_epoch=p.leader_epoch,
                        start_offset=st.start_offset, delivery_complete_count=st.delivery_complete_count,
                        batches=())
                    overlay.record(key, record, records, record_batches)
            response.results.append(result)
        return records, response

    def read_state_summary(self, request, version: int = 1):
        """ReadShareGroupStateSummary: epochs, start offset and (v1) delivery-complete count.
        State never initialised is no error: start offset -1, epochs 0, count -1."""
        response = summary_rsp.ReadShareGroupStateSummaryResponse()
        if not request.group_id:
            return response
        for topic in request.topics:
            result = summary_rsp.ReadStateSummaryResult(topic.topic_id)
            for p in topic.partitions:
                key = SharePartitionKey(request.group_id, topic.topic_id, p.partition)
                try:
                    self._check_partition(p.partition)
                    self._check_topic(topic.topic_id, p.partition)
                except _PartitionError as e:
                    result.partitions.append(summary_rsp.PartitionResult(p.partition, int(e.code), e.message))
                    continue
                st = self._summary(key)
                if st is None:
                    row = summary_rsp.PartitionResult(
                        p.partition, state_epoch=DEFAULT_STATE_EPOCH, leader_epoch=DEFAULT_LEADER_EPOCH,
                        start_offset=UNINITIALIZED_START_OFFSET,
                        delivery_complete_count=UNINITIALIZED_DELIVERY_COMPLETE_COUNT)
                else:
                    state_epoch, leader_epoch, start_offset, dcc = st
                    row = summary_rsp.PartitionResult(
                        p.partition, state_epoch=state_epoch, leader_epoch=leader_epoch,
                        start_offset=start_offset,
                        delivery_complete_count=(dcc if version >= 1
                                                 else UNINITIALIZED_DELIVERY_COMPLETE_COUNT))
                result.partitions.append(row)
            response.results.append(result)
        return response

    def delete_state(self, request) -> tuple[list[CoordinatorRecord], object]:
        """DeleteShareGroupState: a tombstone per existing key; absent keys succeed quietly."""
        records: list[CoordinatorRecord] = []
        response = delete_rsp.DeleteShareGroupStateResponse()
        if not request.group_id:
            return records, response
        overlay = _Overlay(self)
        for topic in request.topics:
            result = delete_rsp.DeleteStateResult(topic.topic_id)
            for p in topic.partitions:
                key = SharePartitionKey(request.group_id, topic.topic_id, p.partition)
                try:
                    self._check_partition(p.partition)
                    self._check_topic(topic.topic_id, p.partition)
                except _PartitionError as e:
                    result.partitions.append(delete_rsp.PartitionResult(p.partition, int(e.code), e.message))
                    continue
                if overlay.get(key) is not None:
                    overlay.record(key, self.tombstone(key), records)
                result.partitions.append(delete_rsp.PartitionResult(p.partition))
            response.results.append(result)
        return records, response

    def tombstones_for_topics(self, topic_ids: Iterable[UUID]) -> list[CoordinatorRecord]:
        """Tombstones for every key of deleted topics (Kafka's maybeCleanupShareState)."""
        gone = set(topic_ids)
        return [self.tombstone(k) for k in self.keys() if k.topic_id in gone]

    def snapshot_records(self, keys: Iterable[SharePartitionKey] | None = None) -> list[CoordinatorRecord]:
        """A fresh snapshot of every replayed key with updates since its last one (of ``keys``
        if given): what the coordinator writes before it stops, so that the next start-up
        reads one record per key. Like Kafka's cold-partition snapshots it bumps the snapshot
        epoch and the write timestamp; the state is unchanged. Pending keys are left as
        they are (their records are still in the log)."""
        now = self._clock_ms()
        out = []
        for key in (self._entries if keys is None else keys):
            e = self._entries.get(key)
            if e is None or e.updates_since_snapshot == 0:
                continue
            out.append(_resnapshot(key, e.state, now))
        return out

    def cold_snapshot_records(self, interval_ms: int) -> list[CoordinatorRecord]:
        """Kafka's ``snapshotColdPartitions``: a fresh snapshot of every key whose last one was
        written ``interval_ms`` ago or more, so that an idle key does not keep the records
        written after its snapshot from being pruned. None while every key's last snapshot
        is already such a one (create and write timestamps differ): the partition is quiet.
        Keys not replayed yet (a background task replays them after a load) wait a round."""
        if all(e.state.create_timestamp != e.state.write_timestamp for e in self._entries.values()):
            return []
        now = self._clock_ms()
        return [_resnapshot(key, e.state, now) for key, e in self._entries.items()
                if now - e.state.write_timestamp >= interval_ms]

    @staticmethod
    def tombstone(key: SharePartitionKey) -> CoordinatorRecord:
        return CoordinatorRecord(ShareSnapshotKey(key.group_id, key.topic_id, key.partition), None)
