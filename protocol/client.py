"""A small blocking Kafka client on our codecs, for tools that must also work against Apache
Kafka: the share-group CLI and the Spark data source.

It negotiates versions with ApiVersions (the highest version both sides know), learns the
brokers from Metadata, and sends each request to the node it names: partition requests to
the leader, group requests to the coordinator. One connection per node, one request at a
time (tools are not throughput-critical).
"""

from __future__ import annotations

import socket
import struct
from typing import Iterable

from . import messages
from .errors import ErrorCode, KafkaError
from .framing import correlation_id, parse_response, request_frame
from .messages.api_versions_request import ApiVersionsRequest
from .messages.find_coordinator_request import FindCoordinatorRequest
from .messages.metadata_request import MetadataRequest, MetadataRequestTopic

_SIZE = struct.Struct(">i")
GROUP_KEY_TYPE = 0


class BrokerConnection:
    """One socket to one broker, with the API versions it supports."""

    def __init__(self, host: str, port: int, client_id: str, timeout_s: float) -> None:
        self.address = (host, port)
        self.client_id = client_id
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self._correlation = 0
        self.versions: dict[int, tuple[int, int]] = {}
        resp = self.send(ApiVersionsRequest(client_software_name="kshare", client_software_version="0"), 3)
        if resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
            resp = self.send(ApiVersionsRequest(), 0)
        if resp.error_code:
            raise KafkaError(resp.error_code, f"ApiVersions failed on {host}:{port}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def version(self, api_key: int, highest: int | None = None) -> int:
        """The newest version both we and the broker support (capped at ``highest``)."""
        ours = messages.VALID_VERSIONS[api_key]
        theirs = self.versions.get(api_key)
        if theirs is None:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"broker does not support API {api_key}")
        top = min(ours[1], theirs[1], highest if highest is not None else ours[1])
        if top < max(ours[0], theirs[0]):
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"no common version of API {api_key}")
        return top

    def send(self, request, version: int | None = None):
        if version is None:
            version = self.version(request.API_KEY)
        self._correlation += 1
        self.sock.sendall(request_frame(request, version, self._correlation, self.client_id))
        while True:
            frame = self._recv(_SIZE.unpack(self._recv(4))[0])
            if correlation_id(frame) == self._correlation:
                return parse_response(frame, request.API_KEY, version)

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"{self.address[0]}:{self.address[1]} closed the connection")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


class KafkaClient:
    def __init__(self, bootstrap: str, client_id: str = "kshare-client", timeout_s: float = 30.0) -> None:
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._bootstrap = [_host_port(b) for b in bootstrap.split(",") if b.strip()]
        self._nodes: dict[int, tuple[str, int]] = {}
        self._conns: dict[tuple[str, int], BrokerConnection] = {}
        self._any: BrokerConnection | None = None

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()
        self._any = None

    # --- connections ----------------------------------------------------------------------------

    def _connect(self, address: tuple[str, int]) -> BrokerConnection:
        conn = self._conns.get(address)
        if conn is None:
            conn = self._conns[address] = BrokerConnection(*address, self.client_id, self.timeout_s)
        return conn

    def any_broker(self) -> BrokerConnection:
        if self._any is None:
            errors = []
            for address in self._bootstrap:
                try:
                    self._any = self._connect(address)
                    break
                except OSError as e:
                    errors.append(f"{address[0]}:{address[1]}: {e}")
            else:
                raise ConnectionError("cannot reach any bootstrap server (" + "; ".join(errors) + ")")
        return self._any

    def node(self, node_id: int) -> BrokerConnection:
        if node_id not in self._nodes:
            self.metadata([])
        if node_id not in self._nodes:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"unknown broker {node_id}")
        return self._connect(self._nodes[node_id])

    # --- requests -------------------------------------------------------------------------------

    def send(self, request, version: int | None = None, node: int | None = None):
        conn = self.any_broker() if node is None else self.node(node)
        return conn.send(request, version)

    def version(self, api_key: int, highest: int | None = None) -> int:
        return self.any_broker().version(api_key, highest)

    def metadata(self, topics: Iterable[str] | None = None):
        """Metadata for ``topics`` (None: all topics, [] : brokers only); never creates topics."""
        conn = self.any_broker()
        v = conn.version(3, 12)
        req = MetadataRequest(
            topics=None if topics is None else [MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
        )
        resp = conn.send(req, v)
        self._nodes = {b.node_id: (b.host, b.port) for b in resp.brokers}
        return resp

    def group_coordinator(self, group_id: str) -> int:
        """The node id coordinating ``group_id`` (FindCoordinator, key type GROUP)."""
        conn = self.any_broker()
        v = conn.version(10)
        if v >= 4:
            resp = conn.send(FindCoordinatorRequest(key_type=GROUP_KEY_TYPE, coordinator_keys=[group_id]), v)
            c = resp.coordinators[0]
            code, message, node, host, port = c.error_code, c.error_message, c.node_id, c.host, c.port
        else:
            resp = conn.send(FindCoordinatorRequest(key=group_id, key_type=GROUP_KEY_TYPE), v)
            code, message, node, host, port = resp.error_code, resp.error_message, resp.node_id, resp.host, resp.port
        if code:
            raise KafkaError(code, message)
        self._nodes[node] = (host, port)
        return node


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected host:port, got {text!r}")
    return host.strip("[]"), int(port)
