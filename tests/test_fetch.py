"""Fetch: raw batches, byte budgets (KIP-74), long polls, errors, epochs, sessions, topic ids."""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.context import RequestContext
from broker.handlers import fetch as fetch_handler
from broker.handlers import produce as produce_handler
from broker.partitions import data_key
from protocol.errors import ErrorCode
from protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic, ReplicaState
from protocol.uuids import random_uuid
from tests.raw_client import RawClient
from tests.test_produce_support import (
    FETCH,
    batch,
    create_topic,
    fetch,
    fetch_request,
    headers_of,
    produce,
    produce_request,
    records_of,
)


def as_stored(batches: list[bytes], offset: int = 0) -> bytes:
    """Produced batches as the broker stores and serves them: base offsets assigned from
    ``offset`` on, partition leader epoch 0."""
    out = b""
    for b in batches:
        stored = bytearray(b)
        struct.pack_into(">q", stored, 0, offset)
        struct.pack_into(">i", stored, 12, 0)
        out += stored
        offset += headers_of(b)[0].records_count
    return out


def test_batches_come_back_byte_identical_apart_from_offset_and_epoch(broker, topic_name):
    with RawClient(broker.bootstrap) as c:
        topic_id = create_topic(c, topic_name).topic_id
        sent = [batch([b"a", b"b"], keys=[b"k1", None]), batch([b"c"], compression=2)]
        for b in sent:
            produce(c, topic_name, b)
        for version in (4, 11, 12, 16, 18):
            by_id = {"topic_id": topic_id} if version >= 13 else {}
            part = fetch(c, topic_name, 0, version=version, **by_id)
            assert part.error_code == 0
            assert part.high_watermark == part.last_stable_offset == 3
            assert part.log_start_offset == (0 if version >= 5 else -1)  # a v5 field
            assert part.aborted_transactions is None
            assert bytes(part.records) == as_stored(sent), version


def test_large_pipelined_responses_reach_a_reader_with_a_small_window_intact(broker, topic_name):
    """Responses bigger than the socket takes at once: the broker keeps the unsent rest of one
    (uvloop's writelines holds views of its parts) while the next is answered behind it."""
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)
        sent = [batch([bytes([i]) * 1000 for _ in range(1000)]) for i in range(3)]  # ~1 MB each
        for b in sent:
            produce(c, topic_name, b)
        with RawClient(broker.bootstrap, "slow-reader") as reader:
            reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
            frames = [reader.frame(FETCH, 12, fetch_request(topic_name, o, partition_max_bytes=8 << 20))
                      for o in (0, 1000)]
            reader.send_raw(b"".join(frames))
            got = [reader.read_response(FETCH, 12) for _ in frames]
        for resp, first in zip(got, (0, 1)):
            (t,) = resp.responses
            (p,) = t.partitions
            assert bytes(p.records) == as_stored(sent[first:], 1000 * first)


def test_partition_and_request_byte_limits_follow_kip_74(broker, topic_name):
    other = topic_name + "-b"
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)
        create_topic(c, other)
        for i in range(3):
            produce(c, topic_name, batch([bytes([i]) * 1000]))
            produce(c, other, batch([bytes([i]) * 1000]))
        size = headers_of(fetch(c, topic_name, 0, partition_max_bytes=1).records)[0].size
        # partition limit below one batch: the first batch still comes back whole
        part = fetch(c, topic_name, 0, partition_max_bytes=1)
        assert [h.base_offset for h in headers_of(part.records)] == [0]
        part = fetch(c, topic_name, 1, partition_max_bytes=2 * size)
        assert [h.base_offset for h in headers_of(part.records)] == [1, 2]
        # past the first batch the limit cuts where it falls, as Kafka's LogSegment.read slices
        # the file: a partial batch ends the data (clients drop it and fetch it again)
        part = fetch(c, topic_name, 0, partition_max_bytes=2 * size - 1)
        records = bytes(part.records)
        assert len(records) == 2 * size - 1
        assert [h.base_offset for h in headers_of(records[:size])] == [0]
        assert records[size:] == bytes(fetch(c, topic_name, 1, partition_max_bytes=size).records)[:size - 1]
        # request limit: the first partition takes what fits, the next gets the rest only
        req = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=size + 10, topics=[
            FetchTopic(topic=topic_name, partitions=[FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)]),
            FetchTopic(topic=other, partitions=[FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)]),
        ])
        resp = c.request(FETCH, 12, req)
        first, second = (t.partitions[0] for t in resp.responses)
        assert len(bytes(first.records)) == size + 10  # one batch and 10 bytes of the next
        assert len(headers_of(bytes(first.records)[:size])) == 1
        assert bytes(second.records) == b""  # nothing left
        assert second.high_watermark == 3
        req.max_bytes = 3 * size + 10  # 10 bytes left for the second: not a whole batch, and not the first
        first, second = (t.partitions[0] for t in c.request(FETCH, 12, req).responses)
        assert (len(bytes(first.records)), bytes(second.records)) == (3 * size, b"")


def test_offset_out_of_range_and_the_log_end(broker, topic_name):
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)
        produce(c, topic_name, batch([b"a"]))
        at_end = fetch(c, topic_name, 1)
        assert (at_end.error_code, at_end.high_watermark, bytes(at_end.records)) == (0, 1, b"")
        past = fetch(c, topic_name, 5)
        assert (past.error_code, past.high_watermark, past.log_start_offset) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1, -1)


def test_leader_epoch_checks_and_read_committed(broker, topic_name):
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)
        produce(c, topic_name, batch([b"a"]))
        assert fetch(c, topic_name, 0, leader_epoch=0).error_code == 0
        assert fetch(c, topic_name, 0, leader_epoch=1).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
        topic_id = create_topic(c, topic_name).topic_id
        req = fetch_request("", 0, topic_id=topic_id)
        req.replica_state = ReplicaState(replica_id=2, replica_epoch=1)
        resp = c.request(FETCH, 16, req)
        refused = resp.responses[0].partitions[0]
        assert (refused.current_leader.leader_id, refused.current_leader.leader_epoch) == (1, 0)  # KIP-951
        assert [(n.node_id, n.port) for n in resp.node_endpoints] == [(1, int(broker.bootstrap.rsplit(":", 1)[1]))]
        committed = fetch(c, topic_name, 0, isolation_level=1)
        assert committed.aborted_transactions == [] and committed.last_stable_offset == 1
        assert len(records_of(committed.records)) == 1


def test_topic_ids_from_v13_and_unknown_topics(broker, topic_name):
    with RawClient(broker.bootstrap) as c:
        topic_id = create_topic(c, topic_name).topic_id
        produce(c, topic_name, batch([b"a"]))
        part = fetch(c, "", 0, version=13, topic_id=topic_id)
        assert [r.value for r in records_of(part.records)] == [b"a"]
        resp = c.request(FETCH, 16, fetch_request("", 0, topic_id=random_uuid()))
        assert resp.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
        assert fetch(c, "no-such-topic", 0, version=12).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert fetch(c, topic_name, 0, partition=7).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_sessionless_fetches(broker, topic_name):
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)
        req = fetch_request(topic_name, 0)
        req.session_id, req.session_epoch = 0, 0  # ask for a new session
        resp = c.request(FETCH, 12, req)
        assert (resp.error_code, resp.session_id) == (0, 0)  # none created: full fetches go on
        req.session_id, req.session_epoch = 1234, 1
        resp = c.request(FETCH, 12, req)
        assert (resp.error_code, resp.responses) == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, [])
        req.session_id, req.session_epoch = 1234, 0  # a full fetch naming an old session
        resp = c.request(FETCH, 12, req)
        assert (resp.error_code, resp.session_id, resp.responses[0].partitions[0].error_code) == (0, 0, 0)


def test_follower_fetches_are_refused(broker, topic_name):
    with RawClient(broker.bootstrap) as c:
        topic_id = create_topic(c, topic_name).topic_id
        req = fetch_request("", 0, topic_id=topic_id)
        req.replica_state = ReplicaState(replica_id=2, replica_epoch=1)
        resp = c.request(FETCH, 15, req)
        assert resp.responses[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_long_poll_returns_on_produce_and_min_bytes_waits_for_max_wait(broker, topic_name):
    with RawClient(broker.bootstrap) as consumer, RawClient(broker.bootstrap) as producer:
        create_topic(consumer, topic_name)
        start = time.monotonic()
        consumer.send_raw(consumer.frame(FETCH, 12, fetch_request(topic_name, 0, max_wait_ms=5000, min_bytes=1)))
        produce(producer, topic_name, batch([b"wake"]))
        resp = consumer.read_response(FETCH, 12)
        elapsed = time.monotonic() - start
        assert [r.value for r in records_of(resp.responses[0].partitions[0].records)] == [b"wake"]
        assert elapsed < 2.5, elapsed  # woken by the produce, not by the 5 s timeout

        start = time.monotonic()
        part = fetch(consumer, topic_name, 0, max_wait_ms=300, min_bytes=1 << 20)
        elapsed = time.monotonic() - start
        assert len(records_of(part.records)) == 1  # what there is, once MaxWaitMs has passed
        assert 0.29 <= elapsed < 2.5, elapsed


@pytest.mark.filterwarnings("ignore:(open|read)_text is deprecated:DeprecationWarning")
def test_a_long_poll_is_woken_by_records_after_segments_were_deleted(broker, topic_name):
    """A kafka-python consumer long-polling at the end of a partition gets the next record at
    once even when DeleteRecords (or retention) dropped a segment during its wait: like Kafka's
    DelayedFetch, the wait counts bytes appended since it began, not the log's shrinking size."""
    import threading

    from confluent_kafka import Producer
    from confluent_kafka import TopicPartition as CkTopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import KafkaConsumer, TopicPartition

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1, config={"segment.bytes": "1048576"})])[topic_name].result(15)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for _ in range(15):  # 1.5 MB: a rolled segment to drop, and the active one
        producer.produce(topic_name, b"x" * 100_000)
    assert producer.flush(15) == 0
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                             fetch_max_wait_ms=20_000, request_timeout_ms=40_000)
    produced_at = []

    def purge_then_produce() -> None:
        time.sleep(1)  # the consumer's fetch is waiting by now
        admin.delete_records([CkTopicPartition(topic_name, 0, 15)])[CkTopicPartition(topic_name, 0, 15)].result(15)
        time.sleep(0.3)
        producer.produce(topic_name, b"new")
        producer.flush(15)
        produced_at.append(time.monotonic())

    try:
        tp = TopicPartition(topic_name, 0)
        consumer.assign([tp])
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == 15
        worker = threading.Thread(target=purge_then_produce)
        worker.start()
        got = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got = [m.value for ms in consumer.poll(timeout_ms=500).values() for m in ms]
        received_at = time.monotonic()
        worker.join(15)
        assert got == [b"new"]
        assert received_at - produced_at[0] < 5, received_at - produced_at[0]  # not the 20 s wait
    finally:
        consumer.close()



def _part(p: int, offset: int) -> FetchPartition:
    return FetchPartition(partition=p, fetch_offset=offset, partition_max_bytes=1 << 20)


def _timed_fetch(client, version: int, topics: list[FetchTopic], max_wait_ms: int):
    """(seconds taken, [(topic or id, partition, error)] in response order)."""
    req = FetchRequest(max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, topics=topics)
    start = time.monotonic()
    resp = client.request(FETCH, version, req)
    rows = [(t.topic or t.topic_id, p.partition_index, p.error_code) for t in resp.responses for p in t.partitions]
    return time.monotonic() - start, rows


def test_unknown_partitions_do_not_cut_a_long_poll_short(broker, topic_name):
    """As Kafka's handleFetch: unknown topics, topic ids and partitions are set aside (answered
    after the others) and the rest long-polls; a request naming only unknown ones answers at once."""
    with RawClient(broker.bootstrap) as c:
        topic_id = create_topic(c, topic_name).topic_id
        produce(c, topic_name, batch([b"x"]))
        gone, missing = random_uuid(), "no-such-" + topic_name
        at_end = _part(0, 1)
        elapsed, rows = _timed_fetch(c, 16, [FetchTopic(topic_id=gone, partitions=[_part(0, 0)]),
                                             FetchTopic(topic_id=topic_id, partitions=[at_end])], 600)
        assert rows == [(topic_id, 0, 0), (gone, 0, ErrorCode.UNKNOWN_TOPIC_ID)]
        assert elapsed >= 0.55, elapsed
        elapsed, rows = _timed_fetch(c, 12, [FetchTopic(topic=topic_name, partitions=[_part(5, 0), at_end]),
                                             FetchTopic(topic=missing, partitions=[_part(0, 0)])], 600)
        assert rows == [(topic_name, 0, 0), (topic_name, 5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                        (missing, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        assert elapsed >= 0.55, elapsed
        elapsed, rows = _timed_fetch(c, 12, [FetchTopic(topic=missing, partitions=[_part(0, 0)])], 5000)
        assert rows == [(missing, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)] and elapsed < 2.5, elapsed

        # still woken by an append to the partitions that exist
        consumer_req = FetchRequest(max_wait_ms=5000, min_bytes=1, max_bytes=1 << 20, topics=[
            FetchTopic(topic=topic_name, partitions=[at_end]), FetchTopic(topic=missing, partitions=[_part(0, 0)])])
        start = time.monotonic()
        c.send_raw(c.frame(FETCH, 12, consumer_req))
        with RawClient(broker.bootstrap) as producer:
            produce(producer, topic_name, batch([b"wake"]))
        resp = c.read_response(FETCH, 12)
        assert time.monotonic() - start < 2.5
        assert [r.value for r in records_of(resp.responses[0].partitions[0].records)] == [b"wake"]
        assert resp.responses[1].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_partition_named_twice_is_answered_once(broker, topic_name):
    """Kafka keys a request's partitions in a LinkedHashMap: one entry, in the first one's place,
    read with the later one's values."""
    with RawClient(broker.bootstrap) as c:
        topic_id = create_topic(c, topic_name).topic_id
        for v in (b"a", b"b", b"c"):
            produce(c, topic_name, batch([v]))

        def offsets(version, topics):
            resp = c.request(FETCH, version, FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=topics))
            return [(p.partition_index, p.error_code, [r.offset for r in records_of(p.records)])
                    for t in resp.responses for p in t.partitions]

        assert offsets(12, [FetchTopic(topic=topic_name, partitions=[_part(0, 0), _part(0, 2)])]) == [(0, 0, [2])]
        assert offsets(16, [FetchTopic(topic_id=topic_id, partitions=[_part(0, 0), _part(5, 0)]),
                            FetchTopic(topic_id=topic_id, partitions=[_part(0, 1), _part(5, 0)])]) == [
            (0, 0, [1, 2]), (5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])]

# -- in-process: the waiting itself, and log start offset moves ---------------------------------------


@pytest.fixture
async def local(tmp_path):
    b = Broker(BrokerConfig({"log.dirs": str(tmp_path / "data")}))
    yield b
    await b.store.close()


def ctx(b, api_key, version):
    conn = type("Conn", (), {"peer": ("127.0.0.1", 1), "close": lambda self: None})()
    return RequestContext(b, conn, api_key, version, 1, "tests")


async def test_a_waiting_fetch_is_woken_by_the_append(local):
    local.topics.create("t", 1)
    req = fetch_request("t", 0, max_wait_ms=30_000, min_bytes=1)
    task = asyncio.ensure_future(fetch_handler.handle(ctx(local, 1, 12), req))
    while not local.partitions.waiting(data_key("t", 0)):  # parked in the long poll
        assert not task.done()
        await asyncio.sleep(0)
    start = time.monotonic()
    await produce_handler.handle(ctx(local, 0, 9), produce_request("t", batch([b"x"])))
    resp = await asyncio.wait_for(task, 5)
    assert time.monotonic() - start < 1
    assert [r.value for r in records_of(resp.responses[0].partitions[0].records)] == [b"x"]


async def test_min_bytes_counts_appended_bytes_before_answering(local):
    local.topics.create("t", 1)
    size = len(batch([b"y" * 100]))
    req = fetch_request("t", 0, max_wait_ms=30_000, min_bytes=2 * size)
    task = asyncio.ensure_future(fetch_handler.handle(ctx(local, 1, 12), req))
    while not local.partitions.waiting(data_key("t", 0)):
        await asyncio.sleep(0)
    await produce_handler.handle(ctx(local, 0, 9), produce_request("t", batch([b"y" * 100])))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done()  # one batch is not MinBytes yet
    await produce_handler.handle(ctx(local, 0, 9), produce_request("t", batch([b"y" * 100])))
    resp = await asyncio.wait_for(task, 5)
    assert len(records_of(resp.responses[0].partitions[0].records)) == 2


async def test_min_bytes_counts_at_most_partition_max_bytes_of_each_partition(local):
    """Kafka's DelayedFetch.tryComplete adds, per partition, the bytes from the fetch offset to
    the high watermark capped at PartitionMaxBytes: a partition can never count for more, so with
    MinBytes above it the fetch waits out MaxWaitMs however much is appended."""
    local.topics.create("t", 1)
    size = len(batch([b"y" * 100]))
    await produce_handler.handle(ctx(local, 0, 9), produce_request("t", batch([b"y" * 100])))
    req = fetch_request("t", 0, max_wait_ms=30_000, min_bytes=2 * size, partition_max_bytes=size + size // 2)
    task = asyncio.ensure_future(fetch_handler.handle(ctx(local, 1, 12), req))
    while not local.partitions.waiting(data_key("t", 0)):  # one batch read: less than MinBytes
        await asyncio.sleep(0)
    for _ in range(3):
        await produce_handler.handle(ctx(local, 0, 9), produce_request("t", batch([b"y" * 100])))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done()  # at most PartitionMaxBytes counted: never MinBytes
    task.cancel()


async def test_a_fetch_offset_on_an_older_segment_answers_without_waiting_for_min_bytes(local):
    """Kafka's DelayedFetch completes at once when the fetch offset is on a segment older than
    the log end's (case F), whatever MinBytes asks; it waited MaxWaitMs."""
    local.topics.create("t", 1)
    lg = local.store.get("t", 0)
    await produce_handler.handle(ctx(local, 0, 9), produce_request("t", batch([b"a"])))
    lg.roll()
    await produce_handler.handle(ctx(local, 0, 9), produce_request("t", batch([b"b"])))
    req = fetch_request("t", 0, max_wait_ms=30_000, min_bytes=1 << 20)
    resp = await asyncio.wait_for(fetch_handler.handle(ctx(local, 1, 12), req), 5)
    assert [r.value for r in records_of(resp.responses[0].partitions[0].records)] == [b"a"]  # one segment
    # Waiting on the log end's segment, a roll ends the wait.
    req = fetch_request("t", 1, max_wait_ms=30_000, min_bytes=1 << 20)
    task = asyncio.ensure_future(fetch_handler.handle(ctx(local, 1, 12), req))
    while not local.partitions.waiting(data_key("t", 0)):
        await asyncio.sleep(0)
    lg.roll()
    await produce_handler.handle(ctx(local, 0, 9), produce_request("t", batch([b"c"])))
    resp = await asyncio.wait_for(task, 5)
    assert [r.value for r in records_of(resp.responses[0].partitions[0].records)] == [b"b"]


async def test_a_partition_is_read_from_one_segment_per_fetch(local):
    """Kafka's LocalLog.read returns what the fetch offset's segment holds and moves to the next
    segment only when that one has nothing at or after the offset; the budget left over is not
    spent on later segments."""
    local.topics.create("t", 1)
    lg = local.store.get("t", 0)
    for values in ([b"a", b"b"], [b"c"], [b"d"]):
        for v in values:
            await produce_handler.handle(ctx(local, 0, 9), produce_request("t", batch([v])))
        lg.roll()

    async def values(offset):
        resp = await fetch_handler.handle(ctx(local, 1, 12), fetch_request("t", offset))
        return [r.value for r in records_of(resp.responses[0].partitions[0].records)]

    assert await values(0) == [b"a", b"b"]
    assert await values(1) == [b"b"]
    assert await values(2) == [b"c"]
    assert await values(3) == [b"d"]
    lg.delete_records_before(2)  # the first segment goes; offset 2 starts the log
    assert await values(2) == [b"c"]


async def test_shutdown_releases_long_polls(local):
    local.topics.create("t", 1)
    task = asyncio.ensure_future(fetch_handler.handle(ctx(local, 1, 12), fetch_request("t", 0, max_wait_ms=30_000, min_bytes=1)))
    while not local.partitions.waiting(data_key("t", 0)):
        await asyncio.sleep(0)
    local.partitions.begin_shutdown()
    resp = await asyncio.wait_for(task, 5)
    assert resp.responses[0].partitions[0].error_code == 0


async def test_deleting_the_topic_answers_a_waiting_fetch(local):
    local.topics.create("t", 1)
    task = asyncio.ensure_future(fetch_handler.handle(ctx(local, 1, 12), fetch_request("t", 0, max_wait_ms=30_000, min_bytes=1)))
    while not local.partitions.waiting(data_key("t", 0)):
        await asyncio.sleep(0)
    local.topics.delete("t")
    resp = await asyncio.wait_for(task, 5)
    assert resp.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_a_topic_created_again_while_a_fetch_waits_is_not_read_under_the_old_id(local):
    """Deleted and created again under its name during the long poll: a fetch that named the
    old topic id gets Kafka's topic-id check (INCONSISTENT_TOPIC_ID, from ReplicaManager's
    readFromLog), not the new topic's records nor the answer for a partition that is gone."""
    old_id = local.topics.create("t", 1).topic_id
    req = fetch_request("t", 0, max_wait_ms=30_000, min_bytes=1, topic_id=old_id)
    task = asyncio.ensure_future(fetch_handler.handle(ctx(local, 1, 16), req))
    while not local.partitions.waiting(data_key("t", 0)):
        await asyncio.sleep(0)
    local.topics.delete("t")
    local.topics.create("t", 1)
    await produce_handler.handle(ctx(local, 0, 9), produce_request("t", batch([b"new"])))
    (t,) = (await asyncio.wait_for(task, 5)).responses
    assert t.topic_id == old_id
    assert [(p.error_code, p.records) for p in t.partitions] == [(ErrorCode.INCONSISTENT_TOPIC_ID, b"")]


async def test_log_start_offset_moves_are_reflected(local):
    local.topics.create("t", 1)
    for v in (b"a", b"b", b"c"):
        await produce_handler.handle(ctx(local, 0, 9), produce_request("t", batch([v])))
    local.store.get("t", 0).delete_records_before(2)
    req = fetch_request("t", 0)
    part = (await fetch_handler.handle(ctx(local, 1, 12), req)).responses[0].partitions[0]
    assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    part = (await fetch_handler.handle(ctx(local, 1, 12), fetch_request("t", 2))).responses[0].partitions[0]
    assert (part.log_start_offset, part.high_watermark) == (2, 3)
    resp = await produce_handler.handle(ctx(local, 0, 9), produce_request("t", batch([b"d"])))
    assert resp.responses[0].partition_responses[0].log_start_offset == 2



# -- epochs as Kafka's FetchRequest.fetchData reads them ------------------------------------------


def test_a_negative_current_leader_epoch_is_not_checked(broker, topic_name):
    """FetchRequest.optionalEpoch: any negative CurrentLeaderEpoch is absent, so with leader
    epoch 0 a Fetch is never FENCED_LEADER_EPOCH (ListOffsets keeps -2 and is fenced)."""
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)
        produce(c, topic_name, batch([b"a"]))
        for epoch in (-1, -2, -100):
            part = fetch(c, topic_name, 0, leader_epoch=epoch)
            assert (part.error_code, len(records_of(part.records))) == (0, 1), epoch


def test_current_leader_is_named_from_v16_only(broker, topic_name):
    """KafkaApis.handleFetchRequest fills CurrentLeader and NodeEndpoints for versionId >= 16;
    v12-15 carry the tagged field's default."""
    with RawClient(broker.bootstrap) as c:
        topic_id = create_topic(c, topic_name).topic_id
        for version, named in ((12, False), (15, False), (16, True), (18, True)):
            by_id = {"topic_id": topic_id} if version >= 13 else {}
            req = fetch_request(topic_name if version < 13 else "", 0, **by_id)
            req.replica_state = ReplicaState(replica_id=2, replica_epoch=1)
            req.replica_id = 2
            resp = c.request(FETCH, version, req)
            p = resp.responses[0].partitions[0]
            assert p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            leader = (p.current_leader.leader_id, p.current_leader.leader_epoch)
            assert leader == ((1, 0) if named else (-1, -1)), version
            assert bool(resp.node_endpoints) == named, version


def test_follower_fetches_are_checked_for_epoch_then_refused_as_unknown_replicas(broker, topic_name):
    """Partition.fetchRecords: the leader epoch is checked first, then followerReplicaOrThrow
    refuses a replica that is not assigned: UNKNOWN_LEADER_EPOCH when the request has an epoch,
    NOT_LEADER_OR_FOLLOWER when it has none."""
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)
        for epoch, code in ((-1, ErrorCode.NOT_LEADER_OR_FOLLOWER), (0, ErrorCode.UNKNOWN_LEADER_EPOCH),
                            (3, ErrorCode.UNKNOWN_LEADER_EPOCH)):
            req = fetch_request(topic_name, 0, leader_epoch=epoch)
            req.replica_id = 2
            assert c.request(FETCH, 12, req).responses[0].partitions[0].error_code == code, epoch


def test_last_fetched_epoch_finds_a_diverging_log_or_an_unknown_epoch(broker, topic_name):
    """Partition.readRecords with LastFetchedEpoch: epoch 0 ends at the log end, so a fetch
    offset past it gets DivergingEpoch (0, log end) and no error, at once; an epoch the log never
    had is OFFSET_OUT_OF_RANGE; a negative one is absent."""
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)
        produce(c, topic_name, batch([b"a"]))
        produce(c, topic_name, batch([b"b"]))

        def part(offset, last_epoch, **kw):
            req = fetch_request(topic_name, offset, **kw)
            req.topics[0].partitions[0].last_fetched_epoch = last_epoch
            return c.request(FETCH, 12, req).responses[0].partitions[0]

        p = part(5, 0, max_wait_ms=5000, min_bytes=1)
        assert (p.error_code, p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (0, 0, 2)
        assert (p.high_watermark, p.log_start_offset, bytes(p.records)) == (2, 0, b"")
        p = part(1, 0)
        assert (p.error_code, p.diverging_epoch.epoch, [r.value for r in records_of(p.records)]) == (0, -1, [b"b"])
        assert part(1, 1).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert part(5, -3).error_code == ErrorCode.OFFSET_OUT_OF_RANGE  # absent: the plain range check
        assert [r.value for r in records_of(part(0, -3).records)] == [b"a", b"b"]


def test_an_unknown_isolation_level_fails_the_request(broker, topic_name):
    """IsolationLevel.forId throws for anything but 0 and 1 once FetchIsolation.of reads it (a
    partition exists): KafkaApis.handle answers the request's error response."""
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)
        resp = c.request(FETCH, 12, fetch_request(topic_name, 0, isolation_level=2))
        assert resp.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
        assert [p.error_code for t in resp.responses for p in t.partitions] == [ErrorCode.UNKNOWN_SERVER_ERROR]
        resp = c.request(FETCH, 12, fetch_request("no-such-topic", 0, isolation_level=2))
        assert resp.error_code == 0  # nothing to read: never looked at
        assert fetch(c, topic_name, 0, isolation_level=1).error_code == 0


def test_aborted_transactions_of_refused_partitions_are_kafkas(broker, topic_name):
    """A partition set aside as unknown is FetchResponse.partitionResponse, whose
    AbortedTransactions keeps the generated default (an empty array); a partition whose read
    failed is ReplicaManager's error LogReadResult, with none (null) even for read_committed."""
    with RawClient(broker.bootstrap) as c:
        topic_id = create_topic(c, topic_name).topic_id
        produce(c, topic_name, batch([b"a"]))
        for version in (4, 12, 13, 18):
            for isolation in (0, 1):
                missing = "no-such-" + topic_name
                topics = [FetchTopic(topic=topic_name, topic_id=topic_id, partitions=[_part(0, 9), _part(7, 0)]),
                          FetchTopic(topic=missing, topic_id=random_uuid(), partitions=[_part(0, 0)])]
                resp = c.request(FETCH, version, FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                                                              isolation_level=isolation, topics=topics))
                rows = [(p.error_code, p.aborted_transactions) for t in resp.responses for p in t.partitions]
                unknown_topic = ErrorCode.UNKNOWN_TOPIC_ID if version >= 13 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                assert rows == [(ErrorCode.OFFSET_OUT_OF_RANGE, None), (unknown_topic, []),
                                (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])], (version, isolation)


def test_a_negative_byte_limit_fails_the_read_that_would_use_it(broker, topic_name):
    """ReplicaManager.readFromLog hands min(PartitionMaxBytes, what is left of MaxBytes) to the
    log, whose LogSegment.read refuses a negative size (IllegalArgumentException, so
    UNKNOWN_SERVER_ERROR) unless the fetch offset is the high watermark (nothing to read). What
    is left never goes below 0 after a partition, so the next partition reads a first batch."""
    other = topic_name + "-b"
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)
        create_topic(c, other)
        produce(c, topic_name, batch([b"a"]))
        produce(c, other, batch([b"b"]))

        def rows(max_bytes, *parts):
            topics = [FetchTopic(topic=t, partitions=[FetchPartition(fetch_offset=o, partition_max_bytes=m)])
                      for t, o, m in parts]
            resp = c.request(FETCH, 12, FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, topics=topics))
            return [(p.error_code, p.high_watermark, [r.value for r in records_of(p.records)])
                    for t in resp.responses for p in t.partitions]

        failed = (ErrorCode.UNKNOWN_SERVER_ERROR, -1, [])
        assert rows(1 << 20, (topic_name, 0, -1)) == [failed]
        assert rows(1 << 20, (topic_name, 1, -1)) == [(0, 1, [])]  # at the high watermark: no read
        assert rows(-1, (topic_name, 0, 100), (other, 0, 100)) == [failed, (0, 1, [b"b"])]
        assert rows(-1, (topic_name, 1, 100), (other, 0, 100)) == [(0, 1, []), (0, 1, [b"b"])]


def test_a_consumer_hears_of_unknown_topic_ids_before_unknown_partitions(broker, topic_name):
    """KafkaApis.handleFetchRequest sets aside a consumer's partitions of unknown topic ids in
    a first pass and those of unknown partitions in a second, so the response lists the first
    before the second whatever the request's order; a follower's single pass keeps the order."""
    with RawClient(broker.bootstrap) as c:
        topic_id = create_topic(c, topic_name).topic_id
        gone = random_uuid()

        def rows(replica_id):
            req = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[
                FetchTopic(topic_id=topic_id, partitions=[_part(7, 0)]),
                FetchTopic(topic_id=gone, partitions=[_part(0, 0)])])
            req.replica_state = ReplicaState(replica_id=replica_id, replica_epoch=-1)
            resp = c.request(FETCH, 16, req)
            return [(t.topic_id, p.partition_index, p.error_code) for t in resp.responses for p in t.partitions]

        unknown_id = (gone, 0, ErrorCode.UNKNOWN_TOPIC_ID)
        unknown_partition = (topic_id, 7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        assert rows(-1) == [unknown_id, unknown_partition]
        assert rows(2) == [unknown_partition, unknown_id]
