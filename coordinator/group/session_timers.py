"""Member session deadlines: in memory only, never records.

A heap of ``(deadline, group, member)`` with lazy deletion: re-arming a member just
pushes a new entry and the stale one is skipped when it surfaces. The heap is rebuilt
when stale entries outnumber live ones, so steady heartbeating stays O(log n).
"""

from __future__ import annotations

import heapq


class SessionTimers:
    __slots__ = ("_deadlines", "_heap")

    def __init__(self) -> None:
        self._deadlines: dict[tuple[str, str], int] = {}
        self._heap: list[tuple[int, str, str]] = []

    def arm(self, group_id: str, member_id: str, deadline_ms: int) -> None:
        self._deadlines[(group_id, member_id)] = deadline_ms
        heapq.heappush(self._heap, (deadline_ms, group_id, member_id))
        if len(self._heap) > 2 * len(self._deadlines) + 64:
            self._heap = [(d, g, m) for (g, m), d in self._deadlines.items()]
            heapq.heapify(self._heap)

    def cancel(self, group_id: str, member_id: str) -> None:
        self._deadlines.pop((group_id, member_id), None)

    def deadline(self, group_id: str, member_id: str) -> int | None:
        return self._deadlines.get((group_id, member_id))

    def is_armed(self, group_id: str, member_id: str) -> bool:
        return (group_id, member_id) in self._deadlines

    def _drop_stale_top(self) -> None:
        heap = self._heap
        while heap:
            deadline, group_id, member_id = heap[0]
            if self._deadlines.get((group_id, member_id)) == deadline:
                return
            heapq.heappop(heap)

    def next_deadline(self) -> int | None:
        self._drop_stale_top()
        return self._heap[0][0] if self._heap else None

    def pop_expired(self, now_ms: int) -> list[tuple[str, str]]:
        """Disarm and return every (group, member) whose deadline is <= now, earliest first."""
        expired = []
        while True:
            self._drop_stale_top()
            if not self._heap or self._heap[0][0] > now_ms:
                return expired
            _, group_id, member_id = heapq.heappop(self._heap)
            del self._deadlines[(group_id, member_id)]
            expired.append((group_id, member_id))

    def __len__(self) -> int:
        return len(self._deadlines)
