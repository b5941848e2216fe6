"""Connection life cycle over real sockets, as Kafka's SocketServer and Selector behave: a
half-closed or badly framed pipeline still gets the answers to the requests before the end,
idle and stalled connections expire, and the per-IP and listener connection limits hold."""

from __future__ import annotations

import socket
import struct

import pytest

from protocol.framing import correlation_id
from protocol.messages.metadata_request import MetadataRequest
from tests.raw_client import RawClient
from tests.test_produce_support import batch, create_topic, fetch_request, list_offset, produce_request

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


# --- idle expiry -------------------------------------------------------------------------------


@pytest.mark.needs_private_broker
def test_negative_connections_max_idle_ms_disables_idle_expiry(broker_factory):
    """Kafka's Selector has no IdleExpiryManager when connections.max.idle.ms < 0."""
    b = broker_factory({"connections.max.idle.ms": "-1"})
    with RawClient(b.bootstrap) as c:
        create_topic(c, "t")
        assert not c.is_closed_by_broker(timeout_s=1.0)  # 20 of the reaper's shortest periods
        assert list_offset(c, "t", -1).offset == 0
    assert "closing idle connection" not in b.log()
