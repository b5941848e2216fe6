"""The network layer: size-prefixed frames in, responses out in request order.

Like Kafka's SocketServer, each connection handles one request at a time and answers in the
order requests arrived (clients pipeline; the broker never reorders). Frames that arrive while
a request is being handled wait in a queue bounded in frames and bytes; past the bound the
socket stops being read, and while the transport's write buffer is full no new request starts
(``drain`` back-pressure). A frame whose size is negative or above
``socket.request.max.bytes``, or whose header or body does not parse, closes the connection:
the broker logs it and keeps serving everyone else. Like Kafka, which reads the next request
only once the previous one is answered, the requests before a bad size prefix or a client's
half-close (FIN) are still handled and answered before the connection closes. A connection
that neither reads nor has bytes taken by its client for ``connections.max.idle.ms`` is
closed, dropping what it has not sent (a client that stopped reading is idle too).
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import os
import resource
import socket
import struct
import time
from collections import deque
from typing import TYPE_CHECKING, Callable

from protocol.errors import ErrorCode, KafkaError
from protocol.framing import API_VERSIONS, request_header_version, response_header_version
from protocol.message import UnsupportedVersionError
from protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse
from protocol.messages.request_header import RequestHeader
from protocol.primitives import DecodeError

from .config import parse_ip_overrides
from .context import RequestContext
from .handlers import REGISTRY
from .log.throttle import ReportThrottle

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("kshare.server")

_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hhi")
MAX_QUEUED_FRAMES = 32
# Also bounded in bytes: Kafka reads one request per connection at a time, and 32 queued
# requests of socket.request.max.bytes (100 MiB) would be gigabytes.
MAX_QUEUED_BYTES = 4 << 20
SEND_WHOLE = 64 * 1024  # response parts this large (record data) are sent as they are
REPORT_INTERVAL_S = 60.0  # refused connections and stalled clients are logged at most this often
# Responses are built in memory (Kafka sends log bytes with sendfile), so a client that stops
# reading keeps its last response in the broker. Past this many such bytes over all connections,
# Fetch and ShareFetch answer one batch (KIP-74's minimum): clients that never read cannot take
# the broker's memory, and the others still make progress.
STALLED_RESPONSE_BYTES = 256 << 20
# At the open-files limit uvloop accepts and closes new connections without telling us (Kafka's
# acceptor logs each failure), so the idle reaper warns once this share of the limit is used.
FD_WARNING_FRACTION = 0.9


def open_files() -> tuple[int, int] | None:
    """(descriptors open, soft limit) of this process, where /proc tells and there is a limit."""
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit == resource.RLIM_INFINITY:
        return None
    try:
        return len(os.listdir("/proc/self/fd")), limit
    except OSError as e:  # EMFILE: not even /proc/self/fd can be opened, so every descriptor is taken
        return (limit, limit) if e.errno == errno.EMFILE else None


class CloseConnection(Exception):
    """Raised by the request pipeline when Kafka would drop the connection."""


class Connection(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.broker = server.broker
        self.transport: asyncio.Transport | None = None
        self.peer: tuple[str, int] = ("", 0)
        self.ip = ""  # the peer's address as max.connections.per.ip counts it
        self._buf = bytearray()
        self._frames: deque[bytearray] = deque()
        self._queued_bytes = 0
        self._wakeup: asyncio.Future | None = None
        self._writable: asyncio.Future | None = None
        self._stalled = 0  # bytes of a response the client has not taken while the socket is full
        self._reading_paused = False
        self._input_done = False  # EOF or a bad size prefix: answer what was read, then close
        self._bad_size: int | None = None
        self._closed = False
        self._worker: asyncio.Task | None = None
        self._close_callbacks: list[Callable[[], None]] = []
        self.busy = False
        self.last_active = time.monotonic()  # the last read, response written or unsent bytes taken
        self._unsent_seen = 0  # the write buffer's size when the idle reaper last looked
        self._expired = False

    # --- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        self._writev = type(transport).__module__.startswith("uvloop")
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                # As Kafka's acceptor: a peer that vanished (host down, no FIN or RST) is found
                # and its connection closed even where connections.max.idle.ms is disabled.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            except OSError:
                pass
        peer = transport.get_extra_info("peername") or ("", 0)
        self.peer = (peer[0], peer[1])
        if not self.server.admit(self):
            self._closed = True
            transport.close()
            return
        self._worker = asyncio.get_running_loop().create_task(self._run())

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        if self._input_done:
            return  # bytes behind a bad size prefix are never read
        buf = self._buf
        buf += data
        limit = self.server.max_request_bytes
        pos = 0
        n = len(buf)
        while n - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > limit:
                self._reject_size(size)
                break
            if n - pos - 4 < size:
                break
            self._frames.append(buf[pos + 4 : pos + 4 + size])
            self._queued_bytes += size
            pos += 4 + size
        if pos:
            del buf[:pos]
        if self._frames:
            self._wake()
            full = len(self._frames) >= MAX_QUEUED_FRAMES or self._queued_bytes >= MAX_QUEUED_BYTES
            if full and not self._reading_paused:
                self._reading_paused = True
                self.transport.pause_reading()

    def _reject_size(self, size: int) -> None:
        """Kafka reads the next size prefix only after answering the requests before it, so
        those are still answered; the worker closes the connection when it gets here."""
        self._bad_size = size
        self._end_input()

    def _end_input(self, *, pause: bool = True) -> None:
        """No more requests: what was read is answered, an incomplete frame never completed.
        After EOF there is nothing left to read, so reading is not paused then."""
        self._input_done = True
        self._buf.clear()
        if pause and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self):
        """A half-close (FIN) still gets the answers to every request it sent, as in Kafka,
        whose muted channel only sees the EOF once those are answered: keep the transport
        open for writing until the worker has sent them."""
        self._end_input(pause=False)
        return True

    def connection_lost(self, exc) -> None:
        self._closed = True
        self.server.release(self)
        self._wake()
        self.resume_writing()  # nothing more will be written: release a worker waiting to
        for cb in self._close_callbacks:
            try:
                cb()
            except Exception:  # pragma: no cover - a hook must never break teardown
                log.exception("connection close hook failed")
        self._close_callbacks.clear()

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self.last_active = time.monotonic()  # the client took what was waiting: progress
        self._unstall()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def _unstall(self) -> None:
        if self._stalled:
            self.server.stalled_bytes -= self._stalled
            self._stalled = 0

    def _stop_waiting_for_reader(self) -> None:
        """Shutdown: a client that is not reading its last answer will not read the next ones
        either, so its queued requests are dropped and its worker finishes now."""
        if self._writable is not None and not self._writable.done():
            self._frames.clear()
            self._queued_bytes = 0
            self._writable.set_result(None)

    # --- public ---------------------------------------------------------------------------

    def on_close(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when the connection goes away (e.g. to drop a share session)."""
        if self._closed:
            callback()
        else:
            self._close_callbacks.append(callback)

    def close(self) -> None:
        if not self._closed and self.transport is not None:
            self._closed = True
            self.transport.close()
            self._wake()

    def last_progress(self, now: float) -> float:
        """When the connection last read or wrote. Bytes leaving the write buffer count, as
        Kafka's IdleExpiryManager counts a socket ready to write: a client slowly reading a
        large answer is not idle, one that stopped reading is."""
        unsent = self.transport.get_write_buffer_size()
        if unsent < self._unsent_seen:
            self.last_active = now
        self._unsent_seen = unsent
        return self.last_active

    def expire(self) -> None:
        """Close after connections.max.idle.ms without progress. As in Kafka, what is still
        unsent is dropped (abort): a graceful close would wait forever for a client that
        stopped reading, keeping its socket and its max.connections slot."""
        if self._expired or self.transport is None:
            return
        self._expired = True
        self._closed = True
        log.info("closing idle connection from %s:%d", *self.peer)
        if self.transport.get_write_buffer_size():
            self.transport.abort()
        else:
            self.transport.close()
        self._wake()

    # --- request pipeline -----------------------------------------------------------------

    def _wake(self) -> None:
        w = self._wakeup
        if w is not None and not w.done():
            w.set_result(None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        metrics = self.server.request_metrics  # None unless the metrics endpoint is served
        try:
            while not self._closed:
                if not self._frames:
                    if self.server.stopping or self._input_done:
                        self._log_bad_size()
                        break
                    self._wakeup = loop.create_future()
                    await self._wakeup
                    self._wakeup = None
                    continue
                frame = self._frames.popleft()
                self._queued_bytes -= len(frame)
                if (self._reading_paused and len(self._frames) < MAX_QUEUED_FRAMES // 2
                        and self._queued_bytes < MAX_QUEUED_BYTES // 2 and not self._input_done):
                    self._reading_paused = False
                    self.transport.resume_reading()
                self.busy = True
                if metrics is not None:
                    started = time.perf_counter()
                try:
                    parts = await self._handle(frame)
                finally:
                    self.busy = False
                if parts is not None and not self._closed:
                    self._send(parts)
                    self.last_active = time.monotonic()
                    if metrics is not None:
                        metrics.record(frame, parts, time.perf_counter() - started)
                    if self._writable is not None and not self._writable.done():
                        self._stalled = self.transport.get_write_buffer_size()
                        self.server.stalled_bytes += self._stalled
                        await self._writable
                elif metrics is not None:  # acks=0, or the client went away meanwhile
                    metrics.record(frame, None, time.perf_counter() - started)
        except CloseConnection:
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("unexpected error on connection from %s:%d; closing it", *self.peer)
        finally:
            self.close()

    def _log_bad_size(self) -> None:
        if self._bad_size is not None:
            log.warning("closing connection from %s:%d: request size %d outside [0, socket.request.max.bytes=%d]",
                        *self.peer, self._bad_size, self.server.max_request_bytes)

    def _send(self, parts: list) -> None:
        """Write a response without joining its record data into one copy first.

        uvloop's ``writelines`` (the broker's loop) sends all parts with one writev and keeps
        what the socket did not take without copying. asyncio's (in-process tests) joins every
        part into new bytes, and a partial send copies the rest again: megabytes per ShareFetch
        or Fetch of large batches. There small parts are joined and large ones go to ``write``
        as they are, which sends at once and copies only what the socket did not take."""
        if self._writev:
            self.transport.writelines(parts)
            return
        write = self.transport.write
        small: list = []
        for part in parts:
            if len(part) >= SEND_WHOLE:
                if small:
                    write(b"".join(small))
                    small = []
                write(part)
            else:
                small.append(part)
        if small:
            write(b"".join(small) if len(small) > 1 else small[0])

    async def _handle(self, frame: bytearray):
        """Decode, dispatch and encode one request; None means no response (acks=0)."""
        if len(frame) < 8:
            log.warning("closing connection from %s:%d: %d-byte frame is too short for a header", *self.peer, len(frame))
            raise CloseConnection
        api_key, api_version, correlation_id = _KEY_VERSION.unpack_from(frame, 0)
        handler = REGISTRY.get(api_key)
        if handler is None:
            log.warning("closing connection from %s:%d: unknown API key %d", *self.peer, api_key)
            raise CloseConnection
        if not handler.min_version <= api_version <= handler.max_version:
            if api_key == API_VERSIONS:
                # Kafka answers an ApiVersions it cannot parse in v0 (header and body), naming only
                # its own ApiVersions range (KIP-511) so the client retries with a version it has.
                # The header is still parsed first (RequestHeader.parse, in the version's header
                # version), and one that does not parse closes the connection as for any request.
                try:
                    RequestHeader.decode(memoryview(frame), request_header_version(api_key, api_version))
                except DecodeError as e:
                    log.warning("closing connection from %s:%d: malformed ApiVersions v%d request header: %s",
                                *self.peer, api_version, e)
                    raise CloseConnection from None
                return self._encode_response(
                    correlation_id, api_key, 0,
                    ApiVersionsResponse(
                        error_code=ErrorCode.UNSUPPORTED_VERSION,
                        api_keys=[ApiVersion(api_key=api_key, min_version=handler.min_version,
                                             max_version=handler.max_version)],
                    ),
                )
            log.warning(
                "closing connection from %s:%d: unsupported version %d of API %s (%d-%d)",
                *self.peer, api_version, handler.name, handler.min_version, handler.max_version,
            )
            raise CloseConnection
        view = memoryview(frame)
        try:
            header, pos = RequestHeader.decode(view, request_header_version(api_key, api_version))
            # Like Kafka, ignore bytes after the body: librdkafka 2.16 sends a few on Metadata v13.
            request, _ = handler.request_class.decode(view, api_version, pos)
        except (DecodeError, UnsupportedVersionError) as e:
            log.warning("closing connection from %s:%d: malformed %s v%d request: %s", *self.peer, handler.name, api_version, e)
            log.debug("malformed frame: %s", bytes(frame[:256]).hex())
            raise CloseConnection from None
        ctx = RequestContext(self.broker, self, api_key, api_version, correlation_id, header.client_id)
        try:
            response = await handler.handle(ctx, request)
        except CloseConnection:
            raise
        except Exception as e:
            response = self._error_response(handler, request, api_version, e)
        if response is None:
            return None
        return self._encode_response(correlation_id, api_key, api_version, response)

    def _error_response(self, handler, request, api_version: int, e: Exception):
        """What Kafka's KafkaApis does with a handler's unexpected exception: log it and
        answer the request's error response (``Errors.forException``: a KafkaError's own code,
        UNKNOWN_SERVER_ERROR for anything else), so one failed request does not take the
        client's connection and share session with it."""
        log.exception("%s v%d from %s:%d failed", handler.name, api_version, *self.peer)
        code = e.code if isinstance(e, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR
        response = handler.error_response(request, api_version, code)
        if response is None:  # no answer wanted (an acks=0 Produce): Kafka's sendErrorOrCloseConnection closes
            raise CloseConnection from None
        return response

    def _encode_response(self, correlation_id: int, api_key: int, api_version: int, response) -> list:
        head = bytearray(8)
        _SIZE.pack_into(head, 4, correlation_id)
        if response_header_version(api_key, api_version) == 1:
            head.append(0)  # no tagged fields in the response header
        parts = response.encode(api_version, head, [])
        total = 0
        for p in parts:
            total += len(p)
        _SIZE.pack_into(parts[0], 0, total - 4)
        return parts


def _address_key(host: str) -> str:
    """An address as one key: IPv4-mapped IPv6 peers (dual-stack listeners) as their IPv4."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return host
    if addr.version == 6 and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(addr)


def _resolve_overrides(overrides: dict[str, int]) -> dict[str, int]:
    """Host names to addresses, as Kafka's ConnectionQuotas does (InetAddress.getByName); a
    name that does not resolve is logged and left out."""
    out: dict[str, int] = {}
    for host, count in overrides.items():
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError as e:
            log.warning("max.connections.per.ip.overrides: cannot resolve %s (%s); its override is ignored", host, e)
            continue
        for info in infos:
            out[_address_key(info[4][0])] = count
    return out


class Server:
    """Accepts connections for one broker within its connection limits, and tracks them for
    idle timeouts and shutdown."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        cfg = broker.config
        self.max_request_bytes: int = cfg["socket.request.max.bytes"]
        self.idle_ms: int = cfg["connections.max.idle.ms"]
        self.connections: set[Connection] = set()
        # Per-API request metrics (broker/metrics.py), set while the metrics endpoint is served.
        self.request_metrics = None
        self.stopping = False
        self.stalled_bytes = 0  # response bytes waiting for clients that stopped reading
        self.stalled_budget = STALLED_RESPONSE_BYTES
        self._stall_reports = ReportThrottle(REPORT_INTERVAL_S, time.monotonic)
        self._server: asyncio.base_events.Server | None = None
        self._reaper: asyncio.Task | None = None
        self._refusals = ReportThrottle(REPORT_INTERVAL_S, time.monotonic)
        self._per_ip: dict[str, int] = {}  # open connections by address (Kafka's ConnectionQuotas counts)
        self._ip_overrides: dict[str, int] = {}
        self._ip_overrides_raw = ""
        self._ip_rejections = ReportThrottle(REPORT_INTERVAL_S, time.monotonic)
        self._fd_reports = ReportThrottle(REPORT_INTERVAL_S, time.monotonic)

    def admit(self, conn: Connection) -> bool:
        """Count a new connection against Kafka's connection quotas: the listener's and the
        broker's ``max.connections``, then ``max.connections.per.ip`` (and its overrides) of
        the peer's address. All are read per connection, so dynamic changes apply to new ones."""
        cfg = self.broker.config
        limit, name = cfg["max.connections"], "max.connections"
        listener_limit = cfg.listener_max_connections()
        if listener_limit < limit:
            limit, name = listener_limit, cfg.listener_config_name("max.connections")
        if len(self.connections) >= limit:
            self.refused(conn.peer, name, limit)
            return False
        conn.ip = ip = _address_key(conn.peer[0])
        count, ip_limit = self._per_ip.get(ip, 0), self._ip_limit(ip)
        if count >= ip_limit:
            self._rejected_ip(ip, ip_limit)
            return False
        self._per_ip[ip] = count + 1
        self.connections.add(conn)
        return True

    def release(self, conn: Connection) -> None:
        """Give back an admitted connection's slots."""
        if conn in self.connections:
            self.connections.discard(conn)
            left = self._per_ip.pop(conn.ip) - 1
            if left:
                self._per_ip[conn.ip] = left

    def _ip_limit(self, ip: str) -> int:
        cfg = self.broker.config
        raw = cfg["max.connections.per.ip.overrides"]
        if raw != self._ip_overrides_raw:  # parsed (and host names resolved) once per change
            self._ip_overrides, self._ip_overrides_raw = _resolve_overrides(parse_ip_overrides(raw)), raw
        return self._ip_overrides.get(ip, cfg["max.connections.per.ip"])

    def _rejected_ip(self, ip: str, limit: int) -> None:
        """Kafka's acceptor closes a connection over the per-address limit at once and logs it;
        here that log comes at most once a minute, as for max.connections."""
        count = self._ip_rejections.occurred()
        if count:
            log.info("Rejected connection from %s, address already has the configured maximum of %d connections "
                     "(%d rejected since the last report).", ip, limit, count)

    def refused(self, peer: tuple[str, int], name: str, limit: int) -> None:
        """A connection over ``max.connections`` is closed at once, and reported at most once a
        minute. Kafka's acceptor waits for a free slot instead; clients reconnect after their
        backoff either way."""
        count = self._refusals.occurred()
        if count:
            log.warning("%s=%d reached: closed %d new connection(s) since the last report, the latest "
                        "from %s:%d", name, limit, count, *peer)

    def response_bytes(self, max_bytes: int) -> int:
        """What a Fetch or ShareFetch may read now: ``max_bytes``, or 1 (one batch) while more
        than the budget of response bytes wait for clients that stopped reading."""
        if self.stalled_bytes <= self.stalled_budget:
            return max_bytes
        count = self._stall_reports.occurred()
        if count:
            log.warning("%d MiB of responses wait for clients that do not read them: %d fetch(es) since the last "
                        "report got one batch", self.stalled_bytes >> 20, count)
        return 1

    async def start(self, host: str, port: int) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        cfg = self.broker.config
        self._server = await loop.create_server(
            lambda: Connection(self), host or None, port, reuse_address=True, backlog=1024
        )
        sock = self._server.sockets[0]
        for opt, name in ((socket.SO_SNDBUF, "socket.send.buffer.bytes"), (socket.SO_RCVBUF, "socket.receive.buffer.bytes")):
            if cfg[name] > 0:
                sock.setsockopt(socket.SOL_SOCKET, opt, cfg[name])
        self._reaper = loop.create_task(self._reap_idle())
        addr = sock.getsockname()
        return addr[0], addr[1]

    async def _reap_idle(self) -> None:
        """Close connections that made no progress for connections.max.idle.ms, as Kafka does
        (a negative value disables this, as in Kafka's Selector), and warn when the open files
        near their limit."""
        expiring = self.idle_ms >= 0
        period = max(0.05, min(self.idle_ms / 1000 / 4, 30.0)) if expiring else 30.0
        while True:
            await asyncio.sleep(period)
            self._check_open_files()  # before idle connections give theirs back
            if expiring:
                self._expire_idle(time.monotonic())

    def _expire_idle(self, now: float) -> None:
        """Expire connections without progress, queued or unsent data or not (a client that
        stopped reading has both); one still handling a request is left to finish it."""
        deadline = now - self.idle_ms / 1000
        for conn in list(self.connections):
            if conn.last_progress(now) < deadline and not conn.busy:
                conn.expire()

    def _check_open_files(self) -> None:
        usage = open_files()
        if usage is not None and usage[0] >= FD_WARNING_FRACTION * usage[1] and self._fd_reports.occurred():
            log.warning("%d of %d file descriptors are open (client connections, log segments): new connections "
                        "are closed at once at the limit; raise the open-files limit (ulimit -n, LimitNOFILE=)",
                        *usage)

    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop accepting, let every connection finish the requests it has read (but not a
        client that stopped reading its answers), then close."""
        self.stopping = True
        if self._reaper is not None:
            self._reaper.cancel()
        if self._server is not None:
            self._server.close()
        workers = []
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.pause_reading()
            conn._stop_waiting_for_reader()
            conn._wake()
            if conn._worker is not None:
                workers.append(conn._worker)
        if workers:
            done, pending = await asyncio.wait(workers, timeout=grace_s)
            for t in pending:
                t.cancel()
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()
