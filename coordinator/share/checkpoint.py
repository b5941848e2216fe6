"""State checkpoints: what loading a ``__share_group_state`` partition up to an offset built.

Loading reads the partition from its log start offset; after a crash (no shutdown snapshots)
that is every record since the last prune. A checkpoint lets the loader start further on: it
holds, for an offset X of one partition, the loader's result for the records below X, and the
load scans only the records from X on (``PartitionLoader(..., seed=...)``). It is kshare's own
file, beside the log as Kafka keeps ``leader-epoch-checkpoint`` and ``partition.metadata``;
the records in the log are untouched and stay the only source of truth.

- **Content.** Per key: its raw key bytes (as in the log), the offset of its oldest needed
  record, and what a load would hold for it: either the entry replaying its records built
  (state, fences as a load rebuilds them, updates since the snapshot) or, for a key not
  replayed yet, its raw snapshot and update values as read from the log.
- **Written** (``Checkpointer``) every ``kshare.share.coordinator.state.checkpoint.interval.ms``
  for each partition a load would otherwise read at least max(``...checkpoint.min.records``,
  its key count) records of (so the O(keys) cost is paid at most once per that many
  records), when pruning moved the log start past the checkpoint, and at a graceful stop.
  The shard's view is taken at a point where it has replayed exactly the log up to its end X,
  the log is fsynced up to X, then the file is written to a temporary file, fsynced and
  renamed over the old one (the directory is fsynced too). The store then records its
  recovery points, so that recovery after a crash also validates only what came after them.
- **Used** only if it parses, its checksum holds, it names this partition and topic id, X is
  within [log start, log end] and the batch ending at X - 1 still has the CRC it had then (so
  a log cut back by recovery and written again is never mistaken for the old one). After the
  tail is scanned, a key whose oldest needed record lies below the log start invalidates it
  too (a full scan would see a different history). Otherwise it is deleted with a warning and
  the partition is read from its log start, exactly as without checkpoints.
- **Deleted** with the partition's directory when the topic is deleted; a topic created again
  has a new id and a new directory.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from crc32c import crc32c

from broker.log.checkpoint import fsync_dir, write_atomically
from protocol.coordinator_records.share_snapshot_key import ShareSnapshotKey

from .combiner import StateBatch
from .loader import PartitionLoader
from .shard import KeyEntry, SharePartitionState

if TYPE_CHECKING:
    from broker.log import PartitionLog

    from .journal import LogJournal
    from .service import ShareCoordinatorService
    from .shard import LoadView

__all__ = ["CHECKPOINT_FILE", "Checkpoint", "CheckpointError", "Checkpointer", "decode", "encode", "load_partition",
           "read_checkpoint"]

log = logging.getLogger("kshare.share_coordinator")

CHECKPOINT_FILE = "kshare-share-state-checkpoint"
MAGIC = b"KSSC"
VERSION = 0
ENCODE_SLICE = 2000  # keys encoded between two turns of the event loop

_HEAD = struct.Struct(">4shI")  # magic, version, CRC-32C of everything after it
_META = struct.Struct(">16siqqIi")  # topic id, partition, offset, last batch base, its CRC, keys
_KEY = struct.Struct(">Hq")  # key bytes length, first needed offset
_SLOT = struct.Struct(">BI")  # 0 nothing | 1 raw snapshot value | 2 entry; update count
_LEN = struct.Struct(">I")
_ENTRY = struct.Struct(">iiiqiqqiiBiI")  # state fields, fences, None flags, updates since, batches
_BATCH = struct.Struct(">qqbh")
_NO_SLOT, _RAW_SNAPSHOT, _ENTRY_SLOT = 0, 1, 2
_NO_LEADER_FENCE, _NO_STATE_FENCE = 1, 2


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used; the partition is read from its log start."""


class Checkpoint:
    """The loader's result for the records of ``topic_id``/``partition`` below ``offset``.

    ``keys`` maps raw key bytes (a ShareSnapshot/ShareUpdate key without its type) to the
    loader's list ``[first offset, slot, *raw update values]``, slot being a raw snapshot
    value, a ``KeyEntry`` or None. ``last_batch`` is (base offset, CRC) of the batch that ends
    at ``offset - 1``, or None if there was none at or above the log start then.
    """

    __slots__ = ("keys", "last_batch", "offset", "partition", "topic_id")

    def __init__(self, topic_id: uuid.UUID, partition: int, offset: int,
                 last_batch: tuple[int, int] | None, keys: dict[bytes, list]) -> None:
        self.topic_id = topic_id
        self.partition = partition
        self.offset = offset
        self.last_batch = last_batch
        self.keys = keys


# --- the file format -------------------------------------------------------------------------------


def _encode_entry(out: bytearray, e: KeyEntry) -> None:
    st = e.state
    flags = (_NO_LEADER_FENCE if e.leader_epoch_fence is None else 0) | \
            (_NO_STATE_FENCE if e.state_epoch_fence is None else 0)
    out += _ENTRY.pack(st.snapshot_epoch, st.state_epoch, st.leader_epoch, st.start_offset,
                       st.delivery_complete_count, st.create_timestamp, st.write_timestamp,
                       e.leader_epoch_fence or 0, e.state_epoch_fence or 0, flags,
                       e.updates_since_snapshot, len(st.state_batches))
    for b in st.state_batches:
        out += _BATCH.pack(*b)


def _decode_entry(buf: bytes, pos: int) -> tuple[KeyEntry, int]:
    (snap, state_epoch, leader, start, dcc, created, written, lf, sf, flags, since,
     n) = _ENTRY.unpack_from(buf, pos)
    pos += _ENTRY.size
    batches = []
    for _ in range(n):
        batches.append(StateBatch(*_BATCH.unpack_from(buf, pos)))
        pos += _BATCH.size
    state = SharePartitionState(snap, state_epoch, leader, start, dcc, tuple(batches), created, written)
    return KeyEntry(state, None if flags & _NO_LEADER_FENCE else lf, None if flags & _NO_STATE_FENCE else sf,
                    since), pos


def encode_key_entry(out: bytearray, body: bytes, first_offset: int, slot, updates: Iterable[bytes]) -> None:
    """Append one key: ``slot`` is a raw snapshot value, a ``KeyEntry`` or None."""
    updates = list(updates)
    out += _KEY.pack(len(body), first_offset)
    out += body
    if slot is None:
        out += _SLOT.pack(_NO_SLOT, len(updates))
    elif isinstance(slot, KeyEntry):
        out += _SLOT.pack(_ENTRY_SLOT, len(updates))
        _encode_entry(out, slot)
    else:
        out += _SLOT.pack(_RAW_SNAPSHOT, len(updates))
        out += _LEN.pack(len(slot))
        out += slot
    for raw in updates:
        out += _LEN.pack(len(raw))
        out += raw


def frame(topic_id: uuid.UUID, partition: int, offset: int, last_batch: tuple[int, int] | None,
          count: int, body: bytes | bytearray) -> bytes:
    """The whole file: header and checksum around ``count`` keys already encoded in ``body``."""
    base, crc = last_batch if last_batch is not None else (-1, 0)
    payload = _META.pack(topic_id.bytes, partition, offset, base, crc, count) + body
    return _HEAD.pack(MAGIC, VERSION, crc32c(payload)) + payload


def encode(ckpt: Checkpoint) -> bytes:
    out = bytearray()
    for body, entry in ckpt.keys.items():
        encode_key_entry(out, body, entry[0], entry[1], entry[2:])
    return frame(ckpt.topic_id, ckpt.partition, ckpt.offset, ckpt.last_batch, len(ckpt.keys), out)


def decode(data: bytes) -> Checkpoint:
    if len(data) < _HEAD.size + _META.size:
        raise CheckpointError(f"{len(data)} bytes, too short")
    magic, version, crc = _HEAD.unpack_from(data, 0)
    if magic != MAGIC:
        raise CheckpointError("not a share state checkpoint")
    if version != VERSION:
        raise CheckpointError(f"unknown version {version}")
    payload = memoryview(data)[_HEAD.size:]
    if crc32c(payload) != crc:
        raise CheckpointError("checksum mismatch")
    tid, partition, offset, base, batch_crc, count = _META.unpack_from(data, _HEAD.size)
    pos = _HEAD.size + _META.size
    keys: dict[bytes, list] = {}
    try:
        for _ in range(count):
            length, first = _KEY.unpack_from(data, pos)
            pos += _KEY.size
            body = data[pos:pos + length]
            pos += length
            kind, n = _SLOT.unpack_from(data, pos)
            pos += _SLOT.size
            if kind == _NO_SLOT:
                slot = None
            elif kind == _ENTRY_SLOT:
                slot, pos = _decode_entry(data, pos)
            elif kind == _RAW_SNAPSHOT:
                (size,) = _LEN.unpack_from(data, pos)
                slot = data[pos + 4:pos + 4 + size]
                pos += 4 + size
            else:
                raise CheckpointError(f"unknown slot kind {kind}")
            entry = [first, slot]
            for _ in range(n):
                (size,) = _LEN.unpack_from(data, pos)
                entry.append(data[pos + 4:pos + 4 + size])
                pos += 4 + size
            if len(body) != length or pos > len(data):
                raise CheckpointError("truncated key")
            keys[body] = entry
    except struct.error as e:
        raise CheckpointError(f"truncated: {e}") from None
    if pos != len(data):
        raise CheckpointError(f"{len(data) - pos} bytes after the last key")
    return Checkpoint(uuid.UUID(bytes=tid), partition, offset, None if base < 0 else (base, batch_crc), keys)


# --- files beside the log ------------------------------------------------------------------------


def checkpoint_path(lg: PartitionLog) -> str | None:
    directory = getattr(lg, "directory", None)
    return None if directory is None else os.path.join(directory, CHECKPOINT_FILE)


def last_batch(lg: PartitionLog, offset: int) -> tuple[int, int] | None:
    """(base offset, CRC) of the batch ending at ``offset - 1``; None if it is not readable
    (below the log start, or no batch ends there)."""
    if offset <= lg.start_offset or offset > lg.end_offset:
        return None
    rr = lg.read(offset - 1, 1)
    if not rr.batches or rr.batches[0].last_offset != offset - 1:
        return None
    h = rr.batches[0].header
    return h.base_offset, h.crc


def remove_checkpoint(lg: PartitionLog) -> None:
    path = checkpoint_path(lg)
    if path is None:
        return
    try:
        os.unlink(path)
        fsync_dir(os.path.dirname(path))
    except FileNotFoundError:
        pass
    except OSError as e:
        log.warning("could not delete %s: %s", path, e)


def validate(ckpt: Checkpoint, lg: PartitionLog) -> None:
    """Raise CheckpointError unless ``ckpt`` may seed a load of ``lg``."""
    name = f"{lg.topic}-{lg.partition}"
    if ckpt.partition != lg.partition or lg.topic_id is None or ckpt.topic_id != lg.topic_id:
        raise CheckpointError(f"it belongs to partition {ckpt.partition} of topic id {ckpt.topic_id}, "
                              f"not {name} of topic id {lg.topic_id}")
    if ckpt.offset > lg.end_offset:
        raise CheckpointError(f"its offset {ckpt.offset} is past the log end offset {lg.end_offset}")
    if ckpt.offset < lg.start_offset:
        raise CheckpointError(f"its offset {ckpt.offset} is below the log start offset {lg.start_offset}")
    if ckpt.offset > lg.start_offset and last_batch(lg, ckpt.offset) != ckpt.last_batch:
        raise CheckpointError(f"the log below its offset {ckpt.offset} is not the one it was taken from")


def read_checkpoint(lg: PartitionLog) -> Checkpoint | None:
    """The partition's checkpoint if it may seed the load; None if there is none or it is not
    usable (then it is deleted, with a warning)."""
    path = checkpoint_path(lg)
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("ignoring %s: %s; reading %s-%d from its log start", path, e, lg.topic, lg.partition)
        return None
    try:
        ckpt = decode(data)
        validate(ckpt, lg)
    except CheckpointError as e:
        log.warning("ignoring %s: %s; reading %s-%d from its log start", path, e, lg.topic, lg.partition)
        remove_checkpoint(lg)
        return None
    return ckpt


async def load_partition(lg: PartitionLog, buffer_size: int = 5 << 20) -> tuple[PartitionLoader, tuple]:
    """A finished pass over the partition and its result (``PartitionLoader.result``), from
    the partition's checkpoint if it has a usable one; the event loop runs between buffers.

    A pass seeded by a checkpoint that fails (e.g. a key would need records below the log
    start) is redone from the log start; only a failure of that one is the partition's."""
    seed = read_checkpoint(lg)
    if seed is not None:
        loader = PartitionLoader(lg, buffer_size, seed)
        try:
            while loader.step():
                await asyncio.sleep(0)
            return loader, loader.result()
        except Exception as e:
            log.warning("ignoring the checkpoint at offset %d: %s; reading %s-%d from its log start",
                        seed.offset, e, lg.topic, lg.partition)
            remove_checkpoint(lg)
    loader = PartitionLoader(lg, buffer_size)
    while loader.step():
        await asyncio.sleep(0)
    return loader, loader.result()


# --- writing -------------------------------------------------------------------------------------


def _body_of(key) -> bytes:
    return ShareSnapshotKey(key.group_id, key.topic_id, key.partition).to_bytes(0)


async def encode_view(view: LoadView, slice_size: int = ENCODE_SLICE) -> tuple[int, bytearray]:
    """Encode a shard's ``LoadView`` a slice of keys at a time; returns (keys, bytes)."""
    out = bytearray()
    n = 0
    for key, first, item in view.items():
        if isinstance(item, KeyEntry):
            encode_key_entry(out, _body_of(key), first, item, ())
        else:  # a pending key: what the loader read (or a checkpoint's entry) and the updates after
            slot = item.base if item.base is not None else item.snapshot
            encode_key_entry(out, getattr(item, "body", None) or _body_of(key), first, slot, item.updates)
        n += 1
        if n % slice_size == 0:
            await asyncio.sleep(0)
    return n, out


class _Origin:
    """Where a partition's shard was loaded: it is the log's image as long as every record
    appended since came from the coordinator's journal."""

    __slots__ = ("appended", "end", "lg", "written")

    def __init__(self, lg: PartitionLog, appended: int, written: int | None) -> None:
        self.lg = lg
        self.end = lg.end_offset
        self.appended = appended
        self.written = written  # offset of the checkpoint on disk, None if none


class Checkpointer:
    """Writes the state checkpoints of the partitions a coordinator serves."""

    def __init__(self, service: ShareCoordinatorService, journal: LogJournal,
                 get_log: Callable[[int], PartitionLog | None], *, min_records: int = 1000,
                 logs_flushed: Callable[[], Awaitable[None]] | None = None) -> None:
        """``logs_flushed``: called after a round that flushed logs for its checkpoints (the
        store records the new recovery points, so that recovery after a crash validates only
        what came after them, as the load reads only what came after the checkpoints)."""
        self.service = service
        self.journal = journal
        self.get_log = get_log
        self.min_records = min_records
        self.logs_flushed = logs_flushed
        self._origins: dict[int, _Origin] = {}
        self._io: asyncio.Future | None = None  # the file write running in a thread
        self.written = 0  # checkpoints written (tests and logs)

    def loaded(self, partition: int, lg: PartitionLog, checkpoint_offset: int | None) -> None:
        """The partition's shard was just loaded from ``lg`` (seeded at ``checkpoint_offset``)."""
        self._origins[partition] = _Origin(lg, self.journal.appended.get(partition, 0), checkpoint_offset)

    def due(self, partition: int) -> bool:
        origin = self._origins.get(partition)
        if origin is None or checkpoint_path(origin.lg) is None or not self.service.serving(partition):
            return False
        lg = origin.lg
        start, end, written = lg.start_offset, lg.end_offset, origin.written
        if written is not None and written == end:
            return False
        if written is not None and written < start:  # pruned past it: useless from now on
            return True
        shard = self.service.shards.get(partition)
        keys = shard.key_count() if shard is not None else 0
        return end - max(start, -1 if written is None else written) >= max(self.min_records, keys)

    async def run_once(self) -> int:
        """Checkpoint every partition that is due; returns how many were written."""
        n = 0
        for p in sorted(self._origins):
            origin = self._origins.get(p)
            if origin is None or not self.due(p):
                continue
            try:
                if await self.checkpoint(p):
                    n += 1
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("could not checkpoint %s-%d: %r", origin.lg.topic, p, e)
        if n and self.logs_flushed is not None:
            try:
                await self.logs_flushed()
            except Exception as e:
                log.warning("could not record the recovery points: %r", e)
        return n

    async def checkpoint(self, partition: int) -> bool:
        """Write the partition's checkpoint now; False if it cannot be (the shard is not the
        log's image, or the log went away)."""
        origin = self._origins.get(partition)
        shard = self.service.shards.get(partition)
        if origin is None or shard is None or not self.service.serving(partition):
            return False
        lg = origin.lg
        path = checkpoint_path(lg)
        if path is None or lg.closed or self.get_log(partition) is not lg or lg.topic_id is None:
            return False
        # The view, the offset and the batch it ends with: taken together, with no await between.
        view = shard.load_view()
        end = lg.end_offset
        foreign = (end - origin.end) - (self.journal.appended.get(partition, 0) - origin.appended)
        if foreign or view.last_offset != end - 1:
            log.warning("%s-%d holds records the share coordinator did not write; no state checkpoints "
                        "until it is loaded again", lg.topic, partition)
            self._origins.pop(partition, None)
            return False
        if origin.written == end:
            return False
        last = last_batch(lg, end)
        topic_id = lg.topic_id
        t0 = time.monotonic()
        await lg.flush(end)  # the records the checkpoint covers are on disk before it is
        count, body = await encode_view(view)
        content = frame(topic_id, partition, end, last, count, body)
        if self.get_log(partition) is not lg or lg.closed:
            return False
        await self._write(path, content)
        if self._origins.get(partition) is origin and (origin.written is None or end > origin.written):
            origin.written = end
        self.written += 1
        log.debug("checkpointed %s-%d at offset %d: %d key(s), %d bytes in %.3f s",
                  lg.topic, partition, end, count, len(content), time.monotonic() - t0)
        return True

    async def _write(self, path: str, content: bytes) -> None:
        await self.idle()

        def job() -> None:
            write_atomically(path, content, fsync=True)
            fsync_dir(os.path.dirname(path))

        self._io = asyncio.get_running_loop().run_in_executor(None, job)
        await asyncio.shield(self._io)

    async def idle(self) -> None:
        """Wait for a file write still running in its thread (it is never interrupted)."""
        io = self._io
        if io is not None and not io.done():
            try:
                await asyncio.shield(io)
            except Exception as e:  # its caller has logged it
                log.debug("checkpoint write failed: %r", e)
