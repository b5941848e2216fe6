"""The network persister against fake share coordinators on 127.0.0.1: coordinator lookup
with FindCoordinator v6 (key type SHARE), one request per coordinator node, and Kafka's
retries of COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR /
UNKNOWN_TOPIC_OR_PARTITION with backoff, at most five attempts. (The whole share flow through
it against a real broker is in test_share_state_restart.)"""

from __future__ import annotations

import asyncio
import struct
import uuid

import pytest

from coordinator.share.routing import key_string, parse_key_string
from persister.network import NetworkPersister
from protocol import messages
from protocol.errors import ErrorCode
from protocol.messages.find_coordinator_response import (
    Coordinator,
    FindCoordinatorResponse,
)
from protocol.messages.request_header import RequestHeader
from tests.test_server_memory import until

T1 = uuid.UUID(int=0x77)
_SIZE = struct.Struct(">i")


def _flexible(api_key, version):
    first = messages.FIRST_FLEXIBLE.get(api_key)
    return first is not None and version >= first


class FakeCoordinator:
    """Answers FindCoordinator with ``route(key)`` -> node index (or an error code), and each
    state RPC partition with ``answer(api_key, group, topic_id, partition)``; ``hold(api_key, body)``,
    if set, is awaited before a request is answered (it holds up the rest of its connection too)."""

    def __init__(self, route=None, answer=None, hold=None):
        self.route = route or (lambda key: 0)
        self.answer = answer or (lambda api, g, t, p: ErrorCode.NONE)
        self.hold = hold
        self.servers: list[asyncio.base_events.Server] = []
        self.nodes: list[tuple[str, int]] = []
        self.requests: list[tuple[int, int, int, object]] = []  # (node, api key, version, body)

    async def start(self, n: int = 1):
        for i in range(n):
            server = await asyncio.start_server(lambda r, w, i=i: self._serve(i, r, w), "127.0.0.1", 0)
            self.servers.append(server)
            self.nodes.append(server.sockets[0].getsockname()[:2])
        return self

    async def close(self):
        for s in self.servers:
            s.close()
            await s.wait_closed()

    async def _serve(self, node, reader, writer):
        try:
            while True:
                size = _SIZE.unpack(await reader.readexactly(4))[0]
                frame = memoryview(await reader.readexactly(size))
                api_key, version = struct.unpack_from(">hh", frame)
                header, pos = RequestHeader.decode(frame, 2 if _flexible(api_key, version) else 1)
                req_mod, req_cls, resp_mod, resp_cls = messages.APIS[api_key]
                body, _ = messages.load(req_mod, req_cls).decode(frame, version, pos)
                self.requests.append((node, api_key, version, body))
                if self.hold is not None:
                    await self.hold(api_key, body)
                resp = self._respond(api_key, body, messages.load(resp_mod, resp_cls))
                head = bytearray(8)
                struct.pack_into(">i", head, 4, header.correlation_id)
                if _flexible(api_key, version):
                    head.append(0)
                out = b"".join(bytes(p) for p in resp.encode(version, head, []))
                writer.write(_SIZE.pack(len(out) - 4) + out[4:])
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def _respond(self, api_key, body, response_class):
        if api_key == 10:
            coordinators = []
            for key in body.coordinator_keys:
                target = self.route(key)
                if isinstance(target, ErrorCode):
                    coordinators.append(Coordinator(key=key, node_id=-1, host="", port=-1, error_code=int(target)))
                else:
                    host, port = self.nodes[target]
                    coordinators.append(Coordinator(key=key, node_id=target, host=host, port=port))
            return FindCoordinatorResponse(coordinators=coordinators)
        module = __import__(response_class.__module__, fromlist=["PartitionResult"])
        result_class = next(v for k, v in vars(module).items()
                            if k.endswith("Result") and k != "PartitionResult" and isinstance(v, type))
        results = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                code = self.answer(api_key, body.group_id, t.topic_id, p.partition)
                if code is None:  # left out of the response
                    continue
                parts.append(module.PartitionResult(partition=p.partition, error_code=int(code),
                                                    error_message=None if code == 0 else code.name))
            results.append(result_class(topic_id=t.topic_id, partitions=parts))
        return response_class(results=results)


def persister_for(fake: FakeCoordinator, **kw) -> NetworkPersister:
    return NetworkPersister(lambda: fake.nodes[0], backoff_ms=1, max_backoff_ms=5, **kw)


def state_calls(fake, api_key):
    return [(n, b) for n, k, _, b in fake.requests if k == api_key]


async def test_finds_the_coordinator_once_and_sends_the_rpc_there():
    fake = await FakeCoordinator(route=lambda key: 1).start(2)
    p = persister_for(fake)
    try:
        assert await p.write_state("g", T1, 0, state_epoch=1, leader_epoch=0, start_offset=3,
                                   delivery_complete_count=2, batches=[(3, 5, 0, 1)]) == (0, None)
        r = await p.read_state("g", T1, 0, leader_epoch=0)
        assert r.error_code == 0
        finds = [b for n, k, v, b in fake.requests if k == 10]
        assert len(finds) == 1 and finds[0].key_type == 2 and finds[0].coordinator_keys == [key_string("g", T1, 0)]
        assert [(n, k, v) for n, k, v, _ in fake.requests[1:]] == [(1, 85, 1), (1, 84, 0)]  # on node 1, v1 writes
        (_, write), = state_calls(fake, 85)
        part = write.topics[0].partitions[0]
        assert (part.start_offset, part.delivery_complete_count, len(part.state_batches)) == (3, 2, 1)
    finally:
        await p.close()
        await fake.close()


@pytest.mark.parametrize("code", [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
                                  ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION])
async def test_retriable_errors_are_retried_with_a_fresh_lookup(code):
    """UNKNOWN_TOPIC_OR_PARTITION too (KAFKA-19455, in 4.1): the coordinator's metadata may lag."""
    calls = []

    def answer(api, g, t, p):
        calls.append(api)
        return code if len(calls) < 3 else ErrorCode.NONE

    fake = await FakeCoordinator(answer=answer).start()
    p = persister_for(fake)
    try:
        assert (await p.read_state("g", T1, 0, leader_epoch=0)).error_code == 0
        assert len(calls) == 3
        assert len([1 for _, k, _, _ in fake.requests if k == 10]) == 3  # the coordinator is looked up again
    finally:
        await p.close()
        await fake.close()


async def test_five_attempts_then_the_error_is_the_answer():
    fake = await FakeCoordinator(answer=lambda *a: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS).start()
    p = persister_for(fake)
    try:
        code, _ = await p.initialize_state("g", T1, 0, state_epoch=0, start_offset=-1)
        assert code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert len(state_calls(fake, 83)) == 5
    finally:
        await p.close()
        await fake.close()


async def test_failed_lookups_and_failed_rpcs_are_counted_apart():
    """As PersisterStateManager's handlers: FindCoordinator failures count against their own
    five attempts, reset by a lookup that succeeds, and the state RPC's failures against its
    own: two failed lookups and then three NOT_COORDINATOR answers do not exhaust either."""
    lookups, reads = [], []

    def route(key):
        lookups.append(key)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE if len(lookups) <= 2 else 0

    def answer(api, g, t, p):
        reads.append(api)
        return ErrorCode.NOT_COORDINATOR if len(reads) <= 3 else ErrorCode.NONE

    fake = await FakeCoordinator(route=route, answer=answer).start()
    p = persister_for(fake)
    try:
        assert (await p.read_state("g", T1, 0, leader_epoch=0)).error_code == 0
        assert (len(lookups), len(reads)) == (6, 4)
    finally:
        await p.close()
        await fake.close()


def test_the_backoff_is_kafkas_exponential_backoff_of_the_failed_attempts():
    """PersisterStateManager's BackoffManager counts the failed attempt before it asks
    ExponentialBackoff(1 s, x2, 30 s, 20% jitter) for the wait: 2 s after the first failure,
    then 4, 8 and 16 s (they used to be 1, 2, 4 and 8 s), never over 30 s with the jitter."""
    p = NetworkPersister(lambda: ("127.0.0.1", 1)).service
    for attempt, seconds in ((1, 2), (2, 4), (3, 8), (4, 16)):
        waits = [p._backoff_s(attempt) for _ in range(200)]
        assert seconds * 0.8 <= min(waits) and max(waits) < seconds * 1.2, (attempt, min(waits), max(waits))
    assert max(p._backoff_s(9) for _ in range(200)) <= 30


async def test_other_errors_are_answered_at_once():
    fake = await FakeCoordinator(answer=lambda *a: ErrorCode.FENCED_STATE_EPOCH).start()
    p = persister_for(fake)
    try:
        code, msg = await p.write_state("g", T1, 0, state_epoch=0, leader_epoch=0, start_offset=1,
                                        delivery_complete_count=-1, batches=[])
        assert (code, msg) == (ErrorCode.FENCED_STATE_EPOCH, "FENCED_STATE_EPOCH")
        assert len(state_calls(fake, 85)) == 1
    finally:
        await p.close()
        await fake.close()


@pytest.mark.parametrize("code", [ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION])
async def test_a_failed_lookup_is_retried_then_reported(code):
    fake = await FakeCoordinator(route=lambda key: code).start()
    p = persister_for(fake)
    try:
        r = await p.read_state("g", T1, 0, leader_epoch=0)
        assert r.error_code == code
        assert len([1 for _, k, _, _ in fake.requests if k == 10]) == 5 and not state_calls(fake, 84)
    finally:
        await p.close()
        await fake.close()


async def test_an_unreachable_broker_is_a_network_exception():
    """Kafka's disconnected client response (checkResponseError): NETWORK_EXCEPTION, retried
    (KAFKA-19927) and then reported; the share partition maps it to UNKNOWN_SERVER_ERROR."""
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    node = server.sockets[0].getsockname()[:2]
    server.close()
    await server.wait_closed()
    p = NetworkPersister(lambda: node, backoff_ms=1, max_backoff_ms=2, request_timeout_s=2)
    try:
        assert (await p.read_state("g", T1, 0, leader_epoch=0)).error_code == ErrorCode.NETWORK_EXCEPTION
    finally:
        await p.close()


async def test_a_state_rpc_that_times_out_is_retried_then_request_timed_out():
    fake = await FakeCoordinator(route=lambda key: 1).start(2)
    silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # accepts, never answers
    fake.nodes[1] = silent.sockets[0].getsockname()[:2]
    p = persister_for(fake, request_timeout_s=0.05)
    try:
        code, _ = await p.write_state("g", T1, 0, state_epoch=0, leader_epoch=0, start_offset=1,
                                      delivery_complete_count=-1, batches=[])
        assert code == ErrorCode.REQUEST_TIMED_OUT
        assert len([1 for _, k, _, _ in fake.requests if k == 10]) == 5  # looked up again each time
    finally:
        await p.close()
        silent.close()
        await fake.close()


async def test_a_response_without_the_key_is_unknown_server_error_at_once():
    fake = await FakeCoordinator(answer=lambda *a: None).start()
    p = persister_for(fake)
    try:
        assert (await p.read_state("g", T1, 0, leader_epoch=0)).error_code == ErrorCode.UNKNOWN_SERVER_ERROR
        assert len(state_calls(fake, 84)) == 1
    finally:
        await p.close()
        await fake.close()


async def test_keys_of_one_request_go_to_their_own_coordinators_and_come_back_in_order():
    def route(key):
        return parse_key_string(key)[2] % 2

    def answer(api, g, t, p):
        return ErrorCode.NONE if p != 3 else ErrorCode.INVALID_REQUEST

    fake = await FakeCoordinator(route=route, answer=answer).start(2)
    p = persister_for(fake)
    try:
        pairs = [(T1, i) for i in range(5)]
        got = await p.delete_state("g", pairs)
        assert list(got) == pairs
        assert {tp: code for tp, (code, _) in got.items()} == {
            (T1, i): (ErrorCode.INVALID_REQUEST if i == 3 else 0) for i in range(5)}
        sent = {n: sorted(p.partition for t in b.topics for p in t.partitions) for n, b in state_calls(fake, 86)}
        assert sent == {0: [0, 2, 4], 1: [1, 3]}
        summaries = await p.read_summary("g", pairs)
        assert list(summaries) == pairs
    finally:
        await p.close()
        await fake.close()


async def test_a_retried_write_does_not_move_the_start_offset_back():
    """Writes A (SPSO 5) then B (SPSO 10) of one key go out together; A's first attempt gets
    NOT_COORDINATOR, B succeeds, A is retried after B. Sent with its own stamp, A would take
    the coordinator's start offset back to 5 over records B pruned."""
    writes = []

    def answer(api, g, t, p):
        if api == 85:
            writes.append(api)
            return ErrorCode.NOT_COORDINATOR if len(writes) == 2 else ErrorCode.NONE
        return ErrorCode.NONE

    fake = await FakeCoordinator(answer=answer).start()
    p = persister_for(fake)

    def write(start, dcc, epoch=1):
        return p.write_state("g", T1, 0, state_epoch=epoch, leader_epoch=0, start_offset=start,
                             delivery_complete_count=dcc, batches=[(start, start, 2, 1)])

    try:
        assert await write(0, 1) == (0, None)  # connects and finds the coordinator
        assert await asyncio.gather(write(5, 3), write(10, 0)) == [(0, None), (0, None)]
        sent = [(part.start_offset, part.delivery_complete_count)
                for _, b in state_calls(fake, 85) for part in b.topics[0].partitions]
        assert len(sent) == 4 and sent[-1] == (10, 0)
        assert sent == sorted(sent, key=lambda s: s[0])  # the start offset never goes back
        assert not p.service._stamps  # forgotten once no write of the key is in flight
        assert await write(2, 0, epoch=2) == (0, None)  # a new state epoch (after a reset) starts lower
        assert state_calls(fake, 85)[-1][1].topics[0].partitions[0].start_offset == 2
    finally:
        await p.close()
        await fake.close()


async def test_no_key_is_retried_once_should_retry_says_stop():
    """Keys of one request wait out their own backoffs. Once ``should_retry()`` says no more
    (the broker is stopping) for one of them, the others still waiting are not retried either:
    each is COORDINATOR_NOT_AVAILABLE without another RPC."""
    fake = await FakeCoordinator(answer=lambda *a: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS).start()
    # the broker begins stopping once key 0 was sent a second time
    p = persister_for(fake, should_retry=lambda: len(state_calls(fake, 86)) < 2)
    waits = iter([0.01, 0.3])  # key 0 comes due first, key 1 later
    p.service._backoff_s = lambda n: next(waits)
    try:
        got = await p.delete_state("g", [(T1, 0), (T1, 1)])
        assert {tp: code for tp, (code, _) in got.items()} == {
            (T1, 0): ErrorCode.COORDINATOR_NOT_AVAILABLE, (T1, 1): ErrorCode.COORDINATOR_NOT_AVAILABLE}
        sent = [sorted(p.partition for t in b.topics for p in t.partitions) for _, b in state_calls(fake, 86)]
        assert sent == [[0, 1], [0]]  # key 1 is not sent again once key 0 was told to stop
    finally:
        await p.close()
        await fake.close()


async def test_a_key_that_waited_is_not_retried_once_should_retry_says_stop():
    """The broker began stopping while the key waited out its backoff: it is answered
    COORDINATOR_NOT_AVAILABLE without another RPC."""
    fake = await FakeCoordinator(answer=lambda *a: ErrorCode.NOT_COORDINATOR).start()
    stopping = []
    p = persister_for(fake, should_retry=lambda: not stopping)

    def backoff(n):
        stopping.append(1)  # the broker begins stopping during the wait
        return 0.01

    p.service._backoff_s = backoff
    try:
        assert (await p.read_state("g", T1, 0, leader_epoch=0)).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert len(state_calls(fake, 84)) == 1
    finally:
        await p.close()
        await fake.close()


async def test_a_key_forgotten_during_a_lookup_is_looked_up_again():
    """A call whose lookup is under way for key 1 (key 0 cached) while a concurrent call gets
    NOT_COORDINATOR for key 0, which forgets key 0's coordinator: key 0 is looked up again at
    once, as Kafka's handler sends FindCoordinator first when its coordinator node is unknown,
    instead of failing the whole call with a KeyError."""
    k0, k1 = key_string("g", T1, 0), key_string("g", T1, 1)
    release = asyncio.Event()

    async def hold(api, body):
        if api == 10 and k1 in body.coordinator_keys:
            await release.wait()

    reads = []

    def answer(api, g, t, p):
        if api == 84:
            reads.append(p)
            return ErrorCode.NOT_COORDINATOR if len(reads) == 1 else ErrorCode.NONE
        return ErrorCode.NONE

    fake = await FakeCoordinator(route=lambda key: 1, answer=answer, hold=hold).start(2)  # lookups on node 0
    p = persister_for(fake)
    try:
        await p.read_summary("g", [(T1, 0)])  # caches key 0's coordinator
        both = asyncio.ensure_future(p.delete_state("g", [(T1, 0), (T1, 1)]))  # looks up key 1: held
        one = asyncio.ensure_future(p.read_state("g", T1, 0, leader_epoch=0))  # NOT_COORDINATOR: forgets key 0
        await until(lambda: k0 not in p.service._coordinators, "forgotten by the concurrent read")
        assert not both.done()
        release.set()
        got = await both
        assert {tp: code for tp, (code, _) in got.items()} == {(T1, 0): 0, (T1, 1): 0}
        assert (await one).error_code == 0
        deleted = sorted((n, p.partition) for n, b in state_calls(fake, 86) for t in b.topics for p in t.partitions)
        assert deleted == [(1, 0), (1, 1)]  # each key sent once, to its coordinator
    finally:
        await p.close()
        await fake.close()
