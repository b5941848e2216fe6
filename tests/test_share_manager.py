"""SharePartitionManager on an in-process broker: what a member's release touches, and which
parked share fetches look when records may have become available."""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager

import uvloop

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.context import RequestContext
from broker.handlers import produce as produce_handler
from broker.log.memory import MemoryLogStore
from broker.share.manager import FetchParams
from protocol.errors import ErrorCode
from tests.test_produce_support import batch, produce_request
from tests.test_share_heartbeat_wire import heartbeat
from tests.test_share_wire_support import ShareMember, parts, share_partition


class CountingDict(dict):
    """A dict that counts full scans (``items()``)."""

    scans = 0

    def items(self):
        self.scans += 1
        return super().items()


def new_broker(tmp_path, extra: dict | None = None) -> Broker:
    return Broker(BrokerConfig({"log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0",
                                "offsets.topic.num.partitions": "2",
                                "share.coordinator.state.topic.num.partitions": "2", **(extra or {})}),
                  store=MemoryLogStore())


@asynccontextmanager
async def running_broker(tmp_path, extra: dict | None = None):
    b = new_broker(tmp_path, extra)
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


def params(max_wait_ms: int, max_records: int = 500, batch_size: int = 500) -> FetchParams:
    return FetchParams(max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, max_records=max_records,
                       batch_size=batch_size)


async def hand_clock_share_partition(b: Broker):
    """Group g's share partition of a new topic t (it starts at the log end, 0) on a manager
    whose clock the test moves by hand (``now[0]``), far ahead of the loop's so real lock
    timers never fire: (manager, now, topic id)."""
    manager = b.share_manager
    now = [asyncio.get_running_loop().time() * 1000 + 10**9]
    manager._now = lambda: now[0]
    topic_id = b.topics.create("t", 1).topic_id
    await share_partition(b, "g", topic_id, 0, "t")
    return manager, now, topic_id


async def produce(b: Broker, topic: str, values: list[bytes], partition: int = 0) -> None:
    conn = type("Conn", (), {"peer": ("127.0.0.1", 1), "close": lambda self: None})()
    request = produce_request(topic, batch(values), partition=partition)
    resp = await produce_handler.handle(RequestContext(b, conn, 0, 9, 1, "tests"), request)
    assert resp.responses[0].partition_responses[0].error_code == 0


async def until_parked(b: Broker, n: int = 1) -> None:
    """Polls (a fetch parking sets no event), for at most 10 s."""
    deadline = time.monotonic() + 10
    while len(b.waiters) < n:
        assert time.monotonic() < deadline, f"{len(b.waiters)} of {n} fetch(es) parked"
        await asyncio.sleep(0.001)


async def test_a_release_visits_only_the_members_group_never_every_share_partition(tmp_path):
    """A closed share session names its partitions, so its member's records are released there
    by lookup; a member that left the group has its records released in every share partition
    of the group, found by group. Both used to scan every loaded share partition: 1,900
    consumers disconnecting at once held the broker for 2.4 s, and again when their sessions
    timed out."""
    async with running_broker(tmp_path) as b:
        manager = b.share_manager
        topic_id = b.topics.create("t", 4).topic_id
        for group in ("g", "other"):
            for p in range(4):
                sp = await share_partition(b, group, topic_id, p, "t")
                assert sp.acquire("m", [(0, 4)], fetch_offset=0, max_records=500, batch_size=500).ranges
        manager._leaders = leaders = CountingDict(manager._leaders)

        await manager.release("g", "m", {(topic_id, 0), (topic_id, 3)})
        assert leaders.scans == 0
        held = {(group, p): manager.cached(group, topic_id, p).acquired_count
                for group in ("g", "other") for p in range(4)}
        assert held == {("g", 0): 0, ("g", 1): 5, ("g", 2): 5, ("g", 3): 0,
                        ("other", 0): 5, ("other", 1): 5, ("other", 2): 5, ("other", 3): 5}

        await manager.release("g", "m")
        assert leaders.scans == 0
        assert [manager.cached("g", topic_id, p).acquired_count for p in range(4)] == [0, 0, 0, 0]
        assert [manager.cached("other", topic_id, p).acquired_count for p in range(4)] == [5, 5, 5, 5]

        manager.forget_share_state("g", [(topic_id, 1)])  # the per-group index follows every removal
        assert sorted(key[2] for key, _ in manager.share_partitions("g")) == [0, 2, 3]
        manager.forget_topic(topic_id)
        assert manager.share_partitions() == [] and manager._by_group == {}


async def test_a_produce_makes_one_parked_share_fetch_per_group_look(tmp_path):
    """Members of a share group compete for the same records: waking all of them for one
    produced record cost every parked member a read, and all but one found nothing (200
    parked members took 0.87 of a core at 100 single-record produces a second)."""
    async with running_broker(tmp_path) as b:
        manager = b.share_manager
        topic_id = b.topics.create("t", 1).topic_id
        looks = []
        acquire = manager._acquire
        manager._acquire = lambda member, leaders, *a, **kw: (
            looks.append(leaders[0][3].key[0]) or acquire(member, leaders, *a, **kw))
        fetches = []
        for i in range(20):
            for group in ("g", "h"):
                await share_partition(b, group, topic_id, 0, "t")
                fetches.append(asyncio.ensure_future(
                    manager.fetch(group, f"m{i}", [(topic_id, 0, "t")], params(30_000))))
        await until_parked(b, 40)
        looks.clear()

        await produce(b, "t", [b"x"])
        done = set()
        while len(done) < 2:
            more, _ = await asyncio.wait(set(fetches) - done, timeout=10, return_when=asyncio.FIRST_COMPLETED)
            assert more
            done |= more
        assert sorted(looks) == ["g", "h"]
        assert sorted(fetches.index(f) for f in done) == [0, 1]  # the longest parked of each group
        assert all(r.acquired == [(0, 0, 1)] for f in done for r in f.result().values())
        assert len(b.waiters) == 38
        for f in fetches:
            f.cancel()


async def test_a_shutdown_answers_share_fetches_parked_in_their_long_poll(tmp_path):
    """A stop lets read requests finish and stops long polls from waiting. A parked share
    fetch used to hold the stop for its whole 10 s grace, then was cut off unanswered."""
    b = new_broker(tmp_path)
    host, port = await b.start()
    topic_id = b.topics.create("t", 1).topic_id
    m = ShareMember(f"{host}:{port}", "g")

    def park():
        assert heartbeat(m.client, "g", m.member_id, 0, ["t"]).error_code == 0
        m.open([(topic_id, 0)])
        return m.send_fetch(max_wait_ms=60_000)

    try:
        answer = await asyncio.to_thread(park)
        await until_parked(b)
        started = time.monotonic()
        await b.stop()
        assert time.monotonic() - started < 5
        resp = await asyncio.to_thread(answer)
        assert resp.error_code == 0 and not any(p.acquired_records for p in parts(resp).values())
    finally:
        m.close()


async def test_deleting_a_topic_forgets_it_once_and_leaves_it_out_of_its_parked_share_fetches(tmp_path):
    """The deletion listener forgot the topic once per loaded share partition, each time
    scanning every share partition and session: 4,000 of them on the topic, beside 4,000 on
    another, held the broker for 11 s. A fetch parked on the topic waits out its MaxWaitMs and
    answers nothing for it, as Kafka's DelayedShareFetch does with the fenced share partition
    (SharePartition.maybeAcquireFetchLock refuses it; SharePartitionManager's onDeleted listener
    only retries the delayed fetch); the session's next fetch reports the deletion."""
    async with running_broker(tmp_path) as b:
        manager = b.share_manager
        topic_id = b.topics.create("t", 4).topic_id
        other_id = b.topics.create("other", 4).topic_id
        for group in ("g", "h"):
            for p in range(4):
                await share_partition(b, group, topic_id, p, "t")
                await share_partition(b, group, other_id, p, "other")
        t0 = asyncio.get_running_loop().time()
        parked = asyncio.ensure_future(
            manager.fetch("g", "m", [(topic_id, 0, "t"), (other_id, 0, "other")], params(1_000)))
        await until_parked(b)
        calls = []
        forget = manager.forget_topic
        manager.forget_topic = lambda t: calls.append(t) or forget(t)

        b.topics.delete("t")
        assert calls == [topic_id]
        result = await asyncio.wait_for(parked, 5)
        assert asyncio.get_running_loop().time() - t0 >= 0.99  # waited out MaxWaitMs
        assert result == {}  # nothing for the deleted partition; no records, no error on the other
        left = sorted((k[0], k[1]) for k, _ in manager.share_partitions())
        assert left == [("g", other_id)] * 4 + [("h", other_id)] * 4


async def test_a_fetch_parked_across_its_topics_deletion_leaves_no_counters_for_it(tmp_path):
    """Kafka's processShareFetch marks TotalShareFetchRequestsPerSec for each topic before the
    fetch waits; counted only when it answered, a fetch parked across the deletion of its topic
    made that topic's counters again after they were removed, one row per deleted topic."""
    async with running_broker(tmp_path) as b:
        topic_id = b.topics.create("t", 1).topic_id
        await share_partition(b, "g", topic_id, 0, "t")
        parked = asyncio.ensure_future(b.share_manager.fetch("g", "m", [(topic_id, 0, "t")], params(300)))
        await until_parked(b)
        assert b.metrics.share.fetch_requests == {"": [1, 0], "t": [1, 0]}  # counted as it parked
        b.topics.delete("t")
        await asyncio.wait_for(parked, 5)
        assert b.metrics.share.fetch_requests == {"": [1, 0]}


async def test_a_fetch_parked_on_share_state_that_an_admin_request_drops_answers_at_once(tmp_path):
    """A reset (AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups) drops the cached
    share partition. A fetch parked on it must not acquire from the dropped copy: records it
    took there would be delivered again from the reloaded state."""
    async with running_broker(tmp_path) as b:
        manager = b.share_manager
        topic_id = b.topics.create("t", 1).topic_id
        await share_partition(b, "g", topic_id, 0, "t")
        parked = asyncio.ensure_future(manager.fetch("g", "m", [(topic_id, 0, "t")], params(60_000)))
        await until_parked(b)
        manager.forget_share_state("g")
        result = await asyncio.wait_for(parked, 5)
        assert result[(topic_id, 0)].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_an_acknowledgement_wakes_a_parked_fetch_only_when_it_leaves_records_to_acquire(tmp_path):
    async with running_broker(tmp_path) as b:
        manager = b.share_manager
        topic_id = b.topics.create("t", 1).topic_id
        await share_partition(b, "g", topic_id, 0, "t")
        await produce(b, "t", [b"a", b"b"])
        held = await manager.fetch("g", "m1", [(topic_id, 0, "t")], params(0, batch_size=1))
        assert held[(topic_id, 0)].acquired == [(0, 1, 1)]
        looks = []
        acquire = manager._acquire
        manager._acquire = lambda member, *a, **kw: looks.append(member) or acquire(member, *a, **kw)
        parked = asyncio.ensure_future(manager.fetch("g", "m2", [(topic_id, 0, "t")], params(60_000)))
        await until_parked(b)

        await manager.acknowledge("g", "m1", {(topic_id, 0): [(0, 0, [1])]})  # accept: nothing to acquire
        for _ in range(20):
            await asyncio.sleep(0)
        assert looks == ["m2"] and not parked.done()
        await manager.acknowledge("g", "m1", {(topic_id, 0): [(1, 1, [2])]})  # release: m2 takes it
        result = await asyncio.wait_for(parked, 5)
        assert looks == ["m2", "m2"] and result[(topic_id, 0)].acquired == [(1, 1, 2)]


def test_an_acknowledgement_while_an_overdue_lock_timer_is_pending_is_answered(tmp_path):
    """The broker runs on uvloop, whose ``call_at`` returns a handle without ``when()`` for a
    deadline already due. Re-arming before such a timer fired (an acknowledgement in the same
    loop turn as a late acquisition) raised AttributeError after the acceptance was applied,
    and the consumer got UNKNOWN_SERVER_ERROR for records it had in fact accepted."""

    async def scenario():
        async with running_broker(tmp_path) as b:
            manager = b.share_manager
            loop = asyncio.get_running_loop()
            manager._now = lambda: loop.time() * 1000 - 120_000  # every lock deadline is overdue
            topic_id = b.topics.create("t", 1).topic_id
            await share_partition(b, "g", topic_id, 0, "t")
            await produce(b, "t", [b"a", b"b"])
            held = await manager.fetch("g", "m", [(topic_id, 0, "t")], params(0))
            assert held[(topic_id, 0)].acquired == [(0, 1, 1)]
            result = await manager.acknowledge("g", "m", {(topic_id, 0): [(0, 0, [1])]})
            assert result[(topic_id, 0)][0] == ErrorCode.NONE
            assert manager.cached("g", topic_id, 0).acquired_count == 1

    uvloop.run(scenario())


async def test_an_acceptance_that_makes_room_under_the_in_flight_limit_wakes_a_parked_fetch(tmp_path):
    async with running_broker(tmp_path, {"group.share.partition.max.record.locks": "100"}) as b:
        manager = b.share_manager
        topic_id = b.topics.create("t", 1).topic_id
        await share_partition(b, "g", topic_id, 0, "t")
        await produce(b, "t", [b"x"] * 100)
        await produce(b, "t", [b"y"])
        held = await manager.fetch("g", "m1", [(topic_id, 0, "t")], params(0, max_records=100, batch_size=100))
        assert held[(topic_id, 0)].acquired == [(0, 99, 1)]  # the limit: offset 100 waits
        parked = asyncio.ensure_future(manager.fetch("g", "m2", [(topic_id, 0, "t")], params(60_000)))
        await until_parked(b)
        await manager.acknowledge("g", "m1", {(topic_id, 0): [(0, 99, [1])]})
        result = await asyncio.wait_for(parked, 5)
        assert result[(topic_id, 0)].acquired == [(100, 100, 1)]


async def test_min_bytes_zero_answers_at_once_when_a_partition_has_room(tmp_path):
    """Kafka's DelayedShareFetch: with a partition under the lock limit, MinBytes 0 is met by
    zero bytes, so the fetch does not long-poll (it used to wait MaxWaitMs)."""
    async with running_broker(tmp_path) as b:
        topic_id = b.topics.create("t", 1).topic_id
        await share_partition(b, "g", topic_id, 0, "t")
        p = FetchParams(max_wait_ms=60_000, min_bytes=0, max_bytes=1 << 20, max_records=500, batch_size=500)
        assert await asyncio.wait_for(b.share_manager.fetch("g", "m1", [(topic_id, 0, "t")], p), 5) == {}


async def test_min_bytes_is_met_at_once_when_the_records_start_in_an_older_segment(tmp_path):
    """DelayedShareFetch.isMinBytesSatisfied answers at once when the fetch offset is on a
    segment older than the log end's (onOlderSegment), whatever MinBytes asks: the fetch
    waited its whole MaxWaitMs for a MinBytes that the log after a roll did not hold."""
    async with running_broker(tmp_path) as b:
        topic_id = b.topics.create("t", 1).topic_id
        await share_partition(b, "g", topic_id, 0, "t")
        await produce(b, "t", [b"a"])
        b.store.get("t", 0).roll()
        await produce(b, "t", [b"b"])
        p = FetchParams(max_wait_ms=60_000, min_bytes=1 << 20, max_bytes=2 << 20, max_records=500, batch_size=500)
        got = await asyncio.wait_for(b.share_manager.fetch("g", "m1", [(topic_id, 0, "t")], p), 5)
        assert got[(topic_id, 0)].acquired == [(0, 1, 1)]
        # Within the log end's segment the bytes count, as before.
        await produce(b, "t", [b"c"])
        parked = asyncio.ensure_future(b.share_manager.fetch("g", "m1", [(topic_id, 0, "t")], p))
        await until_parked(b)
        assert not parked.done()
        parked.cancel()


async def test_min_bytes_counts_a_partition_only_up_to_its_share_of_max_bytes(tmp_path):
    """isMinBytesSatisfied adds min(bytes available, the partition's share of MaxBytes) per
    partition: one batch larger than its share does not meet a MinBytes above the share (it
    answered at once; Kafka waits MaxWaitMs, then serves the batch)."""
    async with running_broker(tmp_path) as b:
        topic_id = b.topics.create("t", 2).topic_id
        for p in (0, 1):
            await share_partition(b, "g", topic_id, p, "t")
        await produce(b, "t", [bytes(120 * 1024)])
        p = FetchParams(max_wait_ms=500, min_bytes=100 * 1024, max_bytes=128 * 1024, max_records=500, batch_size=500)
        started = time.monotonic()
        got = await b.share_manager.fetch("g", "m1", [(topic_id, 0, "t"), (topic_id, 1, "t")], p)
        assert time.monotonic() - started >= 0.4
        assert got[(topic_id, 0)].acquired == [(0, 0, 1)]


async def test_the_first_fetch_acquires_max_records_of_large_records(tmp_path):
    """The first read of a share partition has no bytes-per-record estimate; one cut short of
    MaxRecords is made again with the estimate it gave. Kafka reads the whole byte budget: the
    first fetch of 1 KiB records acquired 60 records instead of 500."""
    async with running_broker(tmp_path) as b:
        topic_id = b.topics.create("t", 1).topic_id
        await share_partition(b, "g", topic_id, 0, "t")
        for _ in range(100):
            await produce(b, "t", [bytes(1024)] * 10)
        p = FetchParams(max_wait_ms=0, min_bytes=1, max_bytes=50 << 20, max_records=500, batch_size=500)
        first = await b.share_manager.fetch("g", "m1", [(topic_id, 0, "t")], p)
        assert first[(topic_id, 0)].acquired == [(0, 499, 1)]


async def test_a_released_record_below_held_ones_comes_with_new_records_after_them(tmp_path):
    """Kafka reads the whole byte budget from the next fetch offset, so a fetch starting at a
    released record acquires it and then new records after the held window (up to MaxRecords
    and the lock limit). The read sized for MaxRecords ended inside the window: the fetch
    returned the one released record."""
    async with running_broker(tmp_path) as b:
        manager = b.share_manager
        topic_id = b.topics.create("t", 1).topic_id
        await share_partition(b, "g", topic_id, 0, "t")
        for _ in range(1000):
            await produce(b, "t", [b"x" * 20])
        held = await manager.fetch("g", "m1", [(topic_id, 0, "t")], params(0, max_records=1000, batch_size=1000))
        assert held[(topic_id, 0)].acquired == [(0, 999, 1)]
        await manager.acknowledge("g", "m1", {(topic_id, 0): [(0, 0, [2])]})  # release offset 0
        for _ in range(500):
            await produce(b, "t", [b"y" * 20])
        got = await manager.fetch("g", "m2", [(topic_id, 0, "t")], params(0))
        assert got[(topic_id, 0)].acquired == [(0, 0, 2), (1000, 1498, 1)]


async def test_max_bytes_is_shared_by_the_partitions_with_room_under_the_lock_limit(tmp_path):
    """Kafka divides MaxBytes over the partitions that can acquire: one at the lock limit
    takes no share (partition 1 got 30 KiB-worth of a 64 KiB budget)."""
    async with running_broker(tmp_path, {"group.share.partition.max.record.locks": "100"}) as b:
        manager = b.share_manager
        topic_id = b.topics.create("t", 2).topic_id
        for p in (0, 1):
            await share_partition(b, "g", topic_id, p, "t")
            for _ in range(20):
                await produce(b, "t", [bytes(1024)] * 10, partition=p)
        full = await manager.fetch("g", "m0", [(topic_id, 0, "t")], params(0, max_records=100, batch_size=100))
        assert full[(topic_id, 0)].acquired == [(0, 99, 1)]
        assert not manager.cached("g", topic_id, 0).can_acquire()
        p = FetchParams(max_wait_ms=0, min_bytes=1, max_bytes=64 * 1024, max_records=500, batch_size=500)
        got = await manager.fetch("g", "m1", [(topic_id, 0, "t"), (topic_id, 1, "t")], p)
        assert list(got) == [(topic_id, 1)]
        assert got[(topic_id, 1)].acquired == [(0, 59, 1)]  # six 10-record batches of ~10.3 KiB


async def test_a_parked_fetch_whose_client_left_hands_its_wake_up_on(tmp_path):
    """Parked fetches are woken oldest first, and a disconnected client's fetch stays parked
    until then: it used to acquire the records, which were then released for the next one."""
    async with running_broker(tmp_path) as b:
        manager = b.share_manager
        topic_id = b.topics.create("t", 1).topic_id
        await share_partition(b, "g", topic_id, 0, "t")
        left = asyncio.ensure_future(manager.fetch("g", "m1", [(topic_id, 0, "t")], params(60_000), gone=lambda: True))
        await until_parked(b)
        stays = asyncio.ensure_future(manager.fetch("g", "m2", [(topic_id, 0, "t")], params(60_000)))
        await until_parked(b, 2)
        await produce(b, "t", [b"x"])
        assert await asyncio.wait_for(left, 5) == {}
        assert (await asyncio.wait_for(stays, 5))[(topic_id, 0)].acquired == [(0, 0, 1)]


async def _two_records_held_by_m1(b):
    """Topic "t" with records 0 and 1, both acquired by member m1 of group "g"; returns
    (manager, topic id, its partition 0, the share partition)."""
    manager = b.share_manager
    topic_id = b.topics.create("t", 1).topic_id
    tp = (topic_id, 0)
    sp = await share_partition(b, "g", topic_id, 0, "t")
    await produce(b, "t", [b"a", b"b"])
    assert (await manager.fetch("g", "m1", [(topic_id, 0, "t")], params(0)))[tp].acquired == [(0, 1, 1)]
    return manager, topic_id, tp, sp


async def test_a_write_fenced_by_a_newer_state_epoch_drops_the_share_partition_until_the_next_fetch(tmp_path):
    """Kafka's fencedSharePartitionHandler: after a fenced write the cached share partition is
    stale, so it is dropped and the next fetch reads the state again. Kept, every later write
    carried the old state epoch and was fenced too, until a restart."""
    async with running_broker(tmp_path) as b:
        manager, topic_id, tp, sp = await _two_records_held_by_m1(b)
        # Someone else (here: the test) initialises the state again, with a newer state epoch.
        code, _ = await manager.persister.initialize_state("g", topic_id, 0, state_epoch=sp.state_epoch + 1,
                                                           start_offset=0)
        assert code == ErrorCode.NONE
        result = await manager.acknowledge("g", "m1", {tp: [(0, 0, [1])]})
        assert result[tp][0] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert manager.share_partitions("g") == []
        # The next fetch reads the new state (nothing acknowledged: both records come back).
        again = await manager.fetch("g", "m1", [(topic_id, 0, "t")], params(0))
        assert again[tp].acquired == [(0, 1, 1)]
        assert (await manager.acknowledge("g", "m1", {tp: [(0, 1, [1])]}))[tp][0] == ErrorCode.NONE


async def test_a_fetch_parked_on_a_share_partition_fenced_by_a_write_waits_on_without_it(tmp_path):
    """Kafka's fencedSharePartitionHandler marks the share partition FENCED, whose
    maybeAcquireFetchLock then refuses every DelayedShareFetch holding it: a fetch parked on it
    is not answered an error but waits out its MaxWaitMs and leaves it out. Its next fetch
    reads the state again."""
    async with running_broker(tmp_path) as b:
        manager, topic_id, tp, sp = await _two_records_held_by_m1(b)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        parked = asyncio.ensure_future(manager.fetch("g", "m2", [(topic_id, 0, "t")], params(1_000)))
        await until_parked(b)
        code, _ = await manager.persister.initialize_state("g", topic_id, 0, state_epoch=sp.state_epoch + 1,
                                                           start_offset=0)
        assert code == ErrorCode.NONE
        assert (await manager.acknowledge("g", "m1", {tp: [(0, 0, [1])]}))[tp][0] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert await asyncio.wait_for(parked, 5) == {}
        assert loop.time() - t0 >= 0.99  # waited out MaxWaitMs
        again = await manager.fetch("g", "m2", [(topic_id, 0, "t")], params(0))
        assert again[tp].acquired == [(0, 1, 1)]


async def test_a_write_refused_for_another_reason_answers_unknown_server_error(tmp_path):
    """Kafka's SharePartition maps the write errors it has no case for to UNKNOWN_SERVER_ERROR:
    the share coordinator's INVALID_REQUEST for a batch it cannot take is not the client's."""
    async with running_broker(tmp_path) as b:
        manager = b.share_manager
        topic_id = b.topics.create("t", 1).topic_id
        tp = (topic_id, 0)
        await share_partition(b, "g", topic_id, 0, "t")
        await produce(b, "t", [b"a"])
        assert (await manager.fetch("g", "m1", [(topic_id, 0, "t")], params(0)))[tp].acquired == [(0, 0, 1)]
        # The state is deleted behind the leader's back: the coordinator refuses the write as
        # one to an uninitialised share partition (INVALID_REQUEST).
        assert (await manager.persister.delete_state("g", [tp]))[tp][0] == ErrorCode.NONE
        result = await manager.acknowledge("g", "m1", {tp: [(0, 0, [1])]})
        assert result[tp][0] == ErrorCode.UNKNOWN_SERVER_ERROR


async def test_a_lock_expiry_written_after_a_later_acknowledgement_does_not_move_the_stored_start_back(tmp_path):
    """A lock expiry's write is sent from a task of its own, so an acknowledgement handled
    before that task runs reaches the share coordinator first. The expiry archived offset 0
    (at the delivery limit) and the SPSO moved past the accepted 1-2 to 3; the acknowledgement
    of 3 was written with SPSO 3, which drops 1-2 from the stored state. The expiry's write
    then carried the SPSO from before the expiry, 0: the stored start went back to 0 with
    nothing stored for 1-2, and after a restart they were delivered again as new records."""
    async with running_broker(tmp_path, {"group.share.delivery.count.limit": "2"}) as b:
        manager, now, topic_id = await hand_clock_share_partition(b)
        tp = (topic_id, 0)
        for value in (b"a", b"b", b"c", b"d"):
            await produce(b, "t", [value])  # offsets 0-3, a batch each
        leader = manager._leaders[("g", topic_id, 0)]

        async def fetch(member, n):
            result = await manager.fetch("g", member, [(topic_id, 0, "t")], params(0, max_records=n, batch_size=n))
            return result[tp].acquired

        async def expire():
            manager._expire(leader)
            await asyncio.gather(*list(manager._writes))

        assert await fetch("m1", 1) == [(0, 0, 1)]
        now[0] += leader.sp.lock_duration_ms + 1
        await expire()
        assert await fetch("m1", 1) == [(0, 0, 2)]
        lock_end = now[0] + leader.sp.lock_duration_ms
        now[0] += 1_000
        assert await fetch("m2", 3) == [(1, 3, 1)]
        assert await manager.acknowledge("g", "m2", {tp: [(1, 2, [1])]}) == {tp: (0, None)}

        now[0] = lock_end + 1  # only offset 0's lock: it is archived, the SPSO moves once written
        manager._expire(leader)
        assert leader.sp.start_offset == 0 and manager._writes
        # Handled before the expiry's write task runs: written at once.
        assert await manager.acknowledge("g", "m2", {tp: [(3, 3, [1])]}) == {tp: (0, None)}
        await asyncio.gather(*list(manager._writes))
        assert leader.sp.start_offset == 4

        manager.forget_share_state("g")  # what a restart loads
        sp = await share_partition(b, "g", topic_id, 0, "t")
        assert (sp.start_offset, sp.next_fetch_offset()) == (4, 4)


async def test_a_release_scheduled_for_a_departed_member_frees_only_what_it_held_then(tmp_path):
    """A member that left with no share session open has its records released from a task
    (the departure is reported from a callback). The release was worked out when that task
    ran, so a share fetch of the member handled first, say on a session it had just opened,
    had the records it was answered with released as well: they went to another member while
    the first one still worked on them. Kafka releases a member's records when it learns of
    the departure; only the write is asynchronous."""
    async with running_broker(tmp_path) as b:
        manager = b.share_manager
        topic_id = b.topics.create("t", 1).topic_id
        tp = (topic_id, 0)
        await share_partition(b, "g", topic_id, 0, "t")
        await produce(b, "t", [b"a", b"b"])
        await produce(b, "t", [b"c", b"d"])
        sp = manager.cached("g", topic_id, 0)

        async def fetch(member):
            return (await manager.fetch("g", member, [(topic_id, 0, "t")], params(0, 2, 2)))[tp].acquired

        assert await fetch("m") == [(0, 1, 1)]
        b._member_departed("g", "m")  # no share session: its records are released
        assert await fetch("m") == [(2, 3, 1)]  # handled before the release's task runs
        await asyncio.gather(*list(manager._writes))
        held = {offset: member for offset, _, _, member, _, _ in sp.iter_records()}
        assert held == {0: None, 1: None, 2: "m", 3: "m"}


async def test_a_share_partition_loading_while_its_topic_is_deleted_and_created_again_never_reads_the_new_one(tmp_path):
    """A share partition is loaded for a topic id but finds its log by topic name, once the
    state is read. A topic deleted while that read was in flight (a network persister, a
    state write waiting for its fsync) and created again under the same name has a new id and
    a new log: the share partition of the old id was loaded on the new log, and the fetch
    that loaded it answered the new topic's records as the old topic's. A deletion only
    forgets loaded share partitions, so nothing dropped it either."""
    async with running_broker(tmp_path) as b:
        manager = b.share_manager
        old_id = b.topics.create("t", 1).topic_id
        code, _ = await manager.persister.initialize_state("g", old_id, 0, state_epoch=1, start_offset=0)
        assert code == ErrorCode.NONE
        read = asyncio.Event()
        reading = asyncio.Event()
        read_state = manager.persister.read_state

        async def held_read(*args, **kwargs):
            state = await read_state(*args, **kwargs)  # answered before the deletion
            reading.set()
            await read.wait()
            return state

        manager.persister = type("Held", (), {"read_state": staticmethod(held_read),
                                              "initialize_state": manager.persister.initialize_state})()
        fetching = asyncio.ensure_future(manager.fetch("g", "m", [(old_id, 0, "t")], params(0)))
        await reading.wait()
        b.topics.delete("t")
        new_id = b.topics.create("t", 1).topic_id
        await produce(b, "t", [b"new"])
        read.set()
        result = (await fetching)[(old_id, 0)]
        assert new_id != old_id
        assert (result.error_code, result.acquired) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
        assert manager.share_partitions("g") == []


async def test_an_acknowledgement_while_its_share_partition_loads_finds_no_records(tmp_path):
    """Kafka caches a share partition before it reads its state (SharePartitionManager's
    getOrCreateSharePartition, then maybeInitialize), so an acknowledgement that arrives
    during the read (a network persister's round trip) reaches an empty cache:
    SharePartition.acknowledge answers INVALID_RECORD_STATE, batch not found. Only a share
    partition that is not there at all is UNKNOWN_TOPIC_OR_PARTITION."""
    async with running_broker(tmp_path) as b:
        manager = b.share_manager
        topic_id = b.topics.create("t", 1).topic_id
        code, _ = await manager.persister.initialize_state("g", topic_id, 0, state_epoch=1, start_offset=0)
        assert code == ErrorCode.NONE
        await produce(b, "t", [b"a"])
        read = asyncio.Event()
        reading = asyncio.Event()
        read_state = manager.persister.read_state

        async def held_read(*args, **kwargs):
            state = await read_state(*args, **kwargs)
            reading.set()
            await read.wait()
            return state

        manager.persister = type("Held", (), {"read_state": staticmethod(held_read)})()
        fetching = asyncio.ensure_future(manager.fetch("g", "m", [(topic_id, 0, "t")], params(0)))
        await reading.wait()
        acked = await manager.acknowledge("g", "m", {(topic_id, 0): [(0, 0, [1])]})
        assert acked == {(topic_id, 0): (
            ErrorCode.INVALID_RECORD_STATE,
            "Batch record not found. The request batch offsets are not found in the cache.")}
        read.set()
        assert (await fetching)[(topic_id, 0)].acquired == [(0, 0, 1)]


async def test_a_failed_load_is_logged_with_the_error_it_answers(tmp_path, caplog):
    """A fetch of a share partition nobody initialised answers UNKNOWN_SERVER_ERROR; the broker
    says why in its log, as Kafka's SharePartition.maybeInitialize does, so an operator
    seeing the client's error finds its cause."""
    async with running_broker(tmp_path) as b:
        topic_id = b.topics.create("t", 1).topic_id
        with caplog.at_level("WARNING", logger="kshare.share"):
            result = (await b.share_manager.fetch("g", "m", [(topic_id, 0, "t")], params(0)))[(topic_id, 0)]
        assert result.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
        (message,) = [r.getMessage() for r in caplog.records if "loading failed" in r.getMessage()]
        assert f"('g', UUID('{topic_id}'), 0)" in message and "UNKNOWN_SERVER_ERROR" in message


async def test_a_lock_expiry_is_written_with_the_start_offset_before_it_moves(tmp_path):
    """Kafka's timeout handler writes the expired records' state with the SPSO and
    delivery-complete count of that moment and moves the SPSO once the write is done
    (SharePartition.releaseAcquisitionLockOnTimeout, then maybeUpdateCachedStateAndOffsets):
    records archived at the delivery limit are written with StartOffset 0 and
    DeliveryCompleteCount 3, and the stored start stays 0 until a later write."""
    async with running_broker(tmp_path, {"group.share.delivery.count.limit": "2"}) as b:
        manager, now, topic_id = await hand_clock_share_partition(b)
        tp = (topic_id, 0)
        await produce(b, "t", [b"a", b"b", b"c"])  # offsets 0-2, one batch
        leader = manager._leaders[("g", topic_id, 0)]
        for delivery in (1, 2):
            result = await manager.fetch("g", "m1", [(topic_id, 0, "t")], params(0))
            assert result[tp].acquired == [(0, 2, delivery)]
            if delivery == 1:
                now[0] += leader.sp.lock_duration_ms + 1
                manager._expire(leader)
                await asyncio.gather(*list(manager._writes))

        sent = []
        write_state = manager.persister.write_state

        async def spy(*args, **kw):
            sent.append((kw["start_offset"], kw["delivery_complete_count"], list(kw["batches"]),
                         leader.sp.start_offset))
            return await write_state(*args, **kw)

        manager.persister.write_state = spy
        now[0] += leader.sp.lock_duration_ms + 1
        manager._expire(leader)
        await asyncio.gather(*list(manager._writes))
        assert sent == [(0, 3, [(0, 2, 4, 2)], 0)]  # ARCHIVED (4), sent before the SPSO moved
        assert leader.sp.start_offset == 3 and leader.sp.delivery_complete_count == 0
        state = await manager.persister.read_state("g", topic_id, 0, leader_epoch=0)
        assert state.start_offset == 0


async def test_a_log_start_moved_under_held_records_leaves_them_in_the_in_flight_window(tmp_path):
    """Kafka's share partition follows a moved log start only when a read from its next fetch
    offset fails OFFSET_OUT_OF_RANGE (ShareFetchUtils.processFetchResponse calls
    updateCacheAndOffsets). Records a consumer holds below the new start therefore still count
    under group.share.partition.max.record.locks, and their acknowledgement is written with
    the old start offset. kshare moved the SPSO at every fetch: m2 acquired offset 100 past
    the limit, and the acceptance was written as 50-99 from start offset 50."""
    async with running_broker(tmp_path, {"group.share.partition.max.record.locks": "100"}) as b:
        manager = b.share_manager
        topic_id = b.topics.create("t", 1).topic_id
        tp = (topic_id, 0)
        await share_partition(b, "g", topic_id, 0, "t")
        await produce(b, "t", [b"x"] * 100)
        await produce(b, "t", [b"y"])
        held = await manager.fetch("g", "m1", [(topic_id, 0, "t")], params(0, max_records=100, batch_size=100))
        assert held[tp].acquired == [(0, 99, 1)]
        b.store.get("t", 0).delete_records_before(50)
        assert await manager.fetch("g", "m2", [(topic_id, 0, "t")], params(0)) == {}
        sp = manager.cached("g", topic_id, 0)
        assert (sp.start_offset, sp.in_flight_count) == (0, 100)

        writes = []
        write_state = manager.persister.write_state

        async def spy(*args, **kwargs):
            writes.append((kwargs["start_offset"], kwargs["delivery_complete_count"], kwargs["batches"]))
            return await write_state(*args, **kwargs)

        manager.persister.write_state = spy
        assert await manager.acknowledge("g", "m1", {tp: [(0, 99, [1])]}) == {tp: (0, None)}
        assert writes == [(0, 100, [(0, 99, 2, 1)])]
        got = await manager.fetch("g", "m2", [(topic_id, 0, "t")], params(0))
        assert got[tp].acquired == [(100, 100, 1)]


async def test_a_fetch_from_below_the_log_start_answers_at_once_and_the_next_one_reads_from_it(tmp_path):
    """A released record below a moved log start is where the next fetch reads: Kafka's read
    fails OFFSET_OUT_OF_RANGE, which completes the long poll at once with nothing for the
    partition, after moving it to the log start (archiving the available records below). The
    next fetch acquires from there. The same when a share partition is loaded with its start
    offset below the log start. kshare read again from the new start within the same fetch."""
    async with running_broker(tmp_path) as b:
        manager = b.share_manager
        topic_id = b.topics.create("t", 1).topic_id
        tp = (topic_id, 0)
        await share_partition(b, "g", topic_id, 0, "t")
        for value in (b"a", b"b", b"c", b"d"):
            await produce(b, "t", [value])
        held = await manager.fetch("g", "m1", [(topic_id, 0, "t")], params(0, max_records=2, batch_size=2))
        assert held[tp].acquired == [(0, 1, 1)]
        await manager.acknowledge("g", "m1", {tp: [(0, 1, [2])]})  # released: the next fetch reads at 0
        b.store.get("t", 0).delete_records_before(2)
        long_poll = params(60_000)
        assert await asyncio.wait_for(manager.fetch("g", "m2", [(topic_id, 0, "t")], long_poll), 5) == {}
        sp = manager.cached("g", topic_id, 0)
        assert (sp.start_offset, sp.next_fetch_offset()) == (2, 2)
        got = await manager.fetch("g", "m2", [(topic_id, 0, "t")], params(0))
        assert got[tp].acquired == [(2, 3, 1)]

        manager.forget_share_state("g")  # loaded again with the stored start offset, 0
        assert (await share_partition(b, "g", topic_id, 0, "t")).start_offset == 0
        assert await asyncio.wait_for(manager.fetch("g", "m3", [(topic_id, 0, "t")], long_poll), 5) == {}
        got = await manager.fetch("g", "m3", [(topic_id, 0, "t")], params(0))
        assert got[tp].acquired == [(2, 3, 1)]
