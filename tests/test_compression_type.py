"""compression.type: the broker stores each produced batch in the topic's codec, as Kafka 4.2 does.

'producer' (the default) keeps the producer's codec, 'uncompressed' stores none, a named codec
stores that one at the topic's compression.<codec>.level. A rewritten batch keeps the producer
fields, flags, timestamps, keys, values and headers, gets offsets as usual, and must still fit
max.message.bytes (MESSAGE_TOO_LARGE). In-process cases use a file-backed broker object; the
end-to-end ones use confluent-kafka against the shared broker and read the stored codec back
from the Fetch response bytes.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from broker.broker import Broker
from broker.config import BrokerConfig
from protocol import compression as codecs
from protocol.errors import ErrorCode
from protocol.records import HEADER_SIZE, build_batch, set_crc
from tests.raw_client import RawClient
from tests.test_produce import produce_one
from tests.test_produce_support import fetch, headers_of, init_producer_id, produce, raw, records_of

CODEC_OF = {"gzip": codecs.GZIP, "snappy": codecs.SNAPPY, "lz4": codecs.LZ4, "zstd": codecs.ZSTD,
            "uncompressed": codecs.NONE}
SOURCES = [codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD]
TIMEOUT = 15
T0 = int(time.time() * 1000) - 60_000


@pytest.fixture
async def local(tmp_path):
    b = Broker(BrokerConfig({"log.dirs": str(tmp_path / "data")}))
    yield b
    await b.store.close()


def sample(n: int = 5) -> list[tuple]:
    """(key, value, headers, timestamp) with null and empty keys, values and headers, and a
    timestamp that goes backwards (CreateTime keeps each record's own)."""
    out = []
    for i in range(n):
        key = None if i == 0 else b"" if i == 1 else f"k{i}".encode()
        value = None if i == 2 else f"value-{i}-".encode() * (i + 1)
        headers = [("h", f"{i}".encode()), ("null", None), ("\u00e9", b"")] if i % 2 else []
        out.append((key, value, headers, T0 + (i * 7919) % 13))
    return out


def stored(b: Broker, topic: str) -> bytes:
    return raw(b.store.get(topic, 0).read(0, 1 << 24).chunks)


def as_tuples(records) -> list[tuple]:
    return [(r.key, r.value, r.headers, r.timestamp) for r in records]


# -- in process ------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", SOURCES, ids=[codecs.CODEC_NAMES[c] for c in SOURCES])
@pytest.mark.parametrize("ctype", ["gzip", "snappy", "lz4", "zstd", "uncompressed", "producer"])
async def test_stored_codec_follows_the_topic_config(local, ctype, source):
    local.topics.create("t", 1, {"compression.type": ctype})
    recs = sample()
    first = build_batch(recs[:2], compression=source, producer_id=7, producer_epoch=3, base_sequence=0)
    second = build_batch(recs[2:], compression=source, producer_id=7, producer_epoch=3, base_sequence=2)
    assert (await produce_one(local, "t", first)).base_offset == 0
    p = await produce_one(local, "t", second)
    assert (p.error_code, p.base_offset, p.log_append_time_ms) == (0, 2, -1)
    data = stored(local, "t")
    want = source if ctype == "producer" else CODEC_OF[ctype]
    hs = headers_of(data)
    assert [h.compression for h in hs] == [want, want]
    assert [(h.base_offset, h.last_offset_delta, h.records_count) for h in hs] == [(0, 1, 2), (2, 2, 3)]
    assert [(h.producer_id, h.producer_epoch, h.base_sequence) for h in hs] == [(7, 3, 0), (7, 3, 2)]
    assert [(h.partition_leader_epoch, h.is_transactional, h.log_append_time) for h in hs] == [(0, False, False)] * 2
    assert [h.max_timestamp for h in hs] == [max(r[3] for r in recs[:2]), max(r[3] for r in recs[2:])]
    got = records_of(data)
    assert [r.offset for r in got] == [0, 1, 2, 3, 4]
    assert as_tuples(got) == recs


async def test_levels_and_the_broker_default(tmp_path):
    b = Broker(BrokerConfig({"log.dirs": str(tmp_path / "data"), "compression.type": "zstd",
                             "compression.zstd.level": "19"}))
    try:
        b.topics.create("default", 1)
        b.topics.create("gzip1", 1, {"compression.type": "gzip", "compression.gzip.level": "1"})
        b.topics.create("keep", 1, {"compression.type": "producer"})
        text = [(None, b"some fairly repetitive payload %d;" % i * 40, []) for i in range(50)]
        for topic in ("default", "gzip1", "keep"):
            assert (await produce_one(b, topic, build_batch(text, timestamp_ms=T0))).error_code == 0
        body = build_batch(text, timestamp_ms=T0)[HEADER_SIZE:]
        assert stored(b, "default")[HEADER_SIZE:] == codecs.compress(codecs.ZSTD, body, 19)
        assert stored(b, "gzip1")[HEADER_SIZE:] == codecs.compress(codecs.GZIP, body, 1)
        assert headers_of(stored(b, "keep"))[0].compression == codecs.NONE
        b.config.set_dynamic({"compression.type": "lz4"}, cluster_default=True)  # a dynamic default
        assert (await produce_one(b, "default", build_batch(text, timestamp_ms=T0))).error_code == 0
        assert [h.compression for h in headers_of(stored(b, "default"))] == [codecs.ZSTD, codecs.LZ4]
    finally:
        await b.store.close()


async def test_log_append_time_topics_stamp_the_rewritten_batch(local):
    local.topics.create("t", 1, {"compression.type": "gzip", "message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    p = await produce_one(local, "t", build_batch([(b"k", b"v", [], 5), (b"k2", b"v2", [], 9)]))
    assert p.error_code == 0 and p.log_append_time_ms >= before
    (h,) = headers_of(stored(local, "t"))
    assert (h.compression, h.log_append_time, h.max_timestamp) == (codecs.GZIP, True, p.log_append_time_ms)
    assert [r.timestamp for r in records_of(stored(local, "t"))] == [p.log_append_time_ms] * 2


async def test_a_rewritten_batch_over_max_message_bytes_is_message_too_large(local):
    local.topics.create("t", 1, {"compression.type": "uncompressed", "max.message.bytes": "2000"})
    big = build_batch([(None, b"a" * 5000, [])], compression=codecs.GZIP)
    assert len(big) < 2000  # the producer's batch fits; stored uncompressed it would not
    p = await produce_one(local, "t", big)
    assert (p.error_code, p.base_offset, p.log_start_offset, p.error_message) == (
        ErrorCode.MESSAGE_TOO_LARGE, -1, -1, None)
    assert local.store.get("t", 0).end_offset == 0
    small = build_batch([(None, b"a" * 500, [])], compression=codecs.GZIP)
    assert (await produce_one(local, "t", small)).error_code == 0


async def test_records_that_do_not_parse_are_refused_when_rewritten(local):
    local.topics.create("t", 1, {"compression.type": "zstd"})
    bad = bytearray(build_batch([(b"k", b"v", [])]))
    bad[HEADER_SIZE] = 0x7E  # record length now runs past the batch; the header and CRC stay valid
    set_crc(bad, 0)
    p = await produce_one(local, "t", bytes(bad))
    assert p.error_code == ErrorCode.INVALID_RECORD
    assert local.store.get("t", 0).end_offset == 0


async def test_idempotent_retry_of_a_rewritten_batch_is_a_duplicate(local):
    local.topics.create("t", 1, {"compression.type": "gzip"})

    def send(values, seq):
        return produce_one(local, "t", build_batch([(None, v, []) for v in values], compression=codecs.LZ4,
                                                   producer_id=42, producer_epoch=0, base_sequence=seq))

    assert (await send([b"a", b"b"], 0)).base_offset == 0
    assert (await send([b"c"], 2)).base_offset == 2
    retry = await send([b"a", b"b"], 0)
    assert (retry.error_code, retry.base_offset) == (0, 0)
    gap = await send([b"x"], 9)
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert (await send([b"d"], 3)).base_offset == 3
    data = stored(local, "t")
    assert [r.value for r in records_of(data)] == [b"a", b"b", b"c", b"d"]
    assert {h.compression for h in headers_of(data)} == {codecs.GZIP}


# -- over the wire: confluent-kafka ----------------------------------------------------------------


def _admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 10000})


def _create(admin: AdminClient, name: str, configs: dict[str, str]) -> None:
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(TIMEOUT)


def _produce(bootstrap: str, topic: str, compression: str, records: list[tuple], **extra) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": compression, "linger.ms": 20,
                  "message.timeout.ms": 30000, **extra})
    errors = []
    for key, value, headers, ts in records:
        p.produce(topic, value=value, key=key, headers=headers or None, timestamp=ts, partition=0,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(30) == 0
    assert errors == []


def _consume(bootstrap: str, topic: str, count: int) -> list[tuple]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    out = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while len(out) < count and time.monotonic() < deadline:
            for m in c.consume(count - len(out), 1.0):
                assert m.error() is None, m.error()
                out.append((m.offset(), m.key(), m.value(), [tuple(h) for h in (m.headers() or [])],
                            m.timestamp()[1]))
    finally:
        c.close()
    return out


def _stored_codecs(bootstrap: str, topic: str) -> list[int]:
    with RawClient(bootstrap) as c:
        return [h.compression for h in headers_of(fetch(c, topic, 0).records)]


@pytest.mark.parametrize("ctype,producer_codec,want", [
    ("gzip", "none", codecs.GZIP), ("lz4", "none", codecs.LZ4), ("zstd", "gzip", codecs.ZSTD),
    ("snappy", "lz4", codecs.SNAPPY), ("uncompressed", "lz4", codecs.NONE), ("producer", "snappy", codecs.SNAPPY),
])
def test_confluent_kafka_round_trip(broker, topic_name, ctype, producer_codec, want):
    admin = _admin(broker)
    _create(admin, topic_name, {"compression.type": ctype})
    recs = [(None if i % 4 == 0 else f"k{i}".encode(), None if i == 3 else f"v{i}".encode() * (i + 1),
             [("h", f"{i}".encode()), ("null", None)] if i % 2 else [], T0 + i * 3 - (i % 3))
            for i in range(20)]
    _produce(broker.bootstrap, topic_name, producer_codec, recs, **{"enable.idempotence": True})
    got = _consume(broker.bootstrap, topic_name, len(recs))
    assert got == [(i, k, v, h, ts) for i, (k, v, h, ts) in enumerate(recs)]
    assert set(_stored_codecs(broker.bootstrap, topic_name)) == {want}


def test_incremental_alter_configs_applies_to_the_next_produce(broker, topic_name):
    admin = _admin(broker)
    _create(admin, topic_name, {})
    one = [(b"k", b"v" * 50, [("h", b"x")], T0)]
    _produce(broker.bootstrap, topic_name, "none", one)
    for ctype in ("gzip", "zstd", "uncompressed"):
        entries = [ConfigEntry("compression.type", ctype, incremental_operation=AlterConfigOpType.SET)]
        (f,) = admin.incremental_alter_configs(
            [ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=entries)]).values()
        f.result(TIMEOUT)
        _produce(broker.bootstrap, topic_name, "lz4", one)
    assert _stored_codecs(broker.bootstrap, topic_name) == [codecs.NONE, codecs.GZIP, codecs.ZSTD, codecs.NONE]
    assert [r[1:] for r in _consume(broker.bootstrap, topic_name, 4)] == [(b"k", b"v" * 50, [("h", b"x")], T0)] * 4


def test_raw_idempotent_retry_over_the_wire(broker, topic_name):
    _create(_admin(broker), topic_name, {"compression.type": "zstd"})
    with RawClient(broker.bootstrap) as c:
        pid = init_producer_id(c).producer_id
        b0 = build_batch([(None, b"a", []), (None, b"b", [])], compression=codecs.GZIP, producer_id=pid,
                         producer_epoch=0, base_sequence=0)
        assert produce(c, topic_name, b0).base_offset == 0
        retry = produce(c, topic_name, b0)
        assert (retry.error_code, retry.base_offset) == (0, 0)
        part = fetch(c, topic_name, 0)
        assert [r.value for r in records_of(part.records)] == [b"a", b"b"]
        assert [h.compression for h in headers_of(part.records)] == [codecs.ZSTD]


def test_recompress_batch_keeps_the_flags_and_producer_fields():
    from protocol.records import iter_records, parse_header, recompress_batch

    src = build_batch([(b"k", b"v", [("h", None)], T0), (None, b"w", [], T0 - 5)], compression=codecs.SNAPPY,
                      producer_id=9, producer_epoch=2, base_sequence=40, is_transactional=True, is_control=True)
    out = recompress_batch(src, codecs.ZSTD, 5)
    h, before = parse_header(out), parse_header(src)
    assert h.compression == codecs.ZSTD
    assert h._replace(crc=0, attributes=0, batch_length=0) == before._replace(crc=0, attributes=0, batch_length=0)
    assert h.attributes & ~0x07 == before.attributes & ~0x07
    assert as_tuples(iter_records(out)) == as_tuples(iter_records(src))
    stamped = recompress_batch(build_batch([(None, b"v", [])], timestamp_type=1, timestamp_ms=123), codecs.GZIP)
    assert (parse_header(stamped).log_append_time, parse_header(stamped).max_timestamp) == (True, 123)
