"""What the network layer keeps in memory per connection, bounded where Kafka's design bounds it
for free: requests waiting behind the one being handled (Kafka reads one at a time), and answers
a client does not read (Kafka sends record data with sendfile). In-process broker, real sockets;
the reading clients are blocking ones in a thread."""

from __future__ import annotations

import asyncio
import random
import socket
import struct

import pytest

from broker.context import RequestContext
from broker.handlers import produce as produce_handler
from broker.server import MAX_QUEUED_BYTES
from protocol.framing import request_frame
from tests.raw_client import RawClient
from tests.test_produce_support import batch, fetch, fetch_request, headers_of, produce_request
from tests.test_share_wire_support import ShareMember, acquired, new_member_id, parts


def ctx(b, api_key, version):
    conn = type("Conn", (), {"peer": ("127.0.0.1", 1), "close": lambda self: None})()
    return RequestContext(b, conn, api_key, version, 1, "tests")


async def until(condition, what: str) -> None:
    """Wait for state the broker reaches on its own (no event to wait for), at most 10 s."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"not {what} within 10 s")


async def connect(b, *, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket()
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.setblocking(False)
    host, port = b.bootstrap.rsplit(":", 1)
    await asyncio.get_running_loop().sock_connect(s, (host, int(port)))
    return s


async def test_requests_queued_behind_a_long_poll_are_bounded_in_bytes(local):
    """Twenty 3 MiB requests behind a Fetch that long-polls: reading stops at MAX_QUEUED_BYTES,
    not after 32 requests (32 of socket.request.max.bytes would be 3 GiB)."""
    local.topics.create("t", 1)
    s = await connect(local)
    loop = asyncio.get_running_loop()
    try:
        await loop.sock_sendall(s, request_frame(fetch_request("t", 0, max_wait_ms=30_000, min_bytes=1), 12, 1, "x"))
        big = 3 << 20  # never parsed: the connection is closed before their turn comes
        sending = loop.create_task(loop.sock_sendall(s, (struct.pack(">i", big) + bytes(big)) * 20))
        await until(lambda: local.server.connections, "connected")
        (conn,) = local.server.connections
        await until(lambda: conn._reading_paused, "paused")
        assert MAX_QUEUED_BYTES <= conn._queued_bytes < MAX_QUEUED_BYTES + big
        assert len(conn._frames) <= 2 and not sending.done()
        sending.cancel()
    finally:
        s.close()


async def test_clients_that_stop_reading_shrink_fetch_and_share_fetch_answers(local, caplog):
    """Past the budget of answer bytes waiting for clients that stopped reading (1 MiB here),
    Fetch and ShareFetch answer one batch (KIP-74's minimum); whole answers again once that
    client is gone."""
    b = local
    b.server.stalled_budget = budget = 1 << 20
    loop = asyncio.get_running_loop()
    big = 64 << 20
    b.topics.create("t", 1)
    share_topic_id = b.topics.create("s", 1).topic_id
    for _ in range(40):
        await produce_handler.handle(ctx(b, 0, 9), produce_request("t", batch([random.randbytes(256 << 10)])))
    member = ShareMember(b.bootstrap, "stall-group")
    stalled = await connect(b, rcvbuf=4096)
    try:
        await loop.run_in_executor(None, member.open, [(share_topic_id, 0)])  # starts at the end: 0
        for _ in range(3):
            await produce_handler.handle(ctx(b, 0, 9), produce_request("s", batch([b"s"] * 10)))
        await loop.sock_sendall(stalled, request_frame(fetch_request("t", 0, partition_max_bytes=big), 12, 1, "x"))
        await until(lambda: b.server.stalled_bytes > budget, "stalled")

        def fetch_batches() -> int:
            with RawClient(b.bootstrap) as c:
                return len(headers_of(fetch(c, "t", 0, max_bytes=big, partition_max_bytes=big).records))

        def share_fetch_acquired() -> list:
            return acquired(parts(member.fetch([(share_topic_id, 0)], max_bytes=big))[(share_topic_id, 0)])

        assert await loop.run_in_executor(None, fetch_batches) == 1
        assert await loop.run_in_executor(None, share_fetch_acquired) == [(0, 9, 1)]
        assert caplog.text.count("responses wait for clients that do not read them") == 1

        stalled.close()
        await until(lambda: b.server.stalled_bytes == 0, "released")
        assert await loop.run_in_executor(None, fetch_batches) == 40
        assert await loop.run_in_executor(None, share_fetch_acquired) == [(10, 29, 1)]
    finally:
        stalled.close()
        member.close()


async def test_a_connection_keeps_only_the_share_sessions_still_open_on_it(local):
    """A connection remembers the share sessions opened on it, to drop them when it closes.
    A client opening and closing sessions for member after member over one connection must
    not pile up the closed ones (Kafka keeps one session key per connection)."""
    b = local
    topic_id = b.topics.create("s", 1).topic_id
    member = ShareMember(b.bootstrap, "g")

    def churn() -> None:
        for _ in range(20):
            member.member_id, member.epoch = new_member_id(), 0
            member.open([(topic_id, 0)])
            assert member.fetch([(topic_id, 0)], epoch=-1).error_code == 0

    try:
        await asyncio.get_running_loop().run_in_executor(None, churn)
        [conn] = b.server.connections
        assert len(conn.share_sessions) <= 1  # (the last one is forgotten at the next open)
        assert len(b.share_sessions) == 0
    finally:
        member.close()
