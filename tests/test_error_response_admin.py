"""What the admin and group APIs answer when their handler fails, item by item, as Kafka 4.2's
``getErrorResponse`` of each request builds it: every topic, group, resource or coordinator key
the request named comes back with the error (duplicates too, in request order), plus the
top-level error where the response has one. Messages: ``Errors.message()`` (the code's default
text) for FindCoordinator and DescribeConfigs, none for the rest (``ApiError.fromThrowable``
drops it for UNKNOWN_SERVER_ERROR). Checked on the decoded wire bytes of that version.
"""

from __future__ import annotations

import uuid

import pytest

from broker.handlers import REGISTRY
from protocol.errors import ErrorCode
from protocol.messages.alter_configs_request import AlterConfigsRequest
from protocol.messages.alter_configs_request import AlterConfigsResource as AlterResource
from protocol.messages.create_partitions_request import CreatePartitionsRequest, CreatePartitionsTopic
from protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from protocol.messages.delete_groups_request import DeleteGroupsRequest
from protocol.messages.delete_topics_request import DeleteTopicsRequest, DeleteTopicState
from protocol.messages.describe_configs_request import DescribeConfigsRequest, DescribeConfigsResource
from protocol.messages.describe_groups_request import DescribeGroupsRequest
from protocol.messages.find_coordinator_request import FindCoordinatorRequest
from protocol.messages.incremental_alter_configs_request import AlterConfigsResource as IncrementalResource
from protocol.messages.incremental_alter_configs_request import IncrementalAlterConfigsRequest
from protocol.messages.list_groups_request import ListGroupsRequest
from protocol.primitives import ZERO_UUID

UNKNOWN = ErrorCode.UNKNOWN_SERVER_ERROR
UNKNOWN_TEXT = "The server experienced an unexpected error when processing the request."
NOT_COORDINATOR = ErrorCode.NOT_COORDINATOR
TOPIC, BROKER = 2, 4
TOPIC_ID = uuid.UUID("6f1c3b2a-0000-4000-8000-000000000001")


def coordinators(r):
    return [(c.key, c.error_code, c.error_message, c.node_id, c.host, c.port) for c in r.coordinators]


def described(r):
    return [(g.group_id, g.error_code, g.error_message, g.group_state, g.protocol_type, g.members) for g in r.groups]


def topic_results(r):
    return [(t.name, t.error_code, t.error_message) for t in r.topics]


def deleted(r):
    return [(t.name, t.topic_id, t.error_code, t.error_message) for t in r.responses]


def config_results(r):
    return [(x.resource_type, x.resource_name, x.error_code, x.error_message, x.configs) for x in r.results]


def altered(r):
    return [(x.resource_type, x.resource_name, x.error_code, x.error_message) for x in r.responses]


def partition_results(r):
    return [(t.name, t.error_code, t.error_message) for t in r.results]


def group_results(r):
    return [(g.group_id, g.error_code) for g in r.results]


DESCRIBE_RESOURCES = [DescribeConfigsResource(resource_type=TOPIC, resource_name="t"),
                      DescribeConfigsResource(resource_type=BROKER, resource_name="1")]
ALTER_RESOURCES = [AlterResource(resource_type=TOPIC, resource_name="t"),
                   AlterResource(resource_type=BROKER, resource_name="1")]
INCREMENTAL_RESOURCES = [IncrementalResource(resource_type=TOPIC, resource_name="t"),
                         IncrementalResource(resource_type=BROKER, resource_name="1")]

# (api key, version, request, code, what to read from the decoded response, what Kafka answers)
CASES = {
    "FindCoordinator-v0-top-level": (10, 0, FindCoordinatorRequest(key="g"), UNKNOWN,
                                     lambda r: (r.error_code, r.node_id, r.host, r.port), (UNKNOWN, -1, "", -1)),
    "FindCoordinator-v3-top-level-with-message": (
        10, 3, FindCoordinatorRequest(key="g"), UNKNOWN,
        lambda r: (r.error_code, r.error_message, r.node_id, r.host, r.port, r.coordinators),
        (UNKNOWN, UNKNOWN_TEXT, -1, "", -1, [])),
    "FindCoordinator-v4-per-key": (
        10, 4, FindCoordinatorRequest(coordinator_keys=["a", "b"]), UNKNOWN, coordinators,
        [("a", UNKNOWN, UNKNOWN_TEXT, -1, "", -1), ("b", UNKNOWN, UNKNOWN_TEXT, -1, "", -1)]),
    "FindCoordinator-v6-kafka-error-default-message": (
        10, 6, FindCoordinatorRequest(key_type=2, coordinator_keys=["g:t:0"]), NOT_COORDINATOR, coordinators,
        [("g:t:0", NOT_COORDINATOR, "This is not the correct coordinator.", -1, "", -1)]),
    "DescribeGroups-v0": (15, 0, DescribeGroupsRequest(groups=["a", "b"]), UNKNOWN, described,
                          [("a", UNKNOWN, None, "", "", []), ("b", UNKNOWN, None, "", "", [])]),
    "DescribeGroups-v6-no-message": (15, 6, DescribeGroupsRequest(groups=["a"]), UNKNOWN, described,
                                     [("a", UNKNOWN, None, "", "", [])]),
    "ListGroups-v0": (16, 0, ListGroupsRequest(), UNKNOWN, lambda r: (r.error_code, r.groups), (UNKNOWN, [])),
    "ListGroups-v5": (16, 5, ListGroupsRequest(states_filter=["Stable"], types_filter=["share"]), UNKNOWN,
                      lambda r: (r.error_code, r.groups), (UNKNOWN, [])),
    "CreateTopics-v2-duplicates-too": (
        19, 2, CreateTopicsRequest(topics=[CreatableTopic(name=n) for n in ("a", "b", "a")]), UNKNOWN, topic_results,
        [("a", UNKNOWN, None), ("b", UNKNOWN, None), ("a", UNKNOWN, None)]),
    "CreateTopics-v7-no-id-no-details": (
        19, 7, CreateTopicsRequest(topics=[CreatableTopic(name="a", num_partitions=3, replication_factor=1)]), UNKNOWN,
        lambda r: [(t.name, t.topic_id, t.error_code, t.error_message, t.num_partitions, t.replication_factor,
                    t.configs) for t in r.topics],
        [("a", ZERO_UUID, UNKNOWN, None, -1, -1, [])]),
    "DeleteTopics-v5-names": (20, 5, DeleteTopicsRequest(topic_names=["a", "b"]), UNKNOWN, deleted,
                              [("a", ZERO_UUID, UNKNOWN, None), ("b", ZERO_UUID, UNKNOWN, None)]),
    "DeleteTopics-v6-names-and-ids": (
        20, 6, DeleteTopicsRequest(topics=[DeleteTopicState(name="a"), DeleteTopicState(topic_id=TOPIC_ID)]),
        UNKNOWN, deleted, [("a", ZERO_UUID, UNKNOWN, None), (None, TOPIC_ID, UNKNOWN, None)]),
    "DescribeConfigs-v1-default-message": (
        32, 1, DescribeConfigsRequest(resources=DESCRIBE_RESOURCES), UNKNOWN, config_results,
        [(TOPIC, "t", UNKNOWN, UNKNOWN_TEXT, []), (BROKER, "1", UNKNOWN, UNKNOWN_TEXT, [])]),
    "DescribeConfigs-v4": (32, 4, DescribeConfigsRequest(resources=DESCRIBE_RESOURCES[:1]), UNKNOWN, config_results,
                           [(TOPIC, "t", UNKNOWN, UNKNOWN_TEXT, [])]),
    "AlterConfigs-v0": (33, 0, AlterConfigsRequest(resources=ALTER_RESOURCES), UNKNOWN, altered,
                        [(TOPIC, "t", UNKNOWN, None), (BROKER, "1", UNKNOWN, None)]),
    "AlterConfigs-v2": (33, 2, AlterConfigsRequest(resources=ALTER_RESOURCES), UNKNOWN, altered,
                        [(TOPIC, "t", UNKNOWN, None), (BROKER, "1", UNKNOWN, None)]),
    "CreatePartitions-v0-duplicates-too": (
        37, 0, CreatePartitionsRequest(topics=[CreatePartitionsTopic(name=n, count=2) for n in ("a", "a")]), UNKNOWN,
        partition_results, [("a", UNKNOWN, None), ("a", UNKNOWN, None)]),
    "CreatePartitions-v3": (37, 3, CreatePartitionsRequest(topics=[CreatePartitionsTopic(name="a", count=2)]), UNKNOWN,
                            partition_results, [("a", UNKNOWN, None)]),
    "DeleteGroups-v0-duplicates-too": (42, 0, DeleteGroupsRequest(groups_names=["g1", "g2", "g1"]), UNKNOWN,
                                       group_results, [("g1", UNKNOWN), ("g2", UNKNOWN), ("g1", UNKNOWN)]),
    "DeleteGroups-v2": (42, 2, DeleteGroupsRequest(groups_names=["g1"]), UNKNOWN, group_results, [("g1", UNKNOWN)]),
    "IncrementalAlterConfigs-v0": (44, 0, IncrementalAlterConfigsRequest(resources=INCREMENTAL_RESOURCES), UNKNOWN,
                                   altered, [(TOPIC, "t", UNKNOWN, None), (BROKER, "1", UNKNOWN, None)]),
    "IncrementalAlterConfigs-v1": (44, 1, IncrementalAlterConfigsRequest(resources=INCREMENTAL_RESOURCES[1:]), UNKNOWN,
                                   altered, [(BROKER, "1", UNKNOWN, None)]),
}


@pytest.mark.parametrize("api_key,version,request_,code,read,expected", CASES.values(), ids=CASES.keys())
def test_error_response_mirrors_what_the_request_named(api_key, version, request_, code, read, expected):
    handler = REGISTRY[api_key]
    response = handler.error_response(request_, version, code)
    decoded = handler.response_class.from_bytes(response.to_bytes(version), version)
    assert read(decoded) == expected
