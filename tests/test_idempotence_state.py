"""ProducerStateManager: Kafka's sequence / epoch / duplicate rules, snapshots and replay."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.producer_state import (
    INT32_MAX,
    CorruptSnapshotError,
    ProducerStateConfig,
    ProducerStateError,
    ProducerStateManager,
    decode_snapshot,
)
from protocol.errors import ErrorCode
from protocol.records import BatchHeader

DAY_MS = 86_400_000
NOW = 1_700_000_000_000


def header(pid=7, epoch=0, seq=0, count=1, base_offset=0, ts=NOW, transactional=False, control=False) -> BatchHeader:
    attributes = (0x10 if transactional else 0) | (0x20 if control else 0)
    return BatchHeader(base_offset, 100, 0, 2, 0, attributes, count - 1, ts, ts, pid, epoch, seq, count)


class Log:
    """The log as far as producer state cares: appended headers with their offsets."""

    def __init__(self) -> None:
        self.state = ProducerStateManager("t-0", ProducerStateConfig(DAY_MS))
        self.headers: list[BatchHeader] = []
        self.end = 0

    def append(self, h: BatchHeader):
        """check + update like the broker; returns the duplicate or the new base offset."""
        dup = self.state.check(h, self.end)
        if dup is not None:
            return dup
        stored = h._replace(base_offset=self.end)
        self.state.update(stored, self.end, stored.max_timestamp)
        self.headers.append(stored)
        self.end += h.last_offset_delta + 1
        return self.end - h.last_offset_delta - 1


def test_in_sequence_batches_are_accepted_and_gaps_refused():
    lg = Log()
    assert lg.append(header(seq=0, count=3)) == 0
    assert lg.append(header(seq=3, count=2)) == 3
    with pytest.raises(ProducerStateError) as e:
        lg.append(header(seq=7))
    assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert lg.append(header(seq=5)) == 5


def test_retry_of_any_of_the_last_five_batches_is_a_duplicate_with_its_original_offsets():
    lg = Log()
    for i in range(6):
        lg.append(header(seq=i * 2, count=2, ts=NOW + i))
    dup = lg.append(header(seq=2, count=2))  # the 2nd batch: still among the last five
    assert (dup.first_offset, dup.last_offset, dup.timestamp) == (2, 3, NOW + 1)
    assert lg.end == 12  # nothing appended
    with pytest.raises(ProducerStateError) as e:  # the 1st batch fell out of the window
        lg.append(header(seq=0, count=2))
    assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_duplicate_needs_the_same_sequence_range_and_epoch():
    lg = Log()
    lg.append(header(seq=0, count=3))
    with pytest.raises(ProducerStateError):
        lg.append(header(seq=0, count=2))  # overlaps but is not the same batch
    with pytest.raises(ProducerStateError) as e:
        lg.append(header(epoch=1, seq=2, count=1))  # new epoch must restart at 0
    assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_older_epoch_is_invalid_producer_epoch_and_newer_epoch_restarts_at_zero():
    lg = Log()
    lg.append(header(epoch=3, seq=0))
    with pytest.raises(ProducerStateError) as e:
        lg.append(header(epoch=2, seq=1))
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert lg.append(header(epoch=4, seq=0)) == 1
    assert lg.append(header(epoch=4, seq=1)) == 2


def test_unknown_producer_may_start_at_any_sequence():
    lg = Log()
    assert lg.append(header(pid=1, seq=1234)) == 0
    assert lg.append(header(pid=1, seq=1235)) == 1


def test_sequence_wraps_after_int32_max():
    lg = Log()
    lg.append(header(seq=INT32_MAX - 1, count=2))
    assert lg.append(header(seq=0)) == 2
    # a batch spanning the wrap is recognised as a duplicate too
    lg2 = Log()
    lg2.append(header(seq=INT32_MAX - 1, count=3))
    assert lg2.append(header(seq=INT32_MAX - 1, count=3)).first_offset == 0


def test_expired_producers_are_forgotten():
    lg = Log()
    lg.append(header(pid=1, ts=NOW))
    lg.append(header(pid=2, ts=NOW + DAY_MS))
    assert lg.state.remove_expired(NOW + DAY_MS) == 1
    assert set(lg.state.producers) == {2}


def test_a_shared_config_changes_the_expiration_of_every_manager_at_once():
    """Kafka's ProducerStateManagerConfig: one object, read on every expiration check."""
    config = ProducerStateConfig(DAY_MS)
    managers = [ProducerStateManager(f"t-{i}", config) for i in range(2)]
    for m in managers:
        m.update(header(seq=0), 0, NOW)
    assert [m.remove_expired(NOW + 1000) for m in managers] == [0, 0]
    config.expiration_ms = 1000
    assert [m.remove_expired(NOW + 1000) for m in managers] == [1, 1]
    managers[0].update(header(seq=0), 1, NOW)
    snapshot = managers[0].encode_snapshot()
    managers[1].load_snapshot(snapshot, 2, NOW + 999)
    assert len(managers[1]) == 1
    config.expiration_ms = 999  # loading a snapshot drops producers expired under the current value
    managers[1].load_snapshot(snapshot, 2, NOW + 999)
    assert len(managers[1]) == 0


def test_snapshot_round_trip_and_corruption():
    lg = Log()
    lg.append(header(pid=1, epoch=2, seq=0, count=4))
    lg.append(header(pid=9, epoch=0, seq=10, count=1))
    data = lg.state.encode_snapshot()
    fresh = ProducerStateManager("t-0", ProducerStateConfig(DAY_MS))
    fresh.load_snapshot(data, lg.end, NOW)
    assert fresh.map_end_offset == 5
    assert fresh.check(header(pid=1, epoch=2, seq=0, count=4), 5).last_offset == 3
    assert fresh.check(header(pid=9, epoch=0, seq=11), 5) is None
    bad = bytearray(data)
    bad[-1] ^= 1
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(bad))
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(data[:-3])
    old = ProducerStateManager("t-0", ProducerStateConfig(DAY_MS))
    old.load_snapshot(data, 5, NOW + 2 * DAY_MS)  # every producer expired meanwhile
    assert len(old) == 0


# -- properties ------------------------------------------------------------------------------------

ops = st.lists(
    st.tuples(
        st.integers(0, 2),  # producer
        st.sampled_from(["next", "next", "next", "dup", "gap", "bump", "old"]),
        st.integers(1, 4),  # records in the batch
    ),
    max_size=60,
)


def drive(script) -> Log:
    """Play a random client: mostly in-sequence batches, some retries, gaps and epoch changes."""
    lg = Log()
    next_seq = {}
    epoch = {}
    sent: dict[int, list] = {}
    for pid, op, count in script:
        e = epoch.setdefault(pid, 0)
        s = next_seq.setdefault(pid, 0)
        if op == "dup" and sent.get(pid):
            h = sent[pid][-1]
        elif op == "gap":
            h = header(pid=pid, epoch=e, seq=s + 1, count=count)
        elif op == "bump":
            epoch[pid] = e + 1
            next_seq[pid] = 0
            h = header(pid=pid, epoch=e + 1, seq=0, count=count)
        elif op == "old" and e > 0:
            h = header(pid=pid, epoch=e - 1, seq=s, count=count)
        else:
            h = header(pid=pid, epoch=e, seq=s, count=count)
        try:
            result = lg.append(h)
        except ProducerStateError as err:
            assert op in ("gap", "old"), (op, err)
            continue
        if isinstance(result, int):
            # a gap is only accepted from a producer the partition does not know yet
            assert op != "gap" or pid not in sent, (op, h)
            assert op != "old" or e == 0, (op, h)
            next_seq[pid] = h.base_sequence + count
            sent.setdefault(pid, []).append(h)
        else:
            assert op == "dup"
    return lg


@settings(max_examples=200, deadline=None)
@given(ops)
def test_replaying_the_log_rebuilds_the_same_state(script):
    lg = drive(script)
    rebuilt = ProducerStateManager("t-0", ProducerStateConfig(DAY_MS))
    for h in lg.headers:
        rebuilt.replay(h)
    assert rebuilt.map_end_offset == lg.end
    assert {p: (e.epoch, list(e.batches)) for p, e in rebuilt.producers.items()} == {
        p: (e.epoch, list(e.batches)) for p, e in lg.state.producers.items()
    }


@settings(max_examples=200, deadline=None)
@given(ops, st.data())
def test_snapshot_then_replay_decides_like_the_live_state(script, data):
    lg = drive(script)
    cut = data.draw(st.integers(0, len(lg.headers)))
    # the state as of the cut, snapshotted, then the headers after it replayed
    upto = ProducerStateManager("t-0", ProducerStateConfig(DAY_MS))
    for h in lg.headers[:cut]:
        upto.replay(h)
    restored = ProducerStateManager("t-0", ProducerStateConfig(DAY_MS))
    restored.load_snapshot(upto.encode_snapshot(), upto.map_end_offset, NOW)
    for h in lg.headers[cut:]:
        restored.replay(h)
    for pid, entry in lg.state.producers.items():
        last = entry.batches[-1]
        for probe in (
            header(pid=pid, epoch=entry.epoch, seq=last.first_seq, count=last.offset_delta + 1),  # retry of last
            header(pid=pid, epoch=entry.epoch, seq=(last.last_seq + 1) & INT32_MAX),  # next
            header(pid=pid, epoch=entry.epoch, seq=(last.last_seq + 3) & INT32_MAX),  # gap
            header(pid=pid, epoch=entry.epoch - 1, seq=0),  # fenced
        ):
            assert outcome(restored, probe, lg.end) == outcome(lg.state, probe, lg.end)


def outcome(state: ProducerStateManager, h: BatchHeader, end: int):
    try:
        dup = state.check(h, end)
    except ProducerStateError as e:
        return e.code
    return None if dup is None else (dup.first_offset, dup.last_offset)


# -- producer id blocks ----------------------------------------------------------------------------


def test_producer_id_blocks_are_claimed_before_use(tmp_path):
    from broker.config import ConfigError
    from broker.producer_ids import PRODUCER_IDS_FILE, ProducerIdAllocator

    a = ProducerIdAllocator(str(tmp_path), block_size=10)
    assert [a.next_id() for _ in range(12)] == list(range(12))
    # a restart (or crash) continues after the last claimed block, never inside it
    b = ProducerIdAllocator(str(tmp_path), block_size=10)
    assert b.next_id() == 20
    (tmp_path / PRODUCER_IDS_FILE).write_text("{not json")
    with pytest.raises(ConfigError, match="is damaged"):
        ProducerIdAllocator(str(tmp_path))


async def test_init_producer_id_on_a_disk_that_refuses_the_next_block_is_retriable(tmp_path, monkeypatch):
    """When the next block of producer ids cannot be recorded (a full disk), InitProducerId
    answers COORDINATOR_LOAD_IN_PROGRESS, which producers retry, as Kafka's
    RPCProducerIdManager does while it has no block; it used to raise and close the
    connection. No id is handed out, and the next request after the disk has room gets the
    block that could not be claimed."""
    import errno
    import os

    from broker.broker import Broker
    from broker.config import BrokerConfig
    from broker.context import RequestContext
    from broker.handlers import init_producer_id
    from broker.producer_ids import PRODUCER_IDS_FILE
    from protocol.messages.init_producer_id_request import InitProducerIdRequest

    b = Broker(BrokerConfig({"log.dirs": str(tmp_path / "data")}))
    real_open = os.open

    def full(path, flags, *args, **kw):
        if str(path).endswith(PRODUCER_IDS_FILE + ".tmp"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, flags, *args, **kw)

    async def init():
        ctx = RequestContext(b, None, 22, 4, 1, "tests")
        r = await init_producer_id.handle(ctx, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000,
                                                                     producer_id=-1, producer_epoch=-1))
        return r.error_code, r.producer_id

    monkeypatch.setattr(os, "open", full)
    assert await init() == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1)
    monkeypatch.undo()
    assert await init() == (ErrorCode.NONE, 0)
    await b.store.close()
