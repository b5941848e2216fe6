"""Wake-ups for long polls: a waiter sleeps on some keys until one is notified or time runs out.

Produce notifies ``(topic, partition)``; share-partition changes (release, lock expiry) notify
their own keys. A notification only says "look again": waiters re-check their condition.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Hashable, Iterable


class Waiters:
    def __init__(self) -> None:
        self._by_key: dict[Hashable, set[asyncio.Future]] = defaultdict(set)

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

    def notify(self, key: Hashable) -> None:
        for fut in self._by_key.pop(key, ()):
            if not fut.done():
                fut.set_result(True)

    def __len__(self) -> int:
        return sum(len(s) for s in self._by_key.values())


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(False)
