"""Group-level configs: validation messages, effective values, DescribeConfigs entries,
and the broker property table they derive from."""

import pytest

from coordinator.group import broker_defaults as bd
from coordinator.group import configs
from coordinator.group.configs import InvalidConfig, describe, effective, validate

ALL_NAMES = [
    "consumer.heartbeat.interval.ms", "consumer.session.timeout.ms", "share.auto.offset.reset",
    "share.heartbeat.interval.ms", "share.isolation.level", "share.record.lock.duration.ms",
    "share.session.timeout.ms", "streams.heartbeat.interval.ms", "streams.initial.rebalance.delay.ms",
    "streams.num.standby.replicas", "streams.session.timeout.ms",
]


def error(props, broker=None):
    with pytest.raises(InvalidConfig) as e:
        validate(props, broker or {})
    return str(e.value)


def test_valid_configs_pass():
    validate({}, {})
    validate({"share.session.timeout.ms": "50000", "share.heartbeat.interval.ms": " 6000 ",
              "share.record.lock.duration.ms": "60000", "share.auto.offset.reset": "by_duration:PT1H",
              "share.isolation.level": "read_committed", "streams.num.standby.replicas": "2",
              "streams.initial.rebalance.delay.ms": "0"}, {})


@pytest.mark.parametrize("props, message", [
    ({"share.unknown": "1"}, "Unknown group config name: share.unknown"),
    ({"group.share.session.timeout.ms": "1"}, "Unknown group config name: group.share.session.timeout.ms"),
    ({"share.session.timeout.ms": "abc"},
     "Invalid value abc for configuration share.session.timeout.ms: Not a number of type INT"),
    ({"share.session.timeout.ms": "1.5"},
     "Invalid value 1.5 for configuration share.session.timeout.ms: Not a number of type INT"),
    ({"share.session.timeout.ms": "2147483648"},
     "Invalid value 2147483648 for configuration share.session.timeout.ms: Not a number of type INT"),
    ({"share.heartbeat.interval.ms": "0"},
     "Invalid value 0 for configuration share.heartbeat.interval.ms: Value must be at least 1"),
    ({"share.record.lock.duration.ms": "999"},
     "Invalid value 999 for configuration share.record.lock.duration.ms: Value must be at least 1000"),
    ({"share.isolation.level": "READ_COMMITTED"},
     "Invalid value READ_COMMITTED for configuration share.isolation.level: "
     "String must be one of: read_committed, read_uncommitted"),
    ({"share.heartbeat.interval.ms": "4999"},
     "share.heartbeat.interval.ms must be greater than or equal to group.share.min.heartbeat.interval.ms"),
    ({"share.heartbeat.interval.ms": "15001"},
     "share.heartbeat.interval.ms must be less than or equal to group.share.max.heartbeat.interval.ms"),
    ({"share.session.timeout.ms": "44999"},
     "share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms"),
    ({"share.session.timeout.ms": "60001"},
     "share.session.timeout.ms must be less than or equal to group.share.max.session.timeout.ms"),
    ({"share.record.lock.duration.ms": "14999"},
     "share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
    ({"share.record.lock.duration.ms": "60001"},
     "share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms"),
    ({"consumer.session.timeout.ms": "1000"},
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ({"streams.num.standby.replicas": "3"},
     "streams.num.standby.replicas must be less than or equal to group.streams.max.standby.replicas"),
    ({"streams.initial.rebalance.delay.ms": "-1"},
     "Invalid value -1 for configuration streams.initial.rebalance.delay.ms: Value must be at least 0"),
])
def test_validation_messages(props, message):
    assert error(props) == message


def test_session_timeout_must_exceed_heartbeat_interval():
    broker = {"group.share.max.heartbeat.interval.ms": "60000", "group.share.min.session.timeout.ms": "10000"}
    props = {"share.session.timeout.ms": "20000", "share.heartbeat.interval.ms": "20000"}
    assert error(props, broker) == "share.session.timeout.ms must be greater than share.heartbeat.interval.ms"


def test_unset_configs_take_broker_values_when_validating():
    broker = {"group.share.min.session.timeout.ms": "50000", "group.share.session.timeout.ms": "55000"}
    validate({"share.heartbeat.interval.ms": "6000"}, broker)  # the session timeout comes from the broker
    assert "greater than or equal to group.share.min.session.timeout.ms" in error(
        {"share.session.timeout.ms": "45000"}, broker)


@pytest.mark.parametrize("value, expected", [
    ("latest", "latest"),
    ("earliest", "earliest"),
    ("by_duration:PT1H", ("by_duration", 3_600_000)),
    ("by_duration:P2D", ("by_duration", 2 * 86_400_000)),
    ("by_duration:P1DT2H3M4.5S", ("by_duration", 93_784_500)),
    ("by_duration:pt0.0001s", ("by_duration", 0)),
    ("by_duration:PT0S", ("by_duration", 0)),
    ("by_duration:-PT-1H", ("by_duration", 3_600_000)),
    ("by_duration:PT1,25S", ("by_duration", 1_250)),
])
def test_auto_offset_reset_values(value, expected):
    validate({"share.auto.offset.reset": value}, {})
    assert effective({"share.auto.offset.reset": value}, {}).share_auto_offset_reset == expected


@pytest.mark.parametrize("value", [
    "LATEST", "Earliest", "none", "by_duration", "by_duration:", "by_duration:P", "by_duration:PT",
    "by_duration:P1W", "by_duration:-PT1H", "by_duration:PT-1S", "by_duration:PT.5S", "by_duration:1H",
    "by_duration:P99999999999999999999D",
])
def test_auto_offset_reset_rejections(value):
    assert error({"share.auto.offset.reset": value}) == (
        f"Invalid value {value} for configuration share.auto.offset.reset: Invalid value `{value}` for "
        "configuration share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the "
        "format 'by_duration:<PnDTnHnMn.nS.>'.")


def test_effective_values():
    e = effective({}, {})
    assert (e.share_session_timeout_ms, e.share_heartbeat_interval_ms, e.share_record_lock_duration_ms) == (
        45000, 5000, 30000)
    assert (e.share_auto_offset_reset, e.share_isolation_level) == ("latest", "read_uncommitted")
    assert (e.streams_num_standby_replicas, e.streams_initial_rebalance_delay_ms) == (0, 3000)
    e = effective({"share.record.lock.duration.ms": "20000"}, {"group.share.heartbeat.interval.ms": "7000"})
    assert (e.share_record_lock_duration_ms, e.share_heartbeat_interval_ms) == (20000, 7000)
    # a stored value outside bounds the broker tightened later is used as stored (Kafka 4.2);
    # garbage falls back to the broker value
    e = effective({"share.session.timeout.ms": "59000", "share.heartbeat.interval.ms": "x",
                   "share.record.lock.duration.ms": "10000"},
                  {"group.share.max.session.timeout.ms": "50000",
                   "group.share.min.record.lock.duration.ms": "15000"})
    assert (e.share_session_timeout_ms, e.share_heartbeat_interval_ms, e.share_record_lock_duration_ms) == (
        59000, 5000, 10000)


def test_describe_defaults():
    entries = describe({}, {})
    assert [e.name for e in entries] == ALL_NAMES
    by_name = {e.name: e for e in entries}
    e = by_name["share.session.timeout.ms"]
    assert (e.value, e.source, e.read_only, e.is_sensitive, e.config_type, e.synonyms, e.documentation) == (
        "45000", 5, False, False, 3, [], None)
    assert by_name["share.auto.offset.reset"].config_type == 2
    assert by_name["share.auto.offset.reset"].value == "latest"


def test_describe_sources_and_synonyms():
    """Kafka 4.2's ConfigHelper.createGroupConfigEntry: the config itself first (GROUP_CONFIG when
    set, else DEFAULT_CONFIG with the value in use), then the broker properties of the bare
    group config name; the broker's group.-prefixed property is no synonym (that is 4.3)."""
    entries = describe({"share.session.timeout.ms": "50000", "share.isolation.level": "read_committed"},
                       {"group.share.heartbeat.interval.ms": "6000", "group.share.record.lock.duration.ms": "20000",
                        "share.record.lock.duration.ms": "17000"},
                       include_synonyms=True, include_docs=True,
                       dynamic_broker_config={"group.share.record.lock.duration.ms": "25000"})
    by_name = {e.name: e for e in entries}
    e = by_name["share.session.timeout.ms"]
    assert (e.value, e.source) == ("50000", 8)
    assert [(s.name, s.value, s.source) for s in e.synonyms] == [("share.session.timeout.ms", "50000", 8)]
    e = by_name["share.heartbeat.interval.ms"]
    assert (e.value, e.source) == ("6000", 5)
    assert [(s.name, s.value, s.source) for s in e.synonyms] == [("share.heartbeat.interval.ms", "6000", 5)]
    e = by_name["share.record.lock.duration.ms"]
    assert (e.value, e.source) == ("25000", 5)
    assert [(s.name, s.value, s.source) for s in e.synonyms] == [
        ("share.record.lock.duration.ms", "25000", 5), ("share.record.lock.duration.ms", "17000", 4)]
    e = by_name["share.isolation.level"]
    assert (e.value, e.source) == ("read_committed", 8)
    assert [(s.name, s.value, s.source) for s in e.synonyms] == [("share.isolation.level", "read_committed", 8)]
    assert [(s.name, s.value, s.source) for s in by_name["share.auto.offset.reset"].synonyms] == [
        ("share.auto.offset.reset", "latest", 5)]
    assert all(e.documentation for e in entries)


def test_describe_selected_names():
    entries = describe({}, {}, names=["share.auto.offset.reset", "not.a.config"])
    assert [e.name for e in entries] == ["share.auto.offset.reset"]


def test_group_config_table_matches_broker_table():
    for definition in configs.GROUP_CONFIGS:
        if definition.name not in ("share.auto.offset.reset", "share.isolation.level"):
            assert definition.broker_synonym == "group." + definition.name
            assert definition.default == bd.BROKER_CONFIG_DEFS["group." + definition.name].default
    assert sorted(configs.config_names()) == ALL_NAMES


def test_broker_values_and_startup_checks():
    assert bd.broker_value("group.share.max.size", {}) == 200
    assert bd.broker_value("group.share.max.size", {"group.share.max.size": "10"}) == 10
    with pytest.raises(ValueError, match="Value must be no more than 1000"):
        bd.broker_value("group.share.max.size", {"group.share.max.size": "1001"})
    with pytest.raises(ValueError, match="Not a number of type INT"):
        bd.broker_value("group.share.max.size", {"group.share.max.size": "ten"})
    bd.validate_broker_config({})
    with pytest.raises(ValueError, match="group.share.session.timeout.ms must be less than or equal to "
                                         "group.share.max.session.timeout.ms"):
        bd.validate_broker_config({"group.share.session.timeout.ms": "70000"})
    with pytest.raises(ValueError, match="group.share.max.share.sessions must be greater than or equal to "
                                         "group.share.max.size"):
        bd.validate_broker_config({"group.share.max.share.sessions": "10"})


@pytest.mark.parametrize("props, message", [
    # GroupCoordinatorConfig checks a range's bounds before the value, heartbeats before sessions
    ({"group.share.min.heartbeat.interval.ms": "20000", "group.share.min.session.timeout.ms": "70000"},
     "group.share.max.heartbeat.interval.ms must be greater than or equal to group.share.min.heartbeat.interval.ms"),
    ({"group.consumer.heartbeat.interval.ms": "50000", "group.consumer.max.heartbeat.interval.ms": "60000",
      "group.share.session.timeout.ms": "70000"},
     "group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms"),
    # ... and all of it before ShareGroupConfig's record lock and session checks
    ({"group.share.record.lock.duration.ms": "70000", "group.streams.num.standby.replicas": "3"},
     "group.streams.num.standby.replicas must be less than or equal to group.streams.max.standby.replicas"),
    ({"group.share.record.lock.duration.ms": "10000"},
     "group.share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
    ({"group.share.record.lock.duration.ms": "70000"},
     "group.share.max.record.lock.duration.ms must be greater than or equal to group.share.record.lock.duration.ms"),
    ({"group.share.assignors": "simple,simple"},
     "Configuration 'group.share.assignors' values must not be duplicated."),
    ({"group.share.assignors": " "},
     "Configuration 'group.share.assignors' must not be empty. Valid values include: any non-empty value"),
    ({"group.share.assignors": "simple,range"}, "Class range cannot be found"),
])
def test_broker_startup_checks_in_kafkas_order(props, message):
    with pytest.raises(ValueError) as e:
        bd.validate_broker_config(props)
    assert str(e.value) == message


def test_share_assignor_by_its_kafka_class_name():
    """Kafka loads group.share.assignors entries other than "simple" by class name, so the
    built-in assignor's own class is accepted (a lone one; with "simple" it makes two)."""
    bd.validate_broker_config({"group.share.assignors": "org.apache.kafka.coordinator.group.assignor.SimpleAssignor"})
    with pytest.raises(ValueError) as e:
        bd.validate_broker_config(
            {"group.share.assignors": "simple, org.apache.kafka.coordinator.group.assignor.SimpleAssignor"})
    assert str(e.value) == "group.share.assignors must contain exactly one assignor, but found 2"
