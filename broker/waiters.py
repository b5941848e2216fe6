"""Wake-ups for long polls: a waiter sleeps on some keys until one is notified or time runs out.

Produce notifies ``(topic, partition)``; share-partition changes (release, lock expiry) notify
their own keys. A notification only says "look again": waiters re-check their condition.

Fetches wait with ``wait``: a notification wakes every one of them, since each reads for
itself. Share fetches wait in turn (``Turn``): the members of a share group compete for the
same records, so waking all of them for one produced record costs every parked member a
look, and all but one find nothing. A notification wakes the longest-parked member of each
share partition; when it has looked, it passes the turn on while records remain. A share
key is linked to its partition's data key, so a produce reaches each group's queue.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Callable, Hashable, Iterable


class Waiters:
    def __init__(self) -> None:
        self._by_key: dict[Hashable, set[asyncio.Future]] = defaultdict(set)
        # Turn queues, oldest first, with the notification count each turn last looked at:
        # a turn is stale (must look again) while its count is below its key's.
        self._queues: dict[Hashable, dict[Turn, int]] = {}
        self._notified: dict[Hashable, int] = {}
        self._links: dict[Hashable, set[Hashable]] = {}  # data key -> turn keys with a queue

    async def wait(self, keys: Iterable[Hashable], timeout_s: float) -> bool:
        """True if one of ``keys`` was notified before ``timeout_s`` elapsed."""
        if timeout_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        keys = list(keys)
        for k in keys:
            self._by_key[k].add(fut)
        handle = loop.call_later(timeout_s, _expire, fut)
        try:
            return await fut
        finally:
            handle.cancel()
            for k in keys:
                s = self._by_key.get(k)
                if s is not None:
                    s.discard(fut)
                    if not s:
                        del self._by_key[k]

    def turn(self, keys: Iterable[tuple[Hashable, Hashable]]) -> Turn:
        """A place in the queues of ``keys``: (turn key, the data key that also wakes it; always
        the same one for a turn key)."""
        return Turn(self, list(keys))

    def notify(self, key: Hashable) -> None:
        for fut in self._by_key.pop(key, ()):
            if not fut.done():
                fut.set_result(True)
        self._notify_turns(key)
        linked = self._links.get(key)
        if linked:
            for k in list(linked):
                self._notify_turns(k)

    def wake_all(self) -> None:
        """Wake every waiter, e.g. at shutdown (they answer with what they have)."""
        for key in list(self._by_key):
            self.notify(key)
        for key in list(self._queues):
            while key in self._queues:
                next(iter(self._queues[key]))._woken(key)

    def _notify_turns(self, key: Hashable) -> None:
        if key in self._queues:
            self._notified[key] += 1  # everyone parked now has to look again
            self._wake_next(key)

    def _wake_next(self, key: Hashable) -> None:
        """Wake the longest-parked turn of ``key`` that has not looked since its last notification."""
        queue = self._queues.get(key)
        if not queue:
            return
        turn, seen = next(iter(queue.items()))  # turns park at the back, so the stale ones lead
        if seen < self._notified[key]:
            turn._woken(key)

    def _park(self, turn: Turn) -> None:
        for key, data_key in turn.keys:
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = {}
                self._notified[key] = 0
                self._links.setdefault(data_key, set()).add(key)
            queue[turn] = self._notified[key]

    def _unpark(self, turn: Turn) -> None:
        for key, data_key in turn.keys:
            queue = self._queues[key]
            del queue[turn]
            if not queue:
                del self._queues[key], self._notified[key]
                linked = self._links[data_key]
                linked.discard(key)
                if not linked:
                    del self._links[data_key]

    def __len__(self) -> int:
        return sum(len(s) for s in self._by_key.values()) + sum(len(q) for q in self._queues.values())


class Turn:
    """One share fetch's place in its partitions' queues, for as long as the fetch lasts.

    After each look at its partitions the fetch calls ``pass_on``: the keys that woke it go
    to the next stale turn if ``more(key)`` says records may remain. ``close`` (at the end
    of the fetch, however it ends) passes on any wake-up it got but did not look at, so a
    cancelled fetch cannot swallow one."""

    __slots__ = ("_waiters", "keys", "_fut", "_woken_by")

    def __init__(self, waiters: Waiters, keys: list[tuple[Hashable, Hashable]]) -> None:
        self._waiters = waiters
        self.keys = keys
        self._fut: asyncio.Future | None = None  # set while parked
        self._woken_by: list[Hashable] = []

    async def wait(self, timeout_s: float) -> bool:
        """Park at the back of every queue; True if woken before ``timeout_s`` elapsed."""
        if timeout_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        self._fut = fut = loop.create_future()
        self._waiters._park(self)
        handle = loop.call_later(timeout_s, _expire, fut)
        try:
            return await fut
        finally:
            handle.cancel()
            if self._fut is not None:  # not woken: still queued
                self._fut = None
                self._waiters._unpark(self)

    def _woken(self, key: Hashable) -> None:
        fut, self._fut = self._fut, None
        self._waiters._unpark(self)
        self._woken_by.append(key)
        if not fut.done():  # (a timeout that fired first still looks, then passes this on)
            fut.set_result(True)

    def pass_on(self, more: Callable[[Hashable], bool]) -> None:
        keys, self._woken_by = self._woken_by, []
        for key in keys:
            if more(key):
                self._waiters._wake_next(key)

    def close(self) -> None:
        self.pass_on(lambda _key: True)

    def __enter__(self) -> Turn:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(False)
