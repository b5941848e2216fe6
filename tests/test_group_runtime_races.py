"""Interleavings of the group-coordinator runtime: an operation that read the group, awaited (a
``__consumer_offsets`` write, a persister call) and then carried on while another task changed
the group. Each test forces its interleaving with held writes or held persister calls (no sleeps
standing in for synchronisation) and drives the real runtime in-process."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from broker.handlers import describe_groups, list_groups, share_group_describe
from broker.log import KafkaStorageError
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.describe_groups_request import DescribeGroupsRequest
from protocol.messages.list_groups_request import ListGroupsRequest
from protocol.messages.share_group_describe_request import ShareGroupDescribeRequest

from .test_group_persistence import A, B, FakePersister, Runtime, World, hb


async def until(condition) -> None:
    """Let the other tasks run until ``condition()`` holds (they only need the loop, no time)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the interleaving was not reached")


class HeldWrites(Runtime):
    """Writes wait for ``release`` while ``hold``; ``held`` counts the writes waiting."""

    hold = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.release = asyncio.Event()
        self.held = 0

    async def _persist(self, records) -> None:
        if self.hold:
            self.held += 1
            await self.release.wait()
        await super()._persist(records)


class HeldPersister(FakePersister):
    """Every InitializeShareGroupState waits until the test answers it: ``calls`` holds
    ``(topic id, partition, state epoch)`` and the future to set with the error code."""

    def __init__(self, events: list) -> None:
        super().__init__(events)
        self.calls: list[tuple[tuple, asyncio.Future]] = []

    async def initialize_state(self, group_id, topic_id, partition, *, state_epoch, start_offset):
        answer = asyncio.get_running_loop().create_future()
        self.calls.append(((topic_id, partition, state_epoch), answer))
        code = await answer
        self.events.append(("initialize", group_id, topic_id, partition, state_epoch, start_offset))
        if code == ErrorCode.NONE:
            self.state[(group_id, topic_id, partition)] = state_epoch
        return code, None

    async def read_summary(self, group_id, pairs):
        return {}

    def pending(self) -> list[tuple]:
        return [call for call, answer in self.calls if not answer.done()]

    def answer(self, topic_id, partition, code=ErrorCode.NONE) -> None:
        for (t, p, _), future in self.calls:
            if (t, p) == (topic_id, partition) and not future.done():
                future.set_result(code)
                return
        raise AssertionError(f"no pending initialisation of {topic_id}-{partition}")

    def answer_all(self) -> None:
        for _, future in self.calls:
            if not future.done():
                future.set_result(ErrorCode.NONE)


def failing_append(lg, data, headers):
    raise KafkaStorageError("disk gone")


def fail_next_append(offsets) -> None:
    """The next append to ``__consumer_offsets`` fails (a full disk), later ones succeed."""
    original = offsets._append

    def append(lg, data, headers):
        offsets._append = original
        raise KafkaStorageError("disk gone")

    offsets._append = append


# --- DeleteGroups and a failed write ----------------------------------------------------------------


async def test_delete_groups_queued_behind_a_write_that_fails_answers_instead_of_raising(tmp_path):
    """DeleteGroups computed on a leave whose write then fails: its own write never happens
    (the shard is rebuilt from the log, where the member still is). Like every other request
    it must answer (NOT_COORDINATOR, Kafka's answer to a failed write), not raise StaleWrite out
    of the handler (which closes the client's connection)."""
    world = World(tmp_path)
    world.topics.create("orders", 2)
    runtime = await world.started(runtime_cls=HeldWrites)
    a = await hb(runtime, A, 0, ["orders"])
    original = world.offsets._append
    runtime.hold = True
    leave = asyncio.ensure_future(hb(runtime, A, -1))
    await until(lambda: runtime.held == 1)
    delete = asyncio.ensure_future(runtime.delete_group("g"))  # the group looks empty: queued behind the leave
    await until(lambda: runtime.held == 1 and not delete.done() and runtime.coordinator.has_group("g")
                and runtime.coordinator.for_group("g")._groups["g"].deleting_topics)
    world.offsets._append = failing_append
    runtime.hold = False
    runtime.release.set()
    assert (await leave).error_code == ErrorCode.NOT_COORDINATOR
    with pytest.raises(KafkaError) as e:
        await delete
    assert e.value.code == ErrorCode.NOT_COORDINATOR
    assert runtime.coordinator.member("g", A) is not None  # the log's state: the member never left
    world.offsets._append = original
    assert (await hb(runtime, A, a.member_epoch)).error_code == 0
    await runtime.stop()


async def test_delete_groups_whose_own_write_fails_answers_instead_of_raising(tmp_path):
    world = World(tmp_path)
    world.topics.create("orders", 1)
    runtime = await world.started()
    await hb(runtime, A, 0, ["orders"])
    await hb(runtime, A, -1)
    world.offsets._append = failing_append
    with pytest.raises(KafkaError) as e:
        await runtime.delete_group("g")
    assert e.value.code == ErrorCode.NOT_COORDINATOR
    await runtime.stop()


# --- share-state initialisation -----------------------------------------------------------------------


async def test_a_failed_initialization_keeps_the_retry_time_of_partitions_still_initializing(tmp_path):
    """Two initialisations of one topic under way (partitions added twice); the first fails.
    Its partitions leave the initializing set, but the second's stay initializing, and as in
    Kafka (uninitializeShareGroupState keeps the topic's timestamp for them) they are not
    initialised again until the retry interval passes: a second InitializeShareGroupState
    landing after the first succeeded would reset state that members already use."""
    world = World(tmp_path)
    world.persister = persister = HeldPersister(world.events)
    orders = world.topics.create("orders", 1)
    other = world.topics.create("other", 1)
    runtime = await world.started()
    join = asyncio.ensure_future(hb(runtime, A, 0, ["orders", "other"]))
    await until(lambda: len(persister.pending()) == 2)
    persister.answer_all()
    assert (await join).error_code == 0
    world.topics.add_partitions("orders", 2)  # initialises orders-1
    await until(lambda: len(persister.pending()) == 1)
    world.topics.add_partitions("orders", 3)  # orders-1 is initializing: initialises orders-2 only
    await until(lambda: len(persister.pending()) == 2)
    assert sorted(p for t, p, _ in persister.pending()) == [1, 2]
    persister.answer(orders.topic_id, 1, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    group = runtime.coordinator.for_group("g")._groups["g"]
    await until(lambda: group.initializing_topics.get(orders.topic_id, ("", {1}))[1] == {2})
    world.topics.add_partitions("other", 2)  # the group looks for partitions without state again
    await until(lambda: (other.topic_id, 1) in [(t, p) for t, p, _ in persister.pending()])
    names = {orders.topic_id: "orders", other.topic_id: "other"}
    assert sorted((names[t], p) for t, p, _ in persister.pending()) == [
        ("orders", 1),  # failed: retried at once
        ("orders", 2),  # the second initialisation, still under way: not a second call
        ("other", 1),
    ]
    persister.answer_all()
    await runtime.flush()
    await runtime.stop()


# --- reads ------------------------------------------------------------------------------------------


async def test_share_group_describe_does_not_show_a_join_that_a_failed_write_takes_back(tmp_path):
    """Kafka answers ShareGroupDescribe from the state at the last committed offset: a member
    whose join is still being written is not described, and one whose write fails never is."""
    world = World(tmp_path)
    world.topics.create("orders", 1)
    runtime = await world.started(runtime_cls=HeldWrites)
    await hb(runtime, A, 0, ["orders"])
    ctx = SimpleNamespace(broker=SimpleNamespace(group_coordinator=runtime), api_version=1)
    original = world.offsets._append
    runtime.hold = True
    join = asyncio.ensure_future(hb(runtime, B, 0, ["orders"]))
    await until(lambda: runtime.held == 1)
    describe = asyncio.ensure_future(share_group_describe.handle(ctx, ShareGroupDescribeRequest(group_ids=["g"])))
    await until(lambda: describe.done() or runtime.held == 1)
    world.offsets._append = failing_append
    runtime.hold = False
    runtime.release.set()
    assert (await join).error_code == ErrorCode.NOT_COORDINATOR
    (group,) = (await describe).groups
    assert (group.error_code, [m.member_id for m in group.members]) == (0, [A])
    world.offsets._append = original
    await runtime.stop()


async def test_list_and_describe_groups_do_not_show_a_group_whose_creation_a_failed_write_takes_back(tmp_path):
    """ListGroups and DescribeGroups read at the last committed offset too: while the first
    join's write is pending the group is not there yet, and after it fails it never was."""
    world = World(tmp_path)
    world.topics.create("orders", 1)
    runtime = await world.started(runtime_cls=HeldWrites)
    ctx = SimpleNamespace(broker=SimpleNamespace(group_coordinator=runtime), api_version=6)
    original = world.offsets._append
    runtime.hold = True
    join = asyncio.ensure_future(hb(runtime, A, 0, ["orders"]))
    await until(lambda: runtime.held == 1)
    listed = asyncio.ensure_future(list_groups.handle(ctx, ListGroupsRequest()))
    described = asyncio.ensure_future(describe_groups.handle(ctx, DescribeGroupsRequest(groups=["g"])))
    await until(lambda: listed.done() or described.done() or runtime.held == 1)
    world.offsets._append = failing_append
    runtime.hold = False
    runtime.release.set()
    assert (await join).error_code == ErrorCode.NOT_COORDINATOR
    assert (await listed).groups == []
    (group,) = (await described).groups
    assert (group.error_code, group.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group g not found.")
    world.offsets._append = original
    await hb(runtime, A, 0, ["orders"])  # the rebuilt shard takes the join now
    assert [g.group_id for g in (await list_groups.handle(ctx, ListGroupsRequest())).groups] == ["g"]
    (group,) = (await describe_groups.handle(ctx, DescribeGroupsRequest(groups=["g"]))).groups
    assert group.error_message == "Group g is not a classic group."
    await runtime.stop()


async def test_share_group_offsets_of_all_topics_do_not_list_an_initialization_a_failed_write_takes_back(tmp_path):
    world = World(tmp_path)
    world.persister = persister = HeldPersister(world.events)
    orders = world.topics.create("orders", 1)
    runtime = await world.started(runtime_cls=HeldWrites)
    join = asyncio.ensure_future(hb(runtime, A, 0, ["orders"]))
    await until(lambda: len(persister.pending()) == 1)
    runtime.hold = True
    persister.answer(orders.topic_id, 0)  # initialized in memory; its record's write is held
    await until(lambda: runtime.held == 1)
    described = asyncio.ensure_future(runtime.share_group_offsets("g", None))
    await until(lambda: described.done() or runtime.held == 1)
    fail_next_append(world.offsets)
    runtime.hold = False
    runtime.release.set()
    assert (await join).error_code == 0
    assert await described == []  # the log never had orders-0 initialized
    await until(lambda: persister.pending())  # the rebuilt shard initialises orders-0 again
    persister.answer_all()
    await runtime.stop()


# --- a __consumer_offsets partition whose writes keep failing ------------------------------------


class CountingLoads(HeldWrites):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.loads = 0

    async def _load_partition(self, partition, coordinator):
        self.loads += 1
        return await super()._load_partition(partition, coordinator)


async def test_a_shard_whose_writes_keep_failing_is_not_rebuilt_in_a_loop(tmp_path):
    """A full disk: every append fails. The failed write of an initialisation's outcome rebuilds
    the shard; the rebuilt shard sets up the still-initializing partition again at once, that
    write fails and rebuilds again, and so on: the partition's whole log replayed in a busy loop
    for as long as the disk stays full. Consecutive failures back off (on the coordinator's
    clock); the first one still rebuilds at once, and a write that succeeds resets it."""
    world = World(tmp_path)
    world.persister = persister = HeldPersister(world.events)
    orders = world.topics.create("orders", 1)
    runtime = await world.started(runtime_cls=CountingLoads)
    join = asyncio.ensure_future(hb(runtime, A, 0, ["orders"]))
    await until(lambda: len(persister.pending()) == 1)
    original = world.offsets._append
    world.offsets._append = failing_append
    persister.answer(orders.topic_id, 0)  # the "initialized" write fails
    assert (await join).error_code == 0
    for _ in range(500):
        await asyncio.sleep(0)
    assert runtime.loads <= 2, runtime.loads  # at once, then once more before backing off
    loads = runtime.loads
    world.clock.advance(10_000)
    for _ in range(50):
        await asyncio.sleep(0)
    assert loads < runtime.loads <= loads + 2
    world.offsets._append = original  # the disk has room again
    world.clock.advance(10_000)
    await until(lambda: persister.pending())  # the rebuilt shard initialises orders-0 again
    persister.answer_all()
    await runtime.flush()
    assert (await hb(runtime, A, 1)).error_code == 0
    assert runtime.coordinator.for_group("g")._groups["g"].initialized_topics
    await runtime.stop()
