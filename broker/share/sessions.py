"""Share sessions (KIP-932): which partitions a member fetches from this broker, and the epoch.

A session is keyed by (group id, member id). ShareFetch with epoch 0 opens it (replacing any
old one, whose acquired records are *not* released: their locks expire), -1 closes it, and any
other epoch must equal the session's current epoch, which then moves on. ShareFetch and
ShareAcknowledge share one epoch sequence. The cache is bounded by
``group.share.max.share.sessions`` and never evicts: a full cache refuses new sessions.
Pure bookkeeping: the caller releases records and builds responses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from protocol.errors import ErrorCode, KafkaError

INT32_MAX = 2**31 - 1
OPEN, CLOSE = 0, -1

TopicPartition = tuple  # (topic_id: uuid.UUID, partition: int)


def next_epoch(epoch: int) -> int:
    """After INT32_MAX the epoch wraps to 1 (0 and -1 are reserved for open and close)."""
    return 1 if epoch >= INT32_MAX else epoch + 1


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    epoch: int = 1
    # Insertion-ordered: the fetch order, rotated by the caller for fairness. Values: the topic
    # name when the partition joined the session, or None if its topic id was unknown then.
    partitions: dict[TopicPartition, str | None] = field(default_factory=dict)
    connection_id: int | None = None
    # Partitions whose last read failed: the next incremental response lists them once more.
    resend: set[TopicPartition] = field(default_factory=set)

    @property
    def key(self) -> tuple[str, str]:
        return self.group_id, self.member_id

    def responded(self, read: dict, served) -> None:
        """Kafka's ShareSessionContext after an incremental response. ``read``: the error code
        of each partition the fetch read; ``served``: those it returned records for, which move
        to the end of the fetch order (the epoch's rotation applies on top). A partition read
        with an error is listed in the next response that reads it again, error or not
        (CachedSharePartition's requiresUpdateInResponse), so the client sees it clear."""
        for tp, code in read.items():
            if code:
                self.resend.add(tp)
            else:
                self.resend.discard(tp)
        parts = self.partitions
        for tp in served:
            if tp in parts:
                parts[tp] = parts.pop(tp)


class ShareSessionCache:
    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self._sessions: dict[tuple[str, str], ShareSession] = {}
        self.evictions = 0  # sessions dropped because their connection closed (metrics)

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def sessions(self) -> list[ShareSession]:
        return list(self._sessions.values())

    def open(self, group_id: str, member_id: str, partitions: Mapping[TopicPartition, str | None],
             connection_id: int | None = None) -> tuple[ShareSession, ShareSession | None]:
        """Epoch 0: a new session over ``partitions`` ({(topic id, partition): topic name or
        None}); returns it and the session it replaced (if any)."""
        key = (group_id, member_id)
        old = self._sessions.pop(key, None)
        if old is None and len(self._sessions) >= self.max_sessions:
            raise KafkaError(
                ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                f"The share session cache is full ({self.max_sessions} sessions).",
            )
        session = ShareSession(group_id, member_id, 1, dict(partitions), connection_id)
        self._sessions[key] = session
        return session, old

    def check_epoch(self, group_id: str, member_id: str, epoch: int, *, acknowledge: bool = False) -> ShareSession:
        """Find the session a non-zero epoch refers to; -1 matches any epoch."""
        if epoch == OPEN and acknowledge:
            raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH, "A ShareAcknowledge cannot open a share session.")
        session = self._sessions.get((group_id, member_id))
        if session is None:
            raise KafkaError(
                ErrorCode.SHARE_SESSION_NOT_FOUND,
                f"Share session for member {member_id} of group {group_id} not found.",
            )
        if epoch != CLOSE and epoch != session.epoch:
            raise KafkaError(
                ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                f"Share session epoch {epoch} does not match the expected epoch {session.epoch}.",
            )
        return session

    def advance(self, session: ShareSession, added: Mapping[TopicPartition, str | None] | None = None,
                forgotten=()) -> list[TopicPartition]:
        """An incremental request: add (as ``open`` takes them) and forget partitions, move the
        epoch; returns the new ones. A partition already in the session keeps the name it joined with."""
        new = []
        for tp, name in (added or {}).items():
            if tp not in session.partitions:
                session.partitions[tp] = name
                new.append(tp)
        for tp in forgotten:
            session.partitions.pop(tp, None)
        session.epoch = next_epoch(session.epoch)
        return [tp for tp in new if tp in session.partitions]  # added, then forgotten: not new

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.pop((group_id, member_id), None)

    def evict(self, session: ShareSession) -> bool:
        """Drop ``session`` because its client's connection closed, if it is still the cached
        one (not closed with epoch -1 or replaced meanwhile); counted, as Kafka's
        ShareSessionCache counts ShareSessionEvictionsPerSec only for these."""
        if self._sessions.get(session.key) is not session:
            return False
        del self._sessions[session.key]
        self.evictions += 1
        return True


def rotated(partitions: list, epoch: int) -> list:
    """Kafka rotates the fetch order by the session epoch so no partition always goes last."""
    n = len(partitions)
    if n <= 1 or epoch < 1:
        return list(partitions)
    k = epoch % n
    return partitions[k:] + partitions[:k]
