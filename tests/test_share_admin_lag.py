"""KIP-1226 lag is exact: DescribeShareGroupOffsets' Lag equals a brute-force count of the
records at or after the share-partition start offset that are not ACKNOWLEDGED or ARCHIVED,
after any sequence of produce / acquire / accept / release / reject / lock timeout.

The broker runs in-process (memory log store, handlers called directly) so lock timeouts come
from a fake clock instead of waiting. Each example uses a fresh topic and group, starts it at
offset 0 with AlterShareGroupOffsets, and checks the lag after every step against a model of
per-offset delivery state that is driven only by what the broker returned (acquired ranges)
and the rules of KIP-932 (delivery limit 2 here, so releases and timeouts also archive).
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.context import RequestContext
from broker.handlers import alter_share_group_offsets as alter_handler
from broker.handlers import delete_groups as delete_groups_handler
from broker.handlers import delete_share_group_offsets as delete_offsets_handler
from broker.handlers import describe_share_group_offsets as describe_handler
from broker.handlers import produce as produce_handler
from broker.log.memory import MemoryLogStore
from broker.share.manager import FetchParams
from coordinator.group.share_offsets import share_partition_lag
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.alter_share_group_offsets_request import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from protocol.messages.delete_groups_request import DeleteGroupsRequest
from protocol.messages.delete_share_group_offsets_request import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequestTopic,
)
from protocol.messages.describe_share_group_offsets_request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)
from protocol.messages.describe_share_group_offsets_response import (
    DescribeShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponseGroup,
    DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
)
from tests.test_produce_support import batch, produce_request

ACCEPT, RELEASE, REJECT = 1, 2, 3
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = "available", "acquired", "acknowledged", "archived"
TERMINAL = {ACKNOWLEDGED, ARCHIVED}
DELIVERY_LIMIT = 2
LOCK_MS = 30_000
MEMBERS = ("member-a", "member-b")
_names = itertools.count()


class FakeClock:
    """Lock deadlines for the share-partition leaders, far ahead of the loop's own clock so the
    real lock timers never fire during a test; ``advance`` moves only this clock."""

    def __init__(self, start_ms: float) -> None:
        self.ms = start_ms

    def __call__(self) -> float:
        return self.ms


@dataclass
class Local:
    loop: asyncio.AbstractEventLoop
    broker: Broker
    clock: FakeClock


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    loop = asyncio.new_event_loop()
    cfg = {
        "log.dirs": str(tmp_path_factory.mktemp("lag") / "data"),
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "group.share.delivery.count.limit": str(DELIVERY_LIMIT),
        "offsets.topic.num.partitions": "3",
        "share.coordinator.state.topic.num.partitions": "3",
    }
    b = Broker(BrokerConfig(cfg), store=MemoryLogStore())
    loop.run_until_complete(b.start())
    clock = FakeClock(loop.time() * 1000 + 10**9)
    b.share_manager._now = clock  # SharePartitions made from now on use the fake clock
    yield Local(loop, b, clock)
    loop.run_until_complete(b.stop())
    loop.close()


def ctx(b, api_key: int, version: int) -> RequestContext:
    conn = type("Conn", (), {"peer": ("127.0.0.1", 1), "close": lambda self: None})()
    return RequestContext(b, conn, api_key, version, 1, "tests")


@dataclass
class Model:
    """Per-offset delivery state as KIP-932 defines it, fed with what the broker returned."""

    end: int = 0
    state: dict[int, str] = field(default_factory=dict)
    count: dict[int, int] = field(default_factory=dict)
    owner: dict[int, str] = field(default_factory=dict)

    def produced(self, n: int) -> None:
        for o in range(self.end, self.end + n):
            self.state[o], self.count[o] = AVAILABLE, 0
        self.end += n

    def acquired(self, member: str, first: int, last: int, delivery_count: int) -> None:
        for o in range(first, last + 1):
            assert self.state[o] == AVAILABLE, (o, self.state[o])
            assert delivery_count == self.count[o] + 1, (o, delivery_count, self.count[o])
            self.state[o], self.count[o], self.owner[o] = ACQUIRED, delivery_count, member

    def _released(self, o: int) -> None:
        self.state[o] = ARCHIVED if self.count[o] >= DELIVERY_LIMIT else AVAILABLE
        self.owner.pop(o, None)

    def acked(self, offsets: list[int], ack_type: int) -> None:
        for o in offsets:
            if ack_type == ACCEPT:
                self.state[o] = ACKNOWLEDGED
            elif ack_type == REJECT:
                self.state[o] = ARCHIVED
            else:
                self._released(o)
            self.owner.pop(o, None)

    def locks_expired(self) -> None:
        for o in [o for o, s in self.state.items() if s == ACQUIRED]:
            self._released(o)

    def held_run(self, member: str, start: int, length: int) -> list[int]:
        """Up to ``length`` consecutive offsets acquired by ``member``, from its ``start``-th."""
        held = sorted(o for o, m in self.owner.items() if m == member)
        if not held:
            return []
        run = [held[start % len(held)]]
        while len(run) < length and self.owner.get(run[-1] + 1) == member:
            run.append(run[-1] + 1)
        return run

    def first_open(self) -> int:
        """The lowest offset still to be delivered (the SPSO once everything is written)."""
        return next((o for o in range(self.end) if self.state[o] not in TERMINAL), self.end)

    def lag_from(self, start: int) -> int:
        return sum(1 for o in range(start, self.end) if self.state[o] not in TERMINAL)


async def describe(b, group: str, topic: str):
    req = DescribeShareGroupOffsetsRequest(groups=[DescribeShareGroupOffsetsRequestGroup(
        group_id=group, topics=[DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[0])])])
    resp = await describe_handler.handle(ctx(b, 90, 1), req)
    (g,) = resp.groups
    assert g.error_code == 0, (g.error_code, g.error_message)
    (p,) = g.topics[0].partitions
    assert p.error_code == 0, (p.error_code, p.error_message)
    return p


async def check_lag(b, model: Model, group: str, topic: str) -> None:
    p = await describe(b, group, topic)
    assert p.lag == model.lag_from(p.start_offset), (p.start_offset, p.lag, model)
    assert p.lag == model.lag_from(model.first_open()), (p.start_offset, p.lag, model.first_open(), model)
    assert 0 <= p.start_offset <= model.first_open()  # only delivered offsets lie below the SPSO


async def run_ops(local: Local, ops) -> None:
    b, manager = local.broker, local.broker.share_manager
    n = next(_names)
    topic, group = f"lag-{n}", f"lag-group-{n}"
    topic_id = b.topics.create(topic, 1).topic_id
    reset = await alter_handler.handle(ctx(b, 91, 0), AlterShareGroupOffsetsRequest(group_id=group, topics=[
        AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[
            AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0)])]))
    assert reset.error_code == 0 and reset.responses[0].partitions[0].error_code == 0, reset
    model = Model()
    await check_lag(b, model, group, topic)
    for op in ops:
        kind = op[0]
        if kind == "produce":
            resp = await produce_handler.handle(ctx(b, 0, 9), produce_request(
                topic, batch([f"r{model.end + i}".encode() for i in range(op[1])])))
            assert resp.responses[0].partition_responses[0].error_code == 0
            model.produced(op[1])
        elif kind == "fetch":
            _, member, max_records = op
            got = await manager.fetch(group, member, [(topic_id, 0, topic)], FetchParams(
                max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, max_records=max_records, batch_size=max_records))
            part = got.get((topic_id, 0))  # (answered only with records or an error)
            assert part is None or part.error_code == 0, part.error_code
            for first, last, count in part.acquired if part else ():
                model.acquired(member, first, last, count)
        elif kind == "ack":
            _, member, ack_type, start, length = op
            run = model.held_run(member, start, length)
            if not run:
                continue
            result = await manager.acknowledge(group, member, {(topic_id, 0): [(run[0], run[-1], [ack_type])]})
            assert result[(topic_id, 0)] == (0, None), result
            model.acked(run, ack_type)
        else:  # every acquisition lock times out
            local.clock.ms += LOCK_MS + 1
            leader = manager._leaders.get((group, topic_id, 0))
            if leader is not None:
                manager._expire(leader)
            if manager._writes:
                await asyncio.gather(*list(manager._writes))
            model.locks_expired()
        await check_lag(b, model, group, topic)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("produce"), st.integers(1, 3)),
        st.tuples(st.just("fetch"), st.sampled_from(MEMBERS), st.integers(1, 4)),
        st.tuples(st.just("ack"), st.sampled_from(MEMBERS), st.sampled_from([ACCEPT, RELEASE, REJECT]),
                  st.integers(0, 8), st.integers(1, 3)),
        st.tuples(st.just("timeout")),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_lag_counts_exactly_the_undelivered_records(local, ops):
    local.loop.run_until_complete(run_ops(local, ops))


def test_the_kip_example_has_lag_7(local):
    """KIP-1226's example: offsets 0-1 archived, 2 and 4 acquired, 3 available, 5 acknowledged,
    6 archived, 7-10 never fetched; SPSO 2, end offset 11, lag 11 - 2 - 2 = 7."""
    ops = [("produce", 1)] * 11 + [
        ("fetch", "member-a", 2), ("ack", "member-a", REJECT, 0, 2),   # 0, 1 archived
        ("fetch", "member-a", 5),                                        # 2-6 acquired
        ("ack", "member-a", RELEASE, 1, 1),                              # 3 available again
        ("ack", "member-a", ACCEPT, 2, 1),                               # 5 acknowledged
        ("ack", "member-a", REJECT, 2, 1),                               # 6 archived
    ]
    local.loop.run_until_complete(run_ops(local, ops))
    n = next(_names) - 1
    p = local.loop.run_until_complete(describe(local.broker, f"lag-group-{n}", f"lag-{n}"))
    assert (p.start_offset, p.leader_epoch, p.lag) == (2, 0, 7)


def _describe_raw(b, group: str, topic: str):
    req = DescribeShareGroupOffsetsRequest(groups=[DescribeShareGroupOffsetsRequestGroup(
        group_id=group, topics=[DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[0])])])
    return describe_handler.handle(ctx(b, 90, 1), req)


def test_a_failing_persister_is_a_group_level_error(local, monkeypatch):
    """Kafka fails the whole group when ReadShareGroupStateSummary fails: its code (or
    UNKNOWN_SERVER_ERROR for an unexpected failure), with the code's default message as
    KafkaApis sets it (Errors.forException(e).message), and no topics."""
    ops = [("produce", 2), ("fetch", "member-a", 2), ("ack", "member-a", ACCEPT, 0, 1)]
    local.loop.run_until_complete(run_ops(local, ops))
    n = next(_names) - 1
    runtime = local.broker.group_coordinator

    class Failing:
        def __init__(self, error):
            self.error = error

        async def read_summary(self, group_id, pairs):
            raise self.error

    for error, code, message in [
        (RuntimeError("disk on fire"), ErrorCode.UNKNOWN_SERVER_ERROR,
         "The server experienced an unexpected error when processing the request."),
        (KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE), ErrorCode.COORDINATOR_NOT_AVAILABLE,
         "The coordinator is not available."),
    ]:
        monkeypatch.setattr(runtime, "_persister", lambda error=error: Failing(error))
        (g,) = local.loop.run_until_complete(_describe_raw(local.broker, f"lag-group-{n}", f"lag-{n}")).groups
        assert (g.error_code, g.error_message, g.topics) == (code, message, [])


@pytest.mark.parametrize("group_id, partitions", [("", [0]), (None, []), (None, [-1, 0])])
def test_a_summary_read_kafkas_persister_refuses_fails_the_group(local, group_id, partitions):
    """DefaultStatePersister.validateGroupTopicPartitionData throws for an empty group id, an
    existing topic without partitions or a negative partition; KafkaApis answers the group
    UNKNOWN_SERVER_ERROR with no topics. A topic that does not exist never gets that far."""
    ops = [("produce", 2), ("fetch", "member-a", 2)]
    local.loop.run_until_complete(run_ops(local, ops))
    n = next(_names) - 1
    group = f"lag-group-{n}" if group_id is None else group_id
    req = DescribeShareGroupOffsetsRequest(groups=[DescribeShareGroupOffsetsRequestGroup(
        group_id=group, topics=[DescribeShareGroupOffsetsRequestTopic(topic_name=f"lag-{n}", partitions=partitions),
                                DescribeShareGroupOffsetsRequestTopic(topic_name="no-such-topic", partitions=[0])])])
    (g,) = local.loop.run_until_complete(describe_handler.handle(ctx(local.broker, 90, 1), req)).groups
    assert (g.error_code, g.error_message, g.topics) == (
        ErrorCode.UNKNOWN_SERVER_ERROR, "The server experienced an unexpected error when processing the request.", [])


def test_a_partition_whose_log_is_gone_has_its_own_error(local, monkeypatch):
    """A topic deleted between the summary read and the end-offset lookup: the partition, not
    the group, answers UNKNOWN_TOPIC_OR_PARTITION with Kafka's message."""
    ops = [("produce", 2), ("fetch", "member-a", 2), ("ack", "member-a", ACCEPT, 0, 1)]
    local.loop.run_until_complete(run_ops(local, ops))
    n = next(_names) - 1
    real_get = local.broker.store.get
    monkeypatch.setattr(local.broker.store, "get",
                        lambda topic, partition: None if topic == f"lag-{n}" else real_get(topic, partition))
    (g,) = local.loop.run_until_complete(_describe_raw(local.broker, f"lag-group-{n}", f"lag-{n}")).groups
    assert g.error_code == 0
    (p,) = g.topics[0].partitions
    assert (p.error_code, p.error_message) == (3, "This server does not host this topic-partition.")


def test_a_persister_failing_one_group_deletion_fails_only_that_group(local, monkeypatch):
    """GroupCoordinatorService.deleteShareGroup turns a DeleteShareGroupState that fails
    outright into that group's error (Errors.forException: UNKNOWN_SERVER_ERROR); the other
    groups of the request are still deleted."""
    local.loop.run_until_complete(run_ops(local, []))
    failing = f"lag-group-{next(_names) - 1}"
    local.loop.run_until_complete(run_ops(local, []))
    other = f"lag-group-{next(_names) - 1}"
    runtime = local.broker.group_coordinator
    real = runtime._persister()

    class FailingFor:
        def __getattr__(self, name):
            return getattr(real, name)

        async def delete_state(self, group_id, pairs):
            if group_id == failing:
                raise RuntimeError("disk on fire")
            return await real.delete_state(group_id, pairs)

    monkeypatch.setattr(runtime, "_persister", FailingFor)
    resp = local.loop.run_until_complete(delete_groups_handler.handle(
        ctx(local.broker, 42, 2), DeleteGroupsRequest(groups_names=[failing, other])))
    assert {r.group_id: r.error_code for r in resp.results} == {failing: ErrorCode.UNKNOWN_SERVER_ERROR, other: 0}
    assert runtime.coordinator.has_group(failing) and not runtime.coordinator.has_group(other)


def test_a_failing_persister_fails_delete_offsets_with_the_codes_default_message(local, monkeypatch):
    """GroupCoordinatorService.deleteShareGroupOffsetsState answers a DeleteShareGroupState that
    fails outright with getErrorDeleteResponseData(Errors.forException(e)): the code (or
    UNKNOWN_SERVER_ERROR) and that code's default message, whatever the exception said."""
    runtime = local.broker.group_coordinator
    real = runtime._persister()
    for error, code, message in [
        (RuntimeError("disk on fire"), ErrorCode.UNKNOWN_SERVER_ERROR,
         "The server experienced an unexpected error when processing the request."),
        (KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "not now"), ErrorCode.COORDINATOR_NOT_AVAILABLE,
         "The coordinator is not available."),
    ]:
        local.loop.run_until_complete(run_ops(local, []))
        n = next(_names) - 1

        class Failing:
            def __getattr__(self, name):
                return getattr(real, name)

            async def delete_state(self, group_id, pairs, error=error):
                raise error

        monkeypatch.setattr(runtime, "_persister", Failing)
        resp = local.loop.run_until_complete(delete_offsets_handler.handle(
            ctx(local.broker, 92, 0), DeleteShareGroupOffsetsRequest(
                group_id=f"lag-group-{n}", topics=[DeleteShareGroupOffsetsRequestTopic(topic_name=f"lag-{n}")])))
        assert (resp.error_code, resp.error_message, resp.responses) == (code, message, [])


@pytest.mark.parametrize("end,start,dcc,lag", [
    (5, -(2**63), 0, 5 - 2**63),          # 5 - MIN_LONG wraps in Java's long arithmetic
    (0, 2**63 - 1, 2, 2**63 - 1),         # -MAX_LONG - 2 wraps to MAX_LONG
    (11, 2, 2, 7),
])
def test_lag_wraps_as_a_java_long_and_always_encodes(end, start, dcc, lag):
    """GroupCoordinatorService.computeShareGroupLagAndBuildResponse subtracts in Java longs; a
    start offset written near the int64 limits (a fuzzed WriteShareGroupState) once gave a lag
    the response could not encode, closing the admin client's connection."""
    assert share_partition_lag(end, start, dcc) == lag
    partition = DescribeShareGroupOffsetsResponsePartition(partition_index=0, start_offset=start, lag=lag)
    DescribeShareGroupOffsetsResponse(groups=[DescribeShareGroupOffsetsResponseGroup(group_id="g", topics=[
        DescribeShareGroupOffsetsResponseTopic(topic_name="t", partitions=[partition])])]).to_bytes(1)
