"""Describe / alter topic and broker configs through confluent-kafka's AdminClient.

Topic configs use the shared broker (unique topics); broker configs change the whole broker,
so those tests run a private one (and restart it to check that dynamic configs persist).
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from protocol.messages.describe_configs_request import DescribeConfigsRequest, DescribeConfigsResource
from protocol.messages.incremental_alter_configs_request import AlterableConfig as IAlterable
from protocol.messages.incremental_alter_configs_request import AlterConfigsResource as IAlterResource
from protocol.messages.incremental_alter_configs_request import IncrementalAlterConfigsRequest
from tests.raw_client import RawClient

TIMEOUT = 15


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


@pytest.fixture
def admin(broker):
    return _admin(broker.bootstrap)


@pytest.fixture
def topic(admin, topic_name):
    admin.create_topics([NewTopic(topic_name, 1, 1, config={"retention.ms": "3600000"})])[topic_name].result(TIMEOUT)
    return topic_name


def describe(admin, restype, name, **kw) -> dict[str, ConfigEntry]:
    (future,) = admin.describe_configs([ConfigResource(restype, name)], **kw).values()
    return future.result(timeout=TIMEOUT)


def incremental(admin, restype, name, *ops, **kw):
    entries = [ConfigEntry(n, v, incremental_operation=op) for n, v, op in ops]
    (future,) = admin.incremental_alter_configs([ConfigResource(restype, name, incremental_configs=entries)],
                                                **kw).values()
    return future.result(timeout=TIMEOUT)


def alter_error(future) -> KafkaError:
    with pytest.raises(Exception) as info:
        future.result(timeout=TIMEOUT)
    return info.value.args[0]


def test_describe_topic_configs(admin, topic):
    configs = describe(admin, ResourceType.TOPIC, topic)
    assert len(configs) == 33  # every Kafka 4.2 topic config
    retention = configs["retention.ms"]
    assert retention.value == "3600000" and retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not retention.is_default and not retention.is_read_only
    cleanup = configs["cleanup.policy"]
    assert cleanup.value == "delete" and cleanup.source == ConfigSource.DEFAULT_CONFIG.value and cleanup.is_default
    assert set(cleanup.synonyms) == {"log.cleanup.policy"}
    assert configs["max.message.bytes"].value == "1048588"
    assert configs["min.cleanable.dirty.ratio"].value == "0.5"


def test_incremental_alter_topic_configs(admin, topic):
    incremental(admin, ResourceType.TOPIC, topic,
                ("cleanup.policy", "compact", AlterConfigOpType.APPEND),
                ("retention.ms", None, AlterConfigOpType.DELETE),
                ("max.message.bytes", "2000000", AlterConfigOpType.SET))
    configs = describe(admin, ResourceType.TOPIC, topic)
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["retention.ms"].value == "604800000"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["max.message.bytes"].value == "2000000"

    incremental(admin, ResourceType.TOPIC, topic, ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT))
    assert describe(admin, ResourceType.TOPIC, topic)["cleanup.policy"].value == "compact"

    # validate_only changes nothing
    incremental(admin, ResourceType.TOPIC, topic, ("segment.ms", "100000", AlterConfigOpType.SET),
                validate_only=True)
    assert describe(admin, ResourceType.TOPIC, topic)["segment.ms"].value == "604800000"


def test_incremental_alter_topic_errors(admin, topic, topic_name):
    def err(*ops, name=topic):
        entries = [ConfigEntry(n, v, incremental_operation=op) for n, v, op in ops]
        (future,) = admin.incremental_alter_configs(
            [ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)]).values()
        return alter_error(future)

    e = err(("no.such.config", "1", AlterConfigOpType.SET))
    assert e.code() == KafkaError.INVALID_CONFIG and e.str() == "Unknown topic config name: no.such.config"
    e = err(("retention.ms", "-7", AlterConfigOpType.SET))
    assert e.code() == KafkaError.INVALID_CONFIG
    assert e.str() == "Invalid value -7 for configuration retention.ms: Value must be at least -1"
    e = err(("retention.ms", "5", AlterConfigOpType.APPEND))
    assert e.code() == KafkaError.INVALID_CONFIG
    assert e.str() == "Can't APPEND to key retention.ms because its type is not LIST."
    e = err(("cleanup.policy", "shred", AlterConfigOpType.APPEND))
    assert e.str() == "Invalid value shred for configuration cleanup.policy: String must be one of: compact, delete"
    # Kafka 4.2's ValidList (KIP-1161): repeats, then empty items, then each value
    # several bad values: the first in LogConfig's definition order is reported
    e = err(("retention.ms", "abc", AlterConfigOpType.SET), ("segment.bytes", "xyz", AlterConfigOpType.SET))
    assert e.str() == "Invalid value xyz for configuration segment.bytes: Not a number of type INT"
    for value, why in (("compact,compact", "duplicated"), ("compact,", "empty")):
        e = err(("cleanup.policy", value, AlterConfigOpType.SET))
        assert (e.code(), e.str()) == (KafkaError.INVALID_CONFIG,
                                       f"Configuration 'cleanup.policy' values must not be {why}.")
    e = err(("retention.ms", "5", AlterConfigOpType.SET), name=topic_name + "-missing")
    assert e.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # nothing above changed the topic
    assert describe(admin, ResourceType.TOPIC, topic)["retention.ms"].value == "3600000"
    assert describe(admin, ResourceType.TOPIC, topic)["cleanup.policy"].value == "delete"


def test_incremental_append_splits_its_value_as_java_does(admin, topic):
    """Kafka splits an APPEND value with String.split(","), which drops trailing empty items."""
    (future,) = admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact,", incremental_operation=AlterConfigOpType.APPEND)])]).values()
    future.result(timeout=TIMEOUT)
    assert describe(admin, ResourceType.TOPIC, topic)["cleanup.policy"].value == "delete,compact"


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_legacy_alter_replaces_topic_configs(admin, topic):
    (future,) = admin.alter_configs([ConfigResource(ResourceType.TOPIC, topic,
                                                    set_config={"segment.bytes": "2097152"})]).values()
    future.result(timeout=TIMEOUT)
    configs = describe(admin, ResourceType.TOPIC, topic)
    assert configs["segment.bytes"].value == "2097152"
    assert configs["retention.ms"].value == "604800000"  # the override it did not name is gone

    (future,) = admin.alter_configs([ConfigResource(ResourceType.TOPIC, topic,
                                                    set_config={"segment.bytes": "100"})]).values()
    e = alter_error(future)
    assert e.code() == KafkaError.INVALID_CONFIG
    assert e.str() == "Invalid value 100 for configuration segment.bytes: Value must be at least 1048576"


def test_describe_broker_configs(admin):
    node = str(admin.describe_cluster().result(timeout=TIMEOUT).controller.id)
    configs = describe(admin, ResourceType.BROKER, node)
    assert configs["num.partitions"].value == "1"
    assert configs["log.dirs"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["log.dirs"].is_read_only
    hours = configs["log.retention.hours"]
    assert hours.value == "168" and hours.source == ConfigSource.DEFAULT_CONFIG.value
    assert not configs["log.retention.ms"].is_read_only
    queued = configs["queued.max.requests"]  # accepted and ignored, with Kafka's default
    assert (queued.value, queued.is_read_only, queued.is_sensitive) == ("500", True, False)


@pytest.mark.needs_private_broker
def test_dynamic_broker_configs_apply_and_persist(broker_factory):
    b = broker_factory()
    admin = _admin(b.bootstrap)
    admin.create_topics([NewTopic("dyn", 1, 1)])["dyn"].result(TIMEOUT)
    node = str(admin.describe_cluster().result(timeout=TIMEOUT).controller.id)

    incremental(admin, ResourceType.BROKER, node, ("log.retention.ms", "7200000", AlterConfigOpType.SET))
    # the cluster-wide default resource "" (librdkafka refuses an empty name, so raw requests)
    with RawClient(b.bootstrap) as c:
        resp = c.request(44, 1, IncrementalAlterConfigsRequest(resources=[
            IAlterResource(4, "", [IAlterable("log.segment.bytes", 0, "4194304")])]))
        assert resp.responses[0].error_code == 0

    def check():
        broker_cfg = describe(admin, ResourceType.BROKER, node)
        assert broker_cfg["log.retention.ms"].value == "7200000"
        assert broker_cfg["log.retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        assert broker_cfg["log.segment.bytes"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        with RawClient(b.bootstrap) as c:
            resp = c.request(32, 4, DescribeConfigsRequest(resources=[DescribeConfigsResource(4, "", None)],
                                                           include_synonyms=True))
        (result,) = resp.results
        assert [(e.name, e.value, e.config_source, [s.source for s in e.synonyms]) for e in result.configs] == [
            ("log.segment.bytes", "4194304", 3, [3])]
        topic_cfg = describe(admin, ResourceType.TOPIC, "dyn")
        assert topic_cfg["retention.ms"].value == "7200000"
        assert topic_cfg["retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        assert topic_cfg["segment.bytes"].value == "4194304"
        assert topic_cfg["segment.bytes"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value

    check()
    b.restart()
    admin = _admin(b.bootstrap)
    check()

    # a read-only broker config is refused as Kafka refuses it
    entries = [ConfigEntry("log.dirs", "/elsewhere", incremental_operation=AlterConfigOpType.SET)]
    (future,) = admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, node,
                                                                incremental_configs=entries)]).values()
    e = alter_error(future)
    assert e.code() == KafkaError.INVALID_REQUEST
    assert e.str() == "Cannot update these configs dynamically: [log.dirs]"

    incremental(admin, ResourceType.BROKER, node, ("log.retention.ms", None, AlterConfigOpType.DELETE))
    assert describe(admin, ResourceType.TOPIC, "dyn")["retention.ms"].value == "604800000"


def test_validate_only_checks_the_broker_config_as_a_whole(admin):
    """Kafka's DynamicBrokerConfig.validate builds the whole resulting config whether or not the
    request applies it, so validate_only refuses what the real change would refuse."""
    node = str(admin.describe_cluster().result(timeout=TIMEOUT).controller.id)
    entries = [ConfigEntry("max.connections.per.ip", "0", incremental_operation=AlterConfigOpType.SET)]
    for validate_only in (True, False):
        (future,) = admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, node,
                                                                    incremental_configs=entries)],
                                                    validate_only=validate_only).values()
        e = alter_error(future)
        assert e.code() == KafkaError.INVALID_REQUEST
        assert e.str() == ("requirement failed: max.connections.per.ip can be set to zero only if "
                           "max.connections.per.ip.overrides property is set.")
    assert describe(admin, ResourceType.BROKER, node)["max.connections.per.ip"].value == "2147483647"


@pytest.mark.needs_private_broker
def test_broker_properties_kshare_does_not_define_are_described_as_sensitive(broker_factory):
    """Kafka's KafkaConfig.maybeSensitive: a property whose type is unknown is sensitive (value
    and synonym values null), so secrets from a Kafka server.properties are not handed out; a
    listener override takes the type of its base property."""
    b = broker_factory({"ssl.keystore.password": "s3cret", "sasl.jaas.config": 'pw="s3cret";',
                        "listener.name.plaintext.max.connections": "500"})
    admin = _admin(b.bootstrap)
    node = str(admin.describe_cluster().result(timeout=TIMEOUT).controller.id)
    configs = describe(admin, ResourceType.BROKER, node)  # librdkafka asks for synonyms
    for name in ("ssl.keystore.password", "sasl.jaas.config"):
        entry = configs[name]
        assert entry.value is None and entry.is_sensitive, name
        assert entry.source == ConfigSource.STATIC_BROKER_CONFIG.value
        assert [s.value for s in entry.synonyms.values()] == [None]
    listener = configs["listener.name.plaintext.max.connections"]
    assert listener.value == "500" and not listener.is_sensitive
    with RawClient(b.bootstrap) as c:
        resp = c.request(32, 4, DescribeConfigsRequest(resources=[DescribeConfigsResource(
            4, node, ["listener.name.plaintext.max.connections", "sasl.jaas.config"])], include_synonyms=True))
    assert {e.name: e.config_type for e in resp.results[0].configs} == {
        "listener.name.plaintext.max.connections": 3, "sasl.jaas.config": 0}  # INT; UNKNOWN


@pytest.mark.needs_private_broker
def test_cluster_default_broker_configs_are_described_as_stored(broker_factory):
    """ConfigHelper.describeConfigs describes BROKER "" from currentDynamicDefaultConfigs, a map of
    the strings as sent (createBrokerConfigEntry passes a String value through), while this
    broker's own resource shows KafkaConfig's parsed value."""
    b = broker_factory()
    admin = _admin(b.bootstrap)
    node = str(admin.describe_cluster().result(timeout=TIMEOUT).controller.id)
    with RawClient(b.bootstrap) as c:
        (done,) = c.request(44, 1, IncrementalAlterConfigsRequest(resources=[IAlterResource(
            4, "", [IAlterable("log.retention.ms", 0, " 0100")])])).responses
        assert done.error_code == 0
        resp = c.request(32, 4, DescribeConfigsRequest(resources=[
            DescribeConfigsResource(4, "", ["log.retention.ms"]),
            DescribeConfigsResource(4, node, ["log.retention.ms"])], include_synonyms=True))
    default, own = ([(e.value, e.config_source, [(s.value, s.source) for s in e.synonyms]) for e in r.configs]
                    for r in resp.results)
    assert default == [(" 0100", 3, [(" 0100", 3)])]
    assert own == [("100", 3, [(" 0100", 3), ("168", 5)])]
