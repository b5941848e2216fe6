"""Share-group state as the records describe it. Only ``ShareGroupCoordinator.replay``
mutates these objects; everything else reads them.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping

# ShareGroupHeartbeat epochs
LEAVE_GROUP_MEMBER_EPOCH = -1

# Group state names as Kafka reports them (ShareGroup.ShareGroupState.toString()).
STATE_EMPTY = "Empty"
STATE_STABLE = "Stable"
STATE_DEAD = "Dead"

Assignment = Mapping[uuid.UUID, frozenset[int]]  # topic id -> partitions (no empty sets)


def normalize(assignment: Mapping[uuid.UUID, object]) -> dict[uuid.UUID, frozenset[int]]:
    """Canonical form: frozensets, no empty topics, so equal assignments compare equal."""
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


@dataclass(frozen=True, slots=True)
class ShareGroupMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()  # sorted, unique
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = 0
    assigned: Assignment = field(default_factory=dict)


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareGroupMember] = field(default_factory=dict)
    targets: dict[str, Assignment] = field(default_factory=dict)
    # How many members subscribe to each topic name (kept in step with members).
    subscribed_names: Counter = field(default_factory=Counter)
    # How many members' targets hold each partition: topic id -> partition -> count.
    target_holders: dict[uuid.UUID, Counter] = field(default_factory=dict)
    # ShareGroupStatePartitionMetadata as last written (``has_state_metadata``: whether one
    # was, tombstones clear it): topic id -> (topic name, partitions) / topic id -> topic name.
    # Only initialized share partitions have share-coordinator state and may be assigned.
    has_state_metadata: bool = False
    initializing_topics: dict[uuid.UUID, tuple[str, frozenset[int]]] = field(default_factory=dict)
    initialized_topics: dict[uuid.UUID, tuple[str, frozenset[int]]] = field(default_factory=dict)
    deleting_topics: dict[uuid.UUID, str] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return STATE_STABLE if self.members else STATE_EMPTY

    def set_member(self, member: ShareGroupMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self.subscribed_names.subtract(old.subscribed_topic_names)
        self.subscribed_names.update(member.subscribed_topic_names)
        self.members[member.member_id] = member
        self._drop_zero_counts()

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is not None:
            self.subscribed_names.subtract(old.subscribed_topic_names)
            self._drop_zero_counts()

    def set_target(self, member_id: str, assignment: Assignment | None) -> None:
        old = self.targets.pop(member_id, None)
        if old:
            for topic_id, partitions in old.items():
                counts = self.target_holders[topic_id]
                counts.subtract(partitions)
                for p in partitions:
                    if counts[p] <= 0:
                        del counts[p]
                if not counts:
                    del self.target_holders[topic_id]
        if assignment is not None:
            self.targets[member_id] = assignment
            for topic_id, partitions in assignment.items():
                self.target_holders.setdefault(topic_id, Counter()).update(partitions)

    def _drop_zero_counts(self) -> None:
        for name in [n for n, c in self.subscribed_names.items() if c <= 0]:
            del self.subscribed_names[name]

    def snapshot(self) -> dict:
        """Plain-data view of everything replay builds (for equality checks and debugging)."""
        return {
            "group_epoch": self.group_epoch,
            "metadata_hash": self.metadata_hash,
            "assignment_epoch": self.assignment_epoch,
            "members": {m: _member_view(v) for m, v in sorted(self.members.items())},
            "targets": {m: _assignment_view(a) for m, a in sorted(self.targets.items())},
            "subscribed_names": dict(sorted(self.subscribed_names.items())),
            "target_holders": {str(t): dict(sorted(c.items())) for t, c in sorted(self.target_holders.items())},
            "has_state_metadata": self.has_state_metadata,
            "initializing_topics": {str(t): (n, sorted(p)) for t, (n, p) in sorted(self.initializing_topics.items())},
            "initialized_topics": {str(t): (n, sorted(p)) for t, (n, p) in sorted(self.initialized_topics.items())},
            "deleting_topics": {str(t): n for t, n in sorted(self.deleting_topics.items())},
        }


def _assignment_view(assignment: Assignment) -> dict[str, list[int]]:
    return {str(t): sorted(ps) for t, ps in sorted(assignment.items())}


def _member_view(member: ShareGroupMember) -> dict:
    return {
        "rack_id": member.rack_id,
        "client_id": member.client_id,
        "client_host": member.client_host,
        "subscribed_topic_names": list(member.subscribed_topic_names),
        "member_epoch": member.member_epoch,
        "previous_member_epoch": member.previous_member_epoch,
        "state": member.state,
        "assigned": _assignment_view(member.assigned),
    }
