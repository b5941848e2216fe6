"""Interleavings of the group-coordinator runtime: an operation that read the group, awaited (a
``__consumer_offsets`` write, a persister call) and then carried on while another task changed
the group. Each test forces its interleaving with held writes or held persister calls (no sleeps
standing in for synchronisation) and drives the real runtime in-process."""

from __future__ import annotations

import asyncio

import pytest

from broker.log import KafkaStorageError
from protocol.errors import ErrorCode, KafkaError

from .test_group_persistence import A, Runtime, World, hb


async def until(condition) -> None:
    """Let the other tasks run until ``condition()`` holds (they only need the loop, no time)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the interleaving was not reached")


class HeldWrites(Runtime):
    """Writes wait for ``release`` while ``hold``; ``held`` counts the writes waiting."""

    hold = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.release = asyncio.Event()
        self.held = 0

    async def _persist(self, records) -> None:
        if self.hold:
            self.held += 1
            await self.release.wait()
        await super()._persist(records)


def failing_append(lg, data, headers):
    raise KafkaStorageError("disk gone")


# --- DeleteGroups and a failed write ----------------------------------------------------------------


async def test_delete_groups_queued_behind_a_write_that_fails_answers_instead_of_raising(tmp_path):
    """DeleteGroups computed on a leave whose write then fails: its own write never happens
    (the shard is rebuilt from the log, where the member still is). Like every other request
    it must answer COORDINATOR_NOT_AVAILABLE, not raise StaleWrite out of the handler (which
    closes the client's connection)."""
    world = World(tmp_path)
    world.topics.create("orders", 2)
    runtime = await world.started(runtime_cls=HeldWrites)
    a = await hb(runtime, A, 0, ["orders"])
    original = world.offsets._append
    runtime.hold = True
    leave = asyncio.ensure_future(hb(runtime, A, -1))
    await until(lambda: runtime.held == 1)
    delete = asyncio.ensure_future(runtime.delete_group("g"))  # the group looks empty: queued behind the leave
    await until(lambda: runtime.held == 1 and not delete.done() and runtime.coordinator.has_group("g")
                and runtime.coordinator.for_group("g")._groups["g"].deleting_topics)
    world.offsets._append = failing_append
    runtime.hold = False
    runtime.release.set()
    assert (await leave).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    with pytest.raises(KafkaError) as e:
        await delete
    assert e.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert runtime.coordinator.member("g", A) is not None  # the log's state: the member never left
    world.offsets._append = original
    assert (await hb(runtime, A, a.member_epoch)).error_code == 0
    await runtime.stop()


async def test_delete_groups_whose_own_write_fails_answers_instead_of_raising(tmp_path):
    world = World(tmp_path)
    world.topics.create("orders", 1)
    runtime = await world.started()
    await hb(runtime, A, 0, ["orders"])
    await hb(runtime, A, -1)
    world.offsets._append = failing_append
    with pytest.raises(KafkaError) as e:
        await runtime.delete_group("g")
    assert e.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    await runtime.stop()
