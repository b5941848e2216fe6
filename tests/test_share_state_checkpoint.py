"""State checkpoints of ``__share_group_state`` (``coordinator.share.checkpoint``).

The central property: a partition loaded from its checkpoint plus the records after it holds
exactly what a load from the log start holds (keys, summaries before any replay, pruning
point, replayed entries with their fences), for any history of state RPCs, restarts,
checkpoints and prunes. A checkpoint that cannot be trusted (corrupt, past the log end after a
torn tail, taken from another history or topic id, below the log start) is deleted with a
warning and the load falls back to the full scan with the same result. Then the broker: a
start after kill -9 reads only the records after the checkpoint.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from broker.log import FileLogStore, LogConfig
from coordinator.share.checkpoint import (
    CHECKPOINT_FILE,
    Checkpoint,
    Checkpointer,
    CheckpointError,
    decode,
    encode,
    load_partition,
)
from coordinator.share.combiner import StateBatch
from coordinator.share.journal import LogJournal
from coordinator.share.loader import PartitionLoader
from coordinator.share.service import ShareCoordinatorService
from coordinator.share.shard import KeyEntry, ShareCoordinatorShard, SharePartitionState
from protocol.coordinator_records.share_snapshot_key import ShareSnapshotKey
from protocol.records import build_batch, parse_header
from tests.raw_client import RawClient
from tests.test_produce_support import list_offset
from tests.test_share_state_loader import (
    INIT_ALL,
    KEYS,
    T1,
    FakePartitions,
    apply_ops,
    op_st,
    snapshot_bytes,
    summaries,
    update_bytes,
)
from tests.test_share_state_support import (
    ACKNOWLEDGED,
    AVAILABLE,
    STATE_TOPIC,
    batches_of,
    create_topic,
    initialize,
    only,
    read_state,
    state_partition,
    write_state,
)

TOPIC = "__share_group_state"
TID = uuid.UUID(int=0x51A7E)


def run(coro):
    return asyncio.run(coro)


class Partition:
    """State partition 0 on a file log store in ``directory``, with its coordinator loaded
    from it (through its checkpoint, if usable) and a checkpointer."""

    def __init__(self, directory, *, segment_bytes: int = 1 << 20, min_records: int = 1,
                 topic_id: uuid.UUID = TID) -> None:
        self.directory = Path(directory)
        self.config = LogConfig(segment_bytes=segment_bytes)
        self.store = FileLogStore(str(directory), default_config=self.config)
        self.lg = self.store.create(TOPIC, 0, topic_id, self.config)
        self.journal = LogJournal(self.store, FakePartitions(), clock_ms=lambda: 1_700_000_000_000)
        self.service = ShareCoordinatorService(num_partitions=1, records_per_snapshot=3, clock_ms=lambda: 5_000,
                                               journal=self.journal)
        self.checkpointer = Checkpointer(self.service, self.journal, lambda p: self.store.get(TOPIC, p),
                                         min_records=min_records)
        self.loader, (keys, last) = run(load_partition(self.lg))
        self.service.shard(0).load(keys, last)
        self.checkpointer.loaded(0, self.lg, self.loader.seed_offset)

    @property
    def file(self) -> Path:
        return self.directory / f"{TOPIC}-0" / CHECKPOINT_FILE

    def checkpoint(self) -> bool:
        return run(self.checkpointer.checkpoint(0))

    def crash(self) -> None:
        """Drop everything as kill -9 would (the bytes written stay, nothing is flushed)."""
        for lg in self.store.partitions():
            lg.close()

    def prune(self) -> None:
        cut = self.service.shard(0).last_redundant_offset()
        if cut is not None:
            self.lg.delete_records_before(min(cut, self.lg.end_offset))


def full_load(lg) -> ShareCoordinatorShard:
    loader = PartitionLoader(lg)
    while loader.step():
        pass
    shard = ShareCoordinatorShard(3, clock_ms=lambda: 5_000)
    shard.load(*loader.result())
    return shard


def checkpoint_load(lg) -> tuple[ShareCoordinatorShard, PartitionLoader]:
    loader, result = run(load_partition(lg))
    shard = ShareCoordinatorShard(3, clock_ms=lambda: 5_000)
    shard.load(*result)
    return shard, loader


def assert_same_load(got: ShareCoordinatorShard, want: ShareCoordinatorShard) -> None:
    assert sorted(got.keys()) == sorted(want.keys())
    assert summaries(got, KEYS) == summaries(want, KEYS)  # before anything is replayed
    assert got.last_redundant_offset() == want.last_redundant_offset()
    assert got.entries() == want.entries()  # state, fences and updates since the snapshot


# --- the property ------------------------------------------------------------------------------------

phase_st = st.tuples(st.lists(op_st, max_size=12), st.sampled_from(["checkpoint", "checkpoint", "restart", "prune", "-"]))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(phases=st.lists(phase_st, min_size=1, max_size=5), segment_bytes=st.sampled_from([300, 1 << 20]))
def test_a_load_from_a_checkpoint_and_the_tail_equals_a_load_from_the_log_start(phases, segment_bytes):
    with tempfile.TemporaryDirectory() as d:
        part = Partition(d, segment_bytes=segment_bytes)
        apply_ops(part.service, INIT_ALL)
        trusted = False  # a checkpoint was written and nothing since may have invalidated it
        for ops, action in phases:
            apply_ops(part.service, ops)
            if action == "checkpoint":
                trusted = part.checkpoint() or trusted
            elif action == "restart":
                part.crash()
                part = Partition(d, segment_bytes=segment_bytes)
                assert (part.loader.seed_offset is not None) >= trusted
            elif action == "prune":
                start = part.lg.start_offset
                part.prune()
                trusted = trusted and part.lg.start_offset == start
        live = part.service.shard(0).entries()
        part.crash()
        store = FileLogStore(d)
        lg = store.get(TOPIC, 0)
        want = full_load(lg)
        got, loader = checkpoint_load(lg)
        event("seeded" if loader.seed_offset is not None else "full scan")
        assert (loader.seed_offset is not None) >= trusted
        if loader.seed_offset is not None:
            event(f"tail of {loader.records} record(s)" if loader.records < 3 else "longer tail")
        assert_same_load(got, want)
        # And both hold the states of the coordinator that wrote the log.
        assert {k: (e.state, e.updates_since_snapshot) for k, e in got.entries().items()} == \
               {k: (e.state, e.updates_since_snapshot) for k, e in live.items()}


# --- the file ----------------------------------------------------------------------------------------


def entry(fences=(3, None)) -> KeyEntry:
    state = SharePartitionState(4, 1, 3, 40, -1, (StateBatch(41, 45, 2, 1), StateBatch(46, 46, 0, 3)), 11, 12)
    return KeyEntry(state, fences[0], fences[1], 2)


def key_body(group: str, partition: int = 0) -> bytes:
    return ShareSnapshotKey(group, T1, partition).to_bytes(0)


def test_a_checkpoint_round_trips_every_kind_of_key():
    k = KEYS[0]
    keys = {
        key_body("entry"): [7, entry(), update_bytes(k)[1]],
        key_body("entry-no-fences"): [8, entry((None, None))],
        key_body("raw"): [9, snapshot_bytes(k)[1], update_bytes(k)[1], update_bytes(k, start=50)[1]],
        key_body("updates-only"): [10, None, update_bytes(k)[1]],
    }
    ckpt = Checkpoint(TID, 3, 99, (90, 0xDEADBEEF), {b: list(v) for b, v in keys.items()})
    back = decode(encode(ckpt))
    assert (back.topic_id, back.partition, back.offset, back.last_batch) == (TID, 3, 99, (90, 0xDEADBEEF))
    assert back.keys == keys
    assert decode(encode(Checkpoint(TID, 0, 0, None, {}))).last_batch is None


@pytest.mark.parametrize("damage", ["flipped byte", "cut short", "empty", "not ours", "trailing bytes"])
def test_a_damaged_checkpoint_file_does_not_decode(damage):
    data = encode(Checkpoint(TID, 0, 5, (4, 1), {key_body("g"): [1, entry()]}))
    damaged = {
        "flipped byte": data[:30] + bytes([data[30] ^ 1]) + data[31:],
        "cut short": data[:len(data) // 2],
        "empty": b"",
        "not ours": b"recovery-point-offset-checkpoint" + data,
        "trailing bytes": data + b"\0",
    }[damage]
    with pytest.raises(CheckpointError):
        decode(damaged)


# --- falling back to the full scan ---------------------------------------------------------------------

HISTORY = INIT_ALL + [("write", k, 10 * i, 1, i, [(10 * i, 2, 2, 1)]) for i in range(1, 6) for k in KEYS] + \
    [("read", KEYS[0], 2), ("delete", KEYS[1])]


def written(directory, **kw) -> Partition:
    part = Partition(directory, **kw)
    apply_ops(part.service, HISTORY)
    assert part.checkpoint() and part.file.exists()
    return part


def assert_falls_back(directory, caplog, reason: str) -> None:
    """The next load ignores (and deletes) the checkpoint and equals the full scan."""
    store = FileLogStore(str(directory))
    lg = store.get(TOPIC, 0)
    want = full_load(lg)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kshare.share_coordinator"):
        got, loader = checkpoint_load(lg)
    assert loader.seed_offset is None
    assert reason in caplog.text and "reading __share_group_state-0 from its log start" in caplog.text
    assert not (Path(directory) / f"{TOPIC}-0" / CHECKPOINT_FILE).exists()
    assert_same_load(got, want)
    for lg in store.partitions():
        lg.close()


def test_a_valid_checkpoint_seeds_the_load_and_only_the_tail_is_read(tmp_path):
    part = written(tmp_path)
    x = part.lg.end_offset
    apply_ops(part.service, [("write", KEYS[0], 70, 3, 1, [(71, 1, 0, 2)])])
    part.crash()
    store = FileLogStore(str(tmp_path))
    lg = store.get(TOPIC, 0)
    got, loader = checkpoint_load(lg)
    assert (loader.seed_offset, loader.records) == (x, 1)
    assert_same_load(got, full_load(lg))


def test_a_corrupt_checkpoint_falls_back_to_the_full_scan(tmp_path, caplog):
    part = written(tmp_path)
    data = bytearray(part.file.read_bytes())
    data[len(data) // 2] ^= 0x40
    part.file.write_bytes(bytes(data))
    part.crash()
    assert_falls_back(tmp_path, caplog, "checksum mismatch")


def test_a_truncated_checkpoint_file_falls_back_to_the_full_scan(tmp_path, caplog):
    part = written(tmp_path)
    part.file.write_bytes(part.file.read_bytes()[:20])
    part.crash()
    assert_falls_back(tmp_path, caplog, "too short")


def last_segment(directory) -> Path:
    return max((Path(directory) / f"{TOPIC}-0").glob("*.log"))


def test_a_checkpoint_past_a_torn_log_end_falls_back_to_the_full_scan(tmp_path, caplog):
    part = written(tmp_path)
    part.crash()
    seg = last_segment(tmp_path)
    with open(seg, "r+b") as f:  # tear the last batch, as a crash in the middle of a write does
        f.truncate(seg.stat().st_size - 7)
    assert_falls_back(tmp_path, caplog, "past the log end offset")


def test_a_checkpoint_of_a_log_that_was_cut_and_written_again_falls_back(tmp_path, caplog):
    part = written(tmp_path)
    saved = part.file.read_bytes()
    x = part.lg.end_offset
    part.crash()
    seg = last_segment(tmp_path)
    with open(seg, "r+b") as f:
        f.truncate(seg.stat().st_size - 7)
    part = Partition(tmp_path)  # the recovered log is shorter: this load drops the checkpoint
    assert part.loader.seed_offset is None and not part.file.exists()
    apply_ops(part.service, [("write", k, 90, 4, 0, [(90, 3, 4, 1)]) for k in KEYS] * 2)
    assert part.lg.end_offset > x
    part.file.write_bytes(saved)  # as if the deletion had been lost
    part.crash()
    assert_falls_back(tmp_path, caplog, "is not the one it was taken from")


def test_a_checkpoint_of_another_topic_id_falls_back_and_deletion_takes_the_checkpoint_along(tmp_path, caplog):
    part = written(tmp_path)
    saved = part.file.read_bytes()
    part.store.delete([(TOPIC, 0)])  # the state topic deleted: its checkpoint goes with its directory
    assert not part.file.exists()
    part = Partition(tmp_path, topic_id=uuid.UUID(int=0xBEEF))  # created again: a new id
    apply_ops(part.service, HISTORY)
    part.file.write_bytes(saved)
    part.crash()
    assert_falls_back(tmp_path, caplog, f"topic id {TID}, not __share_group_state-0 of topic id")


def test_a_checkpoint_below_the_log_start_falls_back_and_is_rewritten(tmp_path, caplog):
    part = written(tmp_path)
    x = part.lg.end_offset
    apply_ops(part.service, [("init", k, 1, 0) for k in KEYS] * 2)  # every key snapshotted after the checkpoint
    part.prune()
    assert part.lg.start_offset > x
    assert part.checkpointer.due(0)  # a checkpoint below the log start is useless: rewritten soon
    part.crash()
    assert_falls_back(tmp_path, caplog, "below the log start offset")


def test_a_checkpoint_whose_keys_need_records_the_log_lost_falls_back(tmp_path, caplog):
    part = written(tmp_path)
    # DeleteRecords by hand past the oldest record a key needs, but not past the checkpoint.
    needed = part.service.shard(0).last_redundant_offset()
    part.lg.delete_records_before(needed + 1)
    assert part.lg.start_offset <= part.checkpointer._origins[0].written
    part.crash()
    assert_falls_back(tmp_path, caplog, "below the log start offset")


# --- when checkpoints are written ------------------------------------------------------------------------


def test_a_checkpoint_is_due_after_min_records_or_its_key_count(tmp_path):
    part = Partition(tmp_path, min_records=4)
    assert not part.checkpointer.due(0)
    apply_ops(part.service, INIT_ALL)  # 3 records, 3 keys
    assert not part.checkpointer.due(0)
    apply_ops(part.service, [("write", KEYS[0], 1, 0, 0, [])])
    assert part.checkpointer.due(0)
    assert run(part.checkpointer.run_once()) == 1 and part.file.exists()
    assert not part.checkpointer.due(0) and run(part.checkpointer.run_once()) == 0
    part.checkpointer.min_records = 1  # now the key count (3) rules
    apply_ops(part.service, [("write", KEYS[0], 2, 0, 0, [])] * 2)
    assert not part.checkpointer.due(0)
    apply_ops(part.service, [("write", KEYS[0], 3, 0, 0, [])])
    assert part.checkpointer.due(0)


def test_records_the_coordinator_did_not_write_stop_checkpoints_until_the_next_load(tmp_path, caplog):
    part = Partition(tmp_path)
    apply_ops(part.service, INIT_ALL)
    foreign = bytearray(build_batch([(b"\x00\x00" + key_body("admin"), snapshot_bytes(KEYS[0])[1], None)]))
    part.lg.append(foreign, [parse_header(foreign)])  # e.g. an admin client's produce
    apply_ops(part.service, [("write", KEYS[0], 1, 0, 0, [])])
    with caplog.at_level(logging.WARNING, logger="kshare.share_coordinator"):
        assert not part.checkpoint()
    assert "did not write" in caplog.text and not part.file.exists()
    part.crash()
    part = Partition(tmp_path)  # the next load reads it, and checkpoints again
    assert len(part.service.shard(0).keys()) == len(KEYS) + 1
    assert part.checkpoint()


def test_a_partition_loaded_from_a_checkpoint_is_checkpointed_again_with_its_pending_keys(tmp_path):
    part = written(tmp_path)
    apply_ops(part.service, [("write", KEYS[2], 60, 2, 3, [(60, 1, 0, 1)])])
    part.crash()
    part = Partition(tmp_path)
    assert part.loader.seed_offset is not None and part.service.shard(0).pending_count() == 2
    apply_ops(part.service, [("write", KEYS[0], 80, 2, 3, [(81, 1, 0, 1)])])  # replays one key
    assert part.checkpoint()
    part.crash()
    store = FileLogStore(str(tmp_path))
    lg = store.get(TOPIC, 0)
    got, loader = checkpoint_load(lg)
    assert (loader.seed_offset, loader.records) == (lg.end_offset, 0)
    assert_same_load(got, full_load(lg))


# --- the broker ----------------------------------------------------------------------------------------

# Checkpoints only at a graceful stop (the periodic task never comes round), whenever anything is new.
CHECKPOINT_AT_STOP = {
    "kshare.share.coordinator.state.checkpoint.interval.ms": "3600000",
    "kshare.share.coordinator.state.checkpoint.min.records": "1",
}


def write_n(c, group, topic_id, first: int, n: int):
    batches = []
    for i in range(first, first + n):
        batches = [(10 * i + 5, 10 * i + 7, AVAILABLE, 1 + i % 3), (10 * i + 8, 10 * i + 9, ACKNOWLEDGED, 1)]
        w = only(write_state(c, group, topic_id, 0, state_epoch=1, start_offset=10 * i,
                             delivery_complete_count=2, batches=batches))
        assert w.error_code == 0, w
    return batches


@pytest.mark.needs_private_broker
def test_a_start_after_kill_9_reads_only_the_records_after_the_checkpoint(broker_factory):
    b = broker_factory(CHECKPOINT_AT_STOP)
    with RawClient(b.bootstrap) as c:
        t = create_topic(c, "t")
        initialize(c, "g", t, 0, state_epoch=1, start_offset=0)
        write_n(c, "g", t, 0, 12)
    b.restart()  # the stop snapshots, prunes and checkpoints
    sp = state_partition("g", t, 0)
    assert (b.data_dir / f"{STATE_TOPIC}-{sp}" / CHECKPOINT_FILE).exists()
    assert "from 0 record(s)" in b.log().split("loaded __share_group_state")[-1]
    with RawClient(b.bootstrap) as c:
        last = write_n(c, "g", t, 12, 3)
    b.kill()
    b.start()
    assert "loaded __share_group_state: 1 key(s) from 3 record(s) in" in b.log()
    assert "(1 partition(s) from a checkpoint)" in b.log().split("loaded __share_group_state")[-1]
    with RawClient(b.bootstrap) as c:
        p = only(read_state(c, "g", t, 0))
        assert (p.error_code, p.state_epoch, p.start_offset, batches_of(p)) == (0, 1, 140, last)
        assert only(write_state(c, "g", t, 0, state_epoch=1, start_offset=150)).error_code == 0
    assert b.stop() == 0
    assert "Traceback" not in b.log() and "ignoring" not in b.log()


# Checkpoints as soon as anything is new.
CHECKPOINT_OFTEN = {
    "kshare.share.coordinator.state.checkpoint.interval.ms": "20",
    "kshare.share.coordinator.state.checkpoint.min.records": "1",
}


@pytest.mark.needs_private_broker
def test_a_torn_tail_below_the_checkpoint_offset_is_cut_and_the_state_read_from_the_log(broker_factory):
    b = broker_factory(CHECKPOINT_OFTEN)
    with RawClient(b.bootstrap) as c:
        t = create_topic(c, "t")
        sp = state_partition("g", t, 0)
        initialize(c, "g", t, 0, state_epoch=1, start_offset=0)
        before = write_n(c, "g", t, 0, 4)
        write_n(c, "g", t, 4, 1)
        end = list_offset(c, STATE_TOPIC, -1, partition=sp).offset
    ckpt = b.data_dir / f"{STATE_TOPIC}-{sp}" / CHECKPOINT_FILE
    deadline = time.monotonic() + 20
    while not (ckpt.exists() and decode(ckpt.read_bytes()).offset == end):  # the periodic task's
        assert time.monotonic() < deadline, b.log()
        time.sleep(0.02)
    b.kill()
    seg = max(ckpt.parent.glob("*.log"))
    with open(seg, "r+b") as f:  # the last batch torn, below the checkpoint's offset
        f.truncate(seg.stat().st_size - 7)
    b.start()
    log = b.log().split("listening on")[-2]  # this start's lines
    assert "truncating the log" in log and "past the log end offset" in log
    with RawClient(b.bootstrap) as c:
        p = only(read_state(c, "g", t, 0))
        assert (p.error_code, p.start_offset, batches_of(p)) == (0, 30, before)
        assert only(write_state(c, "g", t, 0, state_epoch=1, start_offset=60)).error_code == 0
    assert b.stop() == 0
    assert "Traceback" not in b.log()


def test_checkpoint_files_are_not_segment_files(tmp_path):
    """The log store leaves the checkpoint alone when it opens a partition directory."""
    part = written(tmp_path)
    part.crash()
    store = FileLogStore(str(tmp_path))
    assert (tmp_path / f"{TOPIC}-0" / CHECKPOINT_FILE).exists()
    assert store.get(TOPIC, 0).end_offset == part.lg.end_offset
