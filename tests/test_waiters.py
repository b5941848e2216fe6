"""Waiters: broadcast wake-ups for fetches, one-at-a-time turns for share fetches.

A share fetch's turn is woken alone and passes the turn on while records remain. The hazard
is a lost wake-up (a parked fetch that could take records but sleeps until MaxWaitMs), so
the model test checks, whenever nothing is left to run, that no parked fetch could be
satisfied by what is available.
"""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.waiters import Waiters, _expire

HOUR = 3600.0


def share(group, partition):
    return ("share", group, partition)


def data(partition):
    return ("data", partition)


class World:
    """Records available per (group, partition), and share fetches that take them."""

    def __init__(self) -> None:
        self.waiters = Waiters()
        self.available: dict[tuple, int] = {}
        self.looks = 0
        self.members: list[tuple[asyncio.Task, object, int, list]] = []

    def more(self, key) -> bool:
        return self.available.get(key, 0) > 0

    def join(self, group, partitions, need=1, take=1) -> None:
        """A share fetch that answers once ``need`` records are available on its partitions."""
        keys = [share(group, p) for p in partitions]
        turn = self.waiters.turn([(k, data(k[2])) for k in keys])

        async def fetch():
            with turn:
                while True:
                    self.looks += 1
                    ready = sum(self.available.get(k, 0) for k in keys) >= need
                    if ready:
                        left = take
                        for k in keys:
                            n = min(left, self.available.get(k, 0))
                            self.available[k] = self.available.get(k, 0) - n
                            left -= n
                    turn.pass_on(self.more)
                    if ready:
                        return
                    await turn.wait(HOUR)

        self.members.append((asyncio.ensure_future(fetch()), turn, need, keys))

    def produce(self, partition, n, groups) -> None:
        for g in groups:
            k = share(g, partition)
            self.available[k] = self.available.get(k, 0) + n
        self.waiters.notify(data(partition))

    def release(self, group, partition, n) -> None:
        k = share(group, partition)
        self.available[k] = self.available.get(k, 0) + n
        self.waiters.notify(k)

    @staticmethod
    def parked(turn) -> bool:
        return turn._fut is not None and not turn._fut.done()

    async def settle(self) -> None:
        """Run until every fetch has answered or is parked again."""
        for _ in range(10_000):
            if all(task.done() or self.parked(turn) for task, turn, _, _ in self.members):
                return
            await asyncio.sleep(0)
        raise AssertionError("share fetches did not settle")

    def lost_wake_ups(self) -> list:
        return [(need, keys) for task, turn, need, keys in self.members
                if not task.done() and sum(self.available.get(k, 0) for k in keys) >= need]

    def stop(self) -> None:
        for task, _, _, _ in self.members:
            task.cancel()


async def test_a_produce_wakes_one_parked_share_fetch_per_group():
    w = World()
    for _ in range(50):
        w.join("a", [0])
        w.join("b", [0])
    await w.settle()
    assert w.looks == 100
    w.produce(0, 1, groups=("a", "b"))
    await w.settle()
    assert w.looks == 102  # one per group, not 100
    assert [t.done() for t, _, _, _ in w.members[:2]] == [True, True]  # the longest parked
    assert w.waiters._links == {data(0): {share("a", 0), share("b", 0)}}
    w.stop()
    await w.settle()
    assert len(w.waiters) == 0 and w.waiters._links == {} and w.waiters._notified == {}


async def test_the_turn_is_passed_on_while_records_remain():
    w = World()
    for _ in range(10):
        w.join("a", [0])
    await w.settle()
    w.produce(0, 3, groups=("a",))
    await w.settle()
    assert [t.done() for t, _, _, _ in w.members] == [True] * 3 + [False] * 7
    assert w.looks == 10 + 3  # the third took the last record and stopped the chain
    w.stop()


async def test_fetches_that_need_more_each_look_once_per_notification():
    """Two parked fetches that both decline must not hand the turn back and forth."""
    w = World()
    w.join("a", [0], need=5, take=5)
    w.join("a", [0], need=5, take=5)
    await w.settle()
    w.produce(0, 1, groups=("a",))
    await w.settle()
    assert w.looks == 4
    w.release("a", 0, 4)
    await w.settle()
    assert w.looks == 5 and w.members[0][0].done() and not w.members[1][0].done()
    w.stop()


async def test_a_woken_fetch_that_is_cancelled_passes_its_turn_on():
    w = World()
    for _ in range(3):
        w.join("a", [0])
    await w.settle()
    w.produce(0, 1, groups=("a",))
    w.members[0][0].cancel()  # woken, but gone before it looked (its connection closed)
    await w.settle()
    assert [t.done() for t, _, _, _ in w.members] == [True, True, False]
    assert w.members[1][0].cancelled() is False and w.available[share("a", 0)] == 0
    w.stop()


async def test_a_fetch_that_timed_out_as_it_was_woken_still_passes_its_turn_on():
    w = World()
    w.join("a", [0], need=2)
    w.join("a", [0])
    await w.settle()
    _expire(w.members[0][1]._fut)  # its MaxWaitMs timer fired in the same loop iteration
    w.produce(0, 1, groups=("a",))
    await w.settle()
    assert not w.members[0][0].done() and w.members[1][0].done()
    w.stop()


OPS = st.one_of(
    st.tuples(st.just("join"), st.sampled_from("ab"), st.sampled_from([[0], [1], [0, 1], [1, 0]]),
              st.integers(1, 4), st.integers(1, 3)),
    st.tuples(st.just("produce"), st.integers(0, 1), st.integers(1, 3), st.sampled_from(["a", "b", "ab"])),
    st.tuples(st.just("release"), st.sampled_from("ab"), st.integers(0, 1), st.integers(1, 3)),
    st.tuples(st.just("cancel"), st.integers(0, 30)),
    st.tuples(st.just("expire"), st.integers(0, 30)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(OPS, max_size=40))
def test_no_parked_share_fetch_could_take_what_is_available(ops):
    async def run():
        w = World()
        try:
            for op in ops:
                if op[0] == "join":
                    w.join(*op[1:])
                elif op[0] == "produce":
                    w.produce(op[1], op[2], groups=op[3])
                elif op[0] == "release":
                    w.release(*op[1:])
                elif w.members:
                    task, turn, _, _ = w.members[op[1] % len(w.members)]
                    if op[0] == "cancel":
                        task.cancel()
                    elif w.parked(turn):
                        _expire(turn._fut)
                await w.settle()
                assert w.lost_wake_ups() == []
        finally:
            w.stop()
            await w.settle()
        assert len(w.waiters) == 0 and w.waiters._links == {} and w.waiters._queues == {}

    asyncio.run(run())
