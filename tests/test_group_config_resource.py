"""Group configs (ConfigResource GROUP = 32) through confluent-kafka's AdminClient and the raw
client: defaults with sources and synonyms, SET / DELETE, Kafka's INVALID_CONFIG and
INVALID_REQUEST answers, persistence across a restart, and their effect on heartbeats."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

from protocol.messages.alter_configs_request import AlterableConfig, AlterConfigsRequest, AlterConfigsResource
from protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from protocol.messages.describe_configs_request import DescribeConfigsRequest, DescribeConfigsResource
from protocol.messages.incremental_alter_configs_request import AlterableConfig as IAlterable
from protocol.messages.incremental_alter_configs_request import AlterConfigsResource as IAlterResource
from protocol.messages.incremental_alter_configs_request import IncrementalAlterConfigsRequest
from protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest
from tests.raw_client import RawClient

TIMEOUT = 15
GROUP_TYPE = 32
DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS, CREATE_TOPICS, SHARE_GROUP_HEARTBEAT = 32, 33, 44, 19, 76
SET, DELETE, APPEND = AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND
ALL_NAMES = {
    "consumer.heartbeat.interval.ms", "consumer.session.timeout.ms", "share.auto.offset.reset",
    "share.heartbeat.interval.ms", "share.isolation.level", "share.record.lock.duration.ms",
    "share.session.timeout.ms", "streams.heartbeat.interval.ms", "streams.initial.rebalance.delay.ms",
    "streams.num.standby.replicas", "streams.session.timeout.ms",
}


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 10000})


def describe(admin, group) -> dict[str, ConfigEntry]:
    (future,) = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values()
    return future.result(timeout=TIMEOUT)


def incremental(admin, group, *ops, validate_only=False):
    entries = [ConfigEntry(n, v, incremental_operation=op) for n, v, op in ops]
    (future,) = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)],
                                                validate_only=validate_only).values()
    return future


def refused(future) -> KafkaError:
    with pytest.raises(Exception) as info:
        future.result(timeout=TIMEOUT)
    return info.value.args[0]


def join(client, group, topic, member=None):
    return client.request(SHARE_GROUP_HEARTBEAT, 1, ShareGroupHeartbeatRequest(
        group_id=group, member_id=member or uuid.uuid4().hex[:22], member_epoch=0, subscribed_topic_names=[topic]))


def create_topic(client, name):
    resp = client.request(CREATE_TOPICS, 7, CreateTopicsRequest(topics=[CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[])]))
    assert resp.topics[0].error_code == 0


def test_describe_defaults_of_any_group(admin, group):
    configs = describe(admin, group)  # the group does not exist: still described
    assert set(configs) == ALL_NAMES
    session = configs["share.session.timeout.ms"]
    assert (session.value, session.source, session.is_read_only, session.is_sensitive) == (
        "45000", ConfigSource.DEFAULT_CONFIG.value, False, False)
    assert list(session.synonyms) == ["share.session.timeout.ms"]  # Kafka 4.2: the bare name, DEFAULT_CONFIG
    reset = configs["share.auto.offset.reset"]
    assert (reset.value, reset.source, list(reset.synonyms)) == ("latest", ConfigSource.DEFAULT_CONFIG.value,
                                                                 ["share.auto.offset.reset"])
    assert configs["share.record.lock.duration.ms"].value == "30000"
    assert configs["share.isolation.level"].value == "read_uncommitted"


def test_set_and_delete(admin, group):
    incremental(admin, group, ("share.record.lock.duration.ms", "45000", SET),
                ("share.auto.offset.reset", "earliest", SET),
                ("share.heartbeat.interval.ms", "6000", SET)).result(timeout=TIMEOUT)
    configs = describe(admin, group)
    lock = configs["share.record.lock.duration.ms"]
    assert (lock.value, lock.source) == ("45000", ConfigSource.GROUP_CONFIG.value)
    assert list(lock.synonyms) == ["share.record.lock.duration.ms"]
    assert lock.synonyms["share.record.lock.duration.ms"].source == ConfigSource.GROUP_CONFIG.value
    assert configs["share.auto.offset.reset"].value == "earliest"
    assert configs["share.heartbeat.interval.ms"].value == "6000"
    assert describe(admin, group + "-other")["share.auto.offset.reset"].value == "latest"

    incremental(admin, group, ("share.auto.offset.reset", None, DELETE)).result(timeout=TIMEOUT)
    configs = describe(admin, group)
    assert configs["share.auto.offset.reset"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["share.record.lock.duration.ms"].value == "45000"

    incremental(admin, group, ("share.isolation.level", "read_committed", SET), validate_only=True).result(TIMEOUT)
    assert describe(admin, group)["share.isolation.level"].value == "read_uncommitted"


@pytest.mark.parametrize("ops, message", [
    ([("share.record.lock.duration.ms", "100", SET)],
     "Invalid value 100 for configuration share.record.lock.duration.ms: Value must be at least 1000"),
    ([("share.record.lock.duration.ms", "14000", SET)],
     "share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
    ([("share.heartbeat.interval.ms", "16000", SET)],
     "share.heartbeat.interval.ms must be less than or equal to group.share.max.heartbeat.interval.ms"),
    ([("share.session.timeout.ms", "lots", SET)],
     "Invalid value lots for configuration share.session.timeout.ms: Not a number of type INT"),
    ([("share.isolation.level", "serializable", SET)],
     ("Invalid value serializable for configuration share.isolation.level: String must be one of: "
      "read_committed, read_uncommitted")),
    ([("no.such.config", "1", SET)], "Unknown group config name: no.such.config"),
    ([("share.heartbeat.interval.ms", "6000", SET), ("share.auto.offset.reset", "sometimes", SET)],
     ("Invalid value sometimes for configuration share.auto.offset.reset: Invalid value `sometimes` for "
      "configuration share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the format "
      "'by_duration:<PnDTnHnMn.nS.>'.")),
    ([("share.auto.offset.reset", "earliest", APPEND)],
     "Can't APPEND to key share.auto.offset.reset because its type is not LIST."),
])
def test_bad_values_are_invalid_config_and_change_nothing(admin, group, ops, message):
    e = refused(incremental(admin, group, *ops))
    assert (e.code(), e.str()) == (KafkaError.INVALID_CONFIG, message)
    configs = describe(admin, group)
    assert all(c.source == ConfigSource.DEFAULT_CONFIG.value for c in configs.values())


def test_raw_requests_empty_name_and_legacy_alter(broker, group):
    with RawClient(broker.bootstrap) as client:
        resp = client.request(INCREMENTAL_ALTER_CONFIGS, 1, IncrementalAlterConfigsRequest(resources=[
            IAlterResource(GROUP_TYPE, "", [IAlterable("share.heartbeat.interval.ms", 0, "6000")]),
            IAlterResource(GROUP_TYPE, group, [IAlterable("share.heartbeat.interval.ms", 0, "6000"),
                                               IAlterable("share.session.timeout.ms", 0, "50000")]),
        ], validate_only=False))
        assert [(r.error_code, r.error_message) for r in resp.responses] == [
            (42, "Default group resources are not allowed."), (0, None)]
        # legacy AlterConfigs replaces the whole set
        resp = client.request(ALTER_CONFIGS, 2, AlterConfigsRequest(resources=[
            AlterConfigsResource(GROUP_TYPE, group, [AlterableConfig("share.session.timeout.ms", "55000")]),
            AlterConfigsResource(GROUP_TYPE, "", [AlterableConfig("share.session.timeout.ms", "55000")])]))
        assert [(r.error_code, r.error_message) for r in resp.responses] == [
            (0, None), (42, "Default group resources are not allowed.")]
        resp = client.request(DESCRIBE_CONFIGS, 4, DescribeConfigsRequest(resources=[
            DescribeConfigsResource(GROUP_TYPE, group, ["share.session.timeout.ms", "share.heartbeat.interval.ms"]),
            DescribeConfigsResource(GROUP_TYPE, "", None),
        ], include_synonyms=True, include_documentation=True))
        found, empty = resp.results
        assert (empty.error_code, empty.error_message) == (42, "Group name must not be empty")
        entries = {c.name: c for c in found.configs}
        assert list(entries) == ["share.heartbeat.interval.ms", "share.session.timeout.ms"]
        session = entries["share.session.timeout.ms"]
        assert (session.value, session.config_source, session.config_type) == ("55000", 8, 3)
        assert [(s.name, s.value, s.source) for s in session.synonyms] == [("share.session.timeout.ms", "55000", 8)]
        assert session.documentation
        assert (entries["share.heartbeat.interval.ms"].value, entries["share.heartbeat.interval.ms"].config_source) == (
            "5000", 5)


def test_heartbeats_carry_the_group_interval(admin, broker, group, topic_name):
    incremental(admin, group, ("share.heartbeat.interval.ms", "7000", SET)).result(timeout=TIMEOUT)
    with RawClient(broker.bootstrap) as client:
        create_topic(client, topic_name)
        assert join(client, group, topic_name).heartbeat_interval_ms == 7000
        assert join(client, group + "-plain", topic_name).heartbeat_interval_ms == 5000
        incremental(admin, group, ("share.heartbeat.interval.ms", None, DELETE)).result(timeout=TIMEOUT)
        assert join(client, group, topic_name).heartbeat_interval_ms == 5000


@pytest.mark.needs_private_broker
def test_group_configs_survive_a_restart(broker_factory, topic_name):
    b = broker_factory({"group.share.heartbeat.interval.ms": "6000"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "socket.timeout.ms": 10000})
    incremental(admin, "g", ("share.record.lock.duration.ms", "20000", SET),
                ("share.heartbeat.interval.ms", "8000", SET)).result(timeout=TIMEOUT)
    b.restart()
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "socket.timeout.ms": 10000})
    configs = describe(admin, "g")
    assert (configs["share.record.lock.duration.ms"].value, configs["share.record.lock.duration.ms"].source) == (
        "20000", ConfigSource.GROUP_CONFIG.value)
    other = describe(admin, "h")["share.heartbeat.interval.ms"]  # the broker's static value, DEFAULT_CONFIG in 4.2
    assert (other.value, other.source) == ("6000", ConfigSource.DEFAULT_CONFIG.value)
    assert [(s.name, s.value, s.source) for s in other.synonyms.values()] == [
        ("share.heartbeat.interval.ms", "6000", ConfigSource.DEFAULT_CONFIG.value)]
    with RawClient(b.bootstrap) as client:
        create_topic(client, topic_name)
        assert join(client, "g", topic_name).heartbeat_interval_ms == 8000
        assert join(client, "h", topic_name).heartbeat_interval_ms == 6000
