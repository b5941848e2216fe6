"""The network persister: the share coordinator's state RPCs over a socket.

This is what share-partition leaders would use when the share coordinator of a key lives on
another broker. It builds the same request messages as ``InProcessPersister`` (it *is* one,
with a remote coordinator behind it) and, like Kafka's ``PersisterStateManager``:

- finds each key's coordinator with FindCoordinator v6, key type SHARE, key
  ``groupId:topicId:partition``, through the bootstrap broker, and caches the answer;
- sends the key's state RPC to that node (keys of one request that share a node share one
  request);
- on COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR or
  UNKNOWN_TOPIC_OR_PARTITION (from FindCoordinator or the RPC: a coordinator whose metadata
  lags, KAFKA-19455) forgets the coordinator, backs off exponentially (2 s after the
  first failure, doubling to 30 s, with 20% jitter: Kafka's ExponentialBackoff) and tries
  again, then reports that error. As in Kafka's handler per key, failed lookups and failed
  RPCs are counted apart, at most 5 of each (a lookup that succeeds resets its count), and
  the wait follows the count that grew. A coordinator that a concurrent call forgets while
  this call's lookup is awaited is looked up again at once, neither a failure nor a wait: as
  Kafka's handler, which sends FindCoordinator first whenever its node is unknown. Each such
  round needs another call's failed RPC of the key, so the other calls' limits bound them;
- a connection that fails is NETWORK_EXCEPTION and a request that times out
  REQUEST_TIMED_OUT (Kafka's disconnected and timed-out client responses), retried the
  same way (KAFKA-19927) and then reported;
- any other error is the key's answer at once, and so is a response that leaves the key
  out (UNKNOWN_SERVER_ERROR). Once ``should_retry()`` says no more (the broker is stopping),
  checked after each failure and each wait, every key still to retry is
  COORDINATOR_NOT_AVAILABLE, without another request.

A retry can reach the coordinator after a later write of the same key. The coordinator takes
a write's start offset as written, so a retried write carrying its own, older SPSO would move
the start back over records the later one pruned, and a restart would deliver them again.
Each write is therefore sent with the start offset and delivery-complete count of the key's
latest write (same state epoch): the leader stamps writes as it issues them and the SPSO only
grows, so the coordinator sees them in order. The state batches need nothing: the coordinator
combines them by delivery priority, whatever their order.

A broker of kshare talks to itself this way over loopback when ``kshare.share.persister``
is ``network``; it proves the seam and the wire handlers, not a cluster.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from coordinator.share.routing import key_string
from protocol import messages
from protocol.errors import ErrorCode
from protocol.messages.find_coordinator_request import FindCoordinatorRequest
from protocol.messages.find_coordinator_response import FindCoordinatorResponse
from protocol.framing import correlation_id, parse_response, request_frame

from .in_process import InProcessPersister

log = logging.getLogger("kshare.persister")

FIND_COORDINATOR = 10
INITIALIZE, READ, WRITE, DELETE, SUMMARY = 83, 84, 85, 86, 87
SHARE_KEY_TYPE = 2
FIND_COORDINATOR_VERSION = 6

REQUEST_BACKOFF_MS = 1_000  # Kafka's PersisterStateManager constants
REQUEST_BACKOFF_MAX_MS = 30_000
MAX_ATTEMPTS = 5
RETRIABLE = frozenset({
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT,
})

_SIZE = struct.Struct(">i")
Node = tuple[str, int]


def _exp_max(initial_ms: int, max_ms: int) -> float:
    """ExponentialBackoff's expMax: the exponent that reaches the maximum."""
    return math.log2(max_ms / max(initial_ms, 1)) if max_ms > initial_ms else 0


class ConnectionFailed(Exception):
    """``code``: NETWORK_EXCEPTION (no connection, or it broke) or REQUEST_TIMED_OUT."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.NETWORK_EXCEPTION) -> None:
        super().__init__(message)
        self.code = code


class _Connection:
    """One pipelined connection: requests go out in order, responses are matched by id."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str) -> None:
        self.reader = reader
        self.writer = writer
        self.client_id = client_id
        self._correlation = 0
        self._waiting: dict[int, tuple[asyncio.Future, int, int]] = {}
        self.closed = False
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def open(cls, node: Node, client_id: str, timeout_s: float) -> _Connection:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(*node), timeout_s)
        except (TimeoutError, OSError) as e:
            raise ConnectionFailed(f"cannot connect to {node[0]}:{node[1]}: {e}") from None
        return cls(reader, writer, client_id)

    async def request(self, api_key: int, version: int, body, timeout_s: float):
        if self.closed:
            raise ConnectionFailed("connection closed")
        self._correlation += 1
        cid = self._correlation
        fut = asyncio.get_running_loop().create_future()
        self._waiting[cid] = (fut, api_key, version)
        self.writer.write(request_frame(body, version, cid, self.client_id))
        try:
            await self.writer.drain()
            return await asyncio.wait_for(fut, timeout_s)
        except (TimeoutError, OSError) as e:
            self.close()
            code = ErrorCode.REQUEST_TIMED_OUT if isinstance(e, TimeoutError) else ErrorCode.NETWORK_EXCEPTION
            raise ConnectionFailed(f"request {api_key} v{version} failed: {e!r}", code) from None
        finally:
            self._waiting.pop(cid, None)

    async def _read_loop(self) -> None:
        try:
            while True:
                size = _SIZE.unpack(await self.reader.readexactly(4))[0]
                frame = await self.reader.readexactly(size)
                waiting = self._waiting.get(correlation_id(frame))
                if waiting is None:
                    continue
                fut, api_key, version = waiting
                response = parse_response(frame, api_key, version)
                if not fut.done():
                    fut.set_result(response)
        except (asyncio.IncompleteReadError, OSError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("unreadable response from the share coordinator")
        finally:
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for fut, _, _ in self._waiting.values():
            if not fut.done():
                fut.set_exception(ConnectionFailed("connection closed"))
        self._waiting.clear()
        self.writer.close()
        if asyncio.current_task() is not self._task:
            self._task.cancel()


@dataclass(slots=True)
class _Stamp:
    """A coordinator key's latest write, kept while any write of the key is in flight (module
    docstring: a retried write goes out with these values)."""

    in_flight: int
    state_epoch: int
    start_offset: int
    delivery_complete_count: int


class RemoteShareCoordinator:
    """The share coordinator service's five methods, answered by whichever broker
    coordinates each key (see the module docstring for lookups and retries)."""

    def __init__(
        self,
        bootstrap: Callable[[], Node],
        *,
        client_id: str = "kshare-share-persister",
        request_timeout_s: float = 30.0,
        backoff_ms: int = REQUEST_BACKOFF_MS,
        max_backoff_ms: int = REQUEST_BACKOFF_MAX_MS,
        max_attempts: int = MAX_ATTEMPTS,
        should_retry: Callable[[], bool] = lambda: True,
    ) -> None:
        self.bootstrap = bootstrap
        self.should_retry = should_retry
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.backoff_ms = backoff_ms
        self.max_backoff_ms = max_backoff_ms
        self.max_attempts = max_attempts
        self._coordinators: dict[str, Node] = {}  # coordinator key -> node
        self._connections: dict[Node, _Connection] = {}
        self._connecting: dict[Node, asyncio.Future] = {}
        self._stamps: dict[str, _Stamp] = {}  # coordinator key -> its latest write's, while in flight

    # --- the service interface ------------------------------------------------------------------

    async def initialize_state(self, request):
        return await self._call(INITIALIZE, 0, request)

    async def read_state(self, request):
        return await self._call(READ, 0, request)

    async def write_state(self, request, version: int = 1):
        keys = []
        for t in request.topics:
            for p in t.partitions:
                key = key_string(request.group_id, t.topic_id, p.partition)
                stamp = self._stamps.get(key)
                in_flight = stamp.in_flight if stamp is not None else 0
                self._stamps[key] = _Stamp(in_flight + 1, p.state_epoch, p.start_offset, p.delivery_complete_count)
                keys.append(key)
        try:
            return await self._call(WRITE, version, request)
        finally:
            for key in keys:
                stamp = self._stamps[key]
                stamp.in_flight -= 1
                if not stamp.in_flight:
                    del self._stamps[key]

    async def delete_state(self, request):
        return await self._call(DELETE, 0, request)

    async def read_state_summary(self, request, version: int = 1):
        return await self._call(SUMMARY, version, request)

    async def close(self) -> None:
        for conn in list(self._connections.values()):
            conn.close()
        self._connections.clear()

    # --- plumbing -------------------------------------------------------------------------------

    async def _call(self, api_key: int, version: int, request):
        _, _, resp_mod, resp_cls = messages.APIS[api_key]
        response_class = messages.load(resp_mod, resp_cls)
        group = request.group_id
        todo = [(t, p) for t in request.topics for p in t.partitions]
        done: dict[tuple[UUID, int], object] = {}
        results_by_topic: dict[UUID, object] = {}
        # Kafka's handler per key counts failed lookups (reset by one that succeeds) apart from
        # failed state RPCs, each up to max_attempts, and backs off on the count that grew.
        finds: dict[tuple[UUID, int], int] = {}
        rpcs: dict[tuple[UUID, int], int] = {}
        waiting: list[tuple[float, object, object]] = []  # (due, topic, partition), by due
        loop = asyncio.get_running_loop()

        def give_up(keys) -> None:  # should_retry() said no more: the keys still to retry fail now
            for t, p in keys:
                done[(t.topic_id, p.partition)] = _error(response_class, p.partition,
                                                         ErrorCode.COORDINATOR_NOT_AVAILABLE, "Not retried. ")

        while todo or waiting:
            if not todo:
                await asyncio.sleep(max(0.0, waiting[0][0] - loop.time()))
                if not self.should_retry():  # e.g. the broker began stopping while they waited
                    give_up((t, p) for _, t, p in waiting)
                    break
                now = loop.time()
                todo = [(t, p) for due, t, p in waiting if due <= now]
                waiting = [w for w in waiting if w[0] > now]
                continue
            retry: list[tuple[object, object, int]] = []  # (topic, partition, failures so far)
            again = []  # forgotten while the lookup was awaited (module docstring): looked up at once
            by_node: dict[Node, list] = {}
            errors = await self._lookup(group, todo)
            for t, p in todo:
                tp = (t.topic_id, p.partition)
                code = errors.get(tp)
                if code is not None:
                    n = finds[tp] = finds.get(tp, 0) + 1
                    if code in RETRIABLE and n < self.max_attempts:
                        retry.append((t, p, n))
                    else:
                        done[tp] = _error(response_class, p.partition, code, "Error in find coordinator. ")
                    continue
                node = self._coordinators.get(key_string(group, t.topic_id, p.partition))
                if node is None:
                    again.append((t, p))
                    continue
                finds[tp] = 0
                by_node.setdefault(node, []).append((t, p))
            sends = [self._send(api_key, version, request, node, items) for node, items in by_node.items()]
            for items, outcome in zip(by_node.values(), await asyncio.gather(*sends)):
                for (t, p) in items:
                    tp = (t.topic_id, p.partition)
                    if isinstance(outcome, ErrorCode):  # the request failed
                        pr, code = None, outcome
                    else:
                        pr, topic_result = outcome.get(tp, (None, None))
                        if topic_result is not None:
                            results_by_topic.setdefault(t.topic_id, topic_result)
                        code = ErrorCode.UNKNOWN_SERVER_ERROR if pr is None else ErrorCode(pr.error_code)
                    if code in RETRIABLE:
                        self._coordinators.pop(key_string(group, t.topic_id, p.partition), None)
                        n = rpcs[tp] = rpcs.get(tp, 0) + 1
                        if n < self.max_attempts:
                            retry.append((t, p, n))
                            continue
                    done[tp] = pr if pr is not None else _error(response_class, p.partition, code,
                                                               "Error in state RPC. ")
            todo = again
            if retry and not self.should_retry():  # e.g. the broker is stopping: fail now,
                give_up([*((t, p) for t, p, _ in retry), *((t, p) for _, t, p in waiting)])  # waiting keys too
                retry, waiting = [], []
            now = loop.time()
            waiting.extend((now + self._backoff_s(n), t, p) for t, p, n in retry)
            waiting.sort(key=lambda w: w[0])
        return _assemble(response_class, request, done, results_by_topic)

    def _backoff_s(self, attempt: int) -> float:
        """Kafka's ExponentialBackoff.backoff(attempts) after ``attempt`` failed attempts:
        backoff_ms * 2^attempt (2 s after the first), jittered by 20%, then capped."""
        base = self.backoff_ms * 2 ** min(attempt, _exp_max(self.backoff_ms, self.max_backoff_ms))
        return min(base * random.uniform(0.8, 1.2), self.max_backoff_ms) / 1000

    async def _lookup(self, group: str, items) -> dict[tuple[UUID, int], ErrorCode]:
        """Find the coordinators not cached yet; returns the keys whose lookup failed."""
        missing = {key_string(group, t.topic_id, p.partition): (t.topic_id, p.partition) for t, p in items}
        missing = {k: tp for k, tp in missing.items() if k not in self._coordinators}
        if not missing:
            return {}
        try:
            conn = await self._connection(self.bootstrap())
            resp: FindCoordinatorResponse = await conn.request(
                FIND_COORDINATOR, FIND_COORDINATOR_VERSION,
                FindCoordinatorRequest(key_type=SHARE_KEY_TYPE, coordinator_keys=list(missing)),
                self.request_timeout_s,
            )
        except ConnectionFailed as e:
            log.warning("share coordinator lookup failed: %s", e)
            return {tp: e.code for tp in missing.values()}
        errors = {}
        answered = set()
        for c in resp.coordinators:
            tp = missing.get(c.key)
            if tp is None:
                continue
            answered.add(c.key)
            if c.error_code:
                errors[tp] = ErrorCode(c.error_code)
            else:
                self._coordinators[c.key] = (c.host, c.port)
        for k, tp in missing.items():
            if k not in answered:
                errors[tp] = ErrorCode.UNKNOWN_SERVER_ERROR
        return errors

    async def _send(self, api_key: int, version: int, request, node: Node, items) -> dict | ErrorCode:
        """{(topic id, partition): (partition result, topic result shell)} for ``items``, or the
        error code of a request that failed (``ConnectionFailed.code``)."""
        try:
            conn = await self._connection(node)
            # built with no await before the request is written, so its stamps are the latest
            body = self._body(api_key, request, items)
            resp = await conn.request(api_key, version, body, self.request_timeout_s)
        except ConnectionFailed as e:
            log.warning("share state RPC %d to %s:%d failed: %s", api_key, node[0], node[1], e)
            return e.code
        out = {}
        for r in resp.results:
            shell = r.copy(partitions=[])
            for pr in r.partitions:
                out[(r.topic_id, pr.partition)] = (pr, shell)
        return out

    def _body(self, api_key: int, request, items):
        """``request`` cut down to ``items``; a write's partitions carry their key's latest stamp."""
        topics: dict[UUID, object] = {}
        for t, p in items:
            sub = topics.get(t.topic_id)
            if sub is None:
                sub = topics[t.topic_id] = t.copy(partitions=[])
            if api_key == WRITE:
                stamp = self._stamps.get(key_string(request.group_id, t.topic_id, p.partition))
                if stamp is not None and stamp.state_epoch == p.state_epoch and (
                        stamp.start_offset != p.start_offset
                        or stamp.delivery_complete_count != p.delivery_complete_count):
                    p = p.copy(start_offset=stamp.start_offset, delivery_complete_count=stamp.delivery_complete_count)
            sub.partitions.append(p)
        return request.copy(topics=list(topics.values()))

    async def _connection(self, node: Node) -> _Connection:
        conn = self._connections.get(node)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(node)
        if pending is not None:
            return await asyncio.shield(pending)
        fut = asyncio.get_running_loop().create_future()
        self._connecting[node] = fut
        try:
            conn = await _Connection.open(node, self.client_id, self.request_timeout_s)
            log.info("share persister connected to %s:%d", *node)
            self._connections[node] = conn
            fut.set_result(conn)
            return conn
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # retrieved here; waiters re-raise it
            raise
        finally:
            del self._connecting[node]


def _error(response_class, partition: int, code: ErrorCode, prefix: str):
    """A partition result with ``code``, of the response's own PartitionResult class."""
    module = sys.modules[response_class.__module__]
    return module.PartitionResult(partition=partition, error_code=int(code), error_message=prefix + code.name)


def _assemble(response_class, request, done: dict, topic_shells: dict):
    """The response in the request's topic and partition order."""
    module = sys.modules[response_class.__module__]
    result_class = next(v for k, v in vars(module).items()
                        if k.endswith("Result") and k != "PartitionResult" and isinstance(v, type))
    results = []
    for t in request.topics:
        shell = topic_shells.get(t.topic_id)
        parts = [done[(t.topic_id, p.partition)] for p in t.partitions if (t.topic_id, p.partition) in done]
        results.append(shell.copy(partitions=parts) if shell is not None
                       else result_class(topic_id=t.topic_id, partitions=parts))
    return response_class(results=results)


class NetworkPersister(InProcessPersister):
    """``InProcessPersister``'s request building, with the coordinator at the far end of a socket."""

    def __init__(self, bootstrap: Callable[[], Node], **kw) -> None:
        super().__init__(RemoteShareCoordinator(bootstrap, **kw))

    async def close(self) -> None:
        await self.service.close()
