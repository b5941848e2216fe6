"""Interleavings of the share coordinator runtime with its own log I/O, forced in-process.

A request's records are appended and replayed at once, and answered after their fsync
(``log.flush.interval.messages=1``). These tests hold that fsync (an executor whose jobs wait
for the test) and run the coordinator's other work meanwhile, then model what the disk holds
after a power loss: the bytes an fsync confirmed, nothing after them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from contextlib import asynccontextmanager
from pathlib import Path

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.log import FileLogStore
from coordinator.share.checkpoint import load_partition
from coordinator.share.shard import ShareCoordinatorShard, SharePartitionKey
from protocol.coordinator_serde import SHARE_GROUP_STATE_TOPIC
from protocol.errors import ErrorCode
from protocol.messages import initialize_share_group_state_request as ireq
from protocol.messages import read_share_group_state_request as rreq
from protocol.messages import write_share_group_state_request as wreq

G = "g"


class HeldExecutor(concurrent.futures.Executor):
    """The store's fsync executor: runs jobs at once until ``hold()``; then keeps them until
    ``release()`` runs them or ``fail()`` fails them as a failed fsync does (and stops holding)."""

    def __init__(self) -> None:
        self.holding = False
        self.held: list[tuple[concurrent.futures.Future, object]] = []
        self.submitted = asyncio.Event()

    def submit(self, fn, /, *args, **kwargs):
        fut: concurrent.futures.Future = concurrent.futures.Future()
        if not self.holding:
            fut.set_result(fn(*args, **kwargs))
            return fut
        self.held.append((fut, lambda: fn(*args, **kwargs)))
        self.submitted.set()
        return fut

    def hold(self) -> None:
        self.holding = True

    def release(self) -> None:
        self.holding = False
        for fut, job in self.held:
            fut.set_result(job())
        self.held.clear()

    def fail(self) -> None:
        self.holding = False
        for fut, _ in self.held:
            fut.set_exception(OSError(5, "Input/output error"))
        self.held.clear()


@asynccontextmanager
async def broker_on(data: Path, extra: dict | None = None, executor: HeldExecutor | None = None):
    data.mkdir(parents=True, exist_ok=True)
    b = Broker(BrokerConfig({
        "log.dirs": str(data), "listeners": "PLAINTEXT://127.0.0.1:0",
        "offsets.topic.num.partitions": "1", "share.coordinator.state.topic.num.partitions": "1",
        "log.flush.interval.messages": "1", "share.coordinator.state.topic.segment.bytes": "100",
        "share.coordinator.snapshot.update.records.per.snapshot": "1",
        "share.coordinator.state.topic.prune.interval.ms": "3600000", **(extra or {})}),
        store=FileLogStore(str(data), executor=executor or HeldExecutor()))
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


def init_request(topic_id):
    return ireq.InitializeShareGroupStateRequest(G, [ireq.InitializeStateData(topic_id, [ireq.PartitionData(0, 0, 0)])])


def write_request(topic_id, start: int, batches=()):
    return wreq.WriteShareGroupStateRequest(G, [wreq.WriteStateData(topic_id, [wreq.PartitionData(
        0, 0, 0, start, -1, [wreq.StateBatch(*b) for b in batches])])])


def code_of(rsp) -> int:
    return rsp.results[0].partitions[0].error_code


def durable_sizes(partition_dir: Path) -> dict[str, int]:
    return {f.name: f.stat().st_size for f in partition_dir.glob("*.log")}


def lose_unsynced_bytes(partition_dir: Path, durable: dict[str, int]) -> None:
    """What a power loss leaves: each segment file cut back to what an fsync confirmed."""
    for f in partition_dir.glob("*.log"):
        os.truncate(f, durable.get(f.name, 0))


def reload(data: Path) -> ShareCoordinatorShard:
    async def go():
        store = FileLogStore(str(data))
        try:
            _, (keys, last) = await load_partition(store.get(SHARE_GROUP_STATE_TOPIC, 0))
        finally:
            for lg in store.partitions():
                lg.close()
        shard = ShareCoordinatorShard(1)
        shard.load(keys, last)
        return shard
    return asyncio.run(go())


def test_pruning_waits_for_the_fsync_of_the_snapshot_it_prunes_up_to(tmp_path):
    """A write's new snapshot is appended and replayed, and its fsync is still running when the
    prune task runs. Pruning up to that snapshot deletes the acknowledged records below it
    before the snapshot is durable: if that fsync then fails (or the power goes), the key's
    acknowledged state is gone. Kafka reads ``lastRedundantOffset`` in a write operation, which
    completes only once every record written before it is committed."""
    data = tmp_path / "data"

    held = HeldExecutor()

    async def scenario():
        async with broker_on(data, executor=held) as b:
            topic_id = b.topics.create("t", 1).topic_id
            svc, runtime = b.share_coordinator, b.share_coordinator_runtime
            assert code_of(await svc.initialize_state(init_request(topic_id))) == 0  # snapshot, offset 0
            assert code_of(await svc.write_state(write_request(topic_id, 10))) == 0  # update, offset 1
            lg = b.store.get(SHARE_GROUP_STATE_TOPIC, 0)
            part_dir = Path(lg.directory)
            durable = durable_sizes(part_dir)
            held.hold()
            # The next write is a snapshot (one update since the last one) at offset 2.
            write = asyncio.ensure_future(svc.write_state(write_request(topic_id, 20, [(20, 29, 2, 1)])))
            await held.submitted.wait()
            pruned = asyncio.ensure_future(runtime.prune())
            await asyncio.sleep(0)  # one turn: the prune task runs up to its first wait
            assert not pruned.done()  # it waits for the fsync in flight
            held.fail()
            assert code_of(await write) == ErrorCode.NOT_COORDINATOR
            assert await pruned == {}
            assert lg.start_offset == 0
        lose_unsynced_bytes(part_dir, durable)
        return topic_id

    topic_id = asyncio.run(scenario())
    state = reload(data).state(SharePartitionKey(G, topic_id, 0))
    assert state is not None and state.start_offset == 10  # the last acknowledged write



def test_pruning_moves_once_the_fsync_in_flight_succeeds(tmp_path):
    held = HeldExecutor()

    async def scenario():
        async with broker_on(tmp_path / "data", executor=held) as b:
            topic_id = b.topics.create("t", 1).topic_id
            svc, runtime = b.share_coordinator, b.share_coordinator_runtime
            assert code_of(await svc.initialize_state(init_request(topic_id))) == 0
            assert code_of(await svc.write_state(write_request(topic_id, 10))) == 0
            held.hold()
            write = asyncio.ensure_future(svc.write_state(write_request(topic_id, 20, [(20, 29, 2, 1)])))
            await held.submitted.wait()
            pruned = asyncio.ensure_future(runtime.prune())
            await asyncio.sleep(0)
            assert not pruned.done()
            held.release()
            assert code_of(await write) == 0
            assert await pruned == {0: 2}

    asyncio.run(scenario())


def read_request(topic_id):
    return rreq.ReadShareGroupStateRequest(G, [rreq.ReadStateData(topic_id, [rreq.PartitionData(0, 0)])])


def test_a_snapshot_the_coordinator_writes_itself_is_built_on_the_state_it_is_applied_to(tmp_path):
    """The stop's snapshots are computed from the shard, then written by tasks of their own.
    A write that runs in between (it was ready first) is answered, and the stale snapshot
    appended after it then takes the key back to the state before it. Kafka computes such
    records inside a write operation, on the state the records are then applied to."""
    async def scenario():
        async with broker_on(tmp_path / "data", {"share.coordinator.snapshot.update.records.per.snapshot": "500"}) as b:
            topic_id = b.topics.create("t", 1).topic_id
            svc, runtime = b.share_coordinator, b.share_coordinator_runtime
            assert code_of(await svc.initialize_state(init_request(topic_id))) == 0
            assert code_of(await svc.write_state(write_request(topic_id, 10))) == 0  # an update to snapshot
            _, written = await asyncio.gather(runtime.snapshot_and_prune(),
                                              svc.write_state(write_request(topic_id, 30)))
            assert code_of(written) == 0
            rsp = await svc.read_state(read_request(topic_id))
            assert rsp.results[0].partitions[0].start_offset == 30
            return topic_id

    topic_id = asyncio.run(scenario())
    state = reload(tmp_path / "data").state(SharePartitionKey(G, topic_id, 0))
    assert state is not None and state.start_offset == 30
