"""Admin APIs on the wire with the raw client: the error paths and versions real clients do not
exercise (duplicates, bad configs, manual assignments, topic ids, cursors, batched and SHARE
FindCoordinator keys), checked against Kafka 4.2's codes and messages."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaException, ShareConsumer
from confluent_kafka.admin import AdminClient

from protocol.messages.alter_configs_request import AlterableConfig, AlterConfigsRequest, AlterConfigsResource
from protocol.messages.create_partitions_request import (
    CreatePartitionsAssignment,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from protocol.messages.create_topics_request import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from protocol.messages.delete_topics_request import DeleteTopicsRequest, DeleteTopicState
from protocol.messages.describe_cluster_request import DescribeClusterRequest
from protocol.messages.describe_configs_request import DescribeConfigsRequest, DescribeConfigsResource
from protocol.messages.describe_log_dirs_request import DescribableLogDirTopic, DescribeLogDirsRequest
from protocol.messages.describe_topic_partitions_request import (
    Cursor,
    DescribeTopicPartitionsRequest,
    TopicRequest,
)
from protocol.messages.find_coordinator_request import FindCoordinatorRequest
from protocol.messages.incremental_alter_configs_request import AlterableConfig as IAlterable
from protocol.messages.incremental_alter_configs_request import AlterConfigsResource as IAlterResource
from protocol.messages.incremental_alter_configs_request import IncrementalAlterConfigsRequest
from protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from protocol.primitives import ZERO_UUID
from protocol.uuids import uuid_to_str
from tests.raw_client import RawClient
from tests.test_e2e_share_support import (
    consumer_config,
    create_topic,
    earliest_group,
    has_values,
    poll_until,
    produce,
)

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
FIND_COORDINATOR, DESCRIBE_CLUSTER, DESCRIBE_TOPIC_PARTITIONS, METADATA = 10, 60, 75, 3
DESCRIBE_LOG_DIRS = 35
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
INVALID_REQUEST_TEXT = (
    "This most likely occurs because of a request being malformed by the client library or the message was "
    "sent to an incompatible broker. See the broker logs for more details."
)


@pytest.fixture
def client(broker):
    with RawClient(broker.bootstrap) as c:
        yield c


@pytest.fixture
def node_id(client) -> int:
    return client.request(DESCRIBE_CLUSTER, 0, DescribeClusterRequest()).controller_id


def create(client, *topics, version=7, validate_only=False):
    resp = client.request(CREATE_TOPICS, version, CreateTopicsRequest(topics=list(topics), validate_only=validate_only))
    return {t.name: t for t in resp.topics}, resp


def topic(name, partitions=1, rf=1, configs=None, assignments=None) -> CreatableTopic:
    return CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=rf,
        configs=[CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
        assignments=[CreatableReplicaAssignment(partition_index=p, broker_ids=ids) for p, ids in (assignments or [])],
    )


def metadata(client, name):
    resp = client.request(METADATA, 12, MetadataRequest(topics=[MetadataRequestTopic(name=name)],
                                                        allow_auto_topic_creation=False))
    return resp.topics[0]


# --- Metadata -----------------------------------------------------------------------------------


def test_metadata_topic_ids_from_v12_and_invalid_before(client, topic_name):
    """v12 looks topics up by id. v10-11 carry the id field but Kafka refuses it there, and a null
    name, for the whole request (KafkaApis throws InvalidRequestException and answers with
    MetadataRequest.getErrorResponse: every topic INVALID_REQUEST, a null name as "")."""
    create(client, topic(topic_name))
    known = metadata(client, topic_name).topic_id
    unknown = uuid.uuid4()

    def ask(version, *entries):
        topics = [MetadataRequestTopic(name=n, topic_id=i) for n, i in entries]
        resp = client.request(METADATA, version, MetadataRequest(topics=topics, allow_auto_topic_creation=False))
        return [(t.name, t.topic_id, t.error_code) for t in resp.topics], resp

    rows, _ = ask(12, (None, known), (None, unknown), (None, ZERO_UUID))
    assert rows == [(None, unknown, 100), (topic_name, known, 0)]  # with ids, the rest is ignored
    for version in (10, 11):
        rows, resp = ask(version, (topic_name, ZERO_UUID), (None, ZERO_UUID))
        assert rows == [(topic_name, ZERO_UUID, 42), ("", ZERO_UUID, 42)] and resp.brokers == []
        rows, _ = ask(version, (topic_name, known))
        assert rows == [(topic_name, known, 42)]
        rows, _ = ask(version, (topic_name, ZERO_UUID))
        assert rows == [(topic_name, known, 0)]  # the connection is still served



def test_metadata_for_missing_topics_not_created_validates_names_and_knows_internal_ones(broker_factory):
    """Kafka's getTopicMetadata, when a topic is not auto-created (the broker's setting or the
    request's flag): INVALID_TOPIC_EXCEPTION for a name Topic.validate refuses, else
    UNKNOWN_TOPIC_OR_PARTITION, with IsInternal from Topic.isInternal."""
    b = broker_factory({"auto.create.topics.enable": "false"})
    names = ["bad name!", "a" * 300, "..", "no-such", "__transaction_state"]
    expected = [(n, 17, False) for n in names[:3]] + [("no-such", 3, False), ("__transaction_state", 3, True)]
    with RawClient(b.bootstrap) as c:
        for allow in (True, False):
            resp = c.request(METADATA, 12, MetadataRequest(topics=[MetadataRequestTopic(name=n) for n in names],
                                                           allow_auto_topic_creation=allow))
            assert [(t.name, t.error_code, t.is_internal) for t in resp.topics] == expected
            assert all(t.topic_id == ZERO_UUID and t.partitions == [] for t in resp.topics)


def test_metadata_authorized_operations_cover_topics_that_do_not_exist(client, topic_name):
    """KafkaApis.handleTopicMetadataRequest sets TopicAuthorizedOperations on every topic it
    looked up by name, error entries included (no authorizer: every topic operation); an
    unknown topic id keeps the default."""
    create(client, topic(topic_name))
    resp = client.request(METADATA, 12, MetadataRequest(
        topics=[MetadataRequestTopic(name=n) for n in (topic_name, "no-such", "bad name!")],
        allow_auto_topic_creation=False, include_topic_authorized_operations=True))
    ops = [t.topic_authorized_operations for t in resp.topics]
    assert ops[0] == ops[1] == ops[2] != -2147483648
    assert [t.error_code for t in resp.topics] == [0, 3, 17]
    resp = client.request(METADATA, 12, MetadataRequest(
        topics=[MetadataRequestTopic(name=None, topic_id=uuid.uuid4())],
        allow_auto_topic_creation=False, include_topic_authorized_operations=True))
    assert [(t.error_code, t.topic_authorized_operations) for t in resp.topics] == [(100, -2147483648)]


def test_metadata_does_not_auto_create_what_create_topics_refuses(broker_factory):
    """Auto-creation asks the controller for replication factor -1, which takes
    default.replication.factor: above 1, a one-broker Kafka's controller refuses the topic and
    the metadata keeps answering UNKNOWN_TOPIC_OR_PARTITION (AutoTopicCreationManager)."""
    b = broker_factory({"default.replication.factor": "2"})
    with RawClient(b.bootstrap) as c:
        for _ in range(2):
            resp = c.request(METADATA, 12, MetadataRequest(topics=[MetadataRequestTopic(name="auto-rf2")],
                                                           allow_auto_topic_creation=True))
            assert [(t.name, t.error_code, t.partitions) for t in resp.topics] == [("auto-rf2", 3, [])]
        results, _ = create(c, topic("explicit.rf1", rf=1))
        assert results["explicit.rf1"].error_code == 0
        # The name is checked first (validateNewTopicNames before the replica placement): a
        # collision is still answered INVALID_TOPIC_EXCEPTION at once, as README says.
        resp = c.request(METADATA, 12, MetadataRequest(topics=[MetadataRequestTopic(name="explicit_rf1")],
                                                       allow_auto_topic_creation=True))
        assert [(t.name, t.error_code) for t in resp.topics] == [("explicit_rf1", 17)]


def test_metadata_auto_creates_names_that_collide_in_one_request(client, topic_name):
    """AutoTopicCreationManager asks the controller for every missing name of a Metadata request in
    one CreateTopics, whose names are checked against the topics before it: both are created."""
    names = [topic_name + ".m", topic_name + "_m"]
    resp = client.request(METADATA, 12, MetadataRequest(topics=[MetadataRequestTopic(name=n) for n in names],
                                                        allow_auto_topic_creation=True))
    assert sorted((t.name, t.error_code) for t in resp.topics) == [(n, 0) for n in sorted(names)]


def test_metadata_by_topic_id_ignores_the_names(client, topic_name):
    """KafkaApis.handleTopicMetadataRequest: once a request names a topic id, it answers the ids
    only (unknown ones first, UNKNOWN_TOPIC_ID), looking each up by id even with a name beside it;
    the names are neither answered nor auto-created."""
    create(client, topic(topic_name + "-a"))
    id_a = metadata(client, topic_name + "-a").topic_id
    unknown = uuid.uuid4()
    resp = client.request(METADATA, 12, MetadataRequest(topics=[
        MetadataRequestTopic(name=topic_name + "-new", topic_id=ZERO_UUID),
        MetadataRequestTopic(name=topic_name + "-other", topic_id=id_a),
        MetadataRequestTopic(name=None, topic_id=unknown),
    ], allow_auto_topic_creation=True))
    assert [(t.name, t.topic_id, t.error_code) for t in resp.topics] == [
        (None, unknown, 100), (topic_name + "-a", id_a, 0)]
    assert metadata(client, topic_name + "-new").error_code == 3
    assert metadata(client, topic_name + "-other").error_code == 3


@pytest.mark.parametrize("name, internal", [("__transaction_state", True), ("__cluster_metadata", False)])
def test_metadata_does_not_auto_create_the_transaction_state_or_metadata_log(client, name, internal):
    """A one-broker Kafka cannot create __transaction_state (three replicas by default), and
    kshare has no transactions: auto-created with num.partitions, it would stay with the wrong
    count. Kafka's controller refuses __cluster_metadata, its metadata log."""
    for _ in range(2):
        resp = client.request(METADATA, 12, MetadataRequest(topics=[MetadataRequestTopic(name=name)],
                                                            allow_auto_topic_creation=True))
        assert [(t.name, t.error_code, t.is_internal) for t in resp.topics] == [(name, 3, internal)]


def test_metadata_answers_a_topic_named_twice_once(client, topic_name):
    """Kafka takes the requested names (and ids) as a set."""
    create(client, topic(topic_name))
    known = metadata(client, topic_name).topic_id
    unknown = uuid.uuid4()
    entries = [(topic_name, ZERO_UUID), ("no-such-" + topic_name, ZERO_UUID), (topic_name, ZERO_UUID),
               ("no-such-" + topic_name, ZERO_UUID)]
    resp = client.request(METADATA, 12, MetadataRequest(
        topics=[MetadataRequestTopic(name=n, topic_id=i) for n, i in entries], allow_auto_topic_creation=False))
    assert [(t.name, t.error_code) for t in resp.topics] == [(topic_name, 0), ("no-such-" + topic_name, 3)]
    ids = [known, unknown, known, unknown]
    resp = client.request(METADATA, 12, MetadataRequest(
        topics=[MetadataRequestTopic(name=None, topic_id=i) for i in ids], allow_auto_topic_creation=False))
    assert [(t.topic_id, t.error_code) for t in resp.topics] == [(unknown, 100), (known, 0)]  # unknown ids first

# --- CreateTopics -------------------------------------------------------------------------------

def test_create_topics_v7_result_carries_id_counts_and_configs(client, topic_name):
    results, _ = create(client, topic(topic_name, 2, -1, {"retention.ms": "1000", "cleanup.policy": "compact"}))
    r = results[topic_name]
    assert (r.error_code, r.error_message, r.num_partitions, r.replication_factor) == (0, None, 2, 1)
    assert r.topic_id == metadata(client, topic_name).topic_id != ZERO_UUID
    configs = {c.name: (c.value, c.config_source, c.read_only, c.is_sensitive) for c in r.configs}
    assert [c.name for c in r.configs] == sorted(configs)
    assert configs["retention.ms"] == ("1000", 1, False, False)
    assert configs["cleanup.policy"] == ("compact", 1, False, False)
    assert configs["segment.bytes"] == ("1073741824", 5, False, False)


def test_create_topics_duplicates_and_per_topic_errors(client, topic_name):
    results, resp = create(
        client,
        topic(topic_name + "-dup"), topic(topic_name + "-dup"),
        topic(topic_name + "-ok"),
        topic(topic_name + "-rf2", rf=2),
        topic(topic_name + "-rf0", rf=0),
        topic(topic_name + "-p0", partitions=0),
        topic(topic_name + "-unknown-cfg", configs={"retension.ms": "1"}),
        topic(topic_name + "-null-cfg", configs={"retention.ms": None}),
        topic(topic_name + "-bad-bool", configs={"preallocate": "yes"}),
        topic(topic_name + "-lag", configs={"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}),
        topic(topic_name + "-remote", configs={"remote.storage.enable": "true"}),
        topic("a" * 250),
    )
    assert len(resp.topics) == 11  # 12 topics, one answer for the duplicated name
    expect = {
        "-dup": (42, "Duplicate topic name."),
        "-ok": (0, None),
        "-rf2": (38, "Unable to replicate the partition 2 time(s): The target replication factor of 2 cannot be "
                     "reached because only 1 broker(s) are registered."),
        "-rf0": (38, "Replication factor must be larger than 0, or -1 to use the default value."),
        "-p0": (37, "Number of partitions was set to an invalid non-positive value."),
        "-unknown-cfg": (40, "Unknown topic config name: retension.ms"),
        "-null-cfg": (40, "Null value not supported for topic configs: retention.ms"),
        "-bad-bool": (40, "Invalid value yes for configuration preallocate: Expected value to be either true or false"),
        "-lag": (40, "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"),
        "-remote": (40, "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with "
                        "remote log storage."),
    }
    for suffix, (code, message) in expect.items():
        r = results[topic_name + suffix]
        assert (r.error_code, r.error_message) == (code, message), suffix
    assert results["a" * 250].error_code == 17  # INVALID_TOPIC_EXCEPTION
    for suffix in expect:
        assert metadata(client, topic_name + suffix).error_code == (0 if suffix == "-ok" else 3)

    results, _ = create(client, topic(topic_name + "-ok"))
    r = results[topic_name + "-ok"]
    assert (r.error_code, r.error_message) == (36, f"Topic '{topic_name}-ok' already exists.")


def test_create_topics_collision_and_too_many_partitions(client, topic_name):
    name = topic_name + ".x"
    create(client, topic(name))
    results, _ = create(client, topic(name.replace(".", "_")))
    r = results[name.replace(".", "_")]
    assert (r.error_code, r.error_message) == (17, f"Topic '{name.replace('.', '_')}' collides with existing topic: {name}")

    results, _ = create(client, topic(topic_name + "-a", 6000), topic(topic_name + "-b", 5000))
    assert {(r.error_code, r.error_message) for r in results.values()} == {
        (44, "Excessively large number of partitions per request.")}


def test_create_topics_names_that_collide_in_one_request_are_both_created(client, topic_name):
    """Kafka's controller checks a request's names against the topics before it
    (ReplicationControlManager.validateNewTopicNames on topicsWithCollisionChars, which its records
    only change when replayed), so two names of one request that differ by '.' and '_' are both
    created; either still collides with a later one, until both are deleted."""
    dotted, under = topic_name + ".c", topic_name + "_c"
    results, _ = create(client, topic(dotted), topic(under))
    assert {n: (r.error_code, r.error_message) for n, r in results.items()} == {dotted: (0, None), under: (0, None)}
    client.request(DELETE_TOPICS, 6, DeleteTopicsRequest(topics=[DeleteTopicState(name=dotted, topic_id=ZERO_UUID)],
                                                         timeout_ms=5000))
    results, _ = create(client, topic(dotted))
    assert (results[dotted].error_code, results[dotted].error_message) == (
        17, f"Topic '{dotted}' collides with existing topic: {under}")
    assert metadata(client, under).error_code == 0


def test_create_topics_manual_assignments(client, topic_name, node_id):
    results, _ = create(
        client,
        topic(topic_name, -1, -1, assignments=[(0, [node_id]), (1, [node_id])]),
        topic(topic_name + "-rf", -1, 1, assignments=[(0, [node_id])]),
        topic(topic_name + "-other", -1, -1, assignments=[(0, [node_id + 7])]),
        topic(topic_name + "-twice", -1, -1, assignments=[(0, [node_id, node_id])]),
        topic(topic_name + "-gap", -1, -1, assignments=[(0, [node_id]), (2, [node_id])]),
        topic(topic_name + "-repeat", -1, -1, assignments=[(0, [node_id]), (0, [node_id])]),
    )
    ok = results[topic_name]
    assert (ok.error_code, ok.num_partitions, ok.replication_factor) == (0, 2, 1)
    assert len(metadata(client, topic_name).partitions) == 2
    expect = {
        "-rf": (42, "A manual partition assignment was specified, but replication factor was not set to -1."),
        "-other": (39, f"The manual partition assignment includes broker {node_id + 7}, but no such broker is "
                       "registered."),
        "-twice": (39, f"The manual partition assignment includes the broker {node_id} more than once."),
        "-gap": (39, "partitions should be a consecutive 0-based integer sequence"),
        "-repeat": (39, "Found multiple manual partition assignments for partition 0"),
    }
    for suffix, want in expect.items():
        r = results[topic_name + suffix]
        assert (r.error_code, r.error_message) == want, suffix


def test_create_topics_validate_only(client, topic_name):
    results, _ = create(client, topic(topic_name, 4), validate_only=True)
    r = results[topic_name]
    assert (r.error_code, r.num_partitions, r.replication_factor) == (0, 4, 1)
    assert r.topic_id != ZERO_UUID and len(r.configs) == 34  # with internal.segment.bytes
    assert metadata(client, topic_name).error_code == 3
    results, _ = create(client, topic(topic_name, rf=3), validate_only=True)
    assert results[topic_name].error_code == 38


def test_create_topics_v2_and_v4(client, topic_name):
    for version in (2, 4):
        name = f"{topic_name}-v{version}"
        results, _ = create(client, topic(name, 1), version=version)
        assert results[name].error_code == 0
        assert results[name].configs == []  # v5+ only


# --- DeleteTopics -------------------------------------------------------------------------------

def test_delete_topics_by_id_and_name(client, topic_name):
    create(client, topic(topic_name + "-a"), topic(topic_name + "-b"), topic(topic_name + "-c"))
    id_a, id_b, id_c = (metadata(client, f"{topic_name}-{x}").topic_id for x in "abc")
    unknown = uuid.uuid4()
    resp = client.request(DELETE_TOPICS, 6, DeleteTopicsRequest(topics=[
        DeleteTopicState(name=None, topic_id=id_a),
        DeleteTopicState(name=topic_name + "-c", topic_id=ZERO_UUID),
        DeleteTopicState(name=None, topic_id=unknown),
        DeleteTopicState(name=topic_name + "-missing", topic_id=ZERO_UUID),
        DeleteTopicState(name=topic_name + "-b", topic_id=id_b),
        DeleteTopicState(name=None, topic_id=ZERO_UUID),
    ], timeout_ms=5000))
    got = {(r.name, r.topic_id): (r.error_code, r.error_message) for r in resp.responses}
    assert got == {
        (topic_name + "-a", id_a): (0, None),
        (topic_name + "-c", id_c): (0, None),
        (None, unknown): (100, "This server does not host this topic ID."),
        (topic_name + "-missing", ZERO_UUID): (3, "This server does not host this topic-partition."),
        (topic_name + "-b", id_b): (42, "You may not specify both topic name and topic id."),
        (None, ZERO_UUID): (42, "Neither topic name nor id were specified."),
    }
    assert metadata(client, topic_name + "-a").error_code == 3
    assert metadata(client, topic_name + "-c").error_code == 3
    assert metadata(client, topic_name + "-b").error_code == 0


def test_delete_topics_duplicates_and_alias(client, topic_name):
    create(client, topic(topic_name + "-a"), topic(topic_name + "-b"))
    id_b = metadata(client, topic_name + "-b").topic_id
    resp = client.request(DELETE_TOPICS, 6, DeleteTopicsRequest(topics=[
        DeleteTopicState(name=topic_name + "-a", topic_id=ZERO_UUID),
        DeleteTopicState(name=topic_name + "-a", topic_id=ZERO_UUID),
        DeleteTopicState(name=None, topic_id=id_b),
        DeleteTopicState(name=topic_name + "-b", topic_id=ZERO_UUID),
    ]))
    got = sorted((r.name or "", r.error_code, r.error_message) for r in resp.responses)
    assert got == [
        (topic_name + "-a", 42, "Duplicate topic name."),
        (topic_name + "-b", 42, "The provided topic name maps to an ID that was already supplied."),
    ]
    assert metadata(client, topic_name + "-a").error_code == 0
    assert metadata(client, topic_name + "-b").error_code == 0


def test_delete_topics_v1_by_name(client, topic_name):
    create(client, topic(topic_name))
    resp = client.request(DELETE_TOPICS, 1, DeleteTopicsRequest(topic_names=[topic_name, topic_name + "-no"]))
    assert sorted((r.name, r.error_code) for r in resp.responses) == [(topic_name, 0), (topic_name + "-no", 3)]


@pytest.mark.needs_private_broker
def test_delete_topics_disabled(broker_factory):
    b = broker_factory({"delete.topic.enable": "false"})
    with RawClient(b.bootstrap) as c:
        create(c, topic("keep"))
        for version, code in ((2, 42), (3, 73), (6, 73)):
            req = (DeleteTopicsRequest(topics=[DeleteTopicState(name="keep", topic_id=ZERO_UUID)]) if version >= 6
                   else DeleteTopicsRequest(topic_names=["keep"]))
            resp = c.request(DELETE_TOPICS, version, req)
            assert [(r.name, r.error_code) for r in resp.responses] == [("keep", code)]
        assert metadata(c, "keep").error_code == 0


@pytest.mark.needs_private_broker
def test_coordinator_topics_are_neither_deleted_nor_grown(broker_factory):
    """Deleting ``__consumer_offsets`` or ``__share_group_state`` (by name or id, raw or through
    confluent-kafka's AdminClient, as a clean-up of every listed topic does) or adding partitions
    to them is refused; a share group keeps working and the topics keep their ids and sizes."""
    b = broker_factory()
    internal = ("__consumer_offsets", "__share_group_state")
    with RawClient(b.bootstrap) as c:
        before = {name: metadata(c, name) for name in internal}
        ids = {name: t.topic_id for name, t in before.items()}
        resp = c.request(DELETE_TOPICS, 6, DeleteTopicsRequest(topics=[
            DeleteTopicState(name="__consumer_offsets", topic_id=ZERO_UUID),
            DeleteTopicState(name=None, topic_id=ids["__share_group_state"]),
        ]))
        assert sorted((r.name, r.topic_id, r.error_code, r.error_message) for r in resp.responses) == [
            (name, ids[name], 44, f"Topic {name} holds the share groups' state; kshare does not allow it to be "
                                  "deleted.") for name in internal]
        resp = c.request(DELETE_TOPICS, 1, DeleteTopicsRequest(topic_names=list(internal)))
        assert sorted((r.name, r.error_code) for r in resp.responses) == [(name, 44) for name in internal]
        for validate_only in (True, False):
            resp = c.request(CREATE_PARTITIONS, 3, CreatePartitionsRequest(topics=[
                CreatePartitionsTopic(name=name, count=60, assignments=None) for name in internal
            ], timeout_ms=5000, validate_only=validate_only))
            assert [(r.name, r.error_code, r.error_message) for r in resp.results] == [
                (name, 44, f"Topic {name} holds the share groups' state; kshare does not allow it to be given more "
                           "partitions.") for name in internal]

    admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 3})
    for future in admin.delete_topics(list(internal), operation_timeout=10).values():
        with pytest.raises(KafkaException) as refused:
            future.result(30)
        assert refused.value.args[0].code() == 44  # librdkafka's DeleteTopics v4 has no message
    create_topic(b.bootstrap, "work")
    produce(b.bootstrap, "work", [b"a", b"b"])
    consumer = ShareConsumer(consumer_config(b.bootstrap, earliest_group(b.bootstrap)))
    try:
        consumer.subscribe(["work"])
        poll_until(consumer, has_values({b"a", b"b"}))
    finally:
        consumer.close()
    with RawClient(b.bootstrap) as c:
        after = {name: metadata(c, name) for name in internal}
    assert {n: (t.topic_id, len(t.partitions)) for n, t in after.items()} == {
        n: (t.topic_id, len(t.partitions)) for n, t in before.items()}
    log = b.log()
    assert "Traceback" not in log and "refused to delete __consumer_offsets" in log


# --- CreatePartitions ---------------------------------------------------------------------------

def test_create_partitions_errors(client, topic_name, node_id):
    create(client, topic(topic_name, 1))

    def grow(*topics, validate_only=False, version=3):
        resp = client.request(CREATE_PARTITIONS, version, CreatePartitionsRequest(
            topics=list(topics), timeout_ms=5000, validate_only=validate_only))
        return [(r.name, r.error_code, r.error_message) for r in resp.results]

    assert grow(CreatePartitionsTopic(name=topic_name, count=3, assignments=[
        CreatePartitionsAssignment(broker_ids=[node_id])])) == [
        (topic_name, 39, "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.")]
    assert grow(CreatePartitionsTopic(name=topic_name, count=2, assignments=[
        CreatePartitionsAssignment(broker_ids=[node_id, node_id + 1])])) == [
        (topic_name, 39, f"The manual partition assignment includes broker {node_id + 1}, but no such broker is "
                         "registered.")]
    assert grow(CreatePartitionsTopic(name=topic_name + "-none", count=2, assignments=None)) == [
        (topic_name + "-none", 3, None)]
    assert grow(CreatePartitionsTopic(name=topic_name, count=4, assignments=None),
                CreatePartitionsTopic(name=topic_name, count=4, assignments=None)) == [
        (topic_name, 42, "Duplicate topic name.")]
    assert grow(CreatePartitionsTopic(name=topic_name, count=4, assignments=None), validate_only=True,
                version=0) == [(topic_name, 0, None)]
    assert len(metadata(client, topic_name).partitions) == 1
    assert grow(CreatePartitionsTopic(name=topic_name, count=4, assignments=None)) == [(topic_name, 0, None)]
    assert len(metadata(client, topic_name).partitions) == 4


# --- DescribeConfigs / AlterConfigs / IncrementalAlterConfigs -----------------------------------

def describe_configs(client, *resources, version=4, synonyms=False, docs=False):
    return client.request(DESCRIBE_CONFIGS, version, DescribeConfigsRequest(
        resources=[DescribeConfigsResource(t, n, keys) for t, n, keys in resources],
        include_synonyms=synonyms, include_documentation=docs)).results


def test_internal_segment_bytes_is_a_topic_config_listed_as_kafka_4_2_lists_it(client, topic_name):
    """Kafka 4.1+ defines internal.segment.bytes (LogConfig.defineInternal, KAFKA-19080): topics
    may set it; CreateTopics lists every config key (KafkaConfigSchema), so it too, null when unset;
    DescribeConfigs lists internal configs only when the topic sets them (ConfigHelper.allConfigs)."""
    plain, small = topic_name + "-plain", topic_name + "-small"
    results, _ = create(client, topic(plain), topic(small, configs={"internal.segment.bytes": "100"}))
    entries = {n: {c.name: (c.value, c.config_source) for c in results[n].configs} for n in (plain, small)}
    assert [results[n].error_code for n in (plain, small)] == [0, 0]
    assert entries[plain]["internal.segment.bytes"] == (None, 5)
    assert entries[small]["internal.segment.bytes"] == ("100", 1)
    (described_plain, described_small) = describe_configs(client, (2, plain, None), (2, small, None))
    assert "internal.segment.bytes" not in {c.name for c in described_plain.configs}
    assert [(c.name, c.value, c.config_source) for c in described_small.configs
            if c.name == "internal.segment.bytes"] == [("internal.segment.bytes", "100", 1)]
    assert describe_configs(client, (2, plain, ["internal.segment.bytes"]))[0].configs == []


def test_describe_configs_errors_and_flags(client, topic_name, node_id):
    create(client, topic(topic_name, configs={"retention.ms": "1000"}))
    results = describe_configs(
        client,
        (2, topic_name, ["retention.ms", "segment.ms", "no.such"]),
        (2, topic_name + "-missing", None),
        (2, "bad name!", None),
        (4, str(node_id + 1), None),
        (4, "one", None),
        (16, "subscription", None),
        (8, "", None),
        (8, str(node_id + 1), None),
        (8, "one", None),
        (4, f" {node_id}", None),
        (8, f"{node_id}_0", None),
        synonyms=True, docs=True,
    )
    topic_result = results[0]
    assert topic_result.error_code == 0
    entries = {c.name: c for c in topic_result.configs}
    assert list(entries) == ["retention.ms", "segment.ms"]
    assert entries["retention.ms"].config_type == 5 and entries["retention.ms"].documentation
    assert [(s.name, s.value, s.source) for s in entries["retention.ms"].synonyms] == [("retention.ms", "1000", 1)]
    assert entries["segment.ms"].synonyms == [] and entries["segment.ms"].config_source == 5
    assert [(r.error_code, r.error_message) for r in results[1:]] == [
        (3, ""),
        (17, "Topic name is invalid: 'bad name!' contains one or more characters other than ASCII "
             "alphanumerics, '.', '_' and '-'"),
        (42, f"Unexpected broker id, expected {node_id} or empty string, but received {node_id + 1}"),
        (42, "Broker id must be an integer, but it is: one"),
        (42, "Unsupported resource type: CLIENT_METRICS"),
        (42, "Broker id must not be empty"),
        # ConfigHelper.describeConfigs' own wording for BROKER_LOGGER (not RuntimeLoggerManager's)
        (42, f"Unexpected broker id, expected {node_id} but received {node_id + 1}"),
        (42, "Broker id must be an integer, but it is: one"),
        # resourceNameToBrokerId is Integer.parseInt: no spaces, no '_'
        (42, f"Broker id must be an integer, but it is:  {node_id}"),
        (42, f"Broker id must be an integer, but it is: {node_id}_0"),
    ]

    (plain,) = describe_configs(client, (2, topic_name, ["retention.ms"]), version=1)
    (entry,) = plain.configs
    assert entry.synonyms == [] and entry.config_source == 1 and entry.value == "1000"


def test_describe_configs_unknown_type_fails_every_resource(client, topic_name):
    results = describe_configs(client, (2, topic_name, None), (99, "x", None))
    assert [(r.resource_type, r.error_code, r.error_message) for r in results] == [
        (2, 42, INVALID_REQUEST_TEXT), (99, 42, INVALID_REQUEST_TEXT)]


def test_alter_configs_precheck_errors(client, topic_name):
    create(client, topic(topic_name))
    resp = client.request(ALTER_CONFIGS, 2, AlterConfigsRequest(resources=[
        AlterConfigsResource(2, topic_name, [AlterableConfig("retention.ms", "1"), AlterableConfig("retention.ms", "2")]),
        AlterConfigsResource(2, topic_name + "-x", [AlterableConfig("retention.ms", None)]),
        AlterConfigsResource(8, "1", [AlterableConfig("kshare", "INFO")]),
        AlterConfigsResource(4, "7", []), AlterConfigsResource(4, "7", []),
        AlterConfigsResource(2, "", [AlterableConfig("retention.ms", "5")]),
    ]))
    assert [(r.error_code, r.error_message) for r in resp.responses] == [
        (42, "Error due to duplicate config keys"),
        (42, "Null value not supported for : retention.ms"),
        (42, "Unknown resource type 8"),
        (42, "Each resource must appear at most once."),
        (42, "Each resource must appear at most once."),
        (42, "Default topic resources are not allowed."),
    ]


def test_incremental_alter_broker_config_errors(client, node_id):
    def alter(name, *ops):
        resp = client.request(INCREMENTAL_ALTER_CONFIGS, 1, IncrementalAlterConfigsRequest(
            resources=[IAlterResource(4, name, [IAlterable(n, op, v) for n, op, v in ops])], validate_only=True))
        return resp.responses[0].error_code, resp.responses[0].error_message

    me = str(node_id)
    assert alter(me, ("log.retention.ms", 0, "1000")) == (0, None)  # validate_only: nothing changes
    assert alter(me, ("log.retention.ms", 0, "soon")) == (
        42, "Invalid value soon for configuration log.retention.ms: Not a number of type LONG")
    assert alter(me, ("log.index.interval.bytes", 0, "-1")) == (
        42, "Invalid value -1 for configuration log.index.interval.bytes: Value must be at least 0")
    assert alter(me, ("node.id", 0, "3"), ("listeners", 0, "x")) == (
        42, "Cannot update these configs dynamically: [listeners, node.id]")
    assert alter(me, ("log.retention.ms", 2, "1")) == (
        40, "Config value append is not allowed for config key: log.retention.ms")
    assert alter(str(node_id + 1), ("log.retention.ms", 0, "1")) == (
        42, f"Unexpected broker id, expected {node_id}, but received {node_id + 1}")
    assert alter(me, ("log.retention.ms", 9, "1")) == (42, "Unknown operations type 9")
    assert alter(f"{node_id} ", ("log.retention.ms", 0, "1")) == (
        42, f"Node id must be an integer, but it is: {node_id} ")
    # prepareIncrementalConfigs looks the name up in a Scala map: NoSuchElementException, no message
    assert alter(me, ("no.such.config", 2, "a")) == (-1, None)
    assert alter(me, ("no.such.config", 3, "a")) == (-1, None)
    assert alter(me, ("log.retention.ms", 0, None)) == (42, "Null value not supported for : log.retention.ms")
    (entry,) = describe_configs(client, (4, me, ["log.retention.ms"]))[0].configs
    assert entry.value is None and entry.config_source == 5


def test_broker_logger_levels(client, node_id):
    me = str(node_id)

    def alter(*ops, name=me):
        resp = client.request(INCREMENTAL_ALTER_CONFIGS, 1, IncrementalAlterConfigsRequest(
            resources=[IAlterResource(8, name, [IAlterable(n, op, v) for n, op, v in ops])]))
        return resp.responses[0].error_code, resp.responses[0].error_message

    def level(name):
        (result,) = describe_configs(client, (8, me, [name]))
        return {c.name: (c.value, c.config_source) for c in result.configs}.get(name)

    assert level("root")[1] == 6  # DYNAMIC_BROKER_LOGGER_CONFIG
    assert alter(("kshare.configs", 0, "ERROR")) == (0, None)
    assert level("kshare.configs") == ("ERROR", 6)
    assert alter(("kshare.configs", 1, None)) == (0, None)
    assert level("kshare.configs") == (level("root")[0], 6)
    assert alter(("kshare.configs", 0, "LOUD")) == (
        40, "Cannot set the log level of kshare.configs to LOUD as it is not a supported log level. Valid log "
            "levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN")  # RuntimeLoggerManager sorts them
    # RuntimeLoggerManager.validateResourceNameIsNodeId: Integer.parseInt, so "" is not an integer
    assert alter(("root", 0, "INFO"), name="") == (42, "Node id must be an integer, but it is: ")
    assert alter(("root", 0, "INFO"), name=f"+{node_id}_0") == (
        42, f"Node id must be an integer, but it is: +{node_id}_0")
    assert alter(("root", 0, "INFO"), name=str(node_id + 1)) == (
        42, f"Unexpected node id. Expected {node_id}, but received {node_id + 1}")
    assert alter(("no.such.logger", 0, "INFO")) == (40, "Logger no.such.logger does not exist!")
    assert alter(("root", 1, None)) == (42, "Removing the log level of the root logger is not allowed")
    assert alter(("root", 2, "INFO")) == (42, "APPEND operation is not allowed for the BROKER_LOGGER resource")


# --- FindCoordinator ----------------------------------------------------------------------------

def test_find_coordinator_single_key_versions(client, broker, node_id):
    host, port = broker.bootstrap.rsplit(":", 1)
    for version in range(4):
        resp = client.request(FIND_COORDINATOR, version, FindCoordinatorRequest(key="any-group", key_type=0))
        assert (resp.error_code, resp.node_id, resp.host, resp.port) == (0, node_id, host, int(port))
        if version >= 1:
            assert resp.error_message == "NONE"
    resp = client.request(FIND_COORDINATOR, 3, FindCoordinatorRequest(key="txn", key_type=1))
    assert (resp.error_code, resp.node_id, resp.host, resp.port) == (0, node_id, host, int(port))
    resp = client.request(FIND_COORDINATOR, 3, FindCoordinatorRequest(key=f"g:{uuid_to_str(uuid.uuid4())}:0",
                                                                      key_type=2))
    assert (resp.error_code, resp.node_id) == (42, -1)


def test_find_coordinator_batched_and_share_keys(client, node_id):
    good_share = f"grp:with:colons:{uuid_to_str(uuid.uuid4())}:3"
    keys = [good_share, "", "grp:0", f":{uuid_to_str(uuid.uuid4())}:0", "grp:not-a-uuid:0",
            f"grp:{uuid_to_str(uuid.uuid4())}:abc"]
    resp = client.request(FIND_COORDINATOR, 6, FindCoordinatorRequest(key_type=2, coordinator_keys=keys))
    assert [(c.key, c.error_code, c.node_id) for c in resp.coordinators] == (
        [(good_share, 0, node_id)] + [(k, 42, -1) for k in keys[1:]])
    resp = client.request(FIND_COORDINATOR, 5, FindCoordinatorRequest(key_type=2, coordinator_keys=[good_share]))
    assert [(c.error_code, c.node_id, c.host, c.port) for c in resp.coordinators] == [(42, -1, "", -1)]
    resp = client.request(FIND_COORDINATOR, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b", ""]))
    assert [(c.key, c.error_code, c.node_id) for c in resp.coordinators] == [
        ("a", 0, node_id), ("b", 0, node_id), ("", 0, node_id)]
    # An unknown key type: CoordinatorType.forId throws InvalidRequestException, and KafkaApis.handleError
    # answers with FindCoordinatorResponse.prepareErrorResponse, each key with the default message.
    resp = client.request(FIND_COORDINATOR, 6, FindCoordinatorRequest(key_type=7, coordinator_keys=["a", "b"]))
    assert [(c.key, c.error_code, c.error_message, c.node_id, c.host, c.port) for c in resp.coordinators] == [
        (k, 42, INVALID_REQUEST_TEXT, -1, "", -1) for k in ("a", "b")]
    resp = client.request(FIND_COORDINATOR, 3, FindCoordinatorRequest(key_type=7, key="a"))
    assert (resp.error_code, resp.error_message, resp.node_id) == (42, INVALID_REQUEST_TEXT, -1)


def test_find_coordinator_share_key_parsed_as_java(client, node_id):
    """SharePartitionKey.getInstance: a blank group id, or a partition Integer.parseInt refuses
    (spaces, '_', past int32), is INVALID_REQUEST; a sign is accepted, and so are trailing ':'
    (String.split drops the empty parts they make)."""
    tid = uuid_to_str(uuid.uuid4())
    bad = [f" :{tid}:0", f"\t:{tid}:0", f"g:{tid}: 1", f"g:{tid}:1 ", f"g:{tid}:1_0", f"g:{tid}:2147483648",
           f"g:{tid}:-2147483649", f"g:{tid}:"]
    good = [f"g:{tid}:+1", f"g:{tid}:-1", f"g:{tid}:2147483647", f" g :{tid}:0", f"g:{tid}:0::"]
    resp = client.request(FIND_COORDINATOR, 6, FindCoordinatorRequest(key_type=2, coordinator_keys=bad + good))
    assert [(c.key, c.error_code, c.node_id) for c in resp.coordinators] == (
        [(k, 42, -1) for k in bad] + [(k, 0, node_id) for k in good])


# --- SASL on a PLAINTEXT listener ------------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1])
def test_sasl_handshake_gets_illegal_sasl_state(client, version):
    resp = client.request(SASL_HANDSHAKE, version, SaslHandshakeRequest(mechanism="PLAIN"))
    assert (resp.error_code, resp.mechanisms) == (34, [])  # KafkaApis.handleSaslHandshakeRequest
    assert client.request(METADATA, 12, MetadataRequest(topics=[])).brokers  # the connection goes on


@pytest.mark.parametrize("version", [0, 1, 2])
def test_sasl_authenticate_gets_illegal_sasl_state(client, version):
    resp = client.request(SASL_AUTHENTICATE, version, SaslAuthenticateRequest(auth_bytes=b"\0u\0p"))
    assert (resp.error_code, resp.error_message, resp.auth_bytes) == (
        34, "SaslAuthenticate request received after successful authentication", b"")


# --- DescribeCluster ----------------------------------------------------------------------------

def test_describe_cluster_endpoint_types(client, node_id):
    resp = client.request(DESCRIBE_CLUSTER, 2, DescribeClusterRequest(endpoint_type=1, include_fenced_brokers=True))
    assert (resp.error_code, resp.endpoint_type, resp.controller_id) == (0, 1, node_id)
    assert [(b.broker_id, b.is_fenced) for b in resp.brokers] == [(node_id, False)]
    assert resp.cluster_authorized_operations == -(2**31)
    resp = client.request(DESCRIBE_CLUSTER, 0, DescribeClusterRequest(include_cluster_authorized_operations=True))
    # Kafka's AclEntry.supportedOperations(CLUSTER): CREATE, ALTER, DESCRIBE, CLUSTER_ACTION,
    # DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE (bits 5, 7-12); the token operations are USER's
    assert resp.cluster_authorized_operations == 8096
    resp = client.request(DESCRIBE_CLUSTER, 1, DescribeClusterRequest(endpoint_type=2))
    assert (resp.error_code, resp.error_message) == (
        114, "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER")
    resp = client.request(DESCRIBE_CLUSTER, 1, DescribeClusterRequest(endpoint_type=9))
    assert (resp.error_code, resp.error_message) == (115, "Unsupported endpoint type 9")


# --- DescribeTopicPartitions --------------------------------------------------------------------

def test_describe_topic_partitions_paging(client, topic_name, node_id):
    a, b = topic_name + "-a", topic_name + "-b"
    create(client, topic(b, 2), topic(a, 3))

    def page(names, limit, cursor=None):
        resp = client.request(DESCRIBE_TOPIC_PARTITIONS, 0, DescribeTopicPartitionsRequest(
            topics=[TopicRequest(name=n) for n in names], response_partition_limit=limit, cursor=cursor))
        topics = [(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in resp.topics]
        nxt = resp.next_cursor
        return topics, (nxt.topic_name, nxt.partition_index) if nxt is not None else None

    assert page([b, a], 2) == ([(a, 0, [0, 1])], (a, 2))
    assert page([b, a], 2, Cursor(topic_name=a, partition_index=2)) == ([(a, 0, [2]), (b, 0, [0])], (b, 1))
    assert page([b, a], 3, Cursor(topic_name=a, partition_index=0)) == ([(a, 0, [0, 1, 2])], (b, 0))
    assert page([b, a, topic_name + "-c"], 100) == (
        [(a, 0, [0, 1, 2]), (b, 0, [0, 1]), (topic_name + "-c", 3, [])], None)
    # Kafka's handler sets TopicAuthorizedOperations on every topic the metadata cache answers,
    # unknown ones too (the topic operations: READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE,
    # DESCRIBE_CONFIGS, ALTER_CONFIGS)
    resp = client.request(DESCRIBE_TOPIC_PARTITIONS, 0, DescribeTopicPartitionsRequest(
        topics=[TopicRequest(name=a), TopicRequest(name=topic_name + "-c"), TopicRequest(name="bad name")]))
    assert [(t.name, t.error_code, t.topic_authorized_operations) for t in resp.topics] == [
        ("bad name", 17, 3576), (a, 0, 3576), (topic_name + "-c", 3, 3576)]
    assert page([a], 2, Cursor(topic_name=b, partition_index=0)) == ([(a, 42, [])], None)
    assert page([a], 2, Cursor(topic_name=a, partition_index=-1)) == ([(a, 42, [])], None)

    resp = client.request(DESCRIBE_TOPIC_PARTITIONS, 0, DescribeTopicPartitionsRequest(
        topics=[TopicRequest(name=a)]))
    (t,) = resp.topics
    assert t.topic_id == metadata(client, a).topic_id and not t.is_internal
    p = t.partitions[0]
    assert (p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes) == (node_id, 0, [node_id], [node_id])

    # all topics: sorted, unknown ones never listed, cursor respected
    resp = client.request(DESCRIBE_TOPIC_PARTITIONS, 0, DescribeTopicPartitionsRequest(
        topics=[], cursor=Cursor(topic_name=a, partition_index=1), response_partition_limit=3))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in resp.topics][:2] == [(a, [1, 2]), (b, [0])]


# --- DescribeLogDirs ------------------------------------------------------------------------------


def test_describe_log_dirs_sizes_and_filters(client, broker, topic_name):
    """One log directory; null topics means every partition, internal ones included; named
    partitions that do not exist are left out, and so are topics with none left. v4 adds the
    volume's total and usable bytes."""
    create(client, topic(topic_name, 2))
    produce(broker.bootstrap, topic_name, [b"x" * 100] * 5, partition=0)

    def describe(topics, version=4):
        resp = client.request(DESCRIBE_LOG_DIRS, version, DescribeLogDirsRequest(topics=topics))
        (result,) = resp.results
        assert (resp.error_code, result.error_code) == (0, 0)
        assert result.log_dir.startswith("/")
        return result, {t.name: [(p.partition_index, p.partition_size, p.offset_lag, p.is_future_key)
                                 for p in t.partitions] for t in result.topics}

    result, everything = describe(None)
    assert "__consumer_offsets" in everything and "__share_group_state" in everything
    (p0, size0, lag0, future0), (p1, size1, *_) = everything[topic_name]
    assert (p0, p1, lag0, future0, size1) == (0, 1, 0, False, 0)
    assert size0 > 500  # five records of 100 bytes, in their batches
    assert 0 < result.usable_bytes <= result.total_bytes

    named = [DescribableLogDirTopic(topic=topic_name, partitions=[1, 7]),
             DescribableLogDirTopic(topic=topic_name + "-missing", partitions=[0])]
    _, some = describe(named)
    assert some == {topic_name: [(1, 0, 0, False)]}
    result, _ = describe(named, version=1)
    assert (result.total_bytes, result.usable_bytes) == (-1, -1)  # not in v1: the defaults
