"""Connection life cycle over real sockets, as Kafka's SocketServer and Selector behave: a
half-closed or badly framed pipeline still gets the answers to the requests before the end,
idle and stalled connections expire, and the per-IP and listener connection limits hold."""

from __future__ import annotations

import asyncio
import socket
import struct
import subprocess
import sys
import time

import pytest

from protocol.framing import correlation_id
from protocol.messages.metadata_request import MetadataRequest
from tests.broker_process import ROOT
from tests.raw_client import RawClient
from tests.test_produce_support import (
    alter_broker_config,
    batch,
    create_topic,
    fetch_request,
    list_offset,
    produce_request,
)

pytestmark = pytest.mark.e2e

PRODUCE, FETCH, METADATA = 0, 1, 3


def answers_until_closed(c: RawClient, timeout_s: float = 10.0) -> list[int]:
    """Correlation ids of every answer the broker sends before it closes the connection."""
    c.sock.settimeout(timeout_s)
    got = []
    while True:
        try:
            got.append(correlation_id(c.recv_frame()))
        except TimeoutError:
            raise AssertionError(f"still open after answers {got}") from None
        except ConnectionError:  # EOF or reset
            return got


def long_poll_then_metadata(c: RawClient, topic: str) -> bytes:
    """A Fetch that waits (nothing to read) with a Metadata queued behind it."""
    return (c.frame(FETCH, 12, fetch_request(topic, 0, max_wait_ms=500, min_bytes=1))
            + c.frame(METADATA, 12, MetadataRequest(topics=[], allow_auto_topic_creation=False)))


# --- the end of a pipeline ----------------------------------------------------------------------


def test_half_close_answers_every_request_sent_before_it(broker, topic_name):
    """SHUT_WR behind a long-poll Fetch, a Metadata and acks=0 produces: Kafka answers and
    handles them all (its channel is muted while a request is in flight) and only then closes."""
    with RawClient(broker.bootstrap) as c:
        create_topic(c, topic_name)
    with RawClient(broker.bootstrap) as c:
        data = long_poll_then_metadata(c, topic_name)
        data += b"".join(c.frame(PRODUCE, 9, produce_request(topic_name, batch([b"v%d" % i]), acks=0))
                         for i in range(5))
        c.send_raw(data)
        c.sock.shutdown(socket.SHUT_WR)
        assert answers_until_closed(c) == [1, 2]  # then EOF: the broker closed its side
    with RawClient(broker.bootstrap) as c:
        assert list_offset(c, topic_name, -1).offset == 5


@pytest.mark.needs_private_broker
def test_bad_size_prefix_behind_requests_closes_after_answering_them(broker_factory):
    """Kafka reads the next size prefix only once the requests before it are answered."""
    b = broker_factory({"socket.request.max.bytes": "1000"})
    with RawClient(b.bootstrap) as c:
        create_topic(c, "t")
    with RawClient(b.bootstrap) as c:
        c.send_raw(long_poll_then_metadata(c, "t") + struct.pack(">i", 5000) + b"x" * 100)
        assert answers_until_closed(c) == [1, 2]
    assert "request size 5000 outside [0, socket.request.max.bytes=1000]" in b.log()


async def test_accepted_sockets_keep_alive(local):
    """Kafka's acceptor sets SO_KEEPALIVE (and TCP_NODELAY): a client whose host vanished is
    dropped by TCP, freeing its max.connections.per.ip slot, even with idle expiry disabled."""
    def connect_and_ask() -> RawClient:  # answered: the broker has accepted the connection
        c = RawClient(local.bootstrap)
        c.request(METADATA, 12, MetadataRequest(topics=[], allow_auto_topic_creation=False))
        return c

    c = await asyncio.to_thread(connect_and_ask)
    try:
        (conn,) = local.server.connections
        sock = conn.transport.get_extra_info("socket")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        c.close()


# --- idle expiry -------------------------------------------------------------------------------


def stalled_client(b, requests: int) -> socket.socket:
    """A client that pipelines large Fetches and never reads: its answers fill both sockets."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", b.port))
    with RawClient(b.bootstrap) as c:
        frame = c.frame(FETCH, 12, fetch_request("big", 0, max_bytes=8 << 20, partition_max_bytes=8 << 20))
    s.sendall(frame * requests)
    return s


def idle_closes_of(b, s: socket.socket) -> int:
    return b.log().count("closing idle connection from 127.0.0.1:%d\n" % s.getsockname()[1])


def wait_for(condition, timeout_s: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def served_together(b, n: int) -> bool:
    """Whether ``n`` new connections are all served at once (the broker sees closes late)."""
    clients = [RawClient(b.bootstrap) for _ in range(n)]
    try:
        return all(c.request(METADATA, 12, MetadataRequest(topics=[])).brokers for c in clients)
    except ConnectionError:
        return False
    finally:
        for c in clients:
            c.close()


def closed_after_draining(s: socket.socket) -> bool:
    """Read what the broker sent; True on EOF or reset, False if it is still open."""
    s.settimeout(2)
    try:
        while s.recv(1 << 20):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.needs_private_broker
def test_a_client_that_stops_reading_expires_and_frees_its_slot(broker_factory):
    """Kafka's IdleExpiryManager counts a socket only while it can read or write: a client that
    stops reading expires after connections.max.idle.ms whatever is unsent or queued, its
    socket is closed (a graceful close would wait for it to read) and its slot is freed."""
    b = broker_factory({"connections.max.idle.ms": "1000", "max.connections": "3"})
    with RawClient(b.bootstrap) as c:
        create_topic(c, "big")
        for _ in range(4):
            c.request(PRODUCE, 9, produce_request("big", batch([bytes(900_000)])))
    one, queued = stalled_client(b, 1), stalled_client(b, 10)
    try:
        with RawClient(b.bootstrap):  # the third slot: taken while the stalled ones hold theirs
            with RawClient(b.bootstrap) as over:
                assert over.is_closed_by_broker()
        wait_for(lambda: idle_closes_of(b, one) and idle_closes_of(b, queued), what="stalled clients expiring")
        wait_for(lambda: served_together(b, 3), what="three free slots")
        assert closed_after_draining(one) and closed_after_draining(queued)
        assert idle_closes_of(b, one) == 1 and idle_closes_of(b, queued) == 1
    finally:
        one.close()
        queued.close()


@pytest.mark.needs_private_broker
def test_negative_connections_max_idle_ms_disables_idle_expiry(broker_factory):
    """Kafka's Selector has no IdleExpiryManager when connections.max.idle.ms < 0."""
    b = broker_factory({"connections.max.idle.ms": "-1"})
    with RawClient(b.bootstrap) as c:
        create_topic(c, "t")
        assert not c.is_closed_by_broker(timeout_s=1.0)  # 20 of the reaper's shortest periods
        assert list_offset(c, "t", -1).offset == 0
    assert "closing idle connection" not in b.log()


# --- connection quotas --------------------------------------------------------------------------


def open_clients(b, n: int) -> tuple[list[RawClient], list[bool]]:
    """``n`` new connections, each asked for Metadata: the clients and whether each was served."""
    clients, served = [], []
    for _ in range(n):
        c = RawClient(b.bootstrap)
        clients.append(c)
        try:
            served.append(bool(c.request(METADATA, 12, MetadataRequest(topics=[])).brokers))
        except ConnectionError:
            served.append(False)
    return clients, served


@pytest.mark.needs_private_broker
def test_max_connections_per_ip_and_its_overrides_limit_one_address(broker_factory):
    """Kafka's ConnectionQuotas: past max.connections.per.ip (or the address's override) a new
    connection from that address is closed; both settings are dynamic."""
    b = broker_factory({"max.connections.per.ip": "2"})
    clients, served = open_clients(b, 3)
    try:
        assert served == [True, True, False]
        assert ("Rejected connection from 127.0.0.1, address already has the configured maximum of 2 connections"
                in b.log())
        assert alter_broker_config(clients[0], "max.connections.per.ip.overrides", "localhost:4,otherhost:1") == 0
        more, served = open_clients(b, 3)
        clients += more
        assert served == [True, True, False]  # 4 from 127.0.0.1 (localhost) at once
        assert alter_broker_config(clients[0], "max.connections.per.ip", "0") == 0  # allowed: overrides are set
        assert alter_broker_config(clients[0], "max.connections.per.ip.overrides", "") != 0  # 0 needs overrides
        assert alter_broker_config(clients[0], "max.connections.per.ip.overrides", "127.0.0.1:x") != 0
    finally:
        for c in clients:
            c.close()


@pytest.mark.needs_private_broker
def test_listener_max_connections_limits_the_listener(broker_factory):
    """``listener.name.<listener>.max.connections`` caps the listener below max.connections."""
    b = broker_factory({"listener.name.plaintext.max.connections": "1", "max.connections": "5"})
    clients, served = open_clients(b, 2)
    try:
        assert served == [True, False]
        assert "listener.name.plaintext.max.connections=1 reached" in b.log()
    finally:
        for c in clients:
            c.close()


@pytest.mark.needs_private_broker
@pytest.mark.parametrize("override, message", [
    ("max.connections.per.ip=0", "max.connections.per.ip can be set to zero only if"),
    ("max.connections.per.ip.overrides=a b:1", "max.connections.per.ip.overrides contains invalid addresses : a b"),
    ("max.connections.per.ip.overrides=127.0.0.1", "Error parsing configuration property"),
    ("listener.name.plaintext.max.connections=-1", "Invalid value -1 for configuration max.connections"),
])
def test_invalid_connection_limits_stop_the_start(tmp_path, override, message):
    run = subprocess.run([sys.executable, "-m", "broker", "--port", "0", "--data-dir", str(tmp_path / "data"),
                          "--override", override], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and message in run.stderr, run.stderr
