"""Produce: Kafka 4.2's per-partition errors, acks, flush policy, and the wire-level failures.

Most cases call the handler in-process against a real (file-backed) broker object, which is
fast and lets a test create internal or specially configured topics; the malformed-frame and
acks=0 cases run over a socket against the shared broker.
"""

from __future__ import annotations

import asyncio
import errno
import time

import pytest

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.context import RequestContext
from broker.handlers import produce as produce_handler
from broker.log import FileLogStore, segment
from protocol.errors import ErrorCode
from protocol.messages.metadata_request import MetadataRequest
from protocol.messages.produce_request import PartitionProduceData, TopicProduceData
from protocol.compression import compress
from protocol.records import CRC_OFFSET, HEADER_SIZE, build_batch, check_batch, set_crc
from protocol.uuids import random_uuid
from tests.raw_client import RawClient
from tests.test_records import patch_header
from tests.test_produce_support import (
    METADATA,
    PRODUCE,
    batch,
    create_topic,
    fetch,
    produce,
    produce_request,
    records_of,
)
from tests.test_share_coordinator_races import HeldExecutor


class FakeConnection:
    peer = ("127.0.0.1", 1)

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
async def local(tmp_path):
    b = Broker(BrokerConfig({"log.dirs": str(tmp_path / "data"), "log.flush.interval.messages": "1"}))
    yield b
    await b.store.close()


async def call(b, req, *, version=11, client_id="tests", connection=None):
    ctx = RequestContext(b, connection or FakeConnection(), 0, version, 1, client_id)
    return await produce_handler.handle(ctx, req)


async def produce_one(b, topic, records, *, version=11, client_id="tests", **kw):
    resp = await call(b, produce_request(topic, records, **kw), version=version, client_id=client_id)
    (t,) = resp.responses
    (p,) = t.partition_responses
    return p


async def test_append_answers_offsets_and_waits_for_the_flush(local):
    local.topics.create("t", 2)
    p = await produce_one(local, "t", batch([b"a", b"b"]))
    assert (p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset) == (0, 0, -1, 0)
    p = await produce_one(local, "t", batch([b"c"]), partition=1, acks=1)
    assert (p.error_code, p.base_offset) == (0, 0)
    lg = local.store.get("t", 0)
    assert lg.end_offset == 2
    assert lg.recovery_point == 2  # log.flush.interval.messages=1: acked only once fsynced


async def test_unknown_topics_and_partitions_are_not_auto_created(local):
    local.topics.create("t", 1)
    assert (await produce_one(local, "nope", batch([b"a"]))).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert local.topics.get("nope") is None  # Kafka's Produce never creates topics
    assert (await produce_one(local, "t", batch([b"a"]), partition=1)).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert (await produce_one(local, "t", batch([b"a"]), partition=-1)).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_v13_addresses_topics_by_id(local):
    topic = local.topics.create("t", 1)
    resp = await call(local, produce_request("", batch([b"a"]), topic_id=topic.topic_id), version=13)
    assert resp.responses[0].topic_id == topic.topic_id
    assert resp.responses[0].partition_responses[0].error_code == 0
    p = await produce_one(local, "", batch([b"a"]), topic_id=random_uuid(), version=13)
    assert p.error_code == ErrorCode.UNKNOWN_TOPIC_ID


async def test_invalid_required_acks(local):
    local.topics.create("t", 1)
    p = await produce_one(local, "t", batch([b"a"]), acks=2)
    assert (p.error_code, p.base_offset) == (ErrorCode.INVALID_REQUIRED_ACKS, -1)
    assert local.store.get("t", 0).end_offset == 0


async def test_internal_topics_only_take_writes_from_the_admin_client(local):
    local.topics.create("__consumer_offsets", 1)
    p = await produce_one(local, "__consumer_offsets", batch([b"a"]))
    assert p.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    p = await produce_one(local, "__consumer_offsets", batch([b"a"]), client_id="__admin_client")
    assert p.error_code == 0


async def test_message_too_large_uses_the_topic_override(local):
    local.topics.create("t", 1, {"max.message.bytes": "200"})
    p = await produce_one(local, "t", batch([b"x" * 300]))
    assert (p.error_code, p.log_start_offset, p.error_message) == (ErrorCode.MESSAGE_TOO_LARGE, -1, None)
    assert (await produce_one(local, "t", batch([b"x" * 50]))).error_code == 0


async def test_a_batch_larger_than_a_segment_is_refused(local):
    # Kafka's UnifiedLog.append: RecordBatchTooLargeException, even where max.message.bytes allows it
    local.topics.create("t", 1, {"segment.bytes": str(1 << 20), "max.message.bytes": str(4 << 20)})
    p = await produce_one(local, "t", batch([b"x" * (1 << 20)]))
    assert (p.error_code, p.log_start_offset, p.error_message) == (ErrorCode.RECORD_LIST_TOO_LARGE, -1, None)
    assert local.store.get("t", 0).end_offset == 0
    assert (await produce_one(local, "t", batch([b"x" * 1000]))).error_code == 0


async def test_a_segment_roll_the_disk_refuses_answers_storage_error(local, monkeypatch):
    """A full disk that refuses the new segment file: the produce is answered
    KAFKA_STORAGE_ERROR (it used to raise and close the connection), other partitions of the
    request are answered as usual, and the partition takes appends once there is room."""
    local.topics.create("t", 2, {"segment.bytes": "1024"})
    assert (await produce_one(local, "t", batch([b"x" * 600]))).error_code == 0
    real_open = segment.os.open

    def full(path, flags, *args):
        if flags & segment.os.O_CREAT:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, flags, *args)

    monkeypatch.setattr(segment.os, "open", full)
    req = produce_request("t", batch([b"y" * 600]))
    req.topic_data[0].partition_data.append(produce_request("t", batch([b"z"]), partition=1).topic_data[0].partition_data[0])
    (t,) = (await call(local, req)).responses
    assert [(p.index, p.error_code, p.base_offset) for p in t.partition_responses] == [
        (0, ErrorCode.KAFKA_STORAGE_ERROR, -1), (1, 0, 0)]
    monkeypatch.undo()
    p = await produce_one(local, "t", batch([b"y" * 600]))
    assert (p.error_code, p.base_offset) == (0, 1)



async def test_an_offline_log_answers_storage_error_before_the_batch_or_producer_checks(local):
    """Kafka's ReplicaManager finds an offline partition (getPartitionOrException) before
    UnifiedLog looks at the batch or at the producer's state: a retry of a batch already
    appended, or a batch with a bad CRC, gets KAFKA_STORAGE_ERROR with the unknown append info."""
    local.topics.create("t", 1)
    idempotent = batch([b"a"], producer_id=7, epoch=0, seq=0)
    assert (await produce_one(local, "t", idempotent)).error_code == 0
    local.store.get("t", 0)._committer.failure = OSError(errno.EIO, "EIO")
    bad_crc = bytearray(batch([b"x"]))
    bad_crc[-1] ^= 1
    for records in (idempotent, bytes(bad_crc), batch([b"b"], producer_id=7, epoch=0, seq=5)):
        p = await produce_one(local, "t", records)
        assert (p.error_code, p.base_offset, p.log_start_offset) == (ErrorCode.KAFKA_STORAGE_ERROR, -1, -1)

async def test_a_topic_deleted_while_a_produce_waits_for_its_fsync_does_not_fail_it(tmp_path):
    """The append (a roll to a new segment) came before the deletion; its fsync round starts
    after, with the partition's directory gone. That is no disk failure: in Kafka the flush is
    part of the append, which the deletion cannot interrupt, so the produce is answered as
    appended, not KAFKA_STORAGE_ERROR (which a producer would retry into a topic created again)."""
    held = HeldExecutor()
    data = tmp_path / "data"
    data.mkdir()
    b = Broker(BrokerConfig({"log.dirs": str(data), "log.flush.interval.messages": "1"}),
               store=FileLogStore(str(data), executor=held))
    try:
        b.topics.create("t", 1, {"segment.bytes": "150"})
        lg = b.store.get("t", 0)
        held.hold()
        first = asyncio.ensure_future(produce_one(b, "t", batch([b"a" * 40])))
        await held.submitted.wait()  # its fsync round runs (held)
        second = asyncio.ensure_future(produce_one(b, "t", batch([b"b" * 40])))
        while lg.end_offset < 2:  # appended (in a new segment); its flush waits for the next round
            await asyncio.sleep(0)
        assert len(lg.segments) == 2
        b.topics.delete("t")
        held.release()
        assert [((p := await f).error_code, p.base_offset) for f in (first, second)] == [(0, 0), (0, 1)]
    finally:
        await b.store.close()


async def test_record_checks_map_to_corrupt_message_and_invalid_record(local):
    local.topics.create("t", 1)
    bad = bytearray(batch([b"a"]))
    bad[-1] ^= 0xFF
    assert (await produce_one(local, "t", bytes(bad))).error_code == ErrorCode.CORRUPT_MESSAGE
    two = batch([b"a"]) + batch([b"b"])
    assert (await produce_one(local, "t", two)).error_code == ErrorCode.INVALID_RECORD
    assert (await produce_one(local, "t", None)).error_code == ErrorCode.INVALID_RECORD
    zstd = batch([b"a"], compression=4)
    p = await produce_one(local, "t", zstd, version=6)
    assert p.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert (await produce_one(local, "t", zstd, version=7)).error_code == 0
    assert local.store.get("t", 0).end_offset == 1



async def test_batch_checks_of_the_log_come_after_acks_and_internal_topics_and_carry_the_log_start(local):
    """Kafka checks only the records' framing in KafkaApis (ProduceRequest.validateRecords); the
    base offset, size, CRC and counts are UnifiedLog's and LogValidator's, after ReplicaManager
    checked acks and internal topics. Size and CRC refusals answer Kafka's unknown append info
    (log start -1), the base offset and count rules (InvalidRecordException) the log start."""
    local.topics.create("t", 1, {"max.message.bytes": "200"})
    local.topics.create("__consumer_offsets", 1)
    bad_crc = bytearray(batch([b"a"]))
    bad_crc[-1] ^= 0xFF
    assert (await produce_one(local, "t", bytes(bad_crc), acks=2)).error_code == ErrorCode.INVALID_REQUIRED_ACKS
    p = await produce_one(local, "__consumer_offsets", bytes(bad_crc))
    assert p.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    too_big = bytearray(batch([b"x" * 300]))
    too_big[-1] ^= 0xFF
    p = await produce_one(local, "t", bytes(too_big))
    assert (p.error_code, p.log_start_offset) == (ErrorCode.MESSAGE_TOO_LARGE, -1)
    p = await produce_one(local, "t", bytes(bad_crc))
    assert (p.error_code, p.log_start_offset) == (ErrorCode.CORRUPT_MESSAGE, -1)
    assert (await produce_one(local, "t", batch([b"a", b"b"]))).error_code == 0
    local.store.get("t", 0).delete_records_before(1)
    good = batch([b"a"])
    for fields in [{"base_offset": 5}, {"records_count": 2}, {"attributes": 0x20},
                   {"producer_id": 3, "base_sequence": -1}]:
        p = await produce_one(local, "t", bytes(patch_header(good, **fields)))
        assert (p.error_code, p.log_start_offset, p.error_message) == (ErrorCode.INVALID_RECORD, 1, None), fields
    assert local.store.get("t", 0).end_offset == 2

def forged(records_body: bytes, count: int, compression: int = 0) -> bytes:
    """A batch of ``count`` records whose CRC is right for ``records_body``, whatever it holds."""
    out = bytearray(batch([b"x"] * count, compression=compression)[:HEADER_SIZE] + records_body)
    out[8:12] = (len(out) - 12).to_bytes(4, "big")
    set_crc(out, 0)
    return bytes(out)


async def test_records_that_do_not_fill_their_batch_are_invalid_record(local):
    """Kafka's LogValidator reads every record; a batch whose CRC is right but whose records do
    not parse is refused, not stored for consumers to choke on."""
    local.topics.create("t", 1)
    three = batch([b"a", b"bb", b"c"])[HEADER_SIZE:]
    two = batch([b"a", b"bb"])[HEADER_SIZE:]
    for body, count in [(b"\xff" * 40, 3), (bytes(40), 3), (two, 3), (three, 2), (three + b"\0", 3)]:
        p = await produce_one(local, "t", forged(body, count))
        assert p.error_code == ErrorCode.INVALID_RECORD, (body, count)
    lz4 = 3
    assert (await produce_one(local, "t", forged(compress(lz4, two), 3, lz4))).error_code == ErrorCode.INVALID_RECORD
    assert (await produce_one(local, "t", forged(b"\xff" * 40, 3, lz4))).error_code == ErrorCode.CORRUPT_MESSAGE
    assert local.store.get("t", 0).end_offset == 0
    assert (await produce_one(local, "t", forged(three, 3))).error_code == 0
    assert (await produce_one(local, "t", forged(compress(lz4, three), 3, lz4))).error_code == 0
    assert local.store.get("t", 0).end_offset == 6


async def test_timestamps_out_of_bounds_are_invalid_timestamp_with_record_errors(local):
    local.topics.create("t", 1, {"message.timestamp.after.max.ms": "60000",
                                  "message.timestamp.before.max.ms": "3600000"})
    now = int(time.time() * 1000)
    records = [(None, b"ok", [], now), (None, b"future", [], now + 3_600_000), (None, b"ok", [], now)]
    p = await produce_one(local, "t", build_batch(records))
    assert p.error_code == ErrorCode.INVALID_TIMESTAMP
    assert p.error_message == "One or more records have been rejected due to invalid timestamp"
    assert [e.batch_index for e in p.record_errors] == [1]
    assert p.record_errors[0].batch_index_error_message.startswith(f"Timestamp {now + 3_600_000} of message with offset 1")
    old = [(None, b"old", [], now - 7_200_000)]
    assert [e.batch_index for e in (await produce_one(local, "t", build_batch(old))).record_errors] == [0]
    assert (await produce_one(local, "t", build_batch([(None, b"ok", [], now)]))).error_code == 0
    assert local.store.get("t", 0).end_offset == 1
    # A record older than the batch's first one (a negative delta) is checked too, and the
    # offset in the message is the producer's numbering, not the log's.
    p = await produce_one(local, "t", build_batch([(None, b"ok", [], now), (None, b"old", [], now - 7_200_000)]))
    assert p.error_code == ErrorCode.INVALID_TIMESTAMP
    assert [e.batch_index for e in p.record_errors] == [1]
    message = p.record_errors[0].batch_index_error_message
    assert message.startswith(f"Timestamp {now - 7_200_000} of message with offset 1 ")
    assert local.store.get("t", 0).end_offset == 1


async def test_the_timestamp_bounds_in_the_message_are_java_longs(local):
    """LogValidator.validateTimestamp prints now + message.timestamp.after.max.ms as a Java long,
    so Long.MAX_VALUE (no limit on future timestamps) shows a wrapped, negative upper bound."""
    long_max = (1 << 63) - 1
    local.topics.create("t", 1, {"message.timestamp.after.max.ms": str(long_max),
                                  "message.timestamp.before.max.ms": "1000"})
    ts = int(time.time() * 1000) - 3_600_000
    p = await produce_one(local, "t", build_batch([(None, b"old", [], ts)]))
    assert p.error_code == ErrorCode.INVALID_TIMESTAMP
    message = p.record_errors[0].batch_index_error_message
    low, high = (int(x) for x in message.rpartition("[")[2].rstrip("]").split(", "))
    assert high == low + 1000 + long_max - (1 << 64) < 0

async def test_a_producers_log_append_time_batch_counts_as_create_time_on_a_create_time_topic(local):
    """Kafka's LogValidator reads every record of such a batch at its max timestamp, checks that,
    and stores the batch as CreateTime; LogAppendTime topics, and a batch with no max timestamp,
    refuse it."""
    local.topics.create("t", 1)
    local.topics.create("lat", 1, {"message.timestamp.type": "LogAppendTime"})
    now = int(time.time() * 1000)
    stamped = build_batch([(b"k", b"xy", [], now - 5), (None, b"z", [], now - 1)], timestamp_type=1, timestamp_ms=now)
    p = await produce_one(local, "t", stamped)
    assert (p.error_code, p.base_offset, p.log_append_time_ms) == (0, 0, -1)
    stored = b"".join(map(bytes, local.store.get("t", 0).read(0, 1 << 20).chunks))
    h = check_batch(stored)  # the CRC was recomputed
    assert (h.log_append_time, h.max_timestamp, h.base_timestamp) == (False, now, now - 5)
    future = build_batch([(None, b"x", [], now)], timestamp_type=1, timestamp_ms=now + 7_200_000)
    p = await produce_one(local, "t", future)  # the max is every record's timestamp, and out of range
    assert (p.error_code, [e.batch_index for e in p.record_errors]) == (ErrorCode.INVALID_TIMESTAMP, [0])
    for topic, b in (("lat", stamped), ("t", build_batch([(None, b"x", [])], timestamp_type=1, timestamp_ms=-1))):
        p = await produce_one(local, topic, b)
        assert p.error_code == ErrorCode.INVALID_TIMESTAMP, topic
        assert p.record_errors[0].batch_index_error_message.startswith("Invalid timestamp type in message DefaultRec")
    assert p.record_errors[0].batch_index_error_message == (
        "Invalid timestamp type in message DefaultRecord(offset=0, timestamp=-1, key=0 bytes, value=1 bytes). "
        "Producer should not set timestamp type to LogAppendTime.")
    assert local.store.get("t", 0).end_offset == 2 and local.store.get("lat", 0).end_offset == 0


async def test_log_append_time_topics_report_the_append_time(local):
    local.topics.create("t", 1, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    p = await produce_one(local, "t", batch([b"a"], timestamp_ms=1))
    assert p.error_code == 0 and p.log_append_time_ms >= before


async def test_compacted_topics_need_keys(local):
    local.topics.create("c", 1, {"cleanup.policy": "compact"})
    p = await produce_one(local, "c", batch([b"a", b"b"], keys=[b"k", None]))
    assert p.error_code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in p.record_errors] == [1]
    assert "Compacted topic cannot accept message without key" in p.record_errors[0].batch_index_error_message
    assert p.error_message
    assert (await produce_one(local, "c", batch([b"a"], keys=[b"k"]))).error_code == 0
    # The key is looked at before the timestamp (Kafka's LogValidator.validateRecord).
    local.topics.create("c2", 1, {"cleanup.policy": "compact", "message.timestamp.before.max.ms": "3600000"})
    old = build_batch([(None, b"a", [], int(time.time() * 1000) - 7_200_000)])
    assert (await produce_one(local, "c2", old)).error_code == ErrorCode.INVALID_RECORD



async def test_a_keyless_record_and_another_records_bad_timestamp_are_invalid_timestamp(local):
    """LogValidator reports each record's first fault (its key, else its timestamp) and answers
    INVALID_TIMESTAMP, with every record's error, when any of them is a timestamp's."""
    local.topics.create("c", 1, {"cleanup.policy": "compact", "message.timestamp.after.max.ms": "60000"})
    now = int(time.time() * 1000)
    late = now + 3_600_000
    records = [(None, b"a", [], now), (b"k", b"b", [], late), (None, b"c", [], late)]
    p = await produce_one(local, "c", build_batch(records))
    assert (p.error_code, p.error_message) == (ErrorCode.INVALID_TIMESTAMP, "One or more records have been rejected "
                                               "due to invalid timestamp")
    assert [(e.batch_index, e.batch_index_error_message.split()[0]) for e in p.record_errors] == [
        (0, "Compacted"), (1, "Timestamp"), (2, "Compacted")]
    p = await produce_one(local, "c", build_batch([(None, b"c", [], late)]))
    assert (p.error_code, [e.batch_index for e in p.record_errors]) == (ErrorCode.INVALID_RECORD, [0])
    p = await produce_one(local, "c", forged(b"\xff" * 40, 3))  # records that do not parse: no message
    assert (p.error_code, p.record_errors, p.error_message) == (ErrorCode.INVALID_RECORD, [], None)
    local.topics.create("a", 1, {"cleanup.policy": "compact", "message.timestamp.type": "LogAppendTime"})
    p = await produce_one(local, "a", build_batch([(None, b"a", [], now), (b"k", b"b", [], now)], timestamp_type=1))
    assert p.error_code == ErrorCode.INVALID_TIMESTAMP
    assert [e.batch_index_error_message.split()[0] for e in p.record_errors] == ["Compacted", "Invalid"]
    assert local.store.get("c", 0).end_offset == local.store.get("a", 0).end_offset == 0

async def test_min_insync_replicas_above_the_replication_factor_does_not_refuse_acks_all(local):
    """Kafka's Partition checks the ISR against effectiveMinIsr, min(min.insync.replicas,
    replication factor): on one broker acks=all is answered as acks=1, whatever the setting
    (a value copied from a three-broker cluster is common)."""
    local.topics.create("t", 1, {"min.insync.replicas": "2"})
    assert (await produce_one(local, "t", batch([b"a"]), acks=-1)).error_code == 0
    assert (await produce_one(local, "t", batch([b"a"]), acks=1)).error_code == 0


async def test_transactional_batches_are_refused(local):
    local.topics.create("t", 1)
    txn = build_batch([(None, b"a", [])], producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True)
    p = await produce_one(local, "t", txn)
    assert p.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    p = await produce_one(local, "t", txn, transactional_id="tx")
    assert p.error_code == ErrorCode.INVALID_TXN_STATE and "not supported" in p.error_message
    # ReplicaManager.handleProduceAppend verifies only transactional batches with a producer id;
    # one without goes to the log like any other (TRANSACTIONAL_ID_AUTHORIZATION_FAILED without an id)
    no_pid = build_batch([(None, b"a", [])], is_transactional=True)
    assert (await produce_one(local, "t", no_pid)).error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert (await produce_one(local, "t", no_pid, transactional_id="tx")).error_code == 0
    # a magic 0/1 batch is never transactional (Kafka's legacy batches), whatever its byte 22
    legacy = bytearray(batch([b"a"]))
    legacy[16], legacy[22] = 1, legacy[22] | 0x10
    assert (await produce_one(local, "t", bytes(legacy))).error_code == ErrorCode.INVALID_RECORD
    # a transactional id on plain batches is ignored, as in Kafka
    assert (await produce_one(local, "t", batch([b"a"]), transactional_id="tx")).error_code == 0



async def test_a_partition_named_twice_is_answered_once_with_its_last_batch_appended(local):
    """KafkaApis keys a request's partitions in maps: a partition named twice (or a topic listed
    twice) is answered once, the last valid batch is the one appended, and a refusal of the
    records (merged into the answer last) wins the answer though a valid batch was appended."""
    local.topics.create("t", 2)
    req = produce_request("t", batch([b"first"]))
    req.topic_data[0].partition_data.append(PartitionProduceData(index=0, records=batch([b"second"])))
    other = PartitionProduceData(index=1, records=batch([b"x"]))
    req.topic_data.append(TopicProduceData(name="t", partition_data=[other]))
    resp = await call(local, req)
    assert [(t.name, [(p.index, p.error_code, p.base_offset) for p in t.partition_responses])
            for t in resp.responses] == [("t", [(0, 0, 0), (1, 0, 0)])]
    lg = local.store.get("t", 0)
    assert lg.end_offset == 1
    assert [r.value for r in records_of(lg.read(0, 1 << 20).views())] == [b"second"]
    req = produce_request("t", batch([b"third"]))
    req.topic_data[0].partition_data.append(PartitionProduceData(index=0, records=b""))
    (t,) = (await call(local, req)).responses
    assert [(p.index, p.error_code) for p in t.partition_responses] == [(0, ErrorCode.INVALID_RECORD)]
    assert lg.end_offset == 2
    txn = build_batch([(None, b"a", [])], producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True)
    req = produce_request("t", txn)
    req.topic_data.append(TopicProduceData(name="t", partition_data=[PartitionProduceData(index=0, records=txn)]))
    (t,) = (await call(local, req)).responses
    assert [(p.index, p.error_code) for p in t.partition_responses] == [
        (0, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)]


async def test_a_first_batch_with_a_corrupt_size_or_magic_fails_the_whole_request(local):
    """KafkaApis first asks each partition's first batch whether it is transactional
    (RequestUtils.hasTransactionalRecords); reading one whose size field or magic is invalid
    throws CorruptRecordException out of handleProduceRequest: every partition is answered
    CORRUPT_MESSAGE with the exception's message (getErrorResponse) and nothing is appended."""
    local.topics.create("t", 2)
    good = batch([b"a"])
    small, magic = bytearray(good), bytearray(good)
    small[8:12] = (5).to_bytes(4, "big")
    magic[16] = 0xF0
    for bad, message in ((small, "Record size 5 is less than the minimum record overhead (14)"),
                         (magic, "Invalid magic found in record: -16")):
        req = produce_request("t", good)
        req.topic_data.append(TopicProduceData(name="t", partition_data=[PartitionProduceData(index=1, records=bad)]))
        (t,) = (await call(local, req)).responses
        assert [(p.index, p.error_code, p.error_message, p.log_start_offset) for p in t.partition_responses] == [
            (0, ErrorCode.CORRUPT_MESSAGE, message, -1), (1, ErrorCode.CORRUPT_MESSAGE, message, -1)]
        conn = FakeConnection()
        req.acks = 0
        assert await call(local, req, connection=conn) is None and conn.closed
    assert local.store.get("t", 0).end_offset == 0

async def test_acks_zero_answers_nothing_and_closes_the_connection_on_error(local):
    local.topics.create("t", 1)
    conn = FakeConnection()
    assert await call(local, produce_request("t", batch([b"a"]), acks=0), connection=conn) is None
    assert not conn.closed
    assert await call(local, produce_request("nope", batch([b"a"]), acks=0), connection=conn) is None
    assert conn.closed


# -- over the wire ---------------------------------------------------------------------------------


def test_corrupt_batch_leaves_the_log_intact_and_the_broker_serving(broker, topic_name):
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)
        assert produce(c, topic_name, batch([b"good"])).base_offset == 0
        bad = bytearray(batch([b"evil"]))
        bad[CRC_OFFSET] ^= 0x55
        assert produce(c, topic_name, bytes(bad)).error_code == ErrorCode.CORRUPT_MESSAGE
        assert produce(c, topic_name, batch([b"after"])).base_offset == 1  # same connection still served
    with RawClient(broker.bootstrap) as other:
        part = fetch(other, topic_name, 0)
        assert [r.value for r in records_of(part.records)] == [b"good", b"after"]


def test_acks_zero_over_the_wire(broker, topic_name):
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)
        c.send_raw(c.frame(PRODUCE, 9, produce_request(topic_name, batch([b"fire"]), acks=0)))
        # no response for acks=0: the next response read is the Metadata one
        c.send_raw(c.frame(METADATA, 12, MetadataRequest(topics=[])))
        assert c.read_response(METADATA, 12).brokers
        bad = bytearray(batch([b"x"]))
        bad[-1] ^= 1
        c.send_raw(c.frame(PRODUCE, 9, produce_request(topic_name, bytes(bad), acks=0)))
        assert c.is_closed_by_broker()
    with RawClient(broker.bootstrap) as c:
        assert [r.value for r in records_of(fetch(c, topic_name, 0).records)] == [b"fire"]


async def test_an_unknown_codec_is_unknown_server_error_as_kafkas_compression_type_lookup_throws(local):
    """Codec bits 5-7: Kafka's CompressionType.forId throws IllegalArgumentException. Below v7
    ProduceRequest.validateRecords reads the codec for its zstd check, so the exception leaves
    handleProduceRequest and every partition gets UNKNOWN_SERVER_ERROR (getErrorResponse); from
    v7 UnifiedLog.analyzeAndValidateRecords reads it after the CRC, and ReplicaManager's catch-all
    answers that partition UNKNOWN_SERVER_ERROR with the log start offset."""
    local.topics.create("t", 2)
    good = batch([b"a"])
    for codec in (5, 6, 7):
        bad = bytes(patch_header(good, attributes=codec))
        req = produce_request("t", good)
        req.topic_data.append(TopicProduceData(name="t", partition_data=[PartitionProduceData(index=1, records=bad)]))
        (t,) = (await call(local, req, version=6)).responses
        assert [(p.index, p.error_code, p.error_message) for p in t.partition_responses] == [
            (0, ErrorCode.UNKNOWN_SERVER_ERROR, None), (1, ErrorCode.UNKNOWN_SERVER_ERROR, None)]
        (t,) = (await call(local, req, version=7)).responses
        assert [(p.index, p.error_code, p.log_start_offset) for p in t.partition_responses] == [
            (0, ErrorCode.NONE, 0), (1, ErrorCode.UNKNOWN_SERVER_ERROR, 0)]
        bad_crc = bytearray(bad)
        bad_crc[-1] ^= 1
        p = await produce_one(local, "t", bytes(bad_crc), partition=1)
        assert (p.error_code, p.log_start_offset) == (ErrorCode.CORRUPT_MESSAGE, -1)  # the CRC comes first
    assert local.store.get("t", 1).end_offset == 0


async def test_producer_fields_are_read_from_every_batch_before_the_acks_check(local):
    """ReplicaManager.handleProduceAppend reads each appended batch's producer id (and a
    transactional one's epoch and base sequence) before appendRecords checks acks: a batch too
    short to hold them makes Kafka throw an index error out of the request (UNKNOWN_SERVER_ERROR
    for every partition, getErrorResponse), and transactional batches of more than one producer
    fail it with InvalidPidMappingException. A short batch to an unknown topic is never read."""
    local.topics.create("t", 2)
    good = batch([b"a"])
    short = bytearray(good[:32])
    short[8:12] = (20).to_bytes(4, "big")
    req = produce_request("t", good, acks=2)
    req.topic_data.append(TopicProduceData(name="t", partition_data=[PartitionProduceData(index=1, records=short)]))
    (t,) = (await call(local, req)).responses
    assert [(p.index, p.error_code) for p in t.partition_responses] == [
        (0, ErrorCode.UNKNOWN_SERVER_ERROR), (1, ErrorCode.UNKNOWN_SERVER_ERROR)]
    assert (await produce_one(local, "nope", bytes(short))).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def txn(pid):
        return build_batch([(None, b"a", [])], producer_id=pid, producer_epoch=0, base_sequence=0,
                           is_transactional=True)
    req = produce_request("t", txn(5), transactional_id="tx")
    req.topic_data.append(TopicProduceData(name="t", partition_data=[PartitionProduceData(index=1, records=txn(6))]))
    (t,) = (await call(local, req)).responses
    message = "Transactional records contained more than one producer ID"
    assert [(p.index, p.error_code, p.error_message) for p in t.partition_responses] == [
        (0, ErrorCode.INVALID_PRODUCER_ID_MAPPING, message), (1, ErrorCode.INVALID_PRODUCER_ID_MAPPING, message)]
    req.topic_data[1].partition_data[0].records = txn(5)
    (t,) = (await call(local, req)).responses
    assert [p.error_code for p in t.partition_responses] == [ErrorCode.INVALID_TXN_STATE] * 2
    assert local.store.get("t", 0).end_offset == local.store.get("t", 1).end_offset == 0
