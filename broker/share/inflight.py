"""One cached in-flight range of a share partition.

A range starts in *batch mode*: a single state, delivery count, member, lock token and pending
transition id describe every offset in [first, last], so acquiring or acknowledging it costs O(1)
whatever its size. When an operation touches only part of it, the range *splits* into per-offset
mode: parallel sequences indexed by ``offset - first``. A split range is never merged back (as
in Kafka); their cost is paid only by ranges that really diverged. The states are a bytearray,
so finding a record in some state (released records to redeliver, the end of the acknowledged
run that moves the SPSO) is a byte search at C speed, not a Python step per record.

Lock tokens (ints, 0 = no lock) point into the owning partition's lock table; pending ids (ints,
0 = none) name the Transition whose write is in flight for that record.
"""

from __future__ import annotations


class InFlightBatch:
    __slots__ = (
        "first", "last",
        # batch mode
        "state", "count", "member", "lock", "pending",
        # per-offset mode (None while in batch mode)
        "states", "counts", "members", "locks", "pendings",
    )

    def __init__(
        self,
        first: int,
        last: int,
        state: int,
        count: int,
        member: str | None = None,
        lock: int = 0,
    ) -> None:
        self.first = first
        self.last = last
        self.state = state
        self.count = count
        self.member = member
        self.lock = lock
        self.pending = 0
        self.states: bytearray | None = None
        self.counts: list[int] = []
        self.members: list[str | None] = []
        self.locks: list[int] = []
        self.pendings: list[int] = []

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    @property
    def is_split(self) -> bool:
        return self.states is not None

    def split(self) -> None:
        """Switch to per-offset mode, every offset copying the batch state (and lock token)."""
        n = self.last - self.first + 1
        self.states = bytearray((self.state,)) * n
        self.counts = [self.count] * n
        self.members = [self.member] * n
        self.locks = [self.lock] * n
        self.pendings = [self.pending] * n
        self.state = -1
        self.member = None
        self.lock = 0
        self.pending = 0

    def __repr__(self) -> str:
        if self.states is None:
            return (f"InFlightBatch({self.first}-{self.last} state={self.state} "
                    f"count={self.count} member={self.member!r} lock={self.lock} "
                    f"pending={self.pending})")
        return f"InFlightBatch({self.first}-{self.last} split states={self.states})"
