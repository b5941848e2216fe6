"""Idempotent produce on the wire: InitProducerId, duplicates, gaps, fencing, and restarts."""

from __future__ import annotations

import os
import struct
import time

from protocol.errors import ErrorCode
from protocol.messages.describe_producers_request import DescribeProducersRequest
from protocol.messages.describe_producers_request import TopicRequest as DescribeProducersTopic
from tests.raw_client import RawClient
from tests.test_produce_support import (
    alter_broker_config,
    batch,
    create_topic,
    fetch,
    headers_of,
    init_producer_id,
    list_offset,
    produce,
    records_of,
)


def test_producer_ids_are_unique_across_restarts_and_transactions_are_refused(broker_factory):
    b = broker_factory()
    with RawClient(b.bootstrap) as c:
        first = [init_producer_id(c, version=v) for v in (0, 1, 2, 3, 4, 5)]
        assert all(r.error_code == 0 and r.producer_epoch == 0 for r in first)
        ids = [r.producer_id for r in first]
        assert len(set(ids)) == len(ids)
        txn = init_producer_id(c, transactional_id="my-txn")
        assert txn.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert init_producer_id(c, transactional_id="").error_code == ErrorCode.INVALID_REQUEST
        # v3+: an id without an epoch, or the reverse, is malformed; both together get a new id
        for v in (3, 4, 5):
            assert init_producer_id(c, version=v, producer_id=ids[0]).error_code == ErrorCode.INVALID_REQUEST
            assert init_producer_id(c, version=v, producer_epoch=0).error_code == ErrorCode.INVALID_REQUEST
            bumped = init_producer_id(c, version=v, producer_id=ids[0], producer_epoch=0)
            assert bumped.error_code == 0 and bumped.producer_id not in ids and bumped.producer_epoch == 0
            ids.append(bumped.producer_id)
    b.kill()  # a crash must not hand out an id twice either
    b.start()
    with RawClient(b.bootstrap) as c:
        after = init_producer_id(c).producer_id
    assert after > max(ids)
    assert "refusing transactional id 'my-txn'" in b.log()


def test_duplicates_gaps_fencing_and_duplicates_after_restart(broker_factory, topic_name):
    b = broker_factory()
    with RawClient(b.bootstrap) as c:
        create_topic(c, topic_name)
        pid = init_producer_id(c).producer_id

        def send(values, seq, epoch=0):
            return produce(c, topic_name, batch(values, producer_id=pid, epoch=epoch, seq=seq))

        assert send([b"a", b"b", b"c"], 0).base_offset == 0
        assert send([b"d", b"e"], 3).base_offset == 3
        retry = send([b"a", b"b", b"c"], 0)  # the first batch again, e.g. after a lost response
        assert (retry.error_code, retry.base_offset) == (0, 0)
        assert send([b"d", b"e"], 3).base_offset == 3

        gap = send([b"x"], 9)
        assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert (gap.base_offset, gap.log_start_offset) == (-1, 0)

        assert send([b"f"], 0, epoch=1).base_offset == 5  # a new epoch starts again at 0
        fenced = send([b"g"], 5, epoch=0)
        assert fenced.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
        assert send([b"h"], 7, epoch=1).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

        part = fetch(c, topic_name, 0)
        assert [r.value for r in records_of(part.records)] == [b"a", b"b", b"c", b"d", b"e", b"f"]
        assert part.high_watermark == 6

    b.restart()  # SIGTERM: producer state is snapshotted at the log end
    with RawClient(b.bootstrap) as c:
        again = produce(c, topic_name, batch([b"f"], producer_id=pid, epoch=1, seq=0))
        assert (again.error_code, again.base_offset) == (0, 5)
        assert produce(c, topic_name, batch([b"i"], producer_id=pid, epoch=1, seq=1)).base_offset == 6

    b.kill()  # crash: the state is rebuilt from the snapshot plus the batch headers after it
    b.start()
    with RawClient(b.bootstrap) as c:
        again = produce(c, topic_name, batch([b"i"], producer_id=pid, epoch=1, seq=1))
        assert (again.error_code, again.base_offset) == (0, 6)
        assert produce(c, topic_name, batch([b"j"], producer_id=pid, epoch=1, seq=3)).error_code == (
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        )
        assert produce(c, topic_name, batch([b"x"], producer_id=pid, epoch=0, seq=2)).error_code == (
            ErrorCode.INVALID_PRODUCER_EPOCH
        )
        values = [r.value for r in records_of(fetch(c, topic_name, 0).records)]
        assert values == [b"a", b"b", b"c", b"d", b"e", b"f", b"i"]


def test_duplicate_detected_after_crash_without_any_snapshot(broker_factory, topic_name):
    """Every producer snapshot lost: the last segments' batch headers are replayed."""
    b = broker_factory({"log.segment.bytes": "1048576"})  # Kafka's minimum: ten 100 KB batches each
    with RawClient(b.bootstrap) as c:
        create_topic(c, topic_name)
        pid = init_producer_id(c).producer_id
        for seq in range(40):
            value = (b"v%03d" % seq).ljust(100_000, b".")
            r = produce(c, topic_name, batch([value], producer_id=pid, epoch=0, seq=seq))
            assert r.base_offset == seq
    b.kill()
    data = b.data_dir / f"{topic_name}-0"
    snapshots = list(data.glob("*.snapshot"))
    assert snapshots, "segment rolls write producer snapshots"
    for snap in snapshots:
        snap.unlink()
    b.start()
    with RawClient(b.bootstrap) as c:
        r = produce(c, topic_name, batch([b"v039"], producer_id=pid, epoch=0, seq=39))
        assert (r.error_code, r.base_offset) == (0, 39)
        assert produce(c, topic_name, batch([b"v040"], producer_id=pid, epoch=0, seq=40)).base_offset == 40


# -- in-process: which snapshot start-up trusts ---------------------------------------------------


async def test_start_up_skips_snapshots_past_the_log_end_or_corrupt(tmp_path):
    from broker.broker import Broker
    from broker.config import BrokerConfig
    from broker.partitions import Partitions
    from broker.producer_snapshots import SnapshotFiles

    b = Broker(BrokerConfig({"log.dirs": str(tmp_path / "data")}))
    try:
        b.topics.create("t", 1)
        lg = b.store.get("t", 0)
        for seq in range(3):
            data = bytearray(batch([b"x"], producer_id=42, epoch=0, seq=seq))
            b.partitions.append_produce(b.topics.get("t"), lg, data, now_ms=b.now_ms())
        b.partitions.write_snapshots()
        files = SnapshotFiles(lg.directory)
        assert files.offsets() == [3]
        good = files.read(3)
        files.write(2, good[:-1] + bytes([good[-1] ^ 1]))  # torn: fails its CRC
        files.write(9, good)  # claims offsets the log does not have
        files.delete(3)
        fresh = Partitions(b.store, b.waiters, b.config)
        state = fresh.producer_state(lg)
        # both dropped; the log's batch headers were replayed instead, and (as Kafka's
        # rebuildProducerState) the result written at the log end
        assert files.offsets() == [3]
        assert state.producers[42].last_seq == 2
        assert state.check(batch_header(42, 0, 2), lg.end_offset).last_offset == 2
    finally:
        await b.store.close()


def batch_header(pid, epoch, seq):
    from protocol.records import parse_header

    return parse_header(batch([b"x"], producer_id=pid, epoch=epoch, seq=seq))


# -- producer.id.expiration.ms changed at run time ------------------------------------------------


def test_dynamic_expiration_applies_to_partitions_already_loaded(broker_factory, topic_name):
    """Kafka's one shared ProducerStateManagerConfig: a new producer.id.expiration.ms applies to
    every partition at once, not only to those loaded after the change."""
    b = broker_factory({"producer.id.expiration.check.interval.ms": "200"})
    with RawClient(b.bootstrap) as c:
        create_topic(c, topic_name)
        pid = init_producer_id(c).producer_id
        for seq in range(3):  # loads the partition's producer state with the default (one day)
            assert produce(c, topic_name, batch([b"x"], producer_id=pid, epoch=0, seq=seq)).error_code == 0
        assert produce(c, topic_name, batch([b"x"], producer_id=pid, epoch=0, seq=9)).error_code == (
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        )
        assert alter_broker_config(c, "producer.id.expiration.ms", "500") == 0
        deadline = time.monotonic() + 10
        while True:  # the producer expires within expiration + check interval; then any sequence goes
            r = produce(c, topic_name, batch([b"y"], producer_id=pid, epoch=0, seq=9))
            if r.error_code == 0 or time.monotonic() > deadline:
                break
            assert r.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            time.sleep(0.2)
        assert (r.error_code, r.base_offset) == (0, 3)
    assert "Reconfigure producer.id.expiration.ms from 86400000 to 500" in b.log()


# -- a producer whose records are all deleted -----------------------------------------------------


def snapshot_offsets(b, topic: str) -> list[int]:
    return sorted(int(p.stem) for p in (b.data_dir / f"{topic}-0").glob("*.snapshot"))


def test_producer_whose_records_were_deleted_is_forgotten_at_restart(broker_factory, topic_name):
    """Kafka's truncateAndReload deletes the snapshots at or below the log start and starts from
    empty state: after DeleteRecords up to the log end and a restart the producer is unknown and
    any sequence goes. While the broker runs, it keeps the producer (onLogStartOffsetIncremented
    leaves the producers alone), also when the partition had not been written since start-up."""
    from tests.test_delete_records import delete_records

    b = broker_factory()
    with RawClient(b.bootstrap) as c:
        create_topic(c, topic_name)
        pid = init_producer_id(c).producer_id
        for seq in range(3):
            assert produce(c, topic_name, batch([b"x"], producer_id=pid, epoch=0, seq=seq)).error_code == 0
    b.restart()  # snapshot at 3; the partition's state is loaded again on its first append below
    with RawClient(b.bootstrap) as c:
        assert delete_records(c, (topic_name, 0, -1)) == [(topic_name, 0, 0, 3)]
        gap = produce(c, topic_name, batch([b"y"], producer_id=pid, epoch=0, seq=10))
        assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # still known in this run
        assert produce(c, topic_name, batch([b"y"], producer_id=pid, epoch=0, seq=3)).base_offset == 3
        assert delete_records(c, (topic_name, 0, -1)) == [(topic_name, 0, 0, 4)]
        gap = produce(c, topic_name, batch([b"z"], producer_id=pid, epoch=0, seq=10))
        assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    b.restart()  # clean shutdown: a snapshot at 4, the log start
    assert 4 in snapshot_offsets(b, topic_name)
    with RawClient(b.bootstrap) as c:
        r = produce(c, topic_name, batch([b"z"], producer_id=pid, epoch=0, seq=10))
        assert (r.error_code, r.base_offset) == (0, 4)
        assert produce(c, topic_name, batch([b"w"], producer_id=pid, epoch=0, seq=11)).base_offset == 5
    assert [o for o in snapshot_offsets(b, topic_name) if o <= 4] == []  # deleted, as Kafka does


def test_producer_whose_records_expired_by_retention_is_forgotten_at_restart(broker_factory, topic_name):
    """Retention deletes the active segment too (rolling first), so the log start reaches the log
    end: same as DeleteRecords, the producer is kept while the broker runs, forgotten at restart."""
    b = broker_factory({"log.retention.ms": "1000", "log.retention.check.interval.ms": "200",
                        "log.initial.task.delay.ms": "200"})
    with RawClient(b.bootstrap) as c:
        create_topic(c, topic_name)
        pid = init_producer_id(c).producer_id
        for seq in range(3):
            assert produce(c, topic_name, batch([b"x"], producer_id=pid, epoch=0, seq=seq)).error_code == 0
        deadline = time.monotonic() + 15
        while list_offset(c, topic_name, -2).offset != 3:  # EARLIEST reaches the log end
            assert time.monotonic() < deadline, "retention did not delete the records"
            time.sleep(0.2)
        gap = produce(c, topic_name, batch([b"y"], producer_id=pid, epoch=0, seq=10))
        assert (gap.error_code, gap.log_start_offset) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, 3)
    b.restart()
    with RawClient(b.bootstrap) as c:
        r = produce(c, topic_name, batch([b"y"], producer_id=pid, epoch=0, seq=10))
        assert (r.error_code, r.base_offset) == (0, 3)


def _two_producers_then_a_crash(b, topic_name) -> tuple[int, int]:
    """Two idempotent producers write offsets 0 and 1, then the broker is killed (no snapshot)
    and started again."""
    with RawClient(b.bootstrap) as c:
        create_topic(c, topic_name)
        one, two = init_producer_id(c).producer_id, init_producer_id(c).producer_id
        assert produce(c, topic_name, batch([b"a"], producer_id=one, epoch=0, seq=0)).base_offset == 0
        assert produce(c, topic_name, batch([b"b"], producer_id=two, epoch=0, seq=0)).base_offset == 1
    b.kill()
    b.start()
    return one, two


def test_a_crash_recovery_leaves_a_snapshot_at_the_log_end(broker_factory, topic_name):
    """Kafka's LogLoader.rebuildProducerState ends with takeSnapshot(): after a crash the state
    it replayed is written at the log end. Records then deleted (DeleteRecords) and a second
    crash leave that snapshot in range, so a producer whose records are gone stays known: its
    retry is still a duplicate, answered with the original offset, not appended again."""
    from tests.test_delete_records import delete_records

    b = broker_factory()
    one, two = _two_producers_then_a_crash(b, topic_name)  # the load replays both batches
    with RawClient(b.bootstrap) as c:
        assert [p[0] for p in describe_producers(c, (topic_name, [0]))[0][4]] == sorted([one, two])
        assert delete_records(c, (topic_name, 0, 1)) == [(topic_name, 0, 0, 1)]
    b.kill()
    b.start()
    with RawClient(b.bootstrap) as c:
        assert [p[0] for p in describe_producers(c, (topic_name, [0]))[0][4]] == sorted([one, two])
        retry = produce(c, topic_name, batch([b"a"], producer_id=one, epoch=0, seq=0))
        assert (retry.error_code, retry.base_offset) == (0, 0)


def test_delete_records_after_a_crash_keeps_the_producers_it_deletes(broker_factory, topic_name):
    """Kafka loads every partition's producer state at start-up, so DeleteRecords (which leaves
    the producers alone: onLogStartOffsetIncremented) cannot make it forget one. kshare loads on
    first use, so DeleteRecords loads the state before it moves the log start."""
    from tests.test_delete_records import delete_records

    b = broker_factory()
    one, two = _two_producers_then_a_crash(b, topic_name)
    with RawClient(b.bootstrap) as c:
        assert delete_records(c, (topic_name, 0, 1)) == [(topic_name, 0, 0, 1)]  # the first use
        assert [p[0] for p in describe_producers(c, (topic_name, [0]))[0][4]] == sorted([one, two])
        retry = produce(c, topic_name, batch([b"a"], producer_id=one, epoch=0, seq=0))
        assert (retry.error_code, retry.base_offset) == (0, 0)


# -- DescribeProducers ----------------------------------------------------------------------------

DESCRIBE_PRODUCERS = 61


def describe_producers(client, *topics: tuple[str, list[int]]) -> list[tuple]:
    """(topic, partition, error, message, [(id, epoch, last seq, last timestamp, coordinator epoch,
    txn start)]) for each partition answered, in order."""
    req = DescribeProducersRequest(topics=[DescribeProducersTopic(name=n, partition_indexes=ps) for n, ps in topics])
    resp = client.request(DESCRIBE_PRODUCERS, 0, req)
    return [(t.name, p.partition_index, p.error_code, p.error_message,
             [(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp, s.coordinator_epoch,
               s.current_txn_start_offset) for s in p.active_producers])
            for t in resp.topics for p in t.partitions]


def test_describe_producers_answers_the_state_and_kafkas_errors_and_survives_restarts(broker_factory, topic_name):
    """As Kafka's handleDescribeProducersRequest: the producers the partition remembers (last
    batch's sequence and max timestamp, epoch after a bump; no entry for plain batches); per
    partition UNKNOWN_TOPIC_OR_PARTITION with the default message for an unknown topic, without
    one for an unknown partition, INVALID_TOPIC_EXCEPTION with Topic.validate's message; duplicates
    answered again. After a clean restart (snapshot) and a crash (replay) the same; an offline
    partition is KAFKA_STORAGE_ERROR."""
    b = broker_factory()
    idle = topic_name + "-idle"
    ts = int(time.time() * 1000)
    with RawClient(b.bootstrap) as c:
        create_topic(c, topic_name)
        create_topic(c, idle)
        one, two = init_producer_id(c).producer_id, init_producer_id(c).producer_id
        assert produce(c, topic_name, batch([b"a", b"b", b"c"], producer_id=one, epoch=0, seq=0,
                                            timestamp_ms=ts)).error_code == 0
        assert produce(c, topic_name, batch([b"d", b"e"], producer_id=one, epoch=0, seq=3,
                                            timestamp_ms=ts + 5)).error_code == 0
        assert produce(c, topic_name, batch([b"f"], producer_id=two, epoch=0, seq=0, timestamp_ms=ts)).error_code == 0
        assert produce(c, topic_name, batch([b"g"], producer_id=two, epoch=1, seq=0,
                                            timestamp_ms=ts + 9)).error_code == 0
        assert produce(c, topic_name, batch([b"plain"], timestamp_ms=ts)).error_code == 0
        producers = sorted([(one, 0, 4, ts + 5, -1, -1), (two, 1, 0, ts + 9, -1, -1)])
        unknown = "This server does not host this topic-partition."
        expected = [
            (topic_name, 0, 0, None, producers),
            (topic_name, 1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, []),
            (topic_name, -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, []),
            (topic_name, 0, 0, None, producers),
            (idle, 0, 0, None, []),
            ("no-such-topic", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, unknown, []),
            ("no-such-topic", 3, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, unknown, []),
            ("bad name", 0, ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is invalid: 'bad name' contains one or "
             "more characters other than ASCII alphanumerics, '.', '_' and '-'", []),
            ("", 0, ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is invalid: the empty string is not allowed", []),
            (topic_name, 0, 0, None, producers),
        ]
        request = [(topic_name, [0, 1, -1, 0]), (idle, [0]), ("no-such-topic", [0, 3]), ("bad name", [0]),
                   ("", [0]), (topic_name, [0])]
        assert describe_producers(c, *request) == expected
        assert describe_producers(c, (topic_name, [])) == []  # the topic, with no partitions
    b.restart()  # clean: the state comes from the snapshot, loaded by the describe itself
    with RawClient(b.bootstrap) as c:
        assert describe_producers(c, *request) == expected
        assert produce(c, topic_name, batch([b"h"], producer_id=one, epoch=0, seq=5,
                                            timestamp_ms=ts + 20)).error_code == 0
    b.kill()  # crash: the batch after the snapshot is replayed from its header
    b.start()
    with RawClient(b.bootstrap) as c:
        producers = sorted([(one, 0, 5, ts + 20, -1, -1), (two, 1, 0, ts + 9, -1, -1)])
        assert describe_producers(c, (topic_name, [0])) == [(topic_name, 0, 0, None, producers)]
        segment = b.data_dir / f"{topic_name}-0" / ("%020d.log" % 0)
        os.truncate(segment, segment.stat().st_size // 2)
        assert fetch(c, topic_name, 6).error_code == ErrorCode.KAFKA_STORAGE_ERROR  # the read that finds it
        assert describe_producers(c, (topic_name, [0]), (idle, [0])) == [
            (topic_name, 0, ErrorCode.KAFKA_STORAGE_ERROR, None, []), (idle, 0, 0, None, [])]
    assert "Traceback" not in b.log()


def test_describe_producers_of_a_log_with_a_corrupt_batch_is_kafka_storage_error(broker_factory, topic_name):
    """Loading the state after a crash replays the log; a batch damaged on disk stops the replay
    (CorruptRecordError, the partition staying online). That partition answers
    KAFKA_STORAGE_ERROR; the others in the request are still described."""
    b = broker_factory()
    idle = topic_name + "-idle"
    with RawClient(b.bootstrap) as c:
        create_topic(c, topic_name)
        create_topic(c, idle)
        pid = init_producer_id(c).producer_id
        for i in range(3):
            assert produce(c, topic_name, batch([b"v"], producer_id=pid, epoch=0, seq=i)).error_code == 0
    b.kill()  # no snapshot: the next load replays every batch
    b.start()
    with RawClient(b.bootstrap) as c:
        size = headers_of(fetch(c, topic_name, 0, partition_max_bytes=1).records)[0].size
        with open(b.data_dir / f"{topic_name}-0" / ("%020d.log" % 0), "r+b") as f:
            f.seek(2 * size + 8)  # the third batch's length
            f.write(struct.pack(">i", 5))
        assert describe_producers(c, (topic_name, [0]), (idle, [0])) == [
            (topic_name, 0, ErrorCode.KAFKA_STORAGE_ERROR, None, []), (idle, 0, 0, None, [])]
    assert "Traceback" not in b.log()


def test_replayed_producers_are_expired_by_the_periodic_check_not_at_load(broker_factory, topic_name):
    """Kafka's UnifiedLog.rebuildProducerState drops expired producers from a snapshot at
    start-up but not the ones replayed from the log after it; the first
    PeriodicProducerExpirationCheck does. After a crash (no snapshot) a producer whose last batch
    is older than producer.id.expiration.ms is therefore still described until that check, and a
    partition first read after the check no longer has it."""
    b = broker_factory({"producer.id.expiration.check.interval.ms": "4000"})
    other = topic_name + "-other"
    old = int(time.time() * 1000) - 2 * 86_400_000  # CreateTime two days ago (expiration: one day)
    with RawClient(b.bootstrap) as c:
        create_topic(c, topic_name)
        create_topic(c, other)
        pid = init_producer_id(c).producer_id
        for name in (topic_name, other):
            assert produce(c, name, batch([b"a"], producer_id=pid, epoch=0, seq=0, timestamp_ms=old)).error_code == 0
    b.kill()  # no snapshot at the log end: both logs are replayed at the next load
    b.start()
    with RawClient(b.bootstrap) as c:
        assert describe_producers(c, (topic_name, [0])) == [(topic_name, 0, 0, None, [(pid, 0, 0, old, -1, -1)])]
        deadline = time.monotonic() + 30
        while describe_producers(c, (topic_name, [0]))[0][4]:  # until the first check removes it
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert describe_producers(c, (other, [0])) == [(other, 0, 0, None, [])]  # loaded after the check
