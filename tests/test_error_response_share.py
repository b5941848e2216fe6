"""What the share group APIs answer when their handler fails, item by item, as Kafka 4.2's
``getErrorResponse`` of each request builds it (tests/test_handler_failure.py checks only that
every answer encodes and carries no other code), and a real ShareConsumer living through it.
"""

from __future__ import annotations

import asyncio
import sys
import uuid

import pytest
from confluent_kafka import ShareConsumer

from broker.handlers import REGISTRY
from protocol.errors import ErrorCode
from protocol.messages.alter_share_group_offsets_request import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from protocol.messages.delete_share_group_offsets_request import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequestTopic,
)
from protocol.messages.describe_share_group_offsets_request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)
from protocol.messages.share_acknowledge_request import AcknowledgePartition, AcknowledgeTopic, ShareAcknowledgeRequest
from protocol.messages.share_fetch_request import FetchPartition, FetchTopic, ShareFetchRequest
from protocol.messages.share_group_describe_request import ShareGroupDescribeRequest
from protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest
from tests.test_e2e_share_support import (
    consumer_config,
    create_topic,
    earliest_group,
    has_values,
    poll_until,
    produce,
)

UNKNOWN = ErrorCode.UNKNOWN_SERVER_ERROR
UNKNOWN_TEXT = "The server experienced an unexpected error when processing the request."
T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
SHARE_FETCH = 78


def answer(api_key: int, version: int, request, code: int = UNKNOWN):
    """``error_response`` as the client decodes it."""
    h = REGISTRY[api_key]
    return h.response_class.from_bytes(h.error_response(request, version, code).to_bytes(version), version)


# Share-state RPCs: (api key, version, topic class of the request, error message Kafka sets).
STATE = [
    (83, 0, "InitializeStateData", None),
    (84, 0, "ReadStateData", UNKNOWN_TEXT),
    (85, 1, "WriteStateData", UNKNOWN_TEXT),
    (86, 0, "DeleteStateData", None),
    (87, 1, "ReadStateSummaryData", UNKNOWN_TEXT),
]


@pytest.mark.parametrize("api_key,version,topic_class,message", STATE, ids=[s[2] for s in STATE])
def test_share_state_rpcs_mirror_every_topic_and_partition(api_key, version, topic_class, message):
    request_class = REGISTRY[api_key].request_class
    mod = sys.modules[request_class.__module__]
    topic, partition = getattr(mod, topic_class), mod.PartitionData
    request = request_class(group_id="g", topics=[
        topic(topic_id=T1, partitions=[partition(partition=3), partition(partition=0)]),
        topic(topic_id=T2, partitions=[partition(partition=7)]),
    ])
    got = answer(api_key, version, request)
    results = [(r.topic_id, [(p.partition, p.error_code, p.error_message) for p in r.partitions]) for r in got.results]
    assert results == [
        (T1, [(3, UNKNOWN, message), (0, UNKNOWN, message)]),
        (T2, [(7, UNKNOWN, message)]),
    ]


def test_share_group_describe_answers_each_group_requested():
    got = answer(77, 1, ShareGroupDescribeRequest(group_ids=["a", "", "a"], include_authorized_operations=True))
    assert [(g.group_id, g.error_code, g.error_message) for g in got.groups] == [
        ("a", UNKNOWN, None), ("", UNKNOWN, None), ("a", UNKNOWN, None)]
    assert got.groups[0].members == [] and got.groups[0].authorized_operations == -2147483648


@pytest.mark.parametrize("version", [0, 1])
def test_describe_share_group_offsets_answers_each_group_without_topics(version):
    request = DescribeShareGroupOffsetsRequest(groups=[
        DescribeShareGroupOffsetsRequestGroup(group_id="a", topics=[
            DescribeShareGroupOffsetsRequestTopic(topic_name="t", partitions=[0, 1])]),
        DescribeShareGroupOffsetsRequestGroup(group_id="b", topics=None),
    ])
    got = answer(90, version, request)
    assert [(g.group_id, g.error_code, g.error_message, g.topics) for g in got.groups] == [
        ("a", UNKNOWN, UNKNOWN_TEXT, []), ("b", UNKNOWN, UNKNOWN_TEXT, [])]


def test_alter_and_delete_share_group_offsets_answer_at_the_top_level():
    alter = AlterShareGroupOffsetsRequest(group_id="g", topics=[AlterShareGroupOffsetsRequestTopic(
        topic_name="t", partitions=[AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=5)])])
    delete = DeleteShareGroupOffsetsRequest(group_id="g", topics=[DeleteShareGroupOffsetsRequestTopic(topic_name="t")])
    for api_key, request in [(91, alter), (92, delete)]:
        got = answer(api_key, 0, request)
        assert (got.error_code, got.error_message, got.responses) == (UNKNOWN, UNKNOWN_TEXT, [])
        # A KafkaError's own code gets its own default message.
        got = answer(api_key, 0, request, ErrorCode.NOT_COORDINATOR)
        not_coordinator = (ErrorCode.NOT_COORDINATOR, "This is not the correct coordinator.")
        assert (got.error_code, got.error_message) == not_coordinator


def test_heartbeat_fetch_and_acknowledge_answer_the_code_alone():
    heartbeat = answer(76, 1, ShareGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=3))
    assert (heartbeat.error_code, heartbeat.error_message, heartbeat.member_id, heartbeat.assignment) == (
        UNKNOWN, None, None, None)
    fetch = ShareFetchRequest(group_id="g", member_id="m", share_session_epoch=2,
                              topics=[FetchTopic(topic_id=T1, partitions=[FetchPartition(partition_index=0)])])
    ack = ShareAcknowledgeRequest(group_id="g", member_id="m", share_session_epoch=2,
                                  topics=[AcknowledgeTopic(topic_id=T1, partitions=[AcknowledgePartition()])])
    for api_key, request in [(SHARE_FETCH, fetch), (79, ack)]:
        for version in (1, 2):
            got = answer(api_key, version, request)
            assert (got.error_code, got.error_message, got.responses, got.node_endpoints,
                    got.acquisition_lock_timeout_ms) == (UNKNOWN, None, [], [], 0)


def _consume(bootstrap: str, topic: str, n: int) -> tuple[list, list]:
    """Produce ``n`` records, consume until all arrived, then produce a marker and consume until
    it arrived (a record redelivered below it would come no later). Returns (value, delivery
    count) of the records, and the values polled with the marker."""
    create_topic(bootstrap, topic)
    group = earliest_group(bootstrap)
    values = [f"v{i}".encode() for i in range(n)]
    produce(bootstrap, topic, values)
    c = ShareConsumer(consumer_config(bootstrap, group))
    try:
        c.subscribe([topic])
        got = poll_until(c, has_values(set(values)))
        produce(bootstrap, topic, [b"marker"])
        after = poll_until(c, has_values({b"marker"}))
    finally:
        c.close()
    return [(m.value(), m.delivery_count()) for m in got], [m.value() for m in after]


@pytest.mark.e2e
@pytest.mark.timeout(60)
async def test_share_consumer_gets_every_record_once_when_share_fetch_fails(local, monkeypatch):
    """The first two ShareFetches raise; the consumer gets UNKNOWN_SERVER_ERROR on its connection
    (not a closed one) and gets every record once. librdkafka 2.16 surfaces no error to poll():
    it logs "ShareFetch reply error: Unknown broker error", moves its session epoch on as if the
    fetch had succeeded, is answered SHARE_SESSION_NOT_FOUND and re-opens the session (epoch 0)."""
    real = REGISTRY[SHARE_FETCH]
    failed: list[int] = []
    connections: list = []

    async def flaky(ctx, request):
        connections.append(ctx.connection)
        if len(failed) < 2:
            failed.append(request.share_session_epoch)
            raise RuntimeError("injected ShareFetch failure")
        return await real.handle(ctx, request)

    monkeypatch.setitem(REGISTRY, SHARE_FETCH, real._replace(handle=flaky))
    n = 20
    got, after = await asyncio.get_running_loop().run_in_executor(None, _consume, local.bootstrap, "t", n)
    assert len(failed) == 2 and failed[0] == 0  # the session-opening fetch, then librdkafka's next one
    assert len({id(c) for c in connections}) == 1  # every ShareFetch on the connection it started on
    assert sorted(got) == sorted((f"v{i}".encode(), 1) for i in range(n))
    assert after == [b"marker"]
