"""Real clients end to end: confluent-kafka (idempotent, every codec), kafka-python and aiokafka
producers write one partition; confluent-kafka and kafka-python consumers (assign, explicit
offsets, no commits) read every record back with identical keys, values, headers and timestamps.
Each client's transactional producer is refused at once, as README says."""

from __future__ import annotations

import asyncio
import time

import pytest

pytestmark = [
    pytest.mark.e2e,
    # kafka-python loads its schemas with importlib.resources' deprecated helpers
    pytest.mark.filterwarnings("ignore:(open|read)_text is deprecated:DeprecationWarning"),
]

T0 = int(time.time() * 1000) - 60_000
PER_CLIENT = 40


def expected_records(tag: str, start_ts: int, null_headers: bool = True) -> list[tuple]:
    """Keys and values sometimes null or empty, headers sometimes empty or null-valued."""
    out = []
    for i in range(PER_CLIENT):
        key = None if i % 7 == 0 else f"{tag}-k{i}".encode()
        value = None if i % 11 == 5 else (f"{tag}-v{i}-".encode() * (i % 5 + 1))
        headers = [("h1", f"{tag}-{i}".encode()), ("empty", b"")] if i % 3 == 0 else []
        if headers and null_headers:
            headers.append(("null", None))
        out.append((key, value, headers, start_ts + i))
    return out


def produce_confluent(bootstrap: str, topic: str, compression: str, records: list[tuple]) -> None:
    from confluent_kafka import Producer

    p = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": compression,
        "linger.ms": 20, "message.timeout.ms": 30000,
    })
    errors = []
    for key, value, headers, ts in records:
        p.produce(topic, value=value, key=key, headers=headers or None, timestamp=ts,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(30) == 0
    assert errors == []


def produce_kafka_python(bootstrap: str, topic: str, records: list[tuple]) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip", linger_ms=20, acks="all")
    try:
        futures = [
            p.send(topic, value=value, key=key, headers=headers, timestamp_ms=ts, partition=0)
            for key, value, headers, ts in records
        ]
        p.flush(30)
        for f in futures:
            f.get(timeout=30)
    finally:
        p.close(5)


async def produce_aiokafka(bootstrap: str, topic: str, records: list[tuple]) -> None:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="lz4", enable_idempotence=True,
                         linger_ms=20)
    await p.start()
    try:
        futures = [
            await p.send(topic, value=value, key=key, headers=headers, timestamp_ms=ts, partition=0)
            for key, value, headers, ts in records
        ]
        for f in futures:
            await f
    finally:
        await p.stop()


def consume_confluent(bootstrap: str, topic: str, count: int, offset: int = 0) -> list[tuple]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "e2e-no-commits", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, offset)])
        out = []
        deadline = time.monotonic() + 30
        while len(out) < count and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            headers = [(k, v) for k, v in (msg.headers() or [])]
            out.append((msg.offset(), msg.key(), msg.value(), headers, msg.timestamp()[1]))
        return out
    finally:
        c.close()


def consume_kafka_python(bootstrap: str, topic: str, count: int, offset: int = 0) -> list[tuple]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, offset)
        out = []
        deadline = time.monotonic() + 30
        while len(out) < count and time.monotonic() < deadline:
            for msgs in c.poll(timeout_ms=500).values():
                for m in msgs:
                    out.append((m.offset, m.key, m.value, list(m.headers), m.timestamp))
        return out
    finally:
        c.close()


def test_every_client_and_codec_round_trips_byte_identical(broker, topic_name):
    expected = []
    start = T0
    for compression in ("none", "gzip", "snappy", "lz4", "zstd"):
        records = expected_records(f"ck-{compression}", start)
        produce_confluent(broker.bootstrap, topic_name, compression, records)
        expected += records
        start += PER_CLIENT
    records = expected_records("kp", start, null_headers=False)  # kafka-python refuses null header values
    produce_kafka_python(broker.bootstrap, topic_name, records)
    expected += records
    start += PER_CLIENT
    records = expected_records("aio", start)
    asyncio.run(produce_aiokafka(broker.bootstrap, topic_name, records))
    expected += records

    want = [(i, k, v, h, ts) for i, (k, v, h, ts) in enumerate(expected)]
    got = consume_confluent(broker.bootstrap, topic_name, len(want))
    assert got == want
    got = consume_kafka_python(broker.bootstrap, topic_name, len(want))
    assert got == want
    # a consumer starting in the middle of a compressed batch gets records from its offset on
    middle = PER_CLIENT * 3 + 5
    assert consume_confluent(broker.bootstrap, topic_name, 10, offset=middle) == want[middle:middle + 10]


def test_transactional_producers_are_refused_at_once(broker):
    """kshare has no transactions: each client's transactional producer fails fast with the fatal
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53), well inside its own 10 s timeout, rather than
    retrying until it times out."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import TransactionalIdAuthorizationFailed
    from confluent_kafka import KafkaError, KafkaException, Producer
    from kafka import KafkaProducer
    from kafka.errors import TransactionalIdAuthorizationFailedError

    t0 = time.monotonic()
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "e2e-txn-ck", "log_level": 0})
    with pytest.raises(KafkaException) as refused:
        p.init_transactions(10)
    err = refused.value.args[0]
    assert (err.code(), err.fatal()) == (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, True)

    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="e2e-txn-kp", max_block_ms=10000)
    try:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            kp.init_transactions()
    finally:
        kp.close(0)

    async def aiokafka_start() -> None:
        ap = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="e2e-txn-aio",
                              request_timeout_ms=10000)
        try:
            with pytest.raises(TransactionalIdAuthorizationFailed):
                await ap.start()
        finally:
            await ap.stop()

    asyncio.run(aiokafka_start())
    assert time.monotonic() - t0 < 10


def test_retention_empties_an_idle_topic(broker_factory, topic_name):
    """retention.ms expires an idle partition's last records too, as Kafka's deletableSegments
    counts the active segment: a confluent-kafka Consumer sees the low watermark reach the end,
    and the next record goes on from there."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    b = broker_factory({"log.retention.check.interval.ms": "100", "log.initial.task.delay.ms": "100"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic_name, 1, 1, config={"retention.ms": "10000"})])[topic_name].result(15)
    p = Producer({"bootstrap.servers": b.bootstrap, "log_level": 3})
    for i in range(5):
        p.produce(topic_name, f"old-{i}".encode(), timestamp=T0)  # a minute old: past retention.ms
    assert p.flush(15) == 0
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "watermarks", "log_level": 3})
    try:
        tp = TopicPartition(topic_name, 0)
        deadline = time.monotonic() + 20
        while c.get_watermark_offsets(tp, 15) != (5, 5):
            assert time.monotonic() < deadline, "retention left the idle partition's records"
            time.sleep(0.05)
        p.produce(topic_name, b"new")
        assert p.flush(15) == 0
        assert c.get_watermark_offsets(tp, 15) == (5, 6)
    finally:
        c.close()


def test_an_explicit_advertised_port_is_kept_when_listening_on_port_0(broker_factory):
    """Only an advertised port 0 becomes the port the OS picked (Kafka's
    withEphemeralPortsCorrected): with ``listeners`` on port 0 and an explicit
    ``advertised.listeners`` (a proxy in front, say), clients are sent to the advertised port."""
    import socket

    from confluent_kafka.admin import AdminClient

    with socket.socket() as s:  # held while the broker starts, so the OS cannot give it this port
        s.bind(("127.0.0.1", 0))
        advertised = s.getsockname()[1]
        b = broker_factory({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{advertised}"})
    assert b.port != advertised
    brokers = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0}).list_topics(timeout=10).brokers
    assert [(m.id, m.host, m.port) for m in brokers.values()] == [(1, "127.0.0.1", advertised)]


def test_a_sasl_client_gets_an_authentication_error_at_once(broker):
    """PLAINTEXT only: SaslHandshake gets ILLEGAL_SASL_STATE, as from a Kafka PLAINTEXT listener,
    so librdkafka reports an authentication failure naming it (a closed connection would only
    say the broker is down)."""
    from confluent_kafka import KafkaError, Producer

    errors = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p",
                  "error_cb": errors.append, "log_level": 0})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        p.poll(0.1)
    assert errors, "no error reported"
    assert errors[0].code() == KafkaError._AUTHENTICATION
    assert "Request not valid in current SASL state" in errors[0].str()


def test_a_classic_consumer_group_gets_a_clear_error(broker, topic_name, caplog):
    """Consumer groups are not served; what each client says about it is in the README:
    confluent-kafka's Consumer polls an error, kafka-python's raises, and aiokafka's start()
    does not complete while it logs why."""
    from aiokafka import AIOKafkaConsumer
    from confluent_kafka import Consumer
    from kafka import KafkaConsumer
    from kafka.errors import IncompatibleBrokerVersion

    from tests.test_e2e_share_support import create_topic

    create_topic(broker.bootstrap, topic_name)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"cg-{topic_name}", "log_level": 0})
    try:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 20
        while (m := c.poll(0.5)) is None:
            assert time.monotonic() < deadline, "no error within 20 s"
        assert m.error() is not None and "JoinGroup failed" in m.error().str(), m.error()
        assert "Required feature not supported by broker" in m.error().str()
    finally:
        c.close()

    kc = KafkaConsumer(topic_name, bootstrap_servers=broker.bootstrap, group_id=f"kp-{topic_name}")
    try:
        with pytest.raises(IncompatibleBrokerVersion, match="JoinGroupRequest"):
            kc.poll(5000)
    finally:
        kc.close()

    async def aiokafka_start() -> None:
        ac = AIOKafkaConsumer(topic_name, bootstrap_servers=broker.bootstrap, group_id=f"aio-{topic_name}")
        try:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(ac.start(), 3)
        finally:
            await ac.stop()

    asyncio.run(aiokafka_start())
    assert "JoinGroupRequest cannot be used" in caplog.text


def test_offsets_for_an_unknown_special_timestamp_are_unsupported(broker, topic_name):
    """confluent-kafka's offsets_for_times with a negative timestamp Kafka does not know (-7)
    fails with UNSUPPORTED_VERSION, as against Kafka 4.2; MAX_TIMESTAMP (-3) is answered."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

    from tests.test_e2e_share_support import create_topic

    create_topic(broker.bootstrap, topic_name)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(topic_name, b"x")
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"oft-{topic_name}"})
    try:
        (latest,) = c.offsets_for_times([TopicPartition(topic_name, 0, -3)], timeout=10)
        assert (latest.error, latest.offset) == (None, 0)
        with pytest.raises(KafkaException) as e:
            c.offsets_for_times([TopicPartition(topic_name, 0, -7)], timeout=10)
        assert e.value.args[0].code() == KafkaError.UNSUPPORTED_VERSION
    finally:
        c.close()
