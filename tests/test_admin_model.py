"""In-process tests of the config model behind the admin APIs: typed parsing with Kafka's
messages, incremental operations, value/source/synonym resolution, the effect of changes on
the logs' LogConfig, and persistence of dynamic broker configs."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.broker import Broker
from broker.config import DYNAMIC_CONFIG_FILE, INT, LIST, LONG, BrokerConfig, ConfigError
from broker.config_resources import APPEND, DELETE, SET, SUBTRACT, AlterOp, apply_ops
from broker.context import RequestContext
from broker.handlers import REGISTRY
from broker.log import LogConfig, MemoryLogStore
from broker.topic_configs import (
    TOPIC_CONFIGS,
    creation_topic_configs,
    describe_topic_configs,
    parse_typed,
    validate_topic_configs,
)
from protocol.errors import KafkaError
from protocol.messages.create_topics_request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from protocol.messages.incremental_alter_configs_request import AlterableConfig, AlterConfigsResource
from protocol.messages.incremental_alter_configs_request import IncrementalAlterConfigsRequest


def test_parse_typed_uses_kafka_messages():
    assert parse_typed("x", LONG, " 42 ") == 42
    for raw in ("1_000", "4.0", "", "0x10"):
        with pytest.raises(ConfigError, match=f"^Invalid value {raw} for configuration x: Not a number of type LONG$"):
            parse_typed("x", LONG, raw)
    with pytest.raises(ConfigError, match="Not a number of type INT"):
        parse_typed("x", INT, str(2**31))
    assert parse_typed("x", LIST, " a, b ,c ") == ["a", "b", "c"]
    assert parse_typed("x", LIST, "") == []


def test_topic_config_table_is_kafka_4_2():
    assert len(TOPIC_CONFIGS) == 34  # LogConfig's 33 and its internal internal.segment.bytes (Kafka 4.1+)
    assert TOPIC_CONFIGS["internal.segment.bytes"].internal
    validate_topic_configs({"internal.segment.bytes": "100"}, BrokerConfig())  # no minimum
    assert LogConfig.from_properties({}, {"segment.bytes": "2000000", "internal.segment.bytes": "100"}).segment_bytes \
        == 100  # Kafka's LogConfig.segmentSize: the internal value wins when set
    assert list(TOPIC_CONFIGS) == sorted(TOPIC_CONFIGS)
    assert "message.format.version" not in TOPIC_CONFIGS and "message.downconversion.enable" not in TOPIC_CONFIGS
    with pytest.raises(KafkaError, match="Value must be at least 1048576"):
        validate_topic_configs({"segment.bytes": "1048575"}, BrokerConfig())
    with pytest.raises(ConfigError, match="log.segment.bytes: Value must be at least 1048576"):
        BrokerConfig({"log.segment.bytes": "1048575"})
    with pytest.raises(KafkaError, match="Value must be between 1 and 9 or equal to -1"):
        validate_topic_configs({"compression.gzip.level": "0"}, BrokerConfig())
    with pytest.raises(KafkaError, match="Value must be no more than 1"):
        validate_topic_configs({"min.cleanable.dirty.ratio": "1.5"}, BrokerConfig())
    validate_topic_configs({"leader.replication.throttled.replicas": "0:1,1:1", "cleanup.policy": ""}, BrokerConfig())


def test_retention_synonyms_follow_kafka():
    hours = BrokerConfig({"log.retention.hours": "2"})
    (entry,) = describe_topic_configs({}, hours, ["retention.ms"])
    # value from log.retention.hours, but Kafka's synonym list starts at log.retention.ms, so it is empty
    assert (entry.value, entry.source, entry.synonyms) == ("7200000", 5, ())
    assert dict((n, (v, s)) for n, v, s in creation_topic_configs({}, hours))["retention.ms"] == ("7200000", 4)

    ms = BrokerConfig({"log.retention.ms": "5000", "log.retention.hours": "2"})
    (entry,) = describe_topic_configs({"retention.ms": "7"}, ms, ["retention.ms"])
    assert entry.value == "7" and entry.source == 1
    assert entry.synonyms == (("retention.ms", "7", 1), ("log.retention.ms", "5000", 4),
                              ("log.retention.hours", "2", 4), ("log.retention.hours", "168", 5))



def test_a_negative_broker_retention_is_shown_as_kafka_shows_it():
    """DescribeConfigs shows the topic's LogConfig value, where Kafka's logRetentionTimeMillis
    made any negative broker retention -1; CreateTopics converts the synonym's string as
    KafkaConfigSchema does, a plain product for hours and minutes."""
    for props, created in (({"log.retention.ms": "-5"}, "-5"), ({"log.retention.minutes": "-3"}, "-180000"),
                           ({"log.retention.hours": "-2"}, "-7200000")):
        cfg = BrokerConfig(props)
        (entry,) = describe_topic_configs({}, cfg, ["retention.ms"])
        assert entry.value == "-1", props
        assert dict((n, (v, s)) for n, v, s in creation_topic_configs({}, cfg))["retention.ms"] == (created, 4)

ops = st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=3).map(",".join)


@given(st.lists(st.sampled_from(["a", "b", "c"]), unique=True), ops)
def test_append_then_subtract_restores_missing_items(start, values):
    current = {"l": ",".join(start)} if start else {}
    types, defaults = (lambda n: LIST), (lambda n: None)
    appended = apply_ops(current, [AlterOp("l", APPEND, values)], types, defaults)
    items = appended["l"].split(",") if appended["l"] else []
    assert len(items) == len(set(items))  # APPEND never duplicates
    assert set(items) == set(start) | set(values.split(","))
    added = [v for v in dict.fromkeys(values.split(",")) if v not in start]
    back = apply_ops(appended, [AlterOp("l", SUBTRACT, ",".join(added))], types, defaults) if added else appended
    assert (back["l"].split(",") if back["l"] else []) == start


def test_ops_start_from_the_default_and_delete():
    types = {"cleanup.policy": LIST, "retention.ms": LONG}.get
    new = apply_ops({"retention.ms": "5"}, [AlterOp("cleanup.policy", APPEND, "compact"),
                                            AlterOp("retention.ms", DELETE, None)], types, lambda n: "delete")
    assert new == {"cleanup.policy": "delete,compact"}
    with pytest.raises(KafkaError, match="^Can't SUBTRACT to key retention.ms because its type is not LIST.$"):
        apply_ops({}, [AlterOp("retention.ms", SUBTRACT, "1")], types, lambda n: None)
    assert apply_ops({}, [AlterOp("x", SET, "1")], types, lambda n: None) == {"x": "1"}


def _broker(tmp_path) -> Broker:
    cfg = BrokerConfig({"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0"})
    return Broker(cfg, store=MemoryLogStore())


def _call(broker, api_key, version, request):
    ctx = RequestContext(broker, None, api_key, version, 1, "test")
    return asyncio.run(REGISTRY[api_key].handle(ctx, request))


def test_config_changes_reach_the_logs(tmp_path):
    b = _broker(tmp_path)
    resp = _call(b, 19, 7, CreateTopicsRequest(topics=[CreatableTopic(
        name="t", num_partitions=2, replication_factor=-1,
        configs=[CreatableTopicConfig("retention.ms", "1000"), CreatableTopicConfig("max.message.bytes", "2000")])]))
    assert resp.topics[0].error_code == 0
    assert {b.store.get("t", p).config.retention_ms for p in (0, 1)} == {1000}
    assert b.store.get("t", 1).config.max_message_bytes == 2000

    resp = _call(b, 44, 1, IncrementalAlterConfigsRequest(resources=[
        AlterConfigsResource(2, "t", [AlterableConfig("retention.ms", DELETE, None),
                                      AlterableConfig("cleanup.policy", APPEND, "compact")]),
        AlterConfigsResource(4, "", [AlterableConfig("log.retention.ms", SET, "60000")]),
    ]))
    assert [r.error_code for r in resp.responses] == [0, 0]
    log_cfg = b.store.get("t", 0).config
    assert (log_cfg.retention_ms, log_cfg.cleanup_policy, log_cfg.max_message_bytes) == (60000, "delete,compact", 2000)

    # a failing resource changes nothing, even its valid operations
    resp = _call(b, 44, 1, IncrementalAlterConfigsRequest(resources=[AlterConfigsResource(2, "t", [
        AlterableConfig("max.message.bytes", SET, "3000"), AlterableConfig("retention.ms", SET, "-5")])]))
    assert resp.responses[0].error_code == 40
    assert b.store.get("t", 0).config.max_message_bytes == 2000


def test_dynamic_broker_configs_persist(tmp_path):
    b = _broker(tmp_path)
    resp = _call(b, 44, 1, IncrementalAlterConfigsRequest(resources=[
        AlterConfigsResource(4, str(b.node_id), [AlterableConfig("log.retention.ms", SET, "1234")]),
        AlterConfigsResource(4, "", [AlterableConfig("log.retention.ms", SET, "999"),
                                     AlterableConfig("message.max.bytes", SET, "3000")]),
    ]))
    assert [r.error_code for r in resp.responses] == [0, 0]
    assert b.config["log.retention.ms"] == 1234 and b.config["message.max.bytes"] == 3000

    reloaded = BrokerConfig({"log.dirs": str(tmp_path)})
    assert reloaded["log.retention.ms"] == 1234 and reloaded["message.max.bytes"] == 3000
    assert (reloaded.source("log.retention.ms"), reloaded.source("message.max.bytes")) == (2, 3)
    assert reloaded.dynamic_default == {"log.retention.ms": "999", "message.max.bytes": "3000"}

    # a persisted value that no longer validates is skipped, not fatal
    path = tmp_path / DYNAMIC_CONFIG_FILE
    data = json.loads(path.read_text())
    data["broker"]["message.max.bytes"] = "zero"
    path.write_text(json.dumps(data))
    assert BrokerConfig({"log.dirs": str(tmp_path)})["message.max.bytes"] == 3000

    # so is one that is not dynamic (any more), as Kafka's DynamicBrokerConfig.fromPersistentProps
    # drops them: it would otherwise stay, and not even DELETE could remove it
    data["broker"] = {"num.partitions": "7", "log.dirs": "/elsewhere"}
    path.write_text(json.dumps(data))
    reloaded = BrokerConfig({"log.dirs": str(tmp_path)})
    assert reloaded.dynamic == {} and reloaded["num.partitions"] == 1


def test_num_partitions_is_read_only_as_in_kafka(tmp_path):
    """Kafka 4.2 refuses num.partitions dynamically (DynamicBrokerConfig.ALL_DYNAMIC_CONFIGS
    does not contain it); automation that works here must keep working after moving to Kafka."""
    b = _broker(tmp_path)
    resp = _call(b, 44, 1, IncrementalAlterConfigsRequest(resources=[
        AlterConfigsResource(4, "", [AlterableConfig("num.partitions", SET, "3")])]))
    assert [(r.error_code, r.error_message) for r in resp.responses] == [
        (42, "Cannot update these configs dynamically: [num.partitions]")]
    assert b.config["num.partitions"] == 1


def test_raw_properties_follow_dynamic_changes_and_callers_get_their_own_copy(tmp_path):
    """They are rendered once per change of the values (each topic's LogConfig starts from them)."""
    config = BrokerConfig({"log.dirs": str(tmp_path), "log.retention.ms": "1000"})
    first = config.raw_properties()
    assert first["log.retention.ms"] == "1000"
    first["log.retention.ms"] = "mine"
    assert config.raw_properties()["log.retention.ms"] == "1000"
    config.set_dynamic({"log.retention.ms": "2000"})
    assert config.raw_properties()["log.retention.ms"] == "2000"
    config.set_dynamic({"log.retention.ms": None})
    assert config.raw_properties()["log.retention.ms"] == "1000"


def test_admin_changes_the_disk_refuses_answer_storage_error_and_change_nothing(tmp_path, monkeypatch):
    """A full disk refusing the registry (``kshare-topics.json``), the dynamic broker configs or
    the group configs: CreateTopics, CreatePartitions, DeleteTopics and IncrementalAlterConfigs
    answer KAFKA_STORAGE_ERROR (as Kafka maps a KafkaStorageException) and nothing changes,
    neither in memory nor on disk. These used to raise the OSError, which closed the
    connection without an answer, after the change was made in memory but not persisted."""
    import errno
    import os

    from protocol.messages.create_partitions_request import CreatePartitionsRequest, CreatePartitionsTopic
    from protocol.messages.delete_topics_request import DeleteTopicsRequest

    b = _broker(tmp_path)
    assert _call(b, 19, 7, CreateTopicsRequest(topics=[CreatableTopic(
        name="t", num_partitions=1, replication_factor=-1)])).topics[0].error_code == 0
    files = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path) if (tmp_path / n).is_file()}
    real_open = os.open

    def full(path, flags, *args, **kw):
        if str(path).startswith(str(tmp_path)) and str(path).endswith(".tmp"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", full)
    resp = _call(b, 19, 7, CreateTopicsRequest(topics=[CreatableTopic(
        name="u", num_partitions=1, replication_factor=-1)]))
    assert resp.topics[0].error_code == 56 and "No space left" in resp.topics[0].error_message
    resp = _call(b, 37, 3, CreatePartitionsRequest(topics=[CreatePartitionsTopic(name="t", count=3, assignments=None)], timeout_ms=1000))
    assert resp.results[0].error_code == 56
    resp = _call(b, 20, 6, DeleteTopicsRequest(topic_names=["t"], timeout_ms=1000))
    assert [(r.name, r.error_code) for r in resp.responses] == [("t", 56)]
    resp = _call(b, 44, 1, IncrementalAlterConfigsRequest(resources=[
        AlterConfigsResource(2, "t", [AlterableConfig("retention.ms", SET, "5")]),
        AlterConfigsResource(4, "", [AlterableConfig("log.retention.ms", SET, "60000")]),
        AlterConfigsResource(32, "g", [AlterableConfig("share.record.lock.duration.ms", SET, "20000")]),
    ]))
    assert [r.error_code for r in resp.responses] == [56, 56, 56]
    monkeypatch.undo()
    t = b.topics.get("t")
    assert b.topics.get("u") is None and (t.partitions, t.configs) == (1, {})
    assert b.config["log.retention.ms"] is None and b.store.get("t", 0).config.retention_ms == 604800000
    assert b.group_coordinator.group_configs("g") == {}
    assert {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path) if (tmp_path / n).is_file()} == files
