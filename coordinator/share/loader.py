"""Loading a ``__share_group_state`` partition into its shard at start-up.

Replaying every record would decode and combine every state batch ever written, which in
Python costs tens of microseconds a record. The loader instead makes one pass over the
record *keys*: a key's latest ShareSnapshot replaces everything before it, so for each key
it keeps only the raw values from that snapshot on (a tombstone forgets the key). Nothing is
decoded in the pass; the shard replays a key's values when a request first needs its state
(``LoadedKey.records``), and answers a summary from the snapshot and the last updates'
fixed-size fields (``LoadedKey.summary``) without combining any batches.

A state checkpoint (``checkpoint``) may seed the pass with its result for the records below
some offset; the pass then reads only from there, and a key may start from the entry the
checkpoint holds (``LoadedKey.base``) instead of a snapshot.

The pass reads the segments from the log start offset with plain reads (the log was already
recovered and validated at start-up) and walks uncompressed batches inline; compressed
batches go through ``iter_records``, control batches are skipped, records of unknown types
are ignored as Kafka's loader does, and anything that does not parse fails the load.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING

from protocol.coordinator_records.share_snapshot_key import ShareSnapshotKey
from protocol.coordinator_records.share_snapshot_value import ShareSnapshotValue
from protocol.coordinator_records.share_update_key import ShareUpdateKey
from protocol.coordinator_records.share_update_value import ShareUpdateValue
from protocol.primitives import DecodeError
from protocol.records import CorruptRecordError, iter_records
from protocol.varint import VarintError, read_varint, read_varlong

from .shard import KeyEntry, SharePartitionKey

if TYPE_CHECKING:
    from broker.log import PartitionLog

    from .checkpoint import Checkpoint

__all__ = ["LoadError", "LoadedKey", "PartitionLoader", "decode_value"]

_BASE_AND_LENGTH = struct.Struct(">qi")
_INT32 = struct.Struct(">i")
_UPDATE_HEAD = struct.Struct(">hiiq")  # version, snapshot epoch, leader epoch, start offset
_HEADER_SIZE = 61
_MIN_BATCH_LENGTH = _HEADER_SIZE - 12
_SKIP = 0x27  # compression codec bits and the control flag
SNAPSHOT, UPDATE = 0, 1


class LoadError(Exception):
    """The partition holds something the coordinator cannot read; its load fails."""


def decode_value(cls, raw: bytes):
    """A coordinator record value (int16 version + struct) of class ``cls``."""
    if len(raw) < 2:
        raise DecodeError(f"{cls.__name__} shorter than its version")
    version = (raw[0] << 8) | raw[1]
    lo, hi = cls.VALID_VERSIONS
    if not lo <= version <= hi:
        raise DecodeError(f"{cls.__name__} has no version {version}")
    return cls.from_bytes(memoryview(raw)[2:], version)


class LoadedKey:
    """A key's records from its latest snapshot on, as raw values, not replayed yet.

    ``snapshot`` is that snapshot's value, or None when the key's records start with an
    update (after a tombstone) or with ``base``, the entry a state checkpoint holds for the
    records before; ``updates`` are the ShareUpdate values after it, in order. ``body`` is
    the key as the log holds it, without its record type.
    """

    __slots__ = ("_summary", "base", "body", "first_offset", "key", "snapshot", "updates")

    def __init__(self, key: SharePartitionKey, first_offset: int, snapshot: bytes | None, updates: list[bytes],
                 base: KeyEntry | None = None, body: bytes | None = None):
        self.key = key
        self.first_offset = first_offset
        self.snapshot = snapshot
        self.updates = updates
        self.base = base
        self.body = body
        self._summary: tuple[int, int, int, int] | None = None

    def records(self) -> Iterator[tuple]:
        g, t, p = self.key
        if self.snapshot is not None:
            yield ShareSnapshotKey(g, t, p), decode_value(ShareSnapshotValue, self.snapshot)
        update_key = ShareUpdateKey(g, t, p)
        for raw in self.updates:
            yield update_key, decode_value(ShareUpdateValue, raw)

    def summary(self) -> tuple[int, int, int, int]:
        """What replaying the records would leave in the fields a summary reports: an update
        changes the leader epoch and start offset unless it carries -1, the delivery-complete
        count always, the state epoch never."""
        if self._summary is not None:
            return self._summary
        updates = self.updates
        if self.base is not None:
            st = self.base.state
            state_epoch, leader, start, dcc = st.state_epoch, st.leader_epoch, st.start_offset, st.delivery_complete_count
            rest = updates
        elif self.snapshot is not None:
            base = decode_value(ShareSnapshotValue, self.snapshot)
            state_epoch, leader, start, dcc = (base.state_epoch, base.leader_epoch, base.start_offset,
                                               base.delivery_complete_count)
            rest = updates
        else:  # the first update creates the state as it is, -1s included
            base = decode_value(ShareUpdateValue, updates[0])
            state_epoch, leader, start, dcc = 0, base.leader_epoch, base.start_offset, base.delivery_complete_count
            rest = updates[1:]
        if rest:
            dcc = decode_value(ShareUpdateValue, rest[-1]).delivery_complete_count
            found_leader = found_start = False
            for raw in reversed(rest):
                _, _, le, so = _UPDATE_HEAD.unpack_from(raw)
                if not found_leader and le != -1:
                    leader, found_leader = le, True
                if not found_start and so != -1:
                    start, found_start = so, True
                if found_leader and found_start:
                    break
        self._summary = (state_epoch, leader, start, dcc)
        return self._summary


class PartitionLoader:
    """Reads one state partition, a buffer at a time (``step``), into ``LoadedKey``s.

    Call ``step()`` until it returns False (the event loop may run between calls), then
    ``result()``. With ``seed`` (a checkpoint validated against ``lg``) the pass starts at its
    offset from its keys; the caller owns the fallback to a full pass if ``result`` fails.
    """

    def __init__(self, lg: PartitionLog, buffer_size: int = 5 << 20, seed: Checkpoint | None = None) -> None:
        self.lg = lg
        self.buffer_size = max(buffer_size, _HEADER_SIZE)
        self.seed_offset = None if seed is None else seed.offset
        self.start_offset = lg.start_offset if seed is None else seed.offset
        self.records = 0  # records read from the start offset on
        # key bytes without their 2-byte type ->
        #   [first offset, snapshot value | checkpointed KeyEntry | None, *update values]
        self._keys: dict[bytes, list] = {} if seed is None else seed.keys
        self._chunks = self._read_chunks()

    def _read_chunks(self) -> Iterator[None]:
        start = self.start_offset
        for seg in self.lg.segments:
            if seg.next_offset <= start:
                continue
            pos = seg.index.lookup(start - seg.base_offset) if start > seg.base_offset else 0
            size = seg.size
            while pos < size:
                want = min(self.buffer_size, size - pos)
                buf = seg.data.read(pos, want)
                done = self._scan(buf, 0, len(buf), start)
                if done == 0:  # one batch larger than the buffer: read it whole
                    if len(buf) < 12:
                        raise LoadError(f"{len(buf)} stray bytes at position {pos} of segment {seg.base_offset}")
                    whole = 12 + _BASE_AND_LENGTH.unpack_from(buf, 0)[1]
                    if whole <= len(buf) or pos + whole > size:
                        raise LoadError(f"incomplete batch at position {pos} of segment {seg.base_offset}")
                    buf = seg.data.read(pos, whole)
                    done = self._scan(buf, 0, len(buf), start)
                    if done == 0:
                        raise LoadError(f"unreadable batch at position {pos} of segment {seg.base_offset}")
                pos += done
                yield

    def step(self) -> bool:
        """Read and scan one buffer; False once the partition is read."""
        try:
            next(self._chunks)
            return True
        except StopIteration:
            return False

    def result(self) -> tuple[dict[SharePartitionKey, LoadedKey], int]:
        """The loaded keys and the offset of the last record read (-1 if none)."""
        out: dict[SharePartitionKey, LoadedKey] = {}
        log_start = self.lg.start_offset
        for body, entry in self._keys.items():
            try:
                k = ShareSnapshotKey.from_bytes(body, 0)
            except DecodeError as e:
                raise LoadError(f"unreadable share coordinator key {body[:64]!r}: {e}") from None
            key = SharePartitionKey(k.group_id, k.topic_id, k.partition)
            first, slot = entry[0], entry[1]
            if first < log_start:  # only from a seed: the log no longer holds what it read
                raise LoadError(f"{key} needs offset {first}, below the log start offset {log_start}")
            if isinstance(slot, KeyEntry):
                out[key] = LoadedKey(key, first, None, entry[2:], slot, body)
            else:
                out[key] = LoadedKey(key, first, slot, entry[2:], None, body)
        return out, self.lg.end_offset - 1

    # --- the pass -------------------------------------------------------------------------------

    def _scan(self, buf: bytes, pos: int, end: int, start_offset: int) -> int:
        """Consume the whole batches in ``buf[pos:end]``; returns the bytes consumed."""
        first = pos
        keys = self._keys
        get = keys.get
        unpack_bl = _BASE_AND_LENGTH.unpack_from
        unpack_i = _INT32.unpack_from
        n_records = 0
        try:
            while end - pos >= _HEADER_SIZE:
                base, length = unpack_bl(buf, pos)
                if length < _MIN_BATCH_LENGTH or buf[pos + 16] != 2:
                    raise LoadError(f"not a v2 record batch at offset {base}")
                batch_end = pos + 12 + length
                if batch_end > end:
                    break
                attributes = buf[pos + 22]
                if attributes & _SKIP:
                    if not attributes & 0x20:  # compressed: the general decoder
                        for r in iter_records(buf, pos):
                            if r.offset >= start_offset:
                                n_records += 1
                                self._add(r.offset, r.key, r.value)
                    pos = batch_end
                    continue
                count = unpack_i(buf, pos + 57)[0]
                q = pos + _HEADER_SIZE
                while count > 0:
                    count -= 1
                    b = buf[q]  # record length (zig-zag varint; one or two bytes inline)
                    if b < 0x80:
                        record_end = q + 1 + (b >> 1)
                        q += 2  # and the attributes byte
                    elif buf[q + 1] < 0x80 and not b & 1:
                        record_end = q + 2 + (((b & 0x7F) | (buf[q + 1] << 7)) >> 1)
                        q += 3
                    else:
                        rl, q = read_varint(buf, q)
                        record_end = q + rl
                        q += 1
                    if buf[q] < 0x80:  # timestamp delta
                        q += 1
                    else:
                        q = read_varlong(buf, q)[1]
                    b = buf[q]  # offset delta
                    if b < 0x80:
                        offset = base + (b >> 1)
                        q += 1
                    else:
                        d, q = read_varint(buf, q)
                        offset = base + d
                    b = buf[q]  # key length
                    if b < 0x80 and not b & 1:
                        kl = b >> 1
                        q += 1
                    else:
                        kl, q = read_varint(buf, q)
                    if offset < start_offset:
                        q = record_end
                        continue
                    n_records += 1
                    if kl < 2 or buf[q]:
                        if kl < 2:
                            raise LoadError(f"record at offset {offset} has no coordinator key")
                        q = record_end  # not a share coordinator record type: ignored
                        continue
                    kind = buf[q + 1]
                    body = buf[q + 2:q + kl]
                    q += kl
                    b = buf[q]  # value length
                    if b < 0x80:
                        value = None if b & 1 else buf[q + 1:q + 1 + (b >> 1)]
                    elif buf[q + 1] < 0x80 and not b & 1:
                        value = buf[q + 2:q + 2 + (((b & 0x7F) | (buf[q + 1] << 7)) >> 1)]
                    else:
                        vl, q = read_varint(buf, q)
                        value = buf[q:q + vl] if vl >= 0 else None
                    if kind == UPDATE and value is not None:
                        entry = get(body)
                        if entry is None:
                            keys[body] = [offset, None, value]
                        else:
                            entry.append(value)
                    elif kind == SNAPSHOT and value is not None:
                        keys[body] = [offset, value]
                    elif kind <= UPDATE:  # a tombstone deletes the key, as replay does
                        keys.pop(body, None)
                    q = record_end
                if q != batch_end:
                    raise LoadError(f"records of the batch at offset {base} do not fill it")
                pos = batch_end
        except (IndexError, VarintError, CorruptRecordError) as e:
            raise LoadError(f"unreadable batch at position {pos}: {e}") from None
        self.records += n_records
        return pos - first

    def _add(self, offset: int, key, value) -> None:
        """The slow path's version of the inline code in ``_scan``."""
        if key is None or len(key) < 2:
            raise LoadError(f"record at offset {offset} has no coordinator key")
        if key[0] or key[1] > UPDATE:
            return
        body = bytes(key[2:])
        value = None if value is None else bytes(value)
        if value is None:
            self._keys.pop(body, None)
        elif key[1] == SNAPSHOT:
            self._keys[body] = [offset, value]
        else:
            entry = self._keys.get(body)
            if entry is None:
                self._keys[body] = [offset, None, value]
            else:
                entry.append(value)
