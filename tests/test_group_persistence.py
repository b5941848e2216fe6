"""The group coordinator on ``__consumer_offsets``, in-process: Kafka's record sequences and
batch layout, share-partition state set up before anything is assigned, loading (and what
heartbeats see meanwhile), rebuilding after a failed append, restarts that keep groups,
members and epochs, compaction, and a property over random operations with restarts and
compactions."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.handlers import describe_groups, share_group_describe
from broker.log import KafkaStorageError, LogConfig
from broker.log.memory import MemoryLogStore
from broker.topics import TopicRegistry
from coordinator.group import records as rec
from coordinator.group.config_store import GroupConfigStore
from coordinator.group.loader import load_partition
from coordinator.group.offsets_topic import (
    CONSUMER_OFFSETS,
    OffsetsTopic,
    partition_for,
    topic_configs,
)
from coordinator.group.runtime import GroupCoordinatorRuntime, ShardState, group_broker_properties
from coordinator.group.share_group import ShareGroupCoordinator
from coordinator.group.topics import TopicInfo, TopicsImage
from protocol import coordinator_serde as serde
from protocol.coordinator_records.group_metadata_key import GroupMetadataKey
from protocol.coordinator_records.group_metadata_value import GroupMetadataValue
from protocol.coordinator_records.offset_commit_key import OffsetCommitKey
from protocol.coordinator_records.offset_commit_value import OffsetCommitValue
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.describe_groups_request import DescribeGroupsRequest
from protocol.messages.share_group_describe_request import ShareGroupDescribeRequest
from protocol.records import build_batch, check_batches, iter_records, parse_header

HOST = "/127.0.0.1"
A, B, C = "kAMA2MYCSgWVW/t4+7NOvA", "bBBB2MYCSgWVW/t4+7NOvA", "cCCC2MYCSgWVW/t4+7NOvA"
SESSION_MS = 45_000


class FakeTimer:
    def __init__(self, when: int, callback) -> None:
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now
        self.timers: list[FakeTimer] = []

    def now_ms(self) -> int:
        return self.now

    def call_at(self, when_ms: int, callback) -> FakeTimer:
        timer = FakeTimer(when_ms, callback)
        self.timers.append(timer)
        return timer

    def advance(self, ms: int) -> None:
        self.now += ms
        while True:
            due = [t for t in self.timers if not t.cancelled and t.when <= self.now]
            if not due:
                return
            timer = min(due, key=lambda t: t.when)
            self.timers.remove(timer)
            timer.callback()


class FakePersister:
    """Share-partition state as a dict; ``events`` (when set) gets one entry per call so tests
    can order persister calls against ``__consumer_offsets`` writes."""

    def __init__(self, events: list | None = None) -> None:
        self.state: dict[tuple[str, uuid.UUID, int], int] = {}  # -> state epoch
        self.events = events if events is not None else []
        self.fail_initialize = False
        self.fail_delete = False

    async def initialize_state(self, group_id, topic_id, partition, *, state_epoch, start_offset):
        await asyncio.sleep(0)
        self.events.append(("initialize", group_id, topic_id, partition, state_epoch, start_offset))
        if self.fail_initialize:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "share coordinator loading"
        self.state[(group_id, topic_id, partition)] = state_epoch
        return ErrorCode.NONE, None

    async def delete_state(self, group_id, partitions):
        await asyncio.sleep(0)
        self.events.append(("delete", group_id, sorted(partitions)))
        if self.fail_delete:
            return {tp: (ErrorCode.COORDINATOR_NOT_AVAILABLE, "down") for tp in partitions}
        for topic_id, p in partitions:
            self.state.pop((group_id, topic_id, p), None)
        return {tp: (ErrorCode.NONE, None) for tp in partitions}


class Runtime(GroupCoordinatorRuntime):
    """Logs every persisted write into ``events`` (the persister logs its calls there too)."""

    def __init__(self, *args, events: list, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.events = events

    async def _persist(self, records) -> None:
        await super()._persist(records)
        self.events.append(("write", list(records)))


class World:
    """One broker's worth of state that outlives a runtime: topics, ``__consumer_offsets``,
    share state. ``runtime()`` builds a coordinator runtime on it (a fresh one = a restart)."""

    def __init__(self, tmp_path, num_partitions: int = 3, persister: bool = True) -> None:
        self.topics = TopicRegistry(str(tmp_path), MemoryLogStore(),
                                    lambda overrides: LogConfig.from_properties({}, overrides))
        self.offsets = OffsetsTopic.in_memory(num_partitions)
        self.events: list = []
        self.persister = FakePersister(self.events) if persister else None
        self.clock = FakeClock()
        self.configs = GroupConfigStore(None)

    def runtime(self, runtime_cls=Runtime, **kwargs) -> GroupCoordinatorRuntime:
        return runtime_cls(self.topics, group_broker_properties({}), self.configs, self.clock,
                           offsets=self.offsets, persister=self.persister, events=self.events, **kwargs)

    async def started(self, **kwargs) -> GroupCoordinatorRuntime:
        runtime = self.runtime(**kwargs)
        await runtime.start()
        await runtime.wait_loaded()
        await runtime.flush()
        return runtime

    def log_records(self, group: str = "g") -> list[rec.CoordinatorRecord]:
        """Everything in the group's ``__consumer_offsets`` partition, decoded by coordinator_serde."""
        return [rec.CoordinatorRecord(*serde.decode(r.key, r.value, serde.CONSUMER_OFFSETS_TOPIC))
                for _, r in log_entries(self.offsets, self.offsets.partition_for(group))]

    def writes(self) -> list[list]:
        return [e[1] for e in self.events if e[0] == "write"]


def log_entries(offsets: OffsetsTopic, partition: int):
    """(batch header, record) for every record of a partition, in offset order."""
    lg = offsets.log(partition)
    result = lg.read(lg.start_offset, 1 << 30)
    for batch in result.batches:
        chunk = result.chunks[batch.chunk]
        for record in iter_records(chunk, batch.pos):
            yield parse_header(chunk, batch.pos), record


async def hb(runtime, member, epoch, subs=None, group="g"):
    return await runtime.heartbeat(group, member, epoch, None, subs, "client", HOST)


def parts(resp, topic) -> list[int]:
    assert resp.error_code == 0, (resp.error_code, resp.error_message)
    assert resp.assignment is not None
    return sorted(p for tp in resp.assignment.topic_partitions if tp.topic_id == topic.topic_id for p in tp.partitions)


def kinds(records) -> list[str]:
    return [type(r.key).__name__.removeprefix("ShareGroup").removesuffix("Key") + ("-" if r.value is None else "")
            for r in records]


def state_value(initializing=(), initialized=(), deleting=()):
    """A ShareGroupStatePartitionMetadata value as comparable plain data."""
    return ([(t.topic_id, t.topic_name, sorted(t.partitions)) for t in initializing],
            [(t.topic_id, t.topic_name, sorted(t.partitions)) for t in initialized],
            [(t.topic_id, t.topic_name) for t in deleting])


def spm(record) -> tuple:
    v = record.value
    return state_value(v.initializing_topics, v.initialized_topics, v.deleting_topics)


# --- Kafka's record sequence, share state before assignment --------------------------------------


async def test_a_join_writes_kafkas_records_and_initializes_share_state_before_assigning(tmp_path):
    world = World(tmp_path)
    orders = world.topics.create("orders", 3)
    runtime = await world.started()
    join = await hb(runtime, A, 0, ["orders"])
    assert (join.member_epoch, parts(join, orders)) == (2, [0, 1, 2])
    steady = await hb(runtime, A, join.member_epoch)
    assert (steady.error_code, steady.member_epoch, steady.assignment) == (0, 2, None)
    leave = await hb(runtime, A, -1)
    assert (leave.error_code, leave.member_epoch) == (0, -1)
    await runtime.stop()

    steps = [(e[0], kinds(e[1])) if e[0] == "write" else e[:1] + e[3:] for e in world.events]
    assert steps == [
        # the join, as Kafka's heartbeat writes it: nothing assignable yet, then "initializing"
        ("write", ["MemberMetadata", "Metadata", "TargetAssignmentMember", "TargetAssignmentMetadata",
                   "CurrentMemberAssignment", "StatePartitionMetadata"]),
        ("initialize", 0, 1, -1), ("initialize", 1, 1, -1), ("initialize", 2, 1, -1),  # state epoch = group epoch
        ("write", ["StatePartitionMetadata"]),  # initialized
        # the member's next heartbeat (kshare sends it for the member): a new epoch with the partitions
        ("write", ["Metadata", "TargetAssignmentMember", "TargetAssignmentMetadata", "CurrentMemberAssignment"]),
        # the leave
        ("write", ["CurrentMemberAssignment-", "TargetAssignmentMember-", "MemberMetadata-", "Metadata"]),
    ]
    writes = world.writes()
    tid = orders.topic_id
    assert spm(writes[0][-1]) == ([(tid, "orders", [0, 1, 2])], [], [])
    assert spm(writes[1][0]) == ([], [(tid, "orders", [0, 1, 2])], [])
    assert [r.value.epoch for w in writes for r in w if isinstance(r.key, rec.ShareGroupMetadataKey)] == [1, 2, 3]
    assert writes[0][4].value.assigned_partitions == [] and writes[2][3].value.assigned_partitions[0].partitions == [
        0, 1, 2]
    # the partition log holds exactly these records, one batch per write
    assert world.log_records() == [r for w in writes for r in w]


async def test_a_failed_initialization_is_retried_by_the_next_heartbeat(tmp_path):
    world = World(tmp_path)
    orders = world.topics.create("orders", 2)
    runtime = await world.started()
    world.persister.fail_initialize = True
    join = await hb(runtime, A, 0, ["orders"])
    assert (join.member_epoch, parts(join, orders)) == (1, [])  # nothing initialized: nothing assigned
    assert spm(world.writes()[-1][0]) == ([], [], [])  # no longer initializing (Kafka's uninitialize)
    world.persister.fail_initialize = False
    again = await hb(runtime, A, join.member_epoch)
    assert (again.member_epoch, parts(again, orders)) == (2, [0, 1])
    assert sorted(p for (_, _, p), e in world.persister.state.items()) == [0, 1]
    assert set(world.persister.state.values()) == {1}  # initialised at the group epoch of that heartbeat
    await runtime.stop()


async def test_topic_changes_set_up_share_state_before_the_next_heartbeat(tmp_path):
    world = World(tmp_path)
    orders = world.topics.create("orders", 1)
    runtime = await world.started()
    join = await hb(runtime, A, 0, ["orders", "later"])
    assert parts(join, orders) == [0]
    del world.events[:]
    later = world.topics.create("later", 2)  # the group subscribes to it: initialise at once
    world.topics.add_partitions("orders", 2)
    grown = await hb(runtime, A, join.member_epoch)
    assert grown.member_epoch == join.member_epoch + 1  # one bump, at the heartbeat, for both changes
    assert (parts(grown, later), parts(grown, orders)) == ([0, 1], [0, 1])
    # initialised ahead of that heartbeat, with the epoch it bumps to (Kafka initialises there)
    assert {e for (_, t, _), e in world.persister.state.items() if t == later.topic_id} == {grown.member_epoch}
    assert world.persister.state[("g", orders.topic_id, 1)] == grown.member_epoch
    initialized = [e for e in world.events if e[0] == "initialize"]
    assert sorted((e[2], e[3]) for e in initialized) == sorted([(later.topic_id, 0), (later.topic_id, 1),
                                                                 (orders.topic_id, 1)])
    await runtime.stop()


async def test_a_deleted_topic_leaves_the_state_metadata_without_a_persister_delete(tmp_path):
    world = World(tmp_path)
    orders = world.topics.create("orders", 1)
    payments = world.topics.create("payments", 1)
    runtime = await world.started()
    await hb(runtime, A, 0, ["orders", "payments"])
    world.topics.delete("payments")
    await runtime.flush()
    last = world.writes()[-1]
    assert kinds(last) == ["StatePartitionMetadata"]  # the epoch waits for the next heartbeat
    assert spm(last[0]) == ([], [(orders.topic_id, "orders", [0])], [])
    assert not [e for e in world.events if e[0] == "delete"]  # the share coordinator drops its own state
    assert (payments.topic_id, "payments", [0]) in spm(world.writes()[-3][-1])[1]  # it had been initialized
    await runtime.stop()


async def test_deleting_a_group_deletes_its_share_state_first(tmp_path):
    world = World(tmp_path)
    orders = world.topics.create("orders", 2)
    runtime = await world.started()
    await hb(runtime, A, 0, ["orders"])
    with pytest.raises(KafkaError) as e:
        await runtime.delete_group("g")
    assert e.value.code == ErrorCode.NON_EMPTY_GROUP
    await hb(runtime, A, -1)
    world.persister.fail_delete = True
    with pytest.raises(KafkaError) as e:
        await runtime.delete_group("g")
    assert e.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE and runtime.coordinator.has_group("g")
    assert spm(world.writes()[-1][0]) == ([], [], [(orders.topic_id, "orders")])
    world.persister.fail_delete = False
    del world.events[:]
    await runtime.delete_group("g")
    steps = [(e[0], kinds(e[1])) if e[0] == "write" else e for e in world.events]
    assert steps == [
        ("write", ["StatePartitionMetadata"]),  # deleting (again: the earlier attempt failed)
        ("delete", "g", [(orders.topic_id, 0), (orders.topic_id, 1)]),
        ("write", ["TargetAssignmentMetadata-", "StatePartitionMetadata-", "Metadata-"]),
    ]
    assert world.persister.state == {} and not runtime.coordinator.has_group("g")
    await runtime.stop()
    again = await world.started()
    assert not again.coordinator.has_group("g")
    await again.stop()


# --- compaction ------------------------------------------------------------------------------------


async def churn(runtime, times: int) -> None:
    """B joins and leaves ``times`` times: records that later ones supersede."""
    for _ in range(times):
        await hb(runtime, B, 0, ["orders"])
        await hb(runtime, B, -1)


async def test_compaction_keeps_only_the_current_records_and_a_restart_loads_them(tmp_path):
    world = World(tmp_path)
    world.topics.create("orders", 2)
    runtime = await world.started()
    p = world.offsets.partition_for("g")
    lg = world.offsets.log(p)
    a = await hb(runtime, A, 0, ["orders"])
    await churn(runtime, 20)
    total = lg.end_offset - lg.start_offset
    assert not await runtime.compact(p, min_records=total + 1)  # not enough records yet
    # A heartbeat queued just before: compaction waits for its write and keeps what it wrote.
    c, compacted = await asyncio.gather(hb(runtime, C, 0, ["orders"]), runtime.compact(p, min_records=total))
    assert c.error_code == 0 and compacted
    current = runtime.coordinator.for_group("g").snapshot_records()
    assert world.log_records() == current and len(current) < total / 5
    assert not await runtime.compact(p, min_records=0)  # nothing superseded (ratio 0.5)
    a = await hb(runtime, A, a.member_epoch)  # writes go on after the current records
    before = runtime.coordinator.snapshot()
    await runtime.stop()
    again = await world.started()
    assert again.coordinator.snapshot() == before and set(before["g"]["members"]) == {A, C}
    await again.stop()


async def test_partitions_are_compacted_in_the_background(tmp_path):
    world = World(tmp_path)
    world.topics.create("orders", 2)
    runtime = await world.started(compact_interval_s=lambda: 0.01)
    runtime.compact_min_records = 10**9  # none while churning: records written after one would stay
    lg = world.offsets.log(world.offsets.partition_for("g"))
    await churn(runtime, 10)
    runtime.compact_min_records = 50
    for _ in range(500):
        if lg.start_offset > 0:
            break
        await asyncio.sleep(0.01)
    assert lg.start_offset > 0 and world.log_records() == runtime.coordinator.for_group("g").snapshot_records()
    await runtime.stop()


async def test_compaction_follows_the_topics_min_cleanable_dirty_ratio(tmp_path):
    """Kafka's cleaner compares a log's dirty share with that log's min.cleanable.dirty.ratio
    (LogCleanerManager.grabFilthiestCompactedLog), which __consumer_offsets may override."""
    world = World(tmp_path)
    world.topics.create("orders", 2)
    runtime = await world.started()
    p = world.offsets.partition_for("g")
    lg = world.offsets.log(p)
    await churn(runtime, 10)  # most of the records superseded
    lg.config = dataclasses.replace(lg.config, min_cleanable_ratio=0.99)
    assert not await runtime.compact(p, min_records=0)
    lg.config = dataclasses.replace(lg.config, min_cleanable_ratio=0.5)
    assert await runtime.compact(p, min_records=0)
    await runtime.stop()


async def test_consumer_offsets_logs_take_their_min_cleanable_dirty_ratio(local):
    """The broker default (log.cleaner.min.cleanable.ratio), else the topic's override."""
    ratios = lambda: {local.store.get("__consumer_offsets", i).config.min_cleanable_ratio  # noqa: E731
                      for i in range(local.config["offsets.topic.num.partitions"])}
    assert ratios() == {0.5}
    local.config.set_dynamic({"log.cleaner.min.cleanable.ratio": "0.25"}, cluster_default=True)
    assert ratios() == {0.25}
    offsets = local.topics.get("__consumer_offsets")
    local.topics.set_configs(offsets.name, {**offsets.configs, "min.cleanable.dirty.ratio": "0.75"})
    assert ratios() == {0.75}


# --- restarts --------------------------------------------------------------------------------------


async def test_a_restart_keeps_groups_members_epochs_and_assignments(tmp_path):
    world = World(tmp_path)
    orders = world.topics.create("orders", 4)
    first = await world.started()
    a = await hb(first, A, 0, ["orders"])
    b = await hb(first, B, 0, ["orders"])
    a = await hb(first, A, a.member_epoch)
    before = first.coordinator.snapshot()
    await first.stop()
    world.clock.advance(10_000)

    second = await world.started()
    assert second.coordinator.snapshot() == before
    # loaded members get fresh session deadlines at load time, not at their last heartbeat
    assert second.coordinator.session_deadline("g", B) == world.clock.now + SESSION_MS
    writes = len(world.writes())
    steady_a, steady_b = await hb(second, A, a.member_epoch), await hb(second, B, b.member_epoch)
    assert (steady_a.error_code, steady_a.member_epoch, steady_b.member_epoch) == (0, b.member_epoch, b.member_epoch)
    assert len(world.writes()) == writes  # nothing changed, nothing written
    full = await hb(second, A, steady_a.member_epoch, ["orders"])
    assert sorted(parts(full, orders) + parts(b, orders)) == [0, 1, 2, 3]
    assert (await hb(second, C, 5)).error_code == ErrorCode.UNKNOWN_MEMBER_ID  # never was a member
    joined = await hb(second, C, 0, ["orders"])
    assert joined.member_epoch == b.member_epoch + 1  # epochs carry on from the log
    await second.stop()


async def test_members_silent_across_a_restart_expire_a_session_after_loading(tmp_path):
    world = World(tmp_path)
    world.topics.create("orders", 1)
    first = await world.started()
    await hb(first, A, 0, ["orders"])
    await first.stop()
    world.clock.advance(SESSION_MS * 3)  # down for longer than a session
    second = await world.started()
    assert second.coordinator.member("g", A) is not None  # not fenced for the downtime
    world.clock.advance(SESSION_MS)
    await second.flush()
    assert second.coordinator.member("g", A) is None
    await second.stop()


async def test_topic_changes_while_down_bump_the_epoch_and_initialize_on_load(tmp_path):
    world = World(tmp_path)
    orders = world.topics.create("orders", 1)
    first = await world.started()
    a = await hb(first, A, 0, ["orders"])
    await first.stop()
    world.topics.add_partitions("orders", 3)
    second = await world.started()
    grown = await hb(second, A, a.member_epoch)
    assert grown.member_epoch == a.member_epoch + 1 and parts(grown, orders) == [0, 1, 2]
    await second.stop()


async def _member_of_g_stopped(tmp_path):
    """A world whose stopped coordinator has member A in group "g" (on "orders"), and a group
    id kept on another ``__consumer_offsets`` partition."""
    world = World(tmp_path, num_partitions=3)
    world.topics.create("orders", 1)
    first = await world.started()
    a = await hb(first, A, 0, ["orders"])
    await first.stop()
    other = next(g for g in (f"other-{i}" for i in range(100))
                 if world.offsets.partition_for(g) != world.offsets.partition_for("g"))
    return world, a, other


async def test_heartbeats_answer_load_in_progress_until_their_partition_is_loaded(tmp_path):
    world, a, other = await _member_of_g_stopped(tmp_path)
    gate = asyncio.Event()

    class Held(Runtime):
        async def _load_partition(self, partition, coordinator):
            await gate.wait()
            return await super()._load_partition(partition, coordinator)

    second = world.runtime(Held)
    await second.start()
    assert second.shard_state("g") is ShardState.LOADING
    loading = await hb(second, A, a.member_epoch)
    assert (loading.error_code, loading.error_message) == (
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "The coordinator is loading and hence can't process requests.")
    assert (await hb(second, B, 0, ["orders"], group=other)).error_code == 0  # an empty partition serves at once
    # ShareGroupDescribe: Kafka's getErrorDescribedGroupList gives the loading shard's groups the code alone
    ctx = SimpleNamespace(broker=SimpleNamespace(group_coordinator=second), api_version=1)
    (described,) = (await share_group_describe.handle(ctx, ShareGroupDescribeRequest(group_ids=["g"]))).groups
    assert (described.error_code, described.error_message) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None)
    ctx.api_version = 6  # DescribeGroups v6 too (it has ErrorMessage; the helper leaves it null)
    (described,) = (await describe_groups.handle(ctx, DescribeGroupsRequest(groups=["g"]))).groups
    assert (described.error_code, described.error_message) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None)
    gate.set()
    await second.wait_loaded()
    loaded = await hb(second, A, a.member_epoch)
    assert (loaded.error_code, loaded.member_epoch) == (0, a.member_epoch)
    await second.stop()


async def test_a_partition_that_failed_to_load_answers_not_coordinator(tmp_path):
    """Kafka's CoordinatorRuntime answers NOT_COORDINATOR for a partition whose load failed
    (withActiveContextOrThrow: neither active nor loading); an empty partition serves on."""
    world, a, other = await _member_of_g_stopped(tmp_path)

    class Broken(Runtime):
        async def _load_partition(self, partition, coordinator):
            raise ValueError("a record that cannot be replayed")

    second = await world.started(runtime_cls=Broken)
    assert second.shard_state("g") is ShardState.FAILED
    failed = await hb(second, A, a.member_epoch)
    assert (failed.error_code, failed.error_message) == (
        ErrorCode.NOT_COORDINATOR, "This is not the correct coordinator.")
    assert (await hb(second, B, 0, ["orders"], group=other)).error_code == 0
    await second.stop()


class Holding(Runtime):
    """Holds every write until ``release`` is set (when ``hold``)."""

    hold = False
    release: asyncio.Event | None = None

    async def _persist(self, records) -> None:
        if self.hold:
            await self.release.wait()
        await super()._persist(records)


async def test_a_failed_append_rebuilds_the_shard_and_drops_the_writes_behind_it(tmp_path):
    world = World(tmp_path)
    orders = world.topics.create("orders", 2)
    runtime = await world.started(runtime_cls=Holding)
    a = await hb(runtime, A, 0, ["orders"])
    original = world.offsets._append

    def failing_append(lg, data, headers):
        raise KafkaStorageError("disk gone")

    runtime.hold, runtime.release = True, asyncio.Event()
    world.offsets._append = failing_append
    b = asyncio.ensure_future(hb(runtime, B, 0, ["orders"]))
    for _ in range(5):
        await asyncio.sleep(0)
    c = asyncio.ensure_future(hb(runtime, C, 0, ["orders"]))  # computed on top of B's join
    for _ in range(5):
        await asyncio.sleep(0)
    runtime.release.set()
    # Kafka's CoordinatorOperationExceptionHelper: a storage error is NOT_COORDINATOR
    assert (await b).error_code == ErrorCode.NOT_COORDINATOR
    assert (await c).error_code == ErrorCode.NOT_COORDINATOR  # never written
    world.offsets._append = original
    runtime.hold = False
    rebuilt = ShareGroupCoordinator(TopicsImage([TopicInfo(orders.topic_id, "orders", 2)]), track_share_state=True)
    rebuilt.replay_all(world.log_records())
    assert runtime.coordinator.snapshot() == rebuilt.snapshot()  # the log, not the lost writes
    assert runtime.coordinator.member("g", B) is None and runtime.coordinator.member("g", A) is not None
    assert (await hb(runtime, A, a.member_epoch)).error_code == 0
    assert (await hb(runtime, B, 0, ["orders"])).error_code == 0
    await runtime.stop()


# --- the topic, its batches, loading -----------------------------------------------------------------


def test_groups_map_to_partitions_as_in_kafka():
    assert partition_for("g", 50) == 103 % 50  # "g".hashCode() == 103
    assert partition_for("Aa", 50) == partition_for("BB", 50) == 2112 % 50  # equal Java hashes
    assert partition_for("polygenelubricants", 50) == 0  # hashCode() == Integer.MIN_VALUE: Utils.abs -> 0
    assert partition_for("\U0001f600", 7) == abs(31 * 0xD83D + 0xDE00) % 7  # UTF-16 code units
    assert topic_configs(104857600) == {"cleanup.policy": "compact", "compression.type": "producer",
                                        "segment.bytes": "104857600"}


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
async def test_each_write_is_one_batch_laid_out_as_kafkas_coordinator_writes_it(codec):
    topic = OffsetsTopic.in_memory(1, compression=codec, clock_ms=lambda: 1_234)
    records = [rec.member_metadata("g", A, None, "c", HOST, ["orders"]), rec.group_metadata("g", 1, 7),
               rec.member_metadata_tombstone("g", B)]
    await topic.append(0, records)
    await topic.append(0, records[:1])
    entries = list(log_entries(topic, 0))
    headers = [h for h, _ in entries]
    assert [h.base_offset for h in headers] == [0, 0, 0, 3]
    h = headers[0]
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.attributes, h.base_timestamp, h.max_timestamp) == (
        -1, -1, 0, codec, 1_234, 1_234)
    assert [r.timestamp for _, r in entries] == [1_234] * 4 and all(not r.headers for _, r in entries)
    assert [(r.key, r.value) for _, r in entries[:3]] == [rec.encode(r) for r in records]


async def test_a_write_bigger_than_max_message_bytes_is_split_into_batches_of_one_append():
    topic = OffsetsTopic.in_memory(1)
    records = [rec.member_metadata("g", f"member-{i:05d}", None, "c" * 200, HOST, ["orders"]) for i in range(8000)]
    data = topic.encode_batches(records, 1048588)
    headers = check_batches(data)
    assert len(headers) > 1 and all(h.size <= 1048588 for h in headers)
    await topic.append(0, records)
    assert [r.offset for _, r in log_entries(topic, 0)] == list(range(8000))


async def test_loading_skips_other_coordinators_records_and_control_batches():
    topic = OffsetsTopic.in_memory(1)
    lg = topic.log(0)
    foreign = build_batch([
        (serde.encode_key(OffsetCommitKey("g", "orders", 0)), serde.encode_value(OffsetCommitValue(offset=5)), None),
        (serde.encode_key(GroupMetadataKey("classic")), serde.encode_value(GroupMetadataValue(protocol_type="")), None),
        (None, b"keyless", None),
    ])
    control = build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", None)], is_control=True,
                          producer_id=7, is_transactional=True)
    for data in (foreign, control):
        buf = bytearray(data)
        lg.append(buf, check_batches(buf), leader_epoch=0)
    join = ShareGroupCoordinator().heartbeat("g", A, 0, None, ["orders"], "c", HOST, 1)
    await topic.append(0, join.records)
    loaded = ShareGroupCoordinator()
    summary = await load_partition(topic, 0, loaded, chunk_bytes=1)  # one batch per chunk
    assert (summary.replayed, summary.skipped, summary.end_offset) == (len(join.records), 3, lg.end_offset)
    assert list(loaded.snapshot()) == ["g"] and loaded.member("g", A) is not None


def test_an_unknown_offsets_compression_codec_is_refused_at_start_up(tmp_path):
    from broker.broker import Broker
    from broker.config import BrokerConfig, ConfigError

    cfg = {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0"}
    with pytest.raises(ConfigError, match="^Unknown compression type id: 9$"):
        Broker(BrokerConfig({**cfg, "offsets.topic.compression.codec": "9"}), store=MemoryLogStore())
    b = Broker(BrokerConfig({**cfg, "offsets.topic.compression.codec": "4"}), store=MemoryLogStore())
    assert b.topics.get(CONSUMER_OFFSETS) is None  # created when the coordinator starts


# --- a property: restarts lose nothing, epochs never go back, state before assignment ----------------

OPS = st.lists(st.one_of(
    st.tuples(st.just("join"), st.sampled_from([A, B, C]), st.sampled_from([("orders",), ("orders", "later")])),
    st.tuples(st.just("beat"), st.sampled_from([A, B, C])),
    st.tuples(st.just("leave"), st.sampled_from([A, B, C])),
    st.tuples(st.just("wait"), st.integers(0, 50_000)),
    st.tuples(st.just("grow"), st.sampled_from(["orders", "later"])),
    st.tuples(st.just("drop"), st.just("later")),
    st.tuples(st.just("flaky"), st.booleans()),
    st.tuples(st.just("restart"), st.booleans()),
    st.tuples(st.just("compact")),
), max_size=30)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_restarts_keep_state_and_epochs_never_go_back(tmp_path_factory, ops):
    world = World(tmp_path_factory.mktemp("prop"), num_partitions=2)
    world.topics.create("orders", 2)
    sizes = {"orders": 2}

    async def run() -> None:
        runtime = await world.started(cleanable_ratio=lambda: 0.0)  # compact whenever asked
        epochs: dict[str, int] = {}
        high = {"group": 0, "assignment": 0}
        for op in ops:
            if op[0] == "join" or (op[0] == "beat" and op[1] in epochs):
                member = op[1]
                resp = await hb(runtime, member, 0 if op[0] == "join" else epochs[member],
                                list(op[2]) if op[0] == "join" else None)
                assert resp.error_code in (0, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH), resp
                if resp.error_code:
                    epochs.pop(member, None)  # the client rejoins with epoch 0 next time
                else:
                    epochs[member] = resp.member_epoch
            elif op[0] == "leave" and op[1] in epochs:
                assert (await hb(runtime, op[1], -1)).error_code in (0, ErrorCode.UNKNOWN_MEMBER_ID)
                del epochs[op[1]]
            elif op[0] == "wait":
                world.clock.advance(op[1])
            elif op[0] == "grow":
                name = op[1]
                if name in sizes:
                    sizes[name] += 1
                    world.topics.add_partitions(name, sizes[name])
                else:
                    sizes[name] = 1
                    world.topics.create(name, 1)
            elif op[0] == "drop" and op[1] in sizes:
                world.topics.delete(op[1])  # "grow" creates it again, with a new topic id
                del sizes[op[1]]
            elif op[0] == "flaky":
                world.persister.fail_initialize = op[1]
            elif op[0] == "compact":
                p = world.offsets.partition_for("g")
                lg = world.offsets.log(p)
                if await runtime.compact(p, min_records=0):  # the log: the current records, nothing else
                    assert lg.end_offset - lg.start_offset == len(runtime._shards[p].coordinator.snapshot_records())
            elif op[0] == "restart":
                before = runtime.coordinator.snapshot()
                await runtime.stop()
                if op[1]:
                    world.clock.advance(1_000)
                runtime = await world.started(cleanable_ratio=lambda: 0.0)
                after = runtime.coordinator.snapshot()
                for gid in before:  # load + catching up may only move epochs forward
                    assert after[gid]["group_epoch"] >= before[gid]["group_epoch"]
                    assert after[gid]["members"].keys() == before[gid]["members"].keys()
            await runtime.flush()
            snap = runtime.coordinator.snapshot().get("g")
            if snap is not None:
                assert snap["group_epoch"] >= high["group"] and snap["assignment_epoch"] >= high["assignment"]
                high = {"group": snap["group_epoch"], "assignment": snap["assignment_epoch"]}
                # whatever is assigned or targeted has share state
                held = {(uuid.UUID(t), p) for m in snap["members"].values() for t, ps in m["assigned"].items()
                        for p in ps}
                held |= {(uuid.UUID(t), p) for a in snap["targets"].values() for t, ps in a.items() for p in ps}
                assert held <= {(t, p) for (g, t, p) in world.persister.state if g == "g"}
                # the state metadata only names topics that exist
                known = {str(t.topic_id) for t in world.topics}
                assert set(snap["initialized_topics"]) | set(snap["initializing_topics"]) <= known
            # the live state is what the log replays to
            replayed = ShareGroupCoordinator(track_share_state=True)
            replayed.replay_all(world.log_records())
            assert {k: v for k, v in runtime.coordinator.snapshot().items() if k == "g"} == replayed.snapshot()
        await runtime.stop()

    asyncio.run(run())
