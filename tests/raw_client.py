"""A minimal blocking Kafka client built on our codecs, for wire-level tests.

It speaks exactly what a test asks for (any API, any version, raw bytes too), which the real
clients never do: malformed frames, odd versions, epochs a client would not send.
"""

from __future__ import annotations

import socket
import struct

from protocol.framing import parse_response, request_frame


class RawClient:
    def __init__(self, bootstrap: str, client_id: str = "kshare-tests", timeout_s: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.client_id = client_id
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def frame(self, api_key: int, version: int, request) -> bytes:
        assert request.API_KEY == api_key
        self._correlation += 1
        return request_frame(request, version, self._correlation, self.client_id)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._recv_exact(4))
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("connection closed by broker")
            out += chunk
        return bytes(out)

    def request(self, api_key: int, version: int, request):
        """Send one request and return the decoded response."""
        self.send_raw(self.frame(api_key, version, request))
        return self.read_response(api_key, version)

    def read_response(self, api_key: int, version: int):
        return parse_response(self.recv_frame(), api_key, version)

    def is_closed_by_broker(self, timeout_s: float = 5.0) -> bool:
        """True once the broker has closed the connection (EOF or reset)."""
        self.sock.settimeout(timeout_s)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False
