"""The network layer over real sockets: framing, limits, ordering, idle timeout, shutdown.

What Apache Kafka 4.2 does, and so what these tests pin:

- Unknown API key: ``RequestHeader.parse`` fails (``ApiKeys.forId``) with InvalidRequestException
  and the Processor closes the connection without a response.
- Known API, unsupported version: ``Processor.parseRequestHeader`` throws
  UnsupportedVersionException and the connection is closed, again without a response.
- ApiVersions is the exception (``ApiKeys.isVersionEnabled`` accepts every version of it):
  ``RequestContext`` treats an unsupported ApiVersions as v0, and the answer is a v0 response
  (header and body) with UNSUPPORTED_VERSION and only ApiVersions' own range (KIP-511). The
  connection stays open so the client can retry with a version it has.
- ApiVersions always answers with response header v0, whatever the request version.
- A size prefix below 0 or above ``socket.request.max.bytes`` closes the connection
  (``NetworkReceive`` throws InvalidReceiveException).
"""

from __future__ import annotations

import io
import random
import select
import signal
import socket
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer
from kio.schema.response_header.v0.header import ResponseHeader as KioResponseHeader

from broker.handlers import REGISTRY, build_registry, init_producer_id, supported_api_versions
from broker.log.checkpoint import CLEAN_SHUTDOWN_MARKER
from protocol.framing import request_frame, request_header_version, response_header_version
from protocol import messages
from protocol.errors import ErrorCode
from protocol.messages.api_versions_request import ApiVersionsRequest
from protocol.messages.api_versions_response import ApiVersionsResponse
from protocol.messages.incremental_alter_configs_request import AlterableConfig as IncrementalAlterable
from protocol.messages.incremental_alter_configs_request import AlterConfigsResource as IncrementalAlterResource
from protocol.messages.incremental_alter_configs_request import IncrementalAlterConfigsRequest
from protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from protocol.messages.metadata_response import MetadataResponse
from protocol.messages.request_header import RequestHeader
from tests.broker_process import BrokerProcess
from tests.raw_client import RawClient
from tests.test_produce_support import batch, create_topic, fetch_request, produce

pytestmark = pytest.mark.e2e

API_VERSIONS, METADATA, INCREMENTAL_ALTER_CONFIGS = 18, 3, 44
LIST_OFFSETS, INIT_PRODUCER_ID = 2, 22
MAX_REQUEST_BYTES = 1024
AV = REGISTRY[API_VERSIONS]


# --- helpers -------------------------------------------------------------------------------------


def header_bytes(api_key: int, version: int, correlation_id: int, client_id: str | None = "kshare-tests") -> bytes:
    """A request header for any key and version, including ones our codecs refuse to encode."""
    header_version = request_header_version(api_key, version) if api_key in REGISTRY else 1
    return RequestHeader(
        request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id=client_id
    ).to_bytes(header_version)


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def split_response(api_key: int, version: int, frame: bytes) -> tuple[int, bytes]:
    """(correlation id, body bytes) of a response frame, by the response header version."""
    (correlation_id,) = struct.unpack_from(">i", frame, 0)
    pos = 4
    if response_header_version(api_key, version) == 1:
        assert frame[4] == 0, "response header tagged fields"
        pos = 5
    return correlation_id, frame[pos:]


def metadata(client: RawClient, version: int = 12, topics=None) -> MetadataResponse:
    return client.request(METADATA, version, MetadataRequest(topics=topics, allow_auto_topic_creation=False))


def assert_serves(bootstrap: str) -> None:
    """A fresh client still gets answers (the broker survived whatever the last test sent)."""
    with RawClient(bootstrap) as c:
        resp = metadata(c)
        assert resp.brokers and resp.cluster_id


def assert_clean_log(b: BrokerProcess) -> None:
    text = b.log()
    assert "Traceback" not in text, text
    assert "unexpected error" not in text, text


# --- ApiVersions --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(AV.min_version, AV.max_version + 1))
def test_api_versions_every_version_answers_with_header_v0(broker, version):
    with RawClient(broker.bootstrap) as c:
        c.send_raw(c.frame(API_VERSIONS, version, ApiVersionsRequest(client_software_name="kshare-tests",
                                                                      client_software_version="1.0")))
        frame = c.recv_frame()
    (correlation_id,) = struct.unpack_from(">i", frame, 0)
    assert correlation_id == 1
    # Header v0: the body starts right after the correlation id, even for flexible versions.
    resp = ApiVersionsResponse.from_bytes(frame[4:], version)
    assert resp.error_code == ErrorCode.NONE
    got = [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys]
    assert got == [(k.api_key, k.min_version, k.max_version) for k in supported_api_versions()]
    assert (API_VERSIONS, AV.min_version, AV.max_version) in got
    if version >= 1:
        assert resp.throttle_time_ms == 0
    supported = [(f.name, f.min_version, f.max_version) for f in resp.supported_features]
    finalized = [(f.name, f.min_version_level, f.max_version_level) for f in resp.finalized_features]
    if version < 3:
        assert supported == finalized == []
        return
    # Kafka 4.2's defaultSupportedFeatures: metadata.version 7 (3.3-IV3) to 29 (4.2-IV1), features
    # with max 0 (transactions here) left out, and before v4 those with min 0 too (KAFKA-17492).
    assert sorted(supported) == sorted([("metadata.version", 7, 29)] + (
        [("group.version", 0, 1), ("share.version", 0, 1)] if version >= 4 else []))
    assert sorted(finalized) == [("group.version", 1, 1), ("metadata.version", 29, 29), ("share.version", 1, 1)]


@pytest.mark.parametrize("version", [AV.max_version + 1, 99, 32767, -1])
def test_unsupported_api_versions_version_gets_v0_error_with_api_versions_range(broker, version):
    with RawClient(broker.bootstrap) as c:
        # The body is whatever a newer client would send; Kafka does not parse it.
        c.send_raw(framed(header_bytes(API_VERSIONS, version, 4242) + b"\x07future\x00\x00\x00\x00\x01\x00"))
        frame = c.recv_frame()
        expected = struct.pack(">ihihhh", 4242, ErrorCode.UNSUPPORTED_VERSION, 1, API_VERSIONS,
                               AV.min_version, AV.max_version)
        assert frame == expected
        # The connection stays usable: the client retries with a version the broker has.
        resp = c.request(API_VERSIONS, AV.max_version, ApiVersionsRequest(client_software_name="kshare-tests",
                                                                          client_software_version="1.0"))
        assert resp.error_code == ErrorCode.NONE


@pytest.mark.parametrize("version", [AV.max_version + 1, 99])
@pytest.mark.parametrize("header", [
    b"",  # no client id at all
    struct.pack(">h", 5) + b"ab",  # a client id longer than the frame
    struct.pack(">h", -1),  # header v2 (ApiVersions v3+): the tagged fields are missing
])
def test_unsupported_api_versions_version_with_a_header_that_does_not_parse_closes(broker, version, header):
    # RequestHeader.parse reads the header in the version's header version (2 from v3 on) before
    # anything looks at the version; what does not parse closes the connection, unanswered.
    with RawClient(broker.bootstrap) as c:
        c.send_raw(framed(struct.pack(">hhi", API_VERSIONS, version, 4242) + header))
        assert c.is_closed_by_broker()
    assert_serves(broker.bootstrap)


def unregistered_keys() -> list[int]:
    keys = [1000, 32767, -1]
    kafka_but_not_ours = sorted(k for k in messages.APIS if k not in REGISTRY)
    if kafka_but_not_ours:
        keys.append(kafka_but_not_ours[-1])
    return keys


@pytest.mark.parametrize("api_key", unregistered_keys())
def test_unknown_api_key_closes_connection_without_answer(broker, api_key):
    with RawClient(broker.bootstrap) as c:
        c.send_raw(framed(header_bytes(api_key, 0, 1) + b"\x00" * 8))
        assert c.is_closed_by_broker()  # EOF with no response bytes first
    assert_serves(broker.bootstrap)


@pytest.mark.parametrize("version", [REGISTRY[METADATA].max_version + 1, 99, -1])
def test_unsupported_version_of_known_api_closes_connection(broker, version):
    with RawClient(broker.bootstrap) as c:
        c.send_raw(framed(header_bytes(METADATA, version, 1) + b"\x00" * 8))
        assert c.is_closed_by_broker()
    assert_serves(broker.bootstrap)


def test_a_version_the_schema_marks_unstable_is_not_served(broker):
    # InitProducerId v6 (2PC) is "latestVersionUnstable": Kafka 4.2 serves it only with
    # unstable.api.versions.enable, default false.
    unstable = messages.VALID_VERSIONS[INIT_PRODUCER_ID][1]
    assert REGISTRY[INIT_PRODUCER_ID].max_version == messages.STABLE_MAX_VERSION[INIT_PRODUCER_ID] == unstable - 1
    assert messages.STABLE_MAX_VERSION[LIST_OFFSETS] == messages.VALID_VERSIONS[LIST_OFFSETS][1]  # explicitly false
    with RawClient(broker.bootstrap) as c:
        c.send_raw(framed(header_bytes(INIT_PRODUCER_ID, unstable, 1) + b"\x00" * 8))
        assert c.is_closed_by_broker()
    assert_serves(broker.bootstrap)


def test_the_registry_refuses_a_handler_advertising_an_unstable_version(monkeypatch):
    monkeypatch.setattr(init_producer_id, "MAX_VERSION", messages.VALID_VERSIONS[INIT_PRODUCER_ID][1])
    with pytest.raises(ValueError, match="unstable"):
        build_registry(["init_producer_id"])


@pytest.mark.parametrize("version", range(AV.min_version, AV.max_version + 1))
def test_api_versions_bytes_decode_with_kio(broker, version):
    """kio (an independent implementation) reads the live broker's bytes and writes them back."""
    kio_mod = pytest.importorskip(f"kio.schema.api_versions.v{version}.response")
    with RawClient(broker.bootstrap) as c:
        c.send_raw(c.frame(API_VERSIONS, version, ApiVersionsRequest(client_software_name="kshare-tests",
                                                                      client_software_version="1.0")))
        frame = c.recv_frame()
    header, header_size = entity_reader(KioResponseHeader)(frame, 0)
    assert header.correlation_id == 1
    body, body_size = entity_reader(kio_mod.ApiVersionsResponse)(frame, header_size)
    assert header_size + body_size == len(frame)
    assert body.error_code.value == 0
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [
        (k.api_key, k.min_version, k.max_version) for k in supported_api_versions()
    ]
    out = io.BytesIO()
    entity_writer(KioResponseHeader)(out, header)
    entity_writer(kio_mod.ApiVersionsResponse)(out, body)
    assert out.getvalue() == frame


def test_unsupported_api_versions_bytes_decode_with_kio_v0(broker):
    from kio.schema.api_versions.v0.response import ApiVersionsResponse as KioV0

    with RawClient(broker.bootstrap) as c:
        c.send_raw(framed(header_bytes(API_VERSIONS, 99, 7) + b"\x00"))
        frame = c.recv_frame()
    header, header_size = entity_reader(KioResponseHeader)(frame, 0)
    body, body_size = entity_reader(KioV0)(frame, header_size)
    assert (header.correlation_id, header_size + body_size) == (7, len(frame))
    assert body.error_code.value == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [
        (API_VERSIONS, AV.min_version, AV.max_version)
    ]


# --- pipelining ---------------------------------------------------------------------------------


def test_fifty_pipelined_requests_are_answered_in_order(broker):
    """Requests written back to back without reading come back strictly in request order."""
    with RawClient(broker.bootstrap) as c:
        sent: list[tuple[int, int]] = []
        data = bytearray()
        md = REGISTRY[METADATA]
        for i in range(50):
            if i % 2:
                v = AV.min_version + i % (AV.max_version - AV.min_version + 1)
                data += c.frame(API_VERSIONS, v, ApiVersionsRequest(client_software_name="kshare-tests",
                                                                    client_software_version="1.0"))
                sent.append((API_VERSIONS, v))
            else:
                v = max(md.min_version, 1) + i % (md.max_version - max(md.min_version, 1) + 1)
                data += c.frame(METADATA, v, MetadataRequest(topics=[], allow_auto_topic_creation=False))
                sent.append((METADATA, v))
        c.send_raw(bytes(data))
        got = []
        for api_key, v in sent:
            correlation_id, body = split_response(api_key, v, c.recv_frame())
            got.append(correlation_id)
            cls = ApiVersionsResponse if api_key == API_VERSIONS else MetadataResponse
            cls.from_bytes(body, v)  # strict: the body is the response to *that* request
        assert got == list(range(1, 51))


@pytest.mark.parametrize("version", [4, 12])  # request header v1 and v2
def test_a_client_id_that_is_not_utf8_is_served(broker, version):
    """Kafka reads the client id with ``new String(bytes, UTF_8)``, which replaces invalid bytes:
    a client whose client.id is Latin-1 (librdkafka passes its bytes as they are) is served."""
    head = struct.pack(">hhih", METADATA, version, 7, 4) + b"caf\xe9" + (b"\x00" if version >= 9 else b"")
    with RawClient(broker.bootstrap) as c:
        c.send_raw(framed(head + MetadataRequest(topics=[], allow_auto_topic_creation=False).to_bytes(version)))
        correlation_id, body = split_response(METADATA, version, c.recv_frame())
        assert correlation_id == 7
        assert MetadataResponse.from_bytes(body, version).brokers


@pytest.mark.parametrize("length", [-1, -2, -32768])
@pytest.mark.parametrize("version", [4, 12])  # request header v1 and v2
def test_a_client_id_of_any_negative_length_is_null_and_served(broker, version, length):
    """Kafka's generated RequestHeaderData reads a nullable string as null for every negative
    length (``if (length < 0)``), not only -1, and RequestHeader.parse then treats it as "":
    the request is answered, the connection is not closed."""
    head = struct.pack(">hhih", METADATA, version, 8, length) + (b"\x00" if version >= 9 else b"")
    with RawClient(broker.bootstrap) as c:
        c.send_raw(framed(head + MetadataRequest(topics=[], allow_auto_topic_creation=False).to_bytes(version)))
        correlation_id, body = split_response(METADATA, version, c.recv_frame())
        assert correlation_id == 8
        assert MetadataResponse.from_bytes(body, version).brokers


# --- framing and malformed input (a private broker with a small request limit) -------------------


@pytest.fixture(scope="module")
def small_broker(tmp_path_factory):
    b = BrokerProcess(
        tmp_path_factory.mktemp("small") / "data", {"socket.request.max.bytes": str(MAX_REQUEST_BYTES)}
    ).start()
    yield b
    code = b.stop()
    assert code == 0, b.log()
    assert_clean_log(b)


def api_versions_v0_of_size(size: int) -> bytes:
    """An ApiVersions v0 frame whose size prefix is exactly ``size`` (padding in the client id)."""
    fixed = len(header_bytes(API_VERSIONS, 0, 1, client_id=""))
    return framed(header_bytes(API_VERSIONS, 0, 1, client_id="x" * (size - fixed)))


@pytest.mark.needs_private_broker
def test_request_of_exactly_max_bytes_is_served(small_broker):
    frame = api_versions_v0_of_size(MAX_REQUEST_BYTES)
    assert struct.unpack_from(">i", frame)[0] == MAX_REQUEST_BYTES
    with RawClient(small_broker.bootstrap) as c:
        c.send_raw(frame)
        assert ApiVersionsResponse.from_bytes(c.recv_frame()[4:], 0).error_code == ErrorCode.NONE


@pytest.mark.needs_private_broker
@pytest.mark.parametrize(
    "data",
    [
        pytest.param(struct.pack(">i", -1), id="negative-size"),
        pytest.param(struct.pack(">i", -(2**31)), id="min-int-size"),
        pytest.param(struct.pack(">i", MAX_REQUEST_BYTES + 1), id="size-above-max-prefix-only"),
        pytest.param(api_versions_v0_of_size(MAX_REQUEST_BYTES + 1), id="size-above-max-whole-frame"),
        pytest.param(framed(b""), id="empty-frame"),
        pytest.param(framed(b"\x00\x12\x00"), id="frame-shorter-than-header"),
        pytest.param(framed(header_bytes(METADATA, 12, 1)[:-3]), id="truncated-header"),
        pytest.param(framed(header_bytes(METADATA, 12, 1) + b"\x05\x01"), id="malformed-body"),
    ],
)
def test_bad_frame_closes_connection_and_broker_keeps_serving(small_broker, data):
    with RawClient(small_broker.bootstrap) as c:
        c.send_raw(data)
        assert c.is_closed_by_broker()
    assert_serves(small_broker.bootstrap)
    assert_clean_log(small_broker)


@pytest.mark.needs_private_broker
def test_truncated_frame_then_client_close(small_broker):
    with RawClient(small_broker.bootstrap) as c:
        c.send_raw(struct.pack(">i", 100) + header_bytes(METADATA, 12, 1))  # 100 promised, fewer sent
        c.sock.shutdown(socket.SHUT_WR)
        assert c.is_closed_by_broker()
    assert_serves(small_broker.bootstrap)
    assert_clean_log(small_broker)


def _garbage_frame(api_key: int, version: int, correlation_id: int, tail: bytes) -> bytes:
    return framed(struct.pack(">hhi", api_key, version, correlation_id) + tail)


GARBAGE = st.lists(
    st.one_of(
        st.binary(min_size=1, max_size=600),
        st.builds(
            _garbage_frame,
            st.one_of(st.sampled_from(sorted(REGISTRY)), st.integers(-(2**15), 2**15 - 1)),
            st.one_of(st.integers(-1, 16), st.integers(-(2**15), 2**15 - 1)),
            st.integers(-(2**31), 2**31 - 1),
            st.binary(max_size=300),
        ),
    ),
    min_size=1,
    max_size=3,
).map(b"".join)


@pytest.mark.needs_private_broker
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=GARBAGE)
def test_random_bytes_never_hang_or_crash_the_broker(small_broker, data):
    """Garbage on a fresh connection: the broker answers or closes, never hangs, never crashes."""
    with RawClient(small_broker.bootstrap) as c:
        try:
            c.send_raw(data)
            c.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the broker closed first: fine
        c.sock.settimeout(10)
        received = bytearray()
        while True:
            try:
                chunk = c.sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
    # Whatever came back is whole size-prefixed frames.
    pos = 0
    while pos < len(received):
        (size,) = struct.unpack_from(">i", received, pos)
        assert size >= 4 and pos + 4 + size <= len(received)
        pos += 4 + size


@pytest.mark.needs_private_broker
def test_broker_survives_garbage(small_broker):
    """Runs after the fuzz test in file order: the broker still serves and logged no traceback."""
    assert small_broker.alive()
    assert_serves(small_broker.bootstrap)
    assert_clean_log(small_broker)


# --- idle connections ----------------------------------------------------------------------------


def test_idle_connection_is_closed_active_one_stays(broker_factory):
    idle_ms = 500
    b = broker_factory({"connections.max.idle.ms": str(idle_ms)})
    with RawClient(b.bootstrap) as idle, RawClient(b.bootstrap) as active:
        opened = time.monotonic()
        deadline = opened + 20
        requests = 0
        while True:
            resp = active.request(API_VERSIONS, 3, ApiVersionsRequest(client_software_name="kshare-tests",
                                                                       client_software_version="1.0"))
            assert resp.error_code == ErrorCode.NONE
            requests += 1
            if idle.is_closed_by_broker(timeout_s=0.1):  # also paces the active client
                break
            assert time.monotonic() < deadline, "idle connection never closed"
        closed_after = time.monotonic() - opened
        assert closed_after >= idle_ms / 1000 * 0.9
        # The active connection outlived the idle timeout and still works.
        assert requests > 1
        assert metadata(active).brokers
    assert_clean_log(b)


# --- max.connections ----------------------------------------------------------------------------


def test_max_connections_closes_new_connections_over_the_limit(broker_factory):
    """Past ``max.connections`` a new connection is closed at once (Kafka's acceptor waits for
    a slot; either way the client retries), reported once, and a freed slot serves again. The
    limit is dynamic, like Kafka's."""
    b = broker_factory({"max.connections": "2"})
    held = [RawClient(b.bootstrap), RawClient(b.bootstrap)]
    try:
        assert all(metadata(c).brokers for c in held)
        for _ in range(3):
            with RawClient(b.bootstrap) as over:
                assert over.is_closed_by_broker()
        assert "max.connections=2 reached: closed 1 new connection(s) since the last report" in b.log()
        assert b.log().count("max.connections=2 reached") == 1
        held.pop(0).close()
        deadline = time.monotonic() + 20
        while True:  # the broker sees the close on its own time; no event reaches this client
            c = RawClient(b.bootstrap)
            if not c.is_closed_by_broker(timeout_s=0.2):
                held.append(c)
                assert metadata(c).brokers
                break
            c.close()
            assert time.monotonic() < deadline, "no slot came free"
        resp = held[0].request(INCREMENTAL_ALTER_CONFIGS, 1, IncrementalAlterConfigsRequest(resources=[
            IncrementalAlterResource(4, "", [IncrementalAlterable("max.connections", 0, "3")])]))
        assert resp.responses[0].error_code == 0
        with RawClient(b.bootstrap) as third, RawClient(b.bootstrap) as fourth:
            assert metadata(third).brokers and fourth.is_closed_by_broker()
    finally:
        for c in held:
            c.close()
    assert_clean_log(b)


# --- graceful shutdown --------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_exits_zero_and_writes_clean_shutdown_marker(broker_factory, sig):
    b = broker_factory()
    marker = b.data_dir / CLEAN_SHUTDOWN_MARKER
    with RawClient(b.bootstrap) as c:
        assert metadata(c).brokers
    assert not marker.exists()  # removed when the store opened; written again at a clean stop
    b.proc.send_signal(sig)
    assert b.proc.wait(30) == 0
    assert marker.exists()
    assert_clean_log(b)


def test_idle_client_does_not_delay_shutdown(broker_factory):
    b = broker_factory()
    with RawClient(b.bootstrap) as c:
        assert metadata(c).brokers
        started = time.monotonic()
        assert b.stop() == 0
        assert time.monotonic() - started < 5  # far below the 10 s grace period
        assert c.is_closed_by_broker()
    assert_clean_log(b)


def test_a_client_that_stops_reading_does_not_delay_shutdown(broker_factory):
    """Its answer waits in the broker and it will not read the one queued behind it either: the
    broker stops at once instead of after the 10 s grace period."""
    b = broker_factory()
    with RawClient(b.bootstrap) as c:
        create_topic(c, "big")
        for _ in range(12):
            assert produce(c, "big", batch([random.randbytes(900_000)])).error_code == 0
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect(("127.0.0.1", b.port))
    try:
        whole = request_frame(fetch_request("big", 0, partition_max_bytes=50 << 20), 12, 1, "x")
        stalled.sendall(whole + whole)
        deadline = time.monotonic() + 10
        while not select.select([stalled], [], [], 0.05)[0]:  # the answer has started to arrive
            assert time.monotonic() < deadline
        started = time.monotonic()
        assert b.stop() == 0
        assert time.monotonic() - started < 5
    finally:
        stalled.close()
    assert_clean_log(b)


def test_request_in_flight_at_sigterm_gets_its_answer(broker_factory):
    """SIGTERM while a slow request runs: it and the requests queued behind it are answered."""
    b = broker_factory()
    n_topics = 300  # auto-creating each one writes and fsyncs the topic registry: slow enough
    names = [f"slow-{i}" for i in range(n_topics)]
    with RawClient(b.bootstrap) as c:
        slow = c.frame(METADATA, 12, MetadataRequest(topics=[MetadataRequestTopic(name=n) for n in names],
                                                     allow_auto_topic_creation=True))
        quick = c.frame(API_VERSIONS, 3, ApiVersionsRequest(client_software_name="kshare-tests",
                                                            client_software_version="1.0"))
        last = c.frame(METADATA, 12, MetadataRequest(topics=None))
        c.send_raw(slow + quick + last)
        first_dir = b.data_dir / f"{names[0]}-0"
        deadline = time.monotonic() + 30
        while not first_dir.exists():  # the broker has read the frames and is handling the first
            assert time.monotonic() < deadline and b.alive()
            time.sleep(0.002)
        created_at_signal = sum(1 for n in names if (b.data_dir / f"{n}-0").exists())
        b.proc.send_signal(signal.SIGTERM)
        assert created_at_signal < n_topics, "the slow request finished before SIGTERM; make it slower"

        cid, body = split_response(METADATA, 12, c.recv_frame())
        slow_resp = MetadataResponse.from_bytes(body, 12)
        assert cid == 1 and [t.error_code for t in slow_resp.topics] == [0] * n_topics
        cid, body = split_response(API_VERSIONS, 3, c.recv_frame())
        assert cid == 2 and ApiVersionsResponse.from_bytes(body, 3).error_code == 0
        cid, body = split_response(METADATA, 12, c.recv_frame())
        assert cid == 3 and len([t for t in MetadataResponse.from_bytes(body, 12).topics if not t.is_internal]) == n_topics
        assert c.is_closed_by_broker()
    assert b.proc.wait(30) == 0
    assert (b.data_dir / CLEAN_SHUTDOWN_MARKER).exists()
    assert_clean_log(b)
    assert all((b.data_dir / f"{n}-0").is_dir() for n in names)
