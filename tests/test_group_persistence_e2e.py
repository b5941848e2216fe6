"""A real confluent-kafka ShareConsumer across broker restarts (SIGTERM and kill -9): it keeps
consuming, in the same group, as the same member, and the group epoch never goes back."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from coordinator.group.offsets_topic import partition_for
from tests.test_group_persistence_wire import read_partition

TIMEOUT = 30.0


def admin(bootstrap):
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})


def produce(bootstrap, topic, values):
    p = Producer({"bootstrap.servers": bootstrap, "log_level": 3, "linger.ms": 0,
                  "message.timeout.ms": int(TIMEOUT * 1000)})
    errors = []
    for v in values:
        p.produce(topic, value=v, on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(TIMEOUT) == 0 and errors == [], errors


def consume_until(consumer, wanted: set[bytes]) -> set[bytes]:
    """Poll until every value in ``wanted`` arrived; transient errors (the broker is away) are fine."""
    got: set[bytes] = set()
    deadline = time.monotonic() + TIMEOUT
    while not wanted <= got:
        assert time.monotonic() < deadline, f"still missing {sorted(wanted - got)}"
        for m in consumer.poll(0.2):
            if m.error() is not None:
                assert not m.error().fatal(), m.error()
                continue
            got.add(m.value())
    return got


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "kill-9"])
def test_a_share_consumer_keeps_consuming_across_a_broker_restart(broker_factory, topic_name, crash):
    b = broker_factory({"log.flush.interval.messages": "1"})
    group = f"sg-{uuid.uuid4().hex[:12]}"
    client = admin(b.bootstrap)  # kept referenced: a destroyed handle fails its futures
    client.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(TIMEOUT)
    (future,) = client.incremental_alter_configs([ConfigResource(
        ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]
    ).values()
    future.result(TIMEOUT)
    consumer = ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": group, "log_level": 0,
                              "socket.timeout.ms": 5000})
    try:
        consumer.subscribe([topic_name])
        before = {f"before-{i}".encode() for i in range(10)}
        produce(b.bootstrap, topic_name, sorted(before))
        consume_until(consumer, before)
        if crash:
            b.kill()
        else:
            assert b.stop() == 0
        b.start()
        after = {f"after-{i}".encode() for i in range(10)}
        produce(b.bootstrap, topic_name, sorted(after))
        consume_until(consumer, after)
    finally:
        consumer.close()
    assert b.stop() == 0
    records = [r for _, r in read_partition(b.data_dir, partition_for(group, 50)) if r.key.group_id == group]
    members = {r.key.member_id for r in records if hasattr(r.key, "member_id")}
    assert len(members) == 1  # the consumer came back as the same member (it rejoins by its own id)
    epochs = [r.value.epoch for r in records if type(r.key).__name__ == "ShareGroupMetadataKey"]
    assert epochs == sorted(epochs) and len(set(epochs)) == len(epochs)  # never backwards
    assert records[-1].value is not None and type(records[-4].key).__name__ == "ShareGroupCurrentMemberAssignmentKey"
    assert "Traceback" not in b.log()
