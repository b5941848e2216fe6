"""Topic administration through confluent-kafka's AdminClient (librdkafka) on real sockets:
create / list / describe / delete topics and add partitions, with Kafka's errors."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Producer, TopicCollection
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from tests.raw_client import RawClient

TIMEOUT = 15


@pytest.fixture
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 10000})


def _result(futures: dict, key):
    return futures[key].result(timeout=TIMEOUT)


def _error(futures: dict, key) -> KafkaError:
    with pytest.raises(Exception) as info:
        futures[key].result(timeout=TIMEOUT)
    return info.value.args[0]


def _metadata_topic(bootstrap: str, name: str):
    with RawClient(bootstrap) as c:
        resp = c.request(3, 12, MetadataRequest(topics=[MetadataRequestTopic(name=name)], allow_auto_topic_creation=False))
    (topic,) = resp.topics
    return topic


def test_create_list_describe_delete(admin, broker, topic_name):
    _result(admin.create_topics([NewTopic(topic_name, num_partitions=3, replication_factor=1,
                                          config={"retention.ms": "123456"})]), topic_name)
    assert topic_name in admin.list_topics(timeout=TIMEOUT).topics

    (desc,) = admin.describe_topics(TopicCollection([topic_name])).values()
    desc = desc.result(timeout=TIMEOUT)
    assert desc.name == topic_name and not desc.is_internal
    assert [p.id for p in desc.partitions] == [0, 1, 2]
    assert all(len(p.replicas) == 1 and p.leader.id == p.replicas[0].id for p in desc.partitions)

    _result(admin.delete_topics([topic_name], operation_timeout=10), topic_name)
    assert topic_name not in admin.list_topics(timeout=TIMEOUT).topics
    assert _metadata_topic(broker.bootstrap, topic_name).error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_an_idempotent_producer_writes_to_a_topic_with_min_insync_replicas_two(admin, broker, topic_name):
    """A min.insync.replicas copied from a three-broker cluster: Kafka checks acks=all against
    min(min.insync.replicas, replication factor), so confluent-kafka's defaults (acks=all,
    idempotence) deliver on one broker instead of timing out on NOT_ENOUGH_REPLICAS."""
    _result(admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=1,
                                          config={"min.insync.replicas": "2"})]), topic_name)
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "message.timeout.ms": 10000})
    results = []
    for i in range(3):
        p.produce(topic_name, value=b"v%d" % i, on_delivery=lambda err, msg: results.append((err, msg.offset())))
    assert p.flush(20) == 0
    assert results == [(None, 0), (None, 1), (None, 2)]


def test_create_with_defaults_uses_broker_num_partitions(admin, broker, topic_name):
    _result(admin.create_topics([NewTopic(topic_name)]), topic_name)  # -1 / -1
    assert len(_metadata_topic(broker.bootstrap, topic_name).partitions) == 1
    admin.delete_topics([topic_name])[topic_name].result(timeout=TIMEOUT)


def test_create_errors(admin, topic_name):
    _result(admin.create_topics([NewTopic(topic_name, 1, 1)]), topic_name)
    err = _error(admin.create_topics([NewTopic(topic_name, 1, 1)]), topic_name)
    assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS
    assert err.str() == f"Topic '{topic_name}' already exists."

    err = _error(admin.create_topics([NewTopic(topic_name + "-rf", 1, 2)]), topic_name + "-rf")
    assert err.code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert "The target replication factor of 2 cannot be reached because only 1 broker(s) are registered." in err.str()

    err = _error(admin.create_topics([NewTopic(topic_name + "-cfg", 1, 1, config={"retention.ms": "soon"})]),
                 topic_name + "-cfg")
    assert err.code() == KafkaError.INVALID_CONFIG
    assert err.str() == "Invalid value soon for configuration retention.ms: Not a number of type LONG"

    err = _error(admin.create_topics([NewTopic("bad/name", 1, 1)]), "bad/name")
    assert err.code() == KafkaError.TOPIC_EXCEPTION


def test_the_metadata_log_cannot_be_created(admin, broker):
    """Kafka's ControllerApis refuses __cluster_metadata (KRaft's metadata log) before its
    controller sees the request, validate_only or not."""
    for validate_only in (True, False):
        err = _error(admin.create_topics([NewTopic("__cluster_metadata", 1, 1)], validate_only=validate_only),
                     "__cluster_metadata")
        assert err.code() == KafkaError.INVALID_REQUEST
        assert err.str() == "Creation of internal topic __cluster_metadata is prohibited."
    assert _metadata_topic(broker.bootstrap, "__cluster_metadata").error_code == 3


def test_validate_only_creates_nothing(admin, broker, topic_name):
    _result(admin.create_topics([NewTopic(topic_name, 2, 1)], validate_only=True), topic_name)
    assert _metadata_topic(broker.bootstrap, topic_name).error_code == 3


def test_recreated_topic_gets_a_new_id(admin, broker, topic_name):
    _result(admin.create_topics([NewTopic(topic_name, 1, 1)]), topic_name)
    first = _metadata_topic(broker.bootstrap, topic_name).topic_id
    _result(admin.delete_topics([topic_name]), topic_name)
    _result(admin.create_topics([NewTopic(topic_name, 1, 1)]), topic_name)
    second = _metadata_topic(broker.bootstrap, topic_name).topic_id
    assert first != second and second.int != 0


def test_a_topic_with_the_longest_legal_name_is_deleted_and_created_again(admin, broker, topic_name):
    """A 249-character name (Kafka's limit) leaves too little of the 255 bytes a file name may
    have for "-<partition>.<32 hex>-delete": the directory is renamed with the topic cut short,
    as Kafka's UnifiedLog.logDeleteDirName does, so the delete and a new topic of the same name
    both succeed (the broker used to close the connection on both)."""
    from confluent_kafka import Producer

    name = (topic_name + "-" + "x" * 249)[:249]
    _result(admin.create_topics([NewTopic(name, 11, 1)]), name)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(name, b"old", partition=10)
    assert p.flush(TIMEOUT) == 0
    _result(admin.delete_topics([name], operation_timeout=10), name)
    assert _metadata_topic(broker.bootstrap, name).error_code == 3
    _result(admin.create_topics([NewTopic(name, 11, 1)]), name)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    delivered = []
    p.produce(name, b"new", partition=10, on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
    assert p.flush(TIMEOUT) == 0
    assert delivered == [(None, 0)]  # a new, empty log
    (t,) = [t for n, t in admin.list_topics(name, timeout=TIMEOUT).topics.items() if n == name]
    assert len(t.partitions) == 11
    _result(admin.delete_topics([name], operation_timeout=10), name)


def test_delete_unknown_topic(admin, topic_name):
    err = _error(admin.delete_topics([topic_name]), topic_name)
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_partitions(admin, broker, topic_name):
    _result(admin.create_topics([NewTopic(topic_name, 2, 1)]), topic_name)
    _result(admin.create_partitions([NewPartitions(topic_name, 5)], validate_only=True), topic_name)
    assert len(_metadata_topic(broker.bootstrap, topic_name).partitions) == 2
    _result(admin.create_partitions([NewPartitions(topic_name, 5)]), topic_name)
    assert len(_metadata_topic(broker.bootstrap, topic_name).partitions) == 5

    err = _error(admin.create_partitions([NewPartitions(topic_name, 3)]), topic_name)
    assert err.code() == KafkaError.INVALID_PARTITIONS
    assert err.str() == f"The topic {topic_name} currently has 5 partition(s); 3 would not be an increase."
    err = _error(admin.create_partitions([NewPartitions(topic_name, 5)]), topic_name)
    assert err.code() == KafkaError.INVALID_PARTITIONS and err.str() == "Topic already has 5 partition(s)."

    node = admin.describe_cluster().result(timeout=TIMEOUT).controller.id
    _result(admin.create_partitions([NewPartitions(topic_name, 6, replica_assignment=[[node]])]), topic_name)
    err = _error(admin.create_partitions([NewPartitions(topic_name, 7, replica_assignment=[[node + 1]])]), topic_name)
    assert err.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT


def test_describe_cluster(admin, broker):
    result = admin.describe_cluster(include_authorized_operations=True).result(timeout=TIMEOUT)
    assert len(result.nodes) == 1 and result.nodes[0].id == result.controller.id
    assert f"{result.nodes[0].host}:{result.nodes[0].port}" == broker.bootstrap
    assert result.cluster_id
    assert result.authorized_operations  # every cluster operation (no authorizer)
