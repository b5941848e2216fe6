"""A handler's unexpected exception is answered as Kafka answers it, not with a closed connection.

Kafka's KafkaApis catches what a handler throws, logs it and sends the request's
``getErrorResponse``: UNKNOWN_SERVER_ERROR (or an ApiException's own code) wherever that
response has an error code for what the request named. Every registered API declares that
answer (``error_response``); here each is checked for random requests of every served version,
and the server is checked to send it and keep the connection, with the failure logged.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from hypothesis import HealthCheck, given, settings

from broker.handlers import REGISTRY, build_registry, init_producer_id
from protocol import messages
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.api_versions_request import ApiVersionsRequest
from protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from protocol.messages.produce_request import PartitionProduceData, ProduceRequest, TopicProduceData
from protocol.messages.share_fetch_request import ShareFetchRequest
from tests.protocol_strategies import message_strategy, schema
from tests.raw_client import RawClient

UNKNOWN = ErrorCode.UNKNOWN_SERVER_ERROR
PRODUCE, METADATA, API_VERSIONS, SHARE_FETCH = 0, 3, 18, 78
CASES = [(key, v) for key, h in sorted(REGISTRY.items()) for v in range(h.min_version, h.max_version + 1)]


def error_codes(msg, struct, version: int) -> list[int]:
    """Every ``error_code`` a decoded message carries at ``version``, depth first (a field the
    version lacks decodes to its default, 0, and is no part of the answer)."""
    out: list[int] = []
    for f in struct.fields:
        if version not in f.versions:
            continue
        value = getattr(msg, f.attr)
        if f.attr == "error_code":
            out.append(value)
        elif f.is_struct and value is not None:
            for item in value if f.is_array else [value]:
                out.extend(error_codes(item, f.struct, version))
    return out


def test_the_registry_refuses_a_handler_without_an_error_response(monkeypatch):
    monkeypatch.delattr(init_producer_id, "error_response")
    with pytest.raises(ValueError, match="no error_response"):
        build_registry(["init_producer_id"])


@pytest.mark.parametrize("api_key,version", CASES, ids=[f"{messages.APIS[k][1]}-v{v}" for k, v in CASES])
def test_error_response_encodes_and_carries_only_the_error(api_key, version):
    handler = REGISTRY[api_key]
    strategy = message_strategy(schema("message", messages.APIS[api_key][1]), version)
    response_struct = schema("message", messages.APIS[api_key][3]).top

    @settings(max_examples=20, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(request=strategy)
    def one(request):
        response = handler.error_response(request, version, UNKNOWN)
        if response is None:  # Kafka's getErrorResponse answers an acks=0 Produce with null
            assert (api_key, request.acks) == (PRODUCE, 0)
            return
        assert isinstance(response, handler.response_class)
        decoded = handler.response_class.from_bytes(response.to_bytes(version), version)
        assert set(error_codes(decoded, response_struct, version)) <= {UNKNOWN}

    one()


def fail_with(monkeypatch, api_key: int, exc: Exception) -> list:
    """Make ``api_key``'s handler raise ``exc``; the returned list collects its requests."""
    seen: list = []

    async def handle(ctx, request):
        seen.append(request)
        raise exc

    monkeypatch.setitem(REGISTRY, api_key, REGISTRY[api_key]._replace(handle=handle))
    return seen


async def in_thread(fn, *args):
    """Run a blocking client call while the in-process broker keeps serving."""
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


def _metadata_then_again(bootstrap: str):
    with RawClient(bootstrap) as c:
        failed = c.request(METADATA, 12, MetadataRequest(topics=[MetadataRequestTopic(name="t1")]))
        fine = c.request(API_VERSIONS, 3, ApiVersionsRequest(client_software_name="kshare-tests",
                                                              client_software_version="1"))
    return failed, fine


async def test_a_failing_handler_gets_unknown_server_error_and_the_connection_stays(local, monkeypatch, caplog):
    seen = fail_with(monkeypatch, METADATA, RuntimeError("handler bug"))
    with caplog.at_level(logging.ERROR, logger="kshare.server"):
        failed, fine = await in_thread(_metadata_then_again, local.bootstrap)
    assert len(seen) == 1
    assert [(t.name, t.error_code) for t in failed.topics] == [("t1", UNKNOWN)]
    assert fine.error_code == 0 and fine.api_keys  # same connection, next request served
    assert "metadata v12" in caplog.text and "handler bug" in caplog.text


def _share_fetch(bootstrap: str):
    with RawClient(bootstrap) as c:
        return c.request(SHARE_FETCH, 1, ShareFetchRequest(group_id="g", member_id="m" * 22, share_session_epoch=0))


async def test_a_kafka_error_escaping_a_handler_answers_its_own_code(local, monkeypatch):
    fail_with(monkeypatch, SHARE_FETCH, KafkaError(ErrorCode.NOT_COORDINATOR))
    response = await in_thread(_share_fetch, local.bootstrap)
    assert (response.error_code, response.responses) == (ErrorCode.NOT_COORDINATOR, [])


def _produce_acks_0(bootstrap: str) -> bool:
    with RawClient(bootstrap) as c:
        c.send_raw(c.frame(PRODUCE, 9, ProduceRequest(acks=0, topic_data=[
            TopicProduceData(name="t1", partition_data=[PartitionProduceData(index=0, records=b"")])])))
        return c.is_closed_by_broker()


async def test_a_failing_acks_0_produce_closes_the_connection(local, monkeypatch):
    seen = fail_with(monkeypatch, PRODUCE, RuntimeError("handler bug"))
    assert await in_thread(_produce_acks_0, local.bootstrap)  # Kafka: no answer wanted, so it closes
    assert len(seen) == 1
