"""``__share_group_state`` records as typed rows, and back into the share coordinator's records.

Decoding is ``protocol.coordinator_serde``'s: the record key's int16 type picks the
ShareSnapshot / ShareUpdate classes, the value's int16 version picks the generated decoder.
A state partition repeats the same few keys over and over, so a key's bytes are decoded once
and remembered; every value is decoded by its generated class.

``to_record`` turns a row back into the ``ShareSnapshotKey/Value`` or ``ShareUpdateKey/Value``
objects the coordinator wrote, so the fold replays exactly what ``ShareCoordinatorShard.replay``
replays at load time (a round trip through the row is lossless: the tests re-encode it).

Rows are built column by column into Arrow record batches (the Python data source hands Arrow
to Spark without a per-row conversion).
"""

from __future__ import annotations

import struct
from typing import Any, Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
from crc32c import crc32c
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    ByteType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from protocol import coordinator_serde
from protocol.coordinator_records.share_snapshot_key import ShareSnapshotKey
from protocol.coordinator_records.share_snapshot_value import ShareSnapshotValue
from protocol.coordinator_records.share_snapshot_value import StateBatch as SnapshotBatch
from protocol.coordinator_records.share_update_key import ShareUpdateKey
from protocol.coordinator_records.share_update_value import ShareUpdateValue
from protocol.coordinator_records.share_update_value import StateBatch as UpdateBatch
from protocol.primitives import DecodeError
from protocol.records import iter_records, walk_headers
from protocol.uuids import uuid_from_str, uuid_to_str

__all__ = [
    "SNAPSHOT", "UPDATE", "KEY_COLUMNS", "STATE_BATCH_TYPE", "STATE_SCHEMA", "STATE_ARROW_SCHEMA",
    "StateRowBuilder", "to_record",
]

SNAPSHOT = "ShareSnapshot"
UPDATE = "ShareUpdate"
_TYPE_NAMES = {ShareSnapshotKey: SNAPSHOT, ShareUpdateKey: UPDATE}

# A share-partition, as the share coordinator keys its state (plus the state partition it lives in).
KEY_COLUMNS = ["state_partition", "group_id", "topic_id", "partition"]

STATE_BATCH_TYPE = StructType([
    StructField("first_offset", LongType()),
    StructField("last_offset", LongType()),
    StructField("delivery_state", ByteType()),
    StructField("delivery_count", ShortType()),
])

STATE_SCHEMA = StructType([
    StructField("state_partition", IntegerType()),   # partition of the state topic
    StructField("offset", LongType()),               # offset of the record in it
    StructField("timestamp", TimestampType()),       # the record's timestamp
    StructField("record_type", StringType()),        # ShareSnapshot or ShareUpdate
    StructField("tombstone", BooleanType()),         # a null value: the state was deleted
    StructField("group_id", StringType()),
    StructField("topic_id", StringType()),           # Kafka's base64url form
    StructField("partition", IntegerType()),
    StructField("snapshot_epoch", IntegerType()),
    StructField("state_epoch", IntegerType()),       # snapshots only
    StructField("leader_epoch", IntegerType()),
    StructField("start_offset", LongType()),
    StructField("delivery_complete_count", IntegerType()),  # -1: not written (unknown)
    StructField("create_timestamp", LongType()),     # snapshots only
    StructField("write_timestamp", LongType()),      # snapshots only
    StructField("state_batches", ArrayType(STATE_BATCH_TYPE)),
])

STATE_ARROW_SCHEMA = to_arrow_schema(STATE_SCHEMA, timezone="UTC")
_BATCH_LIST_TYPE = STATE_ARROW_SCHEMA.field("state_batches").type
_BATCH_STRUCT_TYPE = _BATCH_LIST_TYPE.value_type

_SHARE_STATE_TYPES = coordinator_serde.record_types(coordinator_serde.SHARE_GROUP_STATE_TOPIC)


class StateRowBuilder:
    """Accumulates decoded state records as columns; ``take()`` returns them as one batch.

    Records whose key type ``__share_group_state`` does not have are skipped and counted
    (Kafka's loader ignores them too); records that do not decode raise ``DecodeError``.
    """

    def __init__(self) -> None:
        self._keys: dict[bytes, tuple | None] = {}
        self.skipped = 0
        self._fast = _FastDecoder(self)
        self.n = 0
        self._pieces: list[pa.RecordBatch] = []  # rows decoded column-wise, in order before the lists
        self._reset_lists()

    def _reset_lists(self) -> None:
        self._listed = 0  # rows in the column lists
        self._cols: dict[str, list] = {f.name: [] for f in STATE_SCHEMA.fields if f.name != "state_batches"}
        self._batch_offsets = [0]
        self._first: list[int] = []
        self._last: list[int] = []
        self._state: list[int] = []
        self._count: list[int] = []

    def _key(self, raw: bytes) -> tuple | None:
        """(type name, group, topic id text, partition, value class), or None for another type."""
        try:
            key, _ = coordinator_serde.decode(raw, None)
        except coordinator_serde.UnknownRecordTypeError:
            info = None
        else:
            record_type = (raw[0] << 8) | raw[1]
            info = (_TYPE_NAMES[type(key)], key.group_id, uuid_to_str(key.topic_id), key.partition,
                    _SHARE_STATE_TYPES[record_type][1])
        self._keys[bytes(raw)] = info
        return info

    def add(self, state_partition: int, records: Iterable) -> None:
        """Append records (``protocol.records.Record``: offset, timestamp, key, value)."""
        c = self._cols
        sp, off, ts, rt, tomb = c["state_partition"], c["offset"], c["timestamp"], c["record_type"], c["tombstone"]
        grp, tid, part = c["group_id"], c["topic_id"], c["partition"]
        se, ste, le, so, dcc = (c["snapshot_epoch"], c["state_epoch"], c["leader_epoch"], c["start_offset"],
                                c["delivery_complete_count"])
        cts, wts = c["create_timestamp"], c["write_timestamp"]
        bo, first, last, state, count = self._batch_offsets, self._first, self._last, self._state, self._count
        keys = self._keys
        n = 0
        for rec in records:
            raw_key = rec.key
            if raw_key is None:
                raise DecodeError(f"state record at offset {rec.offset} has no key")
            info = keys.get(raw_key, False)
            if info is False:
                info = self._key(raw_key)
            if info is None:
                self.skipped += 1
                continue
            type_name, group_id, topic_id, partition, value_cls = info
            value = rec.value
            sp.append(state_partition)
            off.append(rec.offset)
            ts.append(rec.timestamp * 1000)
            rt.append(type_name)
            grp.append(group_id)
            tid.append(topic_id)
            part.append(partition)
            n += 1
            if value is None:
                tomb.append(True)
                se.append(None)
                ste.append(None)
                le.append(None)
                so.append(None)
                dcc.append(None)
                cts.append(None)
                wts.append(None)
                bo.append(len(first))
                continue
            if len(value) < 2:
                raise DecodeError(f"state record at offset {rec.offset}: value shorter than its version")
            try:
                v, end = value_cls.decode(value, (value[0] << 8) | value[1], 2)
            except (DecodeError, ValueError) as e:
                raise DecodeError(f"state record at offset {rec.offset}: {e}") from None
            if end != len(value):
                raise DecodeError(f"state record at offset {rec.offset}: {len(value) - end} trailing bytes")
            tomb.append(False)
            se.append(v.snapshot_epoch)
            le.append(v.leader_epoch)
            so.append(v.start_offset)
            dcc.append(v.delivery_complete_count)
            if type_name == SNAPSHOT:
                ste.append(v.state_epoch)
                cts.append(v.create_timestamp)
                wts.append(v.write_timestamp)
            else:
                ste.append(None)
                cts.append(None)
                wts.append(None)
            for b in v.state_batches:
                first.append(b.first_offset)
                last.append(b.last_offset)
                state.append(b.delivery_state)
                count.append(b.delivery_count)
            bo.append(len(first))
        self.n += n
        self._listed += n

    def add_raw(self, state_partition: int, buf: bytes, pos: int, stop: int, offset: int, end: int,
                starts: list[int] | None = None) -> None:
        """Append the records of the whole batches in ``buf[pos:stop]`` (as fetched; ``starts``:
        their positions, if known) that lie in ``[offset, end)``, walking them as ``kafka_io.Cluster.read_range`` does (control
        batches and batches below the offset skipped): the same rows, or the same error, as
        ``add`` on ``read_range``'s records. Plain batches of share-state records are decoded
        column-wise (``_FastDecoder``); a buffer holding anything else (compression, record
        headers, LogAppendTime, an unusual encoding, a fault) goes record by record through
        ``iter_records`` and ``add``."""
        batch = self._fast.decode(state_partition, buf, pos, stop, offset, end, starts)
        if batch is not None:
            if self._listed:
                self._pieces.append(self._take_lists())
            if batch.num_rows:
                self._pieces.append(batch)
                self.n += batch.num_rows
            return
        for p, h in walk_headers(buf, pos, stop):
            next_offset = h.last_offset + 1
            if h.is_control or h.last_offset < offset:
                offset = max(offset, next_offset)
                continue
            records = [rec for rec in iter_records(buf, p) if offset <= rec.offset < end]
            offset = next_offset
            if records:
                self.add(state_partition, records)

    def take(self) -> pa.RecordBatch:
        """Everything added since the last ``take``, as a batch of ``STATE_ARROW_SCHEMA``."""
        pieces = self._pieces
        if self._listed or not pieces:
            pieces.append(self._take_lists())
        self._pieces = []
        self.n = 0
        if len(pieces) == 1:
            return pieces[0]
        return pa.Table.from_batches(pieces, schema=STATE_ARROW_SCHEMA).combine_chunks().to_batches()[0]

    def _take_lists(self) -> pa.RecordBatch:
        arrays = []
        for f in STATE_ARROW_SCHEMA:
            if f.name == "state_batches":
                children = [pa.array(v, t.type) for v, t in zip(
                    (self._first, self._last, self._state, self._count), _BATCH_STRUCT_TYPE)]
                values = pa.StructArray.from_arrays(children, fields=list(_BATCH_STRUCT_TYPE))
                arrays.append(pa.ListArray.from_arrays(pa.array(self._batch_offsets, pa.int32()), values,
                                                       type=_BATCH_LIST_TYPE))
            else:
                arrays.append(pa.array(self._cols[f.name], f.type))
        self._reset_lists()
        return pa.RecordBatch.from_arrays(arrays, schema=STATE_ARROW_SCHEMA)


def to_record(row: Any) -> tuple:
    """The coordinator's (key, value) objects for a state row (a mapping or an object with the
    column names as attributes); ``value`` is None for a tombstone."""
    get = row.get if hasattr(row, "get") else lambda name: getattr(row, name)
    group_id, topic_id, partition = get("group_id"), uuid_from_str(get("topic_id")), int(get("partition"))
    snapshot = get("record_type") == SNAPSHOT
    if get("tombstone"):
        return (ShareSnapshotKey if snapshot else ShareUpdateKey)(group_id, topic_id, partition), None
    raw_batches = get("state_batches")
    batches = [] if raw_batches is None else [
        (int(b["first_offset"]), int(b["last_offset"]), int(b["delivery_state"]), int(b["delivery_count"]))
        for b in raw_batches]
    if snapshot:
        return ShareSnapshotKey(group_id, topic_id, partition), ShareSnapshotValue(
            snapshot_epoch=int(get("snapshot_epoch")), state_epoch=int(get("state_epoch")),
            leader_epoch=int(get("leader_epoch")), start_offset=int(get("start_offset")),
            delivery_complete_count=int(get("delivery_complete_count")),
            create_timestamp=int(get("create_timestamp")), write_timestamp=int(get("write_timestamp")),
            state_batches=[SnapshotBatch(*b) for b in batches])
    return ShareUpdateKey(group_id, topic_id, partition), ShareUpdateValue(
        snapshot_epoch=int(get("snapshot_epoch")), leader_epoch=int(get("leader_epoch")),
        start_offset=int(get("start_offset")), delivery_complete_count=int(get("delivery_complete_count")),
        state_batches=[UpdateBatch(*b) for b in batches])


# --- column-wise decoding of plain share-state batches ---------------------------------------------

_BATCH_HEAD = struct.Struct(">qiibIhiqqqhii")  # protocol.records.HEADER
_HEADER_SIZE = 61
_SLOW_ATTRIBUTES = 0x07 | 0x08  # compression codec, LogAppendTime: the general path
_CONTROL = 0x20
_UPDATE_FIXED = 18      # version, snapshot epoch, leader epoch, start offset
_SNAPSHOT_FIXED = 38    # version, snapshot/state/leader epoch, start offset, create and write timestamps
_STATE_BATCH_SIZE = 20  # first, last offset, state, count, empty tagged fields
_TS_TYPE = STATE_ARROW_SCHEMA.field("timestamp").type
_INT32 = struct.Struct(">i")

_RECORD_TYPES = pa.array([SNAPSHOT, UPDATE], pa.string())


class _Fallback(Exception):
    """The buffer holds something the column-wise decoder leaves to the general path."""


def _gather(u8: np.ndarray, pos: np.ndarray, width: int, dtype: str) -> np.ndarray:
    """Big-endian integers of ``width`` bytes at byte positions ``pos`` of ``u8`` (each
    entirely inside it)."""
    if not len(pos):
        return np.zeros(0, dtype=dtype.lstrip(">"))
    windows = np.lib.stride_tricks.as_strided(u8, shape=(len(u8) - width + 1, width), strides=(1, 1),
                                              writeable=False)
    return windows[pos].view(dtype).ravel().astype(dtype.lstrip(">"), copy=False)


def _varints(u8: np.ndarray, q: np.ndarray, limit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zig-zag varints at positions ``q`` (each ending before ``limit``): (values, next
    positions). Up to four bytes (28 bits, where varint and varlong agree and nothing is
    truncated); anything longer or running past ``limit`` is left to the general path."""
    b = u8[q].astype(np.int64)
    raw = b & 0x7F
    more = b >= 0x80
    size = np.ones(len(q), dtype=np.int64)
    shift = 7
    while more.any():
        if shift > 21:
            raise _Fallback("varint longer than four bytes")
        nxt = q + size
        if np.any(more & (nxt >= limit)):
            raise _Fallback("varint past its record")
        b = u8[np.where(more, nxt, q)].astype(np.int64)
        raw |= np.where(more, (b & 0x7F) << shift, 0)
        size += more
        more &= b >= 0x80
        shift += 7
    return (raw >> 1) ^ -(raw & 1), q + size


_MAX_GROUPED_KEY = 256  # longer keys are looked up one by one


def _same_keys(u8: np.ndarray, key_pos: np.ndarray, key_len: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Records grouped by equal key bytes: (each record's group, numbered by first appearance;
    each group's first record), or None when the keys are too long to compare this way.

    The keys, zero-padded to a whole number of 8-byte words, are hashed word by word; every
    record is then compared in full with its group's first record, so a hash collision can
    only return None, never a wrong grouping."""
    n = len(key_pos)
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    width = -(-int(key_len.max()) // 8) * 8
    if width > _MAX_GROUPED_KEY or width == 0:
        return None
    padded = u8 if int(key_pos.max()) + width <= len(u8) else np.concatenate([u8, np.zeros(width, np.uint8)])
    windows = np.lib.stride_tricks.as_strided(padded, shape=(len(padded) - width + 1, width), strides=(1, 1),
                                              writeable=False)
    keys = windows[key_pos]
    keys[np.arange(width) >= key_len[:, None]] = 0
    words = keys.view(np.uint64)
    h = key_len.astype(np.uint64)
    for k in range(words.shape[1]):
        h = h * np.uint64(0x9E3779B97F4A7C15) ^ words[:, k]
    codes, uniques = pd.factorize(h)
    first = np.ones(n, dtype=bool)
    if n > 1:
        first[1:] = codes[1:] > np.maximum.accumulate(codes)[:-1]
    firsts = np.flatnonzero(first)
    lead = firsts[codes]
    if not (np.array_equal(keys, keys[lead]) and np.array_equal(key_len, key_len[lead])):
        return None
    return codes.astype(np.int64), firsts


class _FastDecoder:
    """Decodes uncompressed batches of ShareSnapshot / ShareUpdate records into a batch of
    ``STATE_ARROW_SCHEMA`` without a Python object per record.

    One pass in Python walks batches and records (checking what ``check_batch`` and
    ``iter_records`` check: magic, lengths, CRC, counts, offset deltas, record framing) and
    notes where each value lies; numpy then reads the values' fixed layout (version 0:
    int16 version, the fixed fields, a compact array of 20-byte state batches with empty
    tagged fields, and the tagged section holding only the DeliveryCompleteCount or nothing),
    checking that each value ends where its record says. Anything else returns None and the
    caller decodes the buffer the general way, which gives the same rows or raises the error.
    """

    def __init__(self, owner: StateRowBuilder) -> None:
        self.owner = owner
        self._ids: dict[bytes, int] = {}   # record key bytes -> key id (-1: not a share-state key)
        self._snapshot: list[bool] = []    # per key id
        self._groups: list[str] = []
        self._topics: list[str] = []
        self._partitions: list[int] = []

    def _key_id(self, raw: bytes) -> int:
        info = self.owner._keys.get(raw, False)
        if info is False:
            info = self.owner._key(raw)  # may raise: the caller falls back, the general path raises
        if info is None:
            kid = -1
        else:
            kid = len(self._groups)
            self._snapshot.append(info[0] == SNAPSHOT)
            self._groups.append(info[1])
            self._topics.append(info[2])
            self._partitions.append(info[3])
        self._ids[raw] = kid
        return kid

    def decode(self, state_partition: int, buf: bytes, pos: int, stop: int, offset: int,
               end: int, starts: list[int] | None = None) -> pa.RecordBatch | None:
        try:
            walked = self._walk(buf, pos, stop, offset, end, starts)
            if walked is None:
                return None
            return self._values(state_partition, buf, *walked)
        except Exception:  # noqa: BLE001 - anything odd: the general path decides
            return None

    def _walk(self, buf: bytes, pos: int, stop: int, offset: int, end: int, starts: list[int] | None):
        """Batch headers and then records column-wise: step ``j`` parses the ``j``-th record
        of every batch at once. Skips batches as ``read_range`` does, which for batches in
        offset order (required here) means: a control batch, or one ending below
        max(the starting offset, the previous batch's end)."""
        if starts is None:
            starts = []
            p = pos
            while p < stop:
                starts.append(p)
                p += 12 + _INT32.unpack_from(buf, p + 8)[0]
        if not starts:
            return [], [], [], [], [], 0
        u8 = np.frombuffer(buf, dtype=np.uint8)
        at = np.array(starts, dtype=np.int64)
        base = _gather(u8, at, 8, ">i8")
        batch_end = at + 12 + _gather(u8, at + 8, 4, ">i4")
        attributes = _gather(u8, at + 21, 2, ">i2")
        last_delta = _gather(u8, at + 23, 4, ">i4")
        last = base + last_delta
        if np.any(base[1:] <= last[:-1]) or batch_end[-1] != stop or np.any(batch_end[:-1] != at[1:]) \
                or at[0] != pos:
            return None  # not consecutive batches in offset order: the general path walks them
        floor = np.maximum(offset, np.concatenate(([offset], last[:-1] + 1)))
        kept = ((attributes & _CONTROL) == 0) & (last >= floor)
        if not kept.all():
            at, batch_end, base, attributes, last_delta, floor = (
                at[kept], batch_end[kept], base[kept], attributes[kept], last_delta[kept], floor[kept])
        if not len(at):
            return [], [], [], [], [], 0
        magic = u8[at + 16]
        count = _gather(u8, at + 57, 4, ">i4")
        if (np.any(magic != 2) or np.any(batch_end - at < _HEADER_SIZE) or np.any(attributes & _SLOW_ATTRIBUTES)
                or np.any(count < 0) or np.any(last_delta < 0) or np.any(last_delta < count - 1)):
            return None
        view = memoryview(buf)
        crcs = np.array([crc32c(view[a + 21:b]) for a, b in zip(at.tolist(), batch_end.tolist())], dtype=np.int64)
        if np.any(crcs != _gather(u8, at + 17, 4, ">u4")):
            return None
        base_ts = _gather(u8, at + 27, 8, ">i8")
        cur = at + _HEADER_SIZE
        prev = np.full(len(at), -1, dtype=np.int64)
        parts = []
        for j in range(int(count.max())):
            act = np.nonzero(count > j)[0]
            q, e = cur[act], batch_end[act]
            if np.any(q >= e):
                return None
            rec_len, q = _varints(u8, q, e)
            rec_end = q + rec_len
            if np.any(rec_len < 0) or np.any(rec_end > e):
                return None
            q = q + 1  # attributes
            ts_delta, q = _varints(u8, q, rec_end)
            delta, q = _varints(u8, q, rec_end)
            if np.any(delta <= prev[act]) or np.any(delta > last_delta[act]):
                return None
            prev[act] = delta
            key_len, q = _varints(u8, q, rec_end)
            if np.any(key_len < 0):
                return None  # a null key: the general path raises
            key_pos = q
            q = q + key_len
            if np.any(q >= rec_end):
                return None
            value_len, q = _varints(u8, q, rec_end)
            value_pos = q
            q = q + np.maximum(value_len, 0)
            if np.any(q + 1 != rec_end) or np.any(u8[np.minimum(q, len(u8) - 1)] != 0):
                return None  # record headers, or a record that does not add up
            cur[act] = rec_end
            parts.append((act, np.full(len(act), j, dtype=np.int64), base[act] + delta, base_ts[act] + ts_delta,
                          key_pos, key_len, value_pos, value_len))
        if np.any(cur != batch_end):
            return None
        if not parts:
            return [], [], [], [], [], 0
        lane, step, offsets, stamps, key_pos, key_len, value_pos, value_len = (np.concatenate(c) for c in zip(*parts))
        order = np.lexsort((step, lane))
        lane, offsets, stamps = lane[order], offsets[order], stamps[order]
        key_pos, key_len, value_pos, value_len = key_pos[order], key_len[order], value_pos[order], value_len[order]
        keep = (offsets >= floor[lane]) & (offsets < end)
        if not keep.all():
            offsets, stamps = offsets[keep], stamps[keep]
            key_pos, key_len, value_pos, value_len = key_pos[keep], key_len[keep], value_pos[keep], value_len[keep]
        kid = self._key_ids(buf, u8, key_pos, key_len)
        share = kid >= 0
        skipped = int(len(kid) - np.count_nonzero(share))
        if skipped:
            offsets, stamps, kid = offsets[share], stamps[share], kid[share]
            value_pos, value_len = value_pos[share], value_len[share]
        value_len = np.where(value_len < 0, -1, value_len)
        return offsets, stamps, kid, value_pos, value_len, skipped

    def _key_ids(self, buf: bytes, u8: np.ndarray, key_pos: np.ndarray, key_len: np.ndarray) -> np.ndarray:
        """The key id of every record (each distinct key decoded the first time it is seen).

        A state partition repeats a few keys, so the records are grouped by their key bytes
        in numpy (``_same_keys``) and only one record of each group is looked up."""
        grouped = _same_keys(u8, key_pos, key_len)
        if grouped is None:
            return self._key_ids_each(buf, key_pos, key_len)
        codes, firsts = grouped
        return self._key_ids_each(buf, key_pos[firsts], key_len[firsts])[codes]

    def _key_ids_each(self, buf: bytes, key_pos: np.ndarray, key_len: np.ndarray) -> np.ndarray:
        ids = self._ids
        raws = [buf[a:a + n] for a, n in zip(key_pos.tolist(), key_len.tolist())]
        kids = [ids.get(raw) for raw in raws]
        if None in kids:
            for i, raw in enumerate(raws):
                if kids[i] is None:
                    k = ids.get(raw)
                    kids[i] = self._key_id(raw) if k is None else k
        return np.array(kids, dtype=np.int64)

    def _values(self, state_partition: int, buf: bytes, offsets, stamps, kids, vpos, vlen, skipped):
        n = len(offsets)
        u8 = np.frombuffer(buf, dtype=np.uint8)
        kid = np.asarray(kids, dtype=np.int64)
        vp = np.asarray(vpos, dtype=np.int64)
        vl = np.asarray(vlen, dtype=np.int64)
        is_snap = np.array(self._snapshot, dtype=bool)[kid] if n else np.zeros(0, dtype=bool)
        tomb = vl < 0
        live = ~tomb
        snap = live & is_snap
        upd = live & ~is_snap
        fixed = np.where(is_snap, _SNAPSHOT_FIXED, _UPDATE_FIXED)
        # Room for the fixed part, the array length and the tagged fields' count.
        if np.any(live & (vl < fixed + 2)):
            return None
        lp = vp[live]
        if np.any(_gather(u8, lp, 2, ">u2") != 0):
            return None  # another value version: the general path decides
        clen_pos = vp + fixed
        clen = np.where(live, u8[np.where(live, clen_pos, 0)], 1).astype(np.int64)
        if np.any(live & ((clen == 0) | (clen >= 0x80))):
            return None
        nb = np.where(live, clen - 1, 0)
        tags_pos = clen_pos + 1 + _STATE_BATCH_SIZE * nb
        if np.any(live & (tags_pos >= vp + vl)):
            return None
        tags = np.where(live, u8[np.where(live, tags_pos, 0)], 0)
        with_count = live & (tags == 1)
        if np.any(live & (tags > 1)):
            return None
        value_end = np.where(with_count, tags_pos + 7, tags_pos + 1)
        if np.any(live & (value_end != vp + vl)):
            return None
        cp = tags_pos[with_count]
        if np.any(u8[cp + 1] != 0) or np.any(u8[cp + 2] != 4):
            return None
        dcc = np.full(n, -1, dtype=np.int32)
        dcc[with_count] = _gather(u8, cp + 3, 4, ">i4")
        # State batches: each 20 bytes, the last its (empty) tagged fields.
        list_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(nb, out=list_offsets[1:])
        total = int(list_offsets[-1])
        first_batch = np.repeat(clen_pos + 1, nb)
        within = np.arange(total, dtype=np.int64) - np.repeat(list_offsets[:-1], nb)
        bp = first_batch + _STATE_BATCH_SIZE * within
        if total and np.any(u8[bp + 19] != 0):
            return None

        def col(values, mask_null, arrow_type):
            return pa.array(values, type=arrow_type, mask=mask_null)

        snapshot_epoch = np.zeros(n, dtype=np.int32)
        state_epoch = np.zeros(n, dtype=np.int32)
        leader_epoch = np.zeros(n, dtype=np.int32)
        start_offset = np.zeros(n, dtype=np.int64)
        create_ts = np.zeros(n, dtype=np.int64)
        write_ts = np.zeros(n, dtype=np.int64)
        up, sp = vp[upd], vp[snap]
        snapshot_epoch[upd] = _gather(u8, up + 2, 4, ">i4")
        leader_epoch[upd] = _gather(u8, up + 6, 4, ">i4")
        start_offset[upd] = _gather(u8, up + 10, 8, ">i8")
        snapshot_epoch[snap] = _gather(u8, sp + 2, 4, ">i4")
        state_epoch[snap] = _gather(u8, sp + 6, 4, ">i4")
        leader_epoch[snap] = _gather(u8, sp + 10, 4, ">i4")
        start_offset[snap] = _gather(u8, sp + 14, 8, ">i8")
        create_ts[snap] = _gather(u8, sp + 22, 8, ">i8")
        write_ts[snap] = _gather(u8, sp + 30, 8, ">i8")
        not_snap = ~snap

        children = [
            pa.array(_gather(u8, bp, 8, ">i8"), pa.int64()),
            pa.array(_gather(u8, bp + 8, 8, ">i8"), pa.int64()),
            pa.array(u8[bp + 16].view(np.int8) if total else np.zeros(0, np.int8), pa.int8()),
            pa.array(_gather(u8, bp + 17, 2, ">i2"), pa.int16()),
        ]
        values = pa.StructArray.from_arrays(children, fields=list(_BATCH_STRUCT_TYPE))
        batches = pa.ListArray.from_arrays(pa.array(list_offsets.astype(np.int32)), values, type=_BATCH_LIST_TYPE)
        groups = pa.array(self._groups, pa.string())
        topics = pa.array(self._topics, pa.string())
        kid_arrow = pa.array(kid)
        arrays = [
            pa.array(np.full(n, state_partition, dtype=np.int32)),
            pa.array(np.asarray(offsets, dtype=np.int64)),
            pa.array(np.asarray(stamps, dtype=np.int64) * 1000).cast(_TS_TYPE),
            _RECORD_TYPES.take(pa.array((~is_snap).astype(np.int8))),
            pa.array(tomb),
            groups.take(kid_arrow),
            topics.take(kid_arrow),
            pa.array(np.array(self._partitions, dtype=np.int32)[kid] if n else np.zeros(0, np.int32)),
            col(snapshot_epoch, tomb, pa.int32()),
            col(state_epoch, tomb | not_snap, pa.int32()),
            col(leader_epoch, tomb, pa.int32()),
            col(start_offset, tomb, pa.int64()),
            col(dcc, tomb, pa.int32()),
            col(create_ts, tomb | not_snap, pa.int64()),
            col(write_ts, tomb | not_snap, pa.int64()),
            batches,
        ]
        self.owner.skipped += skipped
        return pa.RecordBatch.from_arrays(arrays, schema=STATE_ARROW_SCHEMA)
