"""Reading server.properties, and Kafka's KafkaConfig cross-property checks (validateValues) for a
start-up config, a dynamic change, and dynamic configs stored before a check existed."""

import json

import pytest

from broker.config import DYNAMIC_CONFIG_FILE, BrokerConfig, ConfigError, read_properties
from broker.config_resources import BROKER, DELETE, PROVIDERS, SET, AlterOp
from protocol.errors import ErrorCode, KafkaError


RETENTION = "requirement failed: log.retention.ms must be unlimited (-1) or, greater than or equal to 1"


@pytest.mark.parametrize("props, message", [
    ({"log.retention.ms": "0"}, RETENTION),
    ({"log.retention.minutes": "0"}, RETENTION),
    ({"log.roll.ms": "-3"}, "requirement failed: log.roll.ms must be greater than or equal to 1"),
    ({"log.roll.jitter.ms": "-1"}, "requirement failed: log.roll.jitter.ms must be greater than or equal to 0"),
    ({"max.connections.per.ip": "0"}, "requirement failed: max.connections.per.ip can be set to zero only if "
                                      "max.connections.per.ip.overrides property is set."),
    ({"node.id": "2", "broker.id": "3"}, "You must set `node.id` to the same value as `broker.id`."),
])
def test_cross_property_checks(props, message):
    with pytest.raises(ConfigError) as e:
        BrokerConfig(props)
    assert str(e.value) == message


def test_values_kafka_accepts():
    # a negative retention means unlimited; the finer setting wins over a coarser zero
    BrokerConfig({"log.retention.ms": "-5"})
    BrokerConfig({"log.retention.hours": "0", "log.retention.ms": "1000"})
    BrokerConfig({"connections.max.idle.ms": "-1"})


def test_broker_id_and_node_id_are_synonyms():
    cfg = BrokerConfig({"broker.id": "5"})
    assert (cfg["node.id"], cfg["broker.id"]) == (5, 5)
    cfg = BrokerConfig({"node.id": "7"})
    assert (cfg["node.id"], cfg["broker.id"]) == (7, 7)


def test_a_dynamic_change_gets_the_same_checks():
    cfg = BrokerConfig({})
    with pytest.raises(ConfigError, match="requirement failed: log.retention.ms must be unlimited"):
        cfg.set_dynamic({"log.retention.ms": "0"})
    assert cfg["log.retention.ms"] is None


def test_stored_dynamic_configs_the_checks_refuse_are_not_applied(tmp_path):
    (tmp_path / DYNAMIC_CONFIG_FILE).write_text(json.dumps(
        {"version": 1, "broker": {"log.retention.ms": "0"}, "cluster_default": {"log.retention.bytes": "5"}}))
    cfg = BrokerConfig({"log.dirs": str(tmp_path)})
    assert cfg.dynamic == {} and cfg["log.retention.ms"] is None
    assert cfg["log.retention.bytes"] == 5


def test_properties_files_read_as_java_reads_them(tmp_path):
    """Kafka loads server.properties with java.util.Properties: a blank ends a key too, escapes
    are decoded, and only an odd number of trailing backslashes continues a line."""
    path = tmp_path / "server.properties"
    path.write_text("# a comment\\\n"
                    "num.partitions 3\n"
                    "log.dirs=/data/a\\\\b\n"
                    "  key\\ with\\=eq : v1 \n"
                    "listeners=PLAINTEXT://127.0.0.1:9092,\\\n"
                    "    CONTROLLER://127.0.0.1:9093\n"
                    "path=c:\\\\\\\\\n"
                    "uni=\\u0041z\n"
                    "bare\n")
    assert read_properties(path) == {
        "num.partitions": "3", "log.dirs": "/data/a\\b", "key with=eq": "v1 ",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093", "path": "c:\\\\", "uni": "Az",
        "bare": "",
    }
    assert BrokerConfig(read_properties(path))["num.partitions"] == 3
    # ISO 8859-1, and lines end only at \r, \n or \r\n (a form feed or U+2028 is data)
    path.write_bytes(b"a=caf\xe9\r\nb=x\x0cy\rc=1\xe2\x80\xa82\n")
    assert read_properties(path) == {"a": "caf\u00e9", "b": "x\x0cy", "c": "1\u00e2\u0080\u00a82"}


def test_log_dirs_are_lists_as_in_kafka_4_2(tmp_path):
    """KIP-1161 made log.dir and log.dirs LIST configs without repeats: DescribeConfigs says LIST
    (7), and an empty or repeated list stops the start with ConfigDef.ValidList's message."""
    from types import SimpleNamespace

    from broker.config_resources import BrokerConfigProvider

    cfg = BrokerConfig({"log.dirs": f"{tmp_path}/a, {tmp_path}/b", "node.id": "4"})
    assert cfg.data_dir == tmp_path / "a"
    broker = SimpleNamespace(config=cfg)
    entries = {n: BrokerConfigProvider._entry(broker, n, per_broker=True)
               for n in ("log.dirs", "log.dir", "broker.id", "node.id")}
    assert {n: (e.type, e.value, e.source) for n, e in entries.items()} == {
        "log.dirs": (7, f"{tmp_path}/a,{tmp_path}/b", 4), "log.dir": (7, "/tmp/kafka-logs", 5),
        "broker.id": (3, "4", 4), "node.id": (3, "4", 4)}
    for value, message in (
            ("", "Configuration 'log.dirs' must not be empty. Valid values include: any non-empty value"),
            ("/d,/d", "Configuration 'log.dirs' values must not be duplicated.")):
        with pytest.raises(ConfigError) as e:
            BrokerConfig({"log.dirs": value})
        assert str(e.value) == message


@pytest.mark.parametrize("props, message", [
    ({"listeners": "CLIENT://127.0.0.1:9092", "listener.security.protocol.map": "CLIENT:PLAINTEXT"},
     "requirement failed: inter.broker.listener.name must be a listener name defined in advertised.listeners. "
     "The valid options based on currently configured listeners are CLIENT"),
    ({"advertised.listeners": "PLAINTEXT://h:1,EXTERNAL://h:2",
      "listener.security.protocol.map": "EXTERNAL:PLAINTEXT,PLAINTEXT:PLAINTEXT"},
     "requirement failed: advertised.listeners listener names must be equal to or a subset of the ones defined in "
     "listeners. Found PLAINTEXT,EXTERNAL. The valid options based on the current configuration are PLAINTEXT"),
    # a controller listener is no broker listener (effectiveAdvertisedBrokerListeners)
    ({"listeners": "CLIENT://127.0.0.1:9092,CONTROLLER://:9093", "controller.listener.names": "CONTROLLER",
      "listener.security.protocol.map": "CLIENT:PLAINTEXT,CONTROLLER:PLAINTEXT"},
     "requirement failed: inter.broker.listener.name must be a listener name defined in advertised.listeners. "
     "The valid options based on currently configured listeners are CLIENT"),
    # every listener a controller one: Kafka's validateAdvertisedBrokerListenersNonEmptyForBroker
    ({"listeners": "CONTROLLER://127.0.0.1:9093", "controller.listener.names": "CONTROLLER",
      "listener.security.protocol.map": "CONTROLLER:PLAINTEXT"},
     "requirement failed: There must be at least one broker advertised listener."),
    ({"listeners": "CONTROLLER://127.0.0.1:9093", "controller.listener.names": "CONTROLLER",
      "listener.security.protocol.map": "CONTROLLER:PLAINTEXT", "process.roles": "broker,controller"},
     "requirement failed: There must be at least one broker advertised listener. Perhaps all listeners appear in "
     "controller.listener.names?"),
    ({"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"},
     "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."),
])
def test_listener_name_checks(props, message):
    with pytest.raises(ConfigError) as e:
        BrokerConfig(props)
    assert str(e.value) == message


def test_listener_names_kafka_accepts():
    BrokerConfig({"listeners": "CLIENT://127.0.0.1:9092", "listener.security.protocol.map": "CLIENT:PLAINTEXT",
                  "inter.broker.listener.name": "client"})
    BrokerConfig({"advertised.listeners": "plaintext://h:1"})


def test_the_served_listener_is_the_first_broker_listener():
    """Kafka serves clients on its broker listeners only: a controller listener listed first (a
    combined-mode server.properties) is neither opened nor advertised (effectiveAdvertisedBrokerListeners)."""
    cfg = BrokerConfig({"listeners": "CONTROLLER://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092",
                        "controller.listener.names": "CONTROLLER", "process.roles": "broker,controller",
                        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                        "listener.name.plaintext.max.connections": "7"})
    assert cfg.listener_address() == cfg.advertised_address() == ("127.0.0.1", 9092)
    assert cfg.listener_max_connections() == 7


def test_the_advertised_address_is_the_served_listeners():
    """Metadata names the endpoint advertised for the listener a request came in on, not the
    first advertised one; 0.0.0.0 is refused in every broker entry (KafkaConfig.validateValues)."""
    props = {"listeners": "PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093",
             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
             "inter.broker.listener.name": "INTERNAL"}
    cfg = BrokerConfig({**props, "advertised.listeners": "INTERNAL://internal-host:9093,PLAINTEXT://public:9092"})
    assert cfg.advertised_address() == ("public", 9092)
    assert BrokerConfig({**props, "advertised.listeners": "INTERNAL://internal-host:9093"}).advertised_address() \
        == ("127.0.0.1", 9092)
    with pytest.raises(ConfigError, match="cannot use the nonroutable meta-address 0.0.0.0"):
        BrokerConfig({**props, "listeners": "PLAINTEXT://127.0.0.1:9092,INTERNAL://0.0.0.0:9093"})


async def test_a_log_config_change_must_keep_local_retention_within_retention(local):
    """Kafka's DynamicLogConfig.validateReconfiguration, run when a change touches a topic config's
    broker default: a local retention may be neither unlimited nor above a limited retention.
    DynamicBrokerConfig wraps the cause, so the client reads only "Invalid dynamic configuration"."""
    provider = PROVIDERS[BROKER]
    for name, ops in (("1", [AlterOp("log.local.retention.ms", SET, "-1")]),
                      ("", [AlterOp("log.retention.bytes", SET, "100"),
                            AlterOp("log.local.retention.bytes", SET, "101")]),
                      ("1", [AlterOp("log.retention.ms", SET, "1000"),
                             AlterOp("log.local.retention.ms", SET, "1001")])):
        for validate_only in (True, False):
            with pytest.raises(KafkaError) as e:
                provider.incremental_alter(local, name, ops, validate_only)
            assert (e.value.code, e.value.message) == (ErrorCode.INVALID_REQUEST, "Invalid dynamic configuration")
    assert not local.config.dynamic and not local.config.dynamic_default
    provider.incremental_alter(local, "1", [AlterOp("log.retention.ms", SET, "1000"),
                                            AlterOp("log.local.retention.ms", SET, "1000")], False)
    provider.incremental_alter(local, "", [AlterOp("log.retention.ms", SET, "999")], False)  # this broker's wins
    with pytest.raises(KafkaError):
        provider.incremental_alter(local, "1", [AlterOp("log.retention.ms", SET, "999")], False)
    provider.incremental_alter(local, "1", [AlterOp("log.retention.ms", DELETE, None),
                                            AlterOp("log.local.retention.ms", DELETE, None)], False)
    assert (local.config.dynamic, local.config.dynamic_default) == ({}, {"log.retention.ms": "999"})
