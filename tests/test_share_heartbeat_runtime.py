"""The group-coordinator runtime in-process, with a fake clock: heartbeats, the session-expiry
timer, departures, topic changes, group configs, and the order of persisted records."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.log import LogConfig
from broker.log.memory import MemoryLogStore
from broker.log.store import KafkaStorageError
from broker.topics import TopicRegistry
from coordinator.group.config_store import FILE_NAME, GroupConfigStore
from coordinator.group.runtime import GroupCoordinatorRuntime, RegistryTopics, group_broker_properties
from protocol.errors import ErrorCode

HOST = "/127.0.0.1"
A, B, C = "kAMA2MYCSgWVW/t4+7NOvA", "bBBB2MYCSgWVW/t4+7NOvA", "cCCC2MYCSgWVW/t4+7NOvA"
SESSION_MS = 45_000  # group.share.session.timeout.ms default


class FakeTimer:
    def __init__(self, when: int, callback) -> None:
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """Milliseconds that move only when told; timers fire in ``advance``."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now
        self.timers: list[FakeTimer] = []

    def now_ms(self) -> int:
        return self.now

    def call_at(self, when_ms: int, callback) -> FakeTimer:
        timer = FakeTimer(when_ms, callback)
        self.timers.append(timer)
        return timer

    def armed(self) -> list[int]:
        return sorted(t.when for t in self.timers if not t.cancelled)

    def advance(self, ms: int) -> None:
        self.now += ms
        while True:
            due = [t for t in self.timers if not t.cancelled and t.when <= self.now]
            if not due:
                return
            timer = min(due, key=lambda t: t.when)
            self.timers.remove(timer)
            timer.callback()


def registry(tmp_path) -> TopicRegistry:
    return TopicRegistry(str(tmp_path), MemoryLogStore(), lambda overrides: LogConfig.from_properties({}, overrides))


class Recording(GroupCoordinatorRuntime):
    """Records every persisted batch; ``gate`` (when set) holds persists until released."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.persisted: list[list] = []
        self.gate: asyncio.Event | None = None

    async def _persist(self, records) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self.persisted.append(list(records))


def make(tmp_path, broker_config=None, store=None):
    topics = registry(tmp_path)
    clock = FakeClock()
    runtime = Recording(topics, group_broker_properties(broker_config or {}), store or GroupConfigStore(None), clock)
    departed: list[tuple[str, str]] = []
    runtime.on_member_departed(lambda g, m: departed.append((g, m)))
    return runtime, topics, clock, departed


async def hb(runtime, member, epoch, subs=None, group="g"):
    return await runtime.heartbeat(group, member, epoch, None, subs, "client", HOST)


def parts(resp, topic) -> list[int]:
    assert resp.assignment is not None
    return sorted(p for tp in resp.assignment.topic_partitions if tp.topic_id == topic.topic_id for p in tp.partitions)


async def test_join_gets_every_partition_and_the_default_interval(tmp_path):
    runtime, topics, clock, _ = make(tmp_path)
    orders = topics.create("orders", 3)
    resp = await hb(runtime, A, 0, ["orders"])
    assert (resp.error_code, resp.member_id, resp.member_epoch, resp.heartbeat_interval_ms) == (0, A, 1, 5000)
    assert parts(resp, orders) == [0, 1, 2]
    member = runtime.coordinator.member("g", A)
    assert (member.client_id, member.client_host) == ("client", HOST)
    assert clock.armed() == [clock.now + SESSION_MS]
    assert len(runtime.persisted) == 1  # the join's records, persisted before the answer


async def test_errors_come_back_in_the_response(tmp_path):
    runtime, topics, _, _ = make(tmp_path)
    topics.create("orders", 1)
    assert (await hb(runtime, A, 3, None)).error_code == ErrorCode.GROUP_ID_NOT_FOUND
    await hb(runtime, A, 0, ["orders"])
    assert (await hb(runtime, B, 1)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await hb(runtime, A, 7)).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert (await hb(runtime, "", 0, ["orders"])).error_code == ErrorCode.INVALID_REQUEST


async def test_leave_reports_the_departure_after_persisting(tmp_path):
    runtime, topics, _, departed = make(tmp_path)
    topics.create("orders", 2)
    await hb(runtime, A, 0, ["orders"])
    runtime.gate = asyncio.Event()
    leave = asyncio.ensure_future(hb(runtime, A, -1))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not leave.done() and departed == []  # waiting for its records to be persisted
    runtime.gate.set()
    resp = await leave
    assert (resp.error_code, resp.member_epoch, resp.assignment) == (0, -1, None)
    assert departed == [("g", A)]
    assert runtime.coordinator.member("g", A) is None


async def test_session_expiry_fences_the_silent_member_only(tmp_path):
    runtime, topics, clock, departed = make(tmp_path)
    orders = topics.create("orders", 4)
    await hb(runtime, A, 0, ["orders"])
    b = await hb(runtime, B, 0, ["orders"])
    clock.advance(SESSION_MS - 1000)
    b = await hb(runtime, B, b.member_epoch)  # B stays alive, A is silent
    assert departed == []
    clock.advance(1000)  # A's deadline
    await runtime.stop()  # waits for the queued expiry write
    assert departed == [("g", A)]
    assert runtime.coordinator.member("g", B) is not None
    resp = await hb(runtime, B, b.member_epoch)
    assert resp.member_epoch > b.member_epoch and parts(resp, orders) == [0, 1, 2, 3]


async def test_a_wall_clock_step_does_not_expire_sessions(tmp_path, monkeypatch):
    """With the real clock, a wall-clock step of an hour (an NTP step, a laptop waking up)
    leaves a member's session alone when the expiry timer runs."""
    topics = registry(tmp_path)
    runtime = Recording(topics, group_broker_properties({}), GroupConfigStore(None))
    departed: list[tuple[str, str]] = []
    runtime.on_member_departed(lambda g, m: departed.append((g, m)))
    topics.create("orders", 1)
    await hb(runtime, A, 0, ["orders"])
    hour_ns = 3600 * 10**9
    wall_ns, wall = time.time_ns, time.time
    monkeypatch.setattr(time, "time_ns", lambda: wall_ns() + hour_ns)
    monkeypatch.setattr(time, "time", lambda: wall() + 3600)
    runtime._on_timer()  # what the session timer runs whenever it fires
    await runtime.stop()
    assert departed == []
    assert runtime.coordinator.member("g", A) is not None


async def test_timer_follows_the_earliest_deadline(tmp_path):
    runtime, topics, clock, departed = make(tmp_path)
    topics.create("orders", 1)
    a = await hb(runtime, A, 0, ["orders"])
    first = clock.armed()
    walks = []  # looks at every shard's earliest deadline
    next_deadline = runtime._next_deadline
    runtime._next_deadline = lambda: walks.append(1) or next_deadline()
    for _ in range(5):  # steady heartbeats push the deadline later: no new timers, no walks
        clock.advance(1000)
        a = await hb(runtime, A, a.member_epoch)
    assert clock.armed() == first and walks == []
    clock.advance(first[0] - clock.now)  # fires early, finds nothing, re-arms at the real deadline
    assert departed == [] and clock.armed() == [runtime.coordinator.next_deadline()]
    clock.advance(SESSION_MS)
    await runtime.stop()
    assert departed == [("g", A)] and clock.armed() == []


async def test_topic_changes_bump_the_epoch_and_grow_the_assignment(tmp_path):
    runtime, topics, _, _ = make(tmp_path)
    orders = topics.create("orders", 2)
    a = await hb(runtime, A, 0, ["orders", "later"])
    assert parts(a, orders) == [0, 1]
    topics.add_partitions("orders", 3)
    grown = await hb(runtime, A, a.member_epoch)
    assert grown.member_epoch == a.member_epoch + 1 and parts(grown, orders) == [0, 1, 2]
    later = topics.create("later", 1)
    again = await hb(runtime, A, grown.member_epoch)
    assert again.member_epoch == grown.member_epoch + 1 and parts(again, later) == [0]
    await runtime.stop()
    # the metadata-change records went through _persist too, in order with the heartbeats
    kinds = [type(batch[0][0]).__name__ for batch in runtime.persisted]
    assert kinds.count("ShareGroupMetadataKey") == 2


async def test_topics_deleted_by_one_request_are_one_metadata_change(tmp_path):
    """A DeleteTopics of many topics reaches the coordinator as one change: one new group epoch
    and one metadata record per group, not one per topic (with thousands of topics per group
    each record lists them all)."""
    runtime, topics, _, _ = make(tmp_path)
    created = [topics.create(name, 1) for name in ("a", "b", "c", "d")]
    joined = await hb(runtime, A, 0, ["a", "b", "c", "d"])
    assert all(parts(joined, t) == [0] for t in created)
    before = len(runtime.persisted)
    topics.delete_many(["a", "b", "c"])
    after = await hb(runtime, A, joined.member_epoch)
    assert after.member_epoch == joined.member_epoch + 1
    assert parts(after, created[3]) == [0] and all(parts(after, t) == [] for t in created[:3])
    await runtime.stop()
    kinds = [type(r[0]).__name__ for batch in runtime.persisted[before:] for r in batch]
    assert kinds.count("ShareGroupMetadataKey") == 1


TOPIC_OPS = st.lists(st.tuples(st.sampled_from(["create", "delete", "grow"]), st.sampled_from(["a", "b", "c"])),
                     max_size=30)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=TOPIC_OPS)
def test_the_coordinators_topic_view_follows_the_registry_change_by_change(tmp_path_factory, ops):
    """RegistryTopics keeps its lookups up to date one change at a time: after any sequence of
    creations, deletions and growths its snapshot is what the registry holds, and an earlier
    snapshot stays as it was."""
    topics = registry(tmp_path_factory.mktemp("view"))
    topics.create("a", 1)
    view = RegistryTopics(topics)
    topics.on_change(view.changed)
    ids = {topics.get("a").topic_id}

    def image() -> dict:
        return {t.name: (t.topic_id, t.num_partitions) for t in view.snapshot()}

    for op, name in ops:
        before, kept = image(), view.snapshot()
        exists = topics.get(name) is not None
        if op == "create" and not exists:
            ids.add(topics.create(name, 1).topic_id)
        elif op == "delete" and exists:
            topics.delete(name)
        elif op == "grow" and exists:
            topics.add_partitions(name, topics.get(name).partitions + 1)
        now = view.snapshot()
        assert image() == {t.name: (t.topic_id, t.partitions) for t in topics}
        assert {i: getattr(now.topic_by_id(i), "name", None) for i in ids} == {
            i: getattr(topics.by_id(i), "name", None) for i in ids}
        assert {t.name: (t.topic_id, t.num_partitions) for t in kept} == before
        assert all(kept.topic_by_name(n).topic_id == tid for n, (tid, _) in before.items())


async def test_writes_are_persisted_in_the_order_they_were_made(tmp_path):
    runtime, topics, clock, departed = make(tmp_path)
    topics.create("orders", 2)
    a = await hb(runtime, A, 0, ["orders"])
    clock.advance(SESSION_MS - 1)
    b = await hb(runtime, B, 0, ["orders"])
    runtime.gate = asyncio.Event()
    clock.advance(1)  # A expires: its write is queued first
    late = asyncio.ensure_future(hb(runtime, B, b.member_epoch))  # B's heartbeat waits behind it
    await asyncio.sleep(0)
    assert not late.done()
    runtime.gate.set()
    resp = await late
    assert resp.error_code == 0 and departed == [("g", A)]
    tombstone_batch = next(i for i, batch in enumerate(runtime.persisted) if any(v is None for _, v in batch))
    assert tombstone_batch == len(runtime.persisted) - 2  # expiry, then B's reassignment
    assert a.member_epoch < resp.member_epoch


@pytest.mark.parametrize("failure, traceback", [
    (OSError("disk gone"), True),  # unexpected: logged with its traceback
    (KafkaStorageError("write to __consumer_offsets-0 failed: No space left on device"), False),  # the log's to report
])
async def test_a_failed_persist_answers_not_coordinator(tmp_path, caplog, failure, traceback):
    """Kafka's CoordinatorOperationExceptionHelper: a storage error is NOT_COORDINATOR."""
    runtime, topics, _, _ = make(tmp_path)
    topics.create("orders", 1)

    async def broken(records):
        raise failure

    runtime._persist = broken
    caplog.set_level(logging.INFO, logger="kshare.group_coordinator")
    resp = await hb(runtime, A, 0, ["orders"])
    assert resp.error_code == ErrorCode.NOT_COORDINATOR
    assert [r.exc_info is not None for r in caplog.records if r.levelno >= logging.WARNING] == [True] * traceback
    runtime._persist = lambda records: asyncio.sleep(0)
    assert (await hb(runtime, B, 0, ["orders"])).error_code == 0  # later writes go on


async def test_group_configs_apply_to_the_next_heartbeat(tmp_path):
    runtime, topics, clock, _ = make(tmp_path)
    topics.create("orders", 1)
    a = await hb(runtime, A, 0, ["orders"])
    assert runtime.group_settings("g").share_record_lock_duration_ms == 30_000
    runtime.set_group_configs("g", {"share.heartbeat.interval.ms": "7000", "share.session.timeout.ms": "50000",
                                    "share.record.lock.duration.ms": "20000"})
    a = await hb(runtime, A, a.member_epoch)
    assert a.heartbeat_interval_ms == 7000
    assert runtime.coordinator.session_deadline("g", A) == clock.now + 50_000
    settings_ = runtime.group_settings("g")
    assert (settings_.share_record_lock_duration_ms, settings_.share_delivery_count_limit) == (20_000, 5)
    assert runtime.group_settings("other").share_record_lock_duration_ms == 30_000
    runtime.set_group_configs("g", {})
    assert (await hb(runtime, A, a.member_epoch)).heartbeat_interval_ms == 5000


async def test_broker_properties_reach_the_coordinator(tmp_path):
    runtime, topics, _, _ = make(tmp_path, {"group.share.max.size": "1", "group.share.heartbeat.interval.ms": "6000",
                                            "group.share.delivery.count.limit": "3", "log.dirs": "/x"})
    assert runtime.broker_config == {"group.share.max.size": "1", "group.share.heartbeat.interval.ms": "6000",
                                     "group.share.delivery.count.limit": "3"}
    topics.create("orders", 1)
    assert (await hb(runtime, A, 0, ["orders"])).heartbeat_interval_ms == 6000
    assert (await hb(runtime, B, 0, ["orders"])).error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert runtime.group_settings("g").share_delivery_count_limit == 3


async def test_start_arms_loaded_members_and_delete_group(tmp_path):
    runtime, topics, clock, _ = make(tmp_path)
    topics.create("orders", 1)
    await runtime.start()
    a = await hb(runtime, A, 0, ["orders"])
    await hb(runtime, A, -1)
    await runtime.delete_group("g")
    assert not runtime.coordinator.has_group("g")
    await runtime.stop()
    assert clock.armed() == [] and a.error_code == 0


# --- a property: no member outlives its session, nobody is fenced early -----------------------

OPS = st.lists(st.tuples(st.sampled_from(["join", "beat", "leave", "wait"]), st.sampled_from([A, B, C]),
                         st.integers(0, 60_000)), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_sessions_expire_exactly_on_time(tmp_path_factory, ops):
    tmp = tmp_path_factory.mktemp("prop")

    async def run() -> None:
        runtime, topics, clock, departed = make(tmp)
        topics.create("orders", 3)
        last_seen: dict[str, int] = {}
        epochs: dict[str, int] = {}
        for op, member, ms in ops:
            if op == "wait":
                clock.advance(ms)
                await asyncio.sleep(0)
            elif op == "join" or (op == "beat" and member in epochs):
                resp = await hb(runtime, member, 0 if op == "join" else epochs[member], ["orders"])
                if resp.error_code == 0:
                    epochs[member], last_seen[member] = resp.member_epoch, clock.now
                else:
                    raise AssertionError(f"live member refused: {resp.error_code}")
            elif op == "leave" and member in epochs:
                assert (await hb(runtime, member, -1)).error_code == 0
                epochs.pop(member)
            await runtime.flush()  # queued writes done, departures reported
            alive = {m for m in epochs if runtime.coordinator.member("g", m) is not None}
            for m in set(epochs) - alive:  # fenced: only once its session was over
                assert clock.now >= last_seen[m] + SESSION_MS and ("g", m) in departed
                epochs.pop(m)
            for m in alive:  # nobody fenced early, nobody kept late
                assert clock.now < last_seen[m] + SESSION_MS
            for m, seen in last_seen.items():
                if m not in alive and clock.now >= seen + SESSION_MS:
                    assert runtime.coordinator.member("g", m) is None
            deadline = runtime.coordinator.next_deadline()
            if deadline is not None:
                assert clock.armed() and clock.armed()[0] <= deadline

    asyncio.run(run())


def test_config_store_persists_atomically(tmp_path):
    store = GroupConfigStore(str(tmp_path))
    assert store.get("g") == {} and not (tmp_path / FILE_NAME).exists()
    assert store.replace("g", {"share.record.lock.duration.ms": "20000"})
    assert not store.replace("g", {"share.record.lock.duration.ms": "20000"})
    store.replace("h", {"share.auto.offset.reset": "earliest"})
    again = GroupConfigStore(str(tmp_path))
    assert again.group_ids() == ["g", "h"] and dict(again.get("g")) == {"share.record.lock.duration.ms": "20000"}
    with pytest.raises(TypeError):
        again.get("g")["x"] = "1"  # read-only view
    again.replace("g", {})
    assert GroupConfigStore(str(tmp_path)).group_ids() == ["h"]
    assert not (tmp_path / (FILE_NAME + ".tmp")).exists()


def test_config_store_refuses_an_unknown_format(tmp_path):
    (tmp_path / FILE_NAME).write_text('{"version": 99, "groups": {}}')
    with pytest.raises(ValueError, match="unsupported version"):
        GroupConfigStore(str(tmp_path))


async def test_a_shorter_session_elsewhere_moves_the_timer_earlier(tmp_path):
    runtime, topics, clock, departed = make(tmp_path)
    topics.create("orders", 1)
    runtime.set_group_configs("slow", {"share.session.timeout.ms": "60000"})
    await hb(runtime, A, 0, ["orders"], group="slow")
    await hb(runtime, B, 0, ["orders"], group="fast")  # 45 s: earlier than the armed 60 s
    clock.advance(SESSION_MS)
    await runtime.flush()
    assert departed == [("fast", B)]
    clock.advance(60_000 - SESSION_MS)
    await runtime.flush()
    assert departed == [("fast", B), ("slow", A)]


def test_install_checks_the_group_properties_like_kafka_at_start_up(tmp_path):
    from broker.broker import Broker
    from broker.config import BrokerConfig, ConfigError

    def broker(**props):
        cfg = {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0", **props}
        return Broker(BrokerConfig(cfg), store=MemoryLogStore())

    with pytest.raises(ConfigError, match="^group.share.session.timeout.ms must be greater than or equal to "
                                          "group.share.min.session.timeout.ms$"):
        broker(**{"group.share.session.timeout.ms": "1000"})
    b = broker(**{"group.share.max.size": "3"})
    assert b.group_coordinator.broker_config == {"group.share.max.size": "3"}
