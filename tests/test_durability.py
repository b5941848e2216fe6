"""Durability across restarts (clean stops, kill -9 with flush.messages=1, torn segment tails) and
segments damaged under a running broker or unreadable at start."""

from __future__ import annotations

import errno
import os
import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.log.checkpoint import CLEAN_SHUTDOWN_MARKER
from broker.log.file import FileLogStore
from broker.topics import CONSUMER_OFFSETS, SHARE_GROUP_STATE
from coordinator.share.routing import key_string, partition_for_key
from protocol.messages.describe_topic_partitions_request import DescribeTopicPartitionsRequest, TopicRequest
from protocol.messages.find_coordinator_request import FindCoordinatorRequest
from protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest
from tests.broker_process import BrokerProcess
from tests.raw_client import RawClient
from tests.test_e2e_share_support import Consumers, earliest_group, poll_for, poll_until, set_group_configs
from tests.test_e2e_share_support import produce as produce_confluent
from tests.test_log_support import blob, make_batch
from tests.test_metrics_e2e import heartbeat, scrape
from tests.test_metrics_e2e import value as metric_value
from tests.test_produce_support import batch, create_topic, fetch, headers_of, list_offset, produce, raw, records_of
from tests.test_share_wire_support import ShareMember, acquired, parts, unique
from tests.test_share_wire_support import create_topic as create_topic_with_id

CORRUPT_MESSAGE, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = (
    2, 5, 6, 15, 16)
KAFKA_STORAGE_ERROR = 56
GROUP_KEY, SHARE_KEY = 0, 2


def read_all(bootstrap: str, topic: str, count: int) -> dict[int, bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "durability", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: dict[int, bytes] = {}
        deadline = time.monotonic() + 30
        while len(out) < count and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                out[msg.offset()] = msg.value()
        return out
    finally:
        c.close()


def test_sigterm_restart_keeps_every_record_and_offsets_continue(broker_factory, topic_name):
    b = broker_factory()
    with RawClient(b.bootstrap) as c:
        create_topic(c, topic_name)
        for i in range(20):
            assert produce(c, topic_name, batch([b"r%02d" % i, b"s%02d" % i])).base_offset == 2 * i
    assert b.stop() == 0
    assert (b.data_dir / ".kafka_cleanshutdown").exists()
    b.start()
    with RawClient(b.bootstrap) as c:
        assert produce(c, topic_name, batch([b"after"])).base_offset == 40
        values = [r.value for r in records_of(fetch(c, topic_name, 0).records)]
    assert values == [v for i in range(20) for v in (b"r%02d" % i, b"s%02d" % i)] + [b"after"]
    assert "Traceback" not in b.log()


def test_kill_9_loses_nothing_acknowledged_with_flush_every_message(broker_factory, topic_name):
    b = broker_factory({"log.flush.interval.messages": "1"})
    acked: dict[int, bytes] = {}
    failed = []

    def on_delivery(err, msg) -> None:
        if err is None:
            acked[msg.offset()] = msg.value()
        else:
            failed.append(err)

    p = Producer({
        "bootstrap.servers": b.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 1,
        "message.timeout.ms": 60000, "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 100,
    })
    sent = 0
    deadline = time.monotonic() + 30
    while len(acked) < 300 and time.monotonic() < deadline:  # deliveries in flight while we kill
        p.produce(topic_name, b"m%06d" % sent, on_delivery=on_delivery)
        sent += 1
        p.poll(0.001)
    assert len(acked) >= 300
    b.kill()
    before_restart = dict(acked)
    for _ in range(200):  # a few more into the void: queued, delivered after the restart
        p.produce(topic_name, b"m%06d" % sent, on_delivery=on_delivery)
        sent += 1
    b.start()
    assert p.flush(30) == 0
    assert failed == []
    stored = read_all(b.bootstrap, topic_name, len(acked))
    for offset, value in before_restart.items():
        assert stored.get(offset) == value, offset
    for offset, value in acked.items():
        assert stored.get(offset) == value, offset
    # the idempotent producer's retries across the crash were not written twice
    assert sorted(stored.values()) == sorted(set(stored.values()))
    assert len(stored) == sent


def test_torn_tail_is_truncated_at_start_up(broker_factory, topic_name):
    b = broker_factory()
    with RawClient(b.bootstrap) as c:
        create_topic(c, topic_name)
        for i in range(5):
            produce(c, topic_name, batch([b"v%d" % i] * 3))
        last = headers_of(fetch(c, topic_name, 12).records)[0]
    b.kill()
    segment = b.data_dir / f"{topic_name}-0" / ("%020d.log" % 0)
    size = segment.stat().st_size
    with open(segment, "ab") as f:  # garbage after the last batch, as a crash mid-write leaves
        f.write(os.urandom(100))
    b.start()
    with RawClient(b.bootstrap) as c:
        assert produce(c, topic_name, batch([b"next"])).base_offset == 15
        assert len(records_of(fetch(c, topic_name, 0).records)) == 16
    b.kill()
    os.truncate(segment, size - last.size // 2)  # now cut the 5th batch in half
    b.start()
    assert_first_four_batches_kept(b.bootstrap, topic_name)
    assert "truncating the log to offset 12" in b.log()


def assert_first_four_batches_kept(bootstrap: str, topic: str) -> None:
    """After the last of five batches ``v0``-``v4`` (3 records each) was cut: the first four
    read back and appends go on at offset 12."""
    with RawClient(bootstrap) as c:
        part = fetch(c, topic, 0)
        assert part.high_watermark == 12
        assert [r.value for r in records_of(part.records)] == [b"v%d" % i for i in range(4) for _ in range(3)]
        assert produce(c, topic, batch([b"again"])).base_offset == 12


def test_a_segment_cut_under_the_running_broker(broker_factory, topic_name):
    """A segment file cut while the broker runs (by hand, a damaged disk) is never served as if
    the log ended there: Fetch, ShareFetch, ListOffsets and Produce get KAFKA_STORAGE_ERROR for
    that partition and Metadata shows it without a leader (Kafka takes the log directory
    offline), other partitions go on, the broker logs it once, and a restart recovers the whole
    batches before the cut."""
    b = broker_factory()
    healthy = topic_name + "-ok"
    with RawClient(b.bootstrap) as c, ShareMember(b.bootstrap, unique("g")) as member:
        topic_id = create_topic_with_id(c, topic_name)
        create_topic(c, healthy)
        member.open([(topic_id, 0)])
        for i in range(5):
            produce(c, topic_name, batch([b"v%d" % i] * 3))
        last = headers_of(fetch(c, topic_name, 12).records)[0]
        segment = b.data_dir / f"{topic_name}-0" / ("%020d.log" % 0)
        os.truncate(segment, segment.stat().st_size - last.size // 2)  # the 5th batch cut in half

        assert fetch(c, topic_name, 0).error_code == KAFKA_STORAGE_ERROR
        assert parts(member.fetch())[(topic_id, 0)].error_code == KAFKA_STORAGE_ERROR
        by_time = unique("g")  # a new share partition reset by timestamp reads the log to start
        set_group_configs(b.bootstrap, by_time, {"share.auto.offset.reset": "by_duration:PT1H"})
        with ShareMember(b.bootstrap, by_time) as late:
            assert parts(late.fetch([(topic_id, 0)]))[(topic_id, 0)].error_code == KAFKA_STORAGE_ERROR
        assert list_offset(c, topic_name, 0).error_code == KAFKA_STORAGE_ERROR
        assert produce(c, topic_name, batch([b"lost"])).error_code == KAFKA_STORAGE_ERROR
        assert produce(c, healthy, batch([b"fine"])).error_code == 0
        assert [r.value for r in records_of(fetch(c, healthy, 0).records)] == [b"fine"]
        assert leaders(c, topic_name, healthy) == {
            topic_name: (LEADER_NOT_AVAILABLE, -1, [1]), healthy: (0, 1, [])}
    assert b.log().count("offline until a restart") == 1
    assert "Traceback" not in b.log()

    b.restart()
    assert_first_four_batches_kept(b.bootstrap, topic_name)
    with RawClient(b.bootstrap) as c:
        assert leaders(c, topic_name)[topic_name] == (0, 1, [])



def test_an_offline_log_answers_storage_error_even_where_its_bytes_are_intact(broker_factory, topic_name):
    """Once a read finds a segment cut, the partition's log is offline, and as Kafka's
    getPartitionOrError does for an offline partition, every Fetch and ListOffsets of it gets
    KAFKA_STORAGE_ERROR, not only those reaching the lost bytes; Fetch v4-5 get
    NOT_LEADER_OR_FOLLOWER instead (maybeDownConvertStorageError: those clients may not know 56).
    So does a ShareFetch with nothing left to read there, at once rather than after MaxWaitMs."""
    b = broker_factory()
    with RawClient(b.bootstrap) as c, ShareMember(b.bootstrap, unique("g")) as member:
        topic_id = create_topic_with_id(c, topic_name)
        for i in range(10):
            produce(c, topic_name, batch([b"x" * 1000]))
        member.open([(topic_id, 0)])  # 'latest': the share partition starts at the log end
        segment = b.data_dir / f"{topic_name}-0" / ("%020d.log" % 0)
        os.truncate(segment, segment.stat().st_size // 2)
        assert fetch(c, topic_name, 8, version=5).error_code == NOT_LEADER_OR_FOLLOWER  # the read that finds it
        for kw in ({}, {"partition_max_bytes": 100}, {"max_wait_ms": 5000, "min_bytes": 1 << 20}):
            part = fetch(c, topic_name, 0, **kw)
            assert (part.error_code, part.high_watermark, part.records) == (KAFKA_STORAGE_ERROR, -1, b"")
        for version in (4, 5):
            assert fetch(c, topic_name, 0, version=version).error_code == NOT_LEADER_OR_FOLLOWER
        for timestamp in (-1, -2, -4):
            part = list_offset(c, topic_name, timestamp)
            assert (part.error_code, part.offset) == (KAFKA_STORAGE_ERROR, -1)
        resp, took = member.timed_fetch(max_wait_ms=5000)
        assert parts(resp)[(topic_id, 0)].error_code == KAFKA_STORAGE_ERROR and took < 2.5

def leaders(client: RawClient, *topics: str) -> dict[str, tuple[int, int, list[int]]]:
    """{topic: (error, leader, offline replicas) of partition 0} from Metadata, checked to be
    the same in DescribeTopicPartitions but for the error: Kafka's metadata cache never sets a
    partition error there (a leaderless partition is leader -1, error 0)."""
    md = client.request(3, 12, MetadataRequest(topics=[MetadataRequestTopic(name=t) for t in topics]))
    dtp = client.request(75, 0, DescribeTopicPartitionsRequest(
        topics=[TopicRequest(name=t) for t in topics], response_partition_limit=100))
    out = {t.name: (t.partitions[0].error_code, t.partitions[0].leader_id, t.partitions[0].offline_replicas)
           for t in md.topics}
    assert {t.name: (t.partitions[0].error_code, t.partitions[0].leader_id, t.partitions[0].offline_replicas)
            for t in dtp.topics} == {name: (0, leader, offline) for name, (_, leader, offline) in out.items()}
    return out


def test_a_corrupt_batch_answers_corrupt_message_where_it_is_reached(broker_factory, topic_name):
    """A batch whose length field was damaged on disk: Fetch and ShareFetch serve the batches
    before it (Fetch, as Kafka's file slice, with the damaged bytes after them), then answer
    CORRUPT_MESSAGE where Kafka does, instead of an empty answer that left consumers stuck
    without a word. The partition stays online and takes appends."""
    b = broker_factory()
    with RawClient(b.bootstrap) as c, ShareMember(b.bootstrap, unique("g")) as member:
        topic_id = create_topic_with_id(c, topic_name)
        member.open([(topic_id, 0)])
        for i in range(5):
            produce(c, topic_name, batch([b"v%d" % i] * 3))
        first = headers_of(fetch(c, topic_name, 0, partition_max_bytes=1).records)[0]
        with open(b.data_dir / f"{topic_name}-0" / ("%020d.log" % 0), "r+b") as f:
            f.seek(2 * first.size + 8)  # the third batch's length
            f.write(struct.pack(">i", 5))

        # Kafka's LogSegment.read slices the file: the damaged bytes follow the good batches
        served = raw(fetch(c, topic_name, 0).records)
        assert [r.offset for r in records_of(served[: 2 * first.size])] == list(range(6))
        assert len(served) > 2 * first.size
        assert fetch(c, topic_name, 6).error_code == CORRUPT_MESSAGE
        assert [acquired(p) for p in parts(member.fetch()).values()] == [[(0, 5, 1)]]
        assert parts(member.fetch())[(topic_id, 0)].error_code == CORRUPT_MESSAGE
        assert produce(c, topic_name, batch([b"after"])).base_offset == 15
        assert leaders(c, topic_name)[topic_name] == (0, 1, [])
    consumers = Consumers(b.bootstrap)  # confluent-kafka: the six good records, then the error
    try:
        consumer = consumers.new(earliest_group(b.bootstrap), topic_name)
        got = []
        with pytest.raises(KafkaException, match="corrupt message"):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                got += [m.value() for m in consumer.poll(0.2)]
        assert got == [b"v0"] * 3 + [b"v1"] * 3
    finally:
        consumers.close_all()
    assert b.log().count("reached a corrupt batch") == 1
    assert "Traceback" not in b.log()


def test_a_share_consumer_leaves_a_partition_whose_log_is_offline_alone(tmp_path, topic_name):
    """confluent-kafka's ShareConsumer, subscribed to a topic whose log went offline and to a
    healthy one, reads the missing leader: it consumes the healthy topic and sends almost no
    requests for the other, where KAFKA_STORAGE_ERROR alone made it retry thousands of times a
    second."""
    b = BrokerProcess(tmp_path / "data", extra_args=["--metrics-port", "0"]).start()
    consumers = Consumers(b.bootstrap)
    healthy = topic_name + "-ok"
    try:
        with RawClient(b.bootstrap) as c:
            create_topic(c, topic_name)
            create_topic(c, healthy)
            for i in range(5):
                produce(c, topic_name, batch([b"v%d" % i] * 3))
            segment = b.data_dir / f"{topic_name}-0" / ("%020d.log" % 0)
            os.truncate(segment, segment.stat().st_size // 2)
            assert fetch(c, topic_name, 0).error_code == KAFKA_STORAGE_ERROR
        group = earliest_group(b.bootstrap)
        produce_confluent(b.bootstrap, healthy, [b"a", b"b", b"c"])
        consumer = consumers.new(group, [topic_name, healthy])
        got = poll_until(consumer, lambda got: len(got) >= 3)
        got += poll_for(consumer, 1.0)
        assert sorted((m.topic(), m.value()) for m in got) == [(healthy, v) for v in (b"a", b"b", b"c")]
        scraped = scrape(b)
        assert metric_value(scraped, "kafka_network_requestmetrics_requests_total", request="ShareFetch") < 100
        assert metric_value(scraped, "kafka_controller_kafkacontroller_offlinepartitionscount") == 1
    finally:
        consumers.close_all()
        b.kill()


def test_a_coordinator_partition_offline_is_not_offered_as_a_coordinator(broker_factory, topic_name):
    """When the ``__consumer_offsets`` partition of a group, or the ``__share_group_state``
    partition of a share-partition, goes offline, FindCoordinator answers
    COORDINATOR_NOT_AVAILABLE for their keys, as Kafka answers a coordinator partition without
    a leader; keys on other partitions still get this broker, and a restart serves them all."""
    b = broker_factory()
    group = unique("g")
    other = next(g for g in (unique("g") for _ in range(1000)) if internal_partition(g) != internal_partition(group))
    with RawClient(b.bootstrap) as c, ShareMember(b.bootstrap, group) as member:
        topic_id = create_topic_with_id(c, topic_name)
        produce(c, topic_name, batch([b"v"]))
        heartbeat(c, group, member.member_id, 0, [topic_name])  # writes to the group's partition
        member.open([(topic_id, 0)])  # initialises the share-partition's state
        state_key = key_string(group, topic_id, 0)
        other_key = next(k for k in (key_string(unique("g"), topic_id, 0) for _ in range(1000))
                         if internal_partition(k) != internal_partition(state_key))
        assert coordinators(c, GROUP_KEY, group, other) == {group: 0, other: 0}
        assert coordinators(c, SHARE_KEY, state_key, other_key) == {state_key: 0, other_key: 0}

        for topic, partition in [(CONSUMER_OFFSETS, internal_partition(group)),
                                 (SHARE_GROUP_STATE, internal_partition(state_key))]:
            segment = b.data_dir / f"{topic}-{partition}" / ("%020d.log" % 0)
            os.truncate(segment, segment.stat().st_size // 2)
            assert fetch(c, topic, 0, partition=partition).error_code == KAFKA_STORAGE_ERROR

        assert coordinators(c, GROUP_KEY, group, other) == {group: COORDINATOR_NOT_AVAILABLE, other: 0}
        assert coordinators(c, SHARE_KEY, state_key, other_key) == {state_key: COORDINATOR_NOT_AVAILABLE,
                                                                    other_key: 0}
        # Another spelling of the same key is hashed as Kafka does, in its canonical form
        # (SharePartitionKey.asCoordinatorKey), so it lands on the same offline partition.
        spelt = next(k for k in (state_key[:-1] + p for p in ("+0", "00", "-0", "000", "0:", "+00"))
                     if internal_partition(k) != internal_partition(state_key))
        assert coordinators(c, SHARE_KEY, spelt) == {spelt: COORDINATOR_NOT_AVAILABLE}
        single = c.request(10, 3, FindCoordinatorRequest(key=group, key_type=GROUP_KEY))
        assert (single.error_code, single.node_id) == (COORDINATOR_NOT_AVAILABLE, -1)
        # The leave cannot be written; reloading the group then fails, logged without a traceback.
        leave = c.request(76, 1, ShareGroupHeartbeatRequest(group_id=group, member_id=member.member_id,
                                                            member_epoch=-1))
        assert leave.error_code == NOT_COORDINATOR  # Kafka's answer to a failed write
        deadline = time.monotonic() + 10
        while "stay unavailable" not in b.log() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert b.log().count("stay unavailable") == 1
    assert "Traceback" not in b.log()

    b.restart()
    with RawClient(b.bootstrap) as c:
        assert coordinators(c, GROUP_KEY, group, other) == {group: 0, other: 0}
        assert coordinators(c, SHARE_KEY, state_key, other_key) == {state_key: 0, other_key: 0}


def coordinators(client: RawClient, key_type: int, *keys: str) -> dict[str, int]:
    """{key: error} from one FindCoordinator v6, each error checked against its node."""
    resp = client.request(10, 6, FindCoordinatorRequest(key_type=key_type, coordinator_keys=list(keys)))
    for found in resp.coordinators:
        assert found.node_id == (1 if found.error_code == 0 else -1)
    return {found.key: found.error_code for found in resp.coordinators}


def internal_partition(key: str) -> int:
    """The partition of a group id (``__consumer_offsets``) or a share-partition key
    (``__share_group_state``), 50 partitions each by default."""
    return partition_for_key(key, 50)


async def test_an_unreadable_segment_at_start_stops_it_with_the_reason(broker_factory, topic_name, monkeypatch):
    """A disk that fails reads (EIO) while the start recovers a log after kill -9 stops the
    start with the path and the reason, not a traceback."""
    from broker.__main__ import StartupError, serve
    from broker.log import segment

    b = broker_factory()
    with RawClient(b.bootstrap) as c:
        create_topic(c, topic_name)
        produce(c, topic_name, batch([b"v"] * 3))
    b.kill()  # no clean-shutdown marker: the start reads the segments again

    def failing_pread(fd, size, position):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(segment.os, "pread", failing_pread)
    config = BrokerConfig({"log.dirs": str(b.data_dir), "listeners": "PLAINTEXT://127.0.0.1:0"})
    with pytest.raises(StartupError, match=r"cannot open the data directory .*Input/output error"):
        await serve(config)


async def test_a_failing_shutdown_step_still_flushes_and_closes_the_logs(tmp_path, caplog):
    """A full disk can fail the share coordinator's final snapshot; the graceful stop logs it,
    goes on to flush and close every log (with Kafka's clean-shutdown marker, since the logs are
    whole), and reports the failure so kshare-broker exits 1."""
    b = Broker(BrokerConfig({"log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0"}))
    await b.start()
    b.topics.create("t", 1)
    b.partitions.append(b.store.get("t", 0), *blob(make_batch(3)))

    async def full_disk():
        raise OSError(errno.ENOSPC, "No space left on device")

    b.share_coordinator_runtime.stop = full_disk
    assert await b.stop() is False
    assert "shutting down: " in caplog.text and "No space left on device" in caplog.text
    assert "shutdown finished with errors" in caplog.text
    assert (tmp_path / "data" / CLEAN_SHUTDOWN_MARKER).exists()  # the store still closed cleanly
    reopened = FileLogStore(str(tmp_path / "data"))
    assert reopened.get("t", 0).end_offset == 3
    await reopened.close()
