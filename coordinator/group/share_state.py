"""Which share partitions of a share group have share-coordinator state, as Kafka keeps it in
ShareGroupStatePartitionMetadata (GroupMetadataManager's initialize / uninitialize / delete /
cleanup steps), computed as pure functions of the group and the topic image.

A share partition is only assigned once the share coordinator holds state for it: the group
coordinator first records it as *initializing*, asks the share coordinator to initialise it
(InitializeShareGroupState, state epoch = group epoch, start offset -1), and on success records
it as *initialized*; on failure it leaves the initializing set and a later heartbeat retries.
Deleting a group moves everything to *deleting* before the state is deleted. A deleted topic
simply drops out (the share coordinator removes its state on its own, as in Kafka).

These functions return the record to write; ``ShareGroupCoordinator`` replays it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from . import records as rec
from .model import ShareGroup
from .records import CoordinatorRecord
from .topics import TopicLookup

UNKNOWN_TOPIC_NAME = "<UNKNOWN>"  # Kafka's name for a topic id the image no longer has

TopicPartitions = Mapping[uuid.UUID, tuple[str, frozenset[int]]]  # topic id -> (name, partitions)


@dataclass(frozen=True)
class StateRequest:
    """Share partitions to initialise (InitializeShareGroupState, ``state_epoch`` = the group
    epoch, start offset -1) or to delete (DeleteShareGroupState, ``state_epoch`` unused)."""

    group_id: str
    partitions: dict[uuid.UUID, tuple[int, ...]]  # topic id -> sorted partitions
    state_epoch: int = 0

    def pairs(self) -> list[tuple[uuid.UUID, int]]:
        return [(t, p) for t, ps in sorted(self.partitions.items()) for p in ps]


def _name(topics: TopicLookup, topic_id: uuid.UUID) -> str:
    topic = topics.topic_by_id(topic_id)
    return UNKNOWN_TOPIC_NAME if topic is None else topic.name


def _names(topics: TopicLookup, topic_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, str]:
    return {t: _name(topics, t) for t in topic_ids}


def combine(first: TopicPartitions, second: TopicPartitions) -> dict[uuid.UUID, tuple[str, frozenset[int]]]:
    """Kafka's ``combineInitMaps``: the union per topic, named as in ``second`` where it has the topic."""
    out = dict(first)
    for topic_id, (name, partitions) in second.items():
        if topic_id in out:
            out[topic_id] = (name, out[topic_id][1] | partitions)
        else:
            out[topic_id] = (name, frozenset(partitions))
    return out


def request_of(group_id: str, partitions: TopicPartitions, state_epoch: int = 0) -> StateRequest:
    return StateRequest(group_id, {t: tuple(sorted(ps)) for t, (_, ps) in sorted(partitions.items())}, state_epoch)


def to_initialize(group: ShareGroup, subscribed_names: Iterable[str], topics: TopicLookup,
                  fresh: Callable[[uuid.UUID], bool]) -> dict[uuid.UUID, tuple[str, frozenset[int]]]:
    """Kafka's ``subscribedTopicsChangeMap``: the partitions of subscribed topics that are
    neither initialized nor initializing since recently (``fresh(topic_id)``; an initializing
    topic that is not fresh is retried)."""
    already = combine(group.initialized_topics,
                      {t: v for t, v in group.initializing_topics.items() if fresh(t)})
    out = {}
    for name in sorted(set(subscribed_names)):
        topic = topics.topic_by_name(name)
        if topic is None:
            continue
        have = already.get(topic.topic_id, ("", frozenset()))[1]
        if len(have) < topic.num_partitions:
            missing = frozenset(range(topic.num_partitions)) - have
            if missing:
                out[topic.topic_id] = (topic.name, missing)
    return out


def initializing_record(group: ShareGroup, change: TopicPartitions, topics: TopicLookup) -> CoordinatorRecord:
    """Kafka's ``addInitializingTopicsRecords``: ``change`` joins the initializing set, and its
    topics leave the deleting set."""
    if not group.has_state_metadata:
        return rec.state_partition_metadata(group.group_id, change, {}, {})
    initializing = combine(group.initializing_topics, change)
    deleting = [t for t in group.deleting_topics if t not in initializing]
    return rec.state_partition_metadata(group.group_id, initializing, group.initialized_topics,
                                        _names(topics, deleting))


def initialized_record(group: ShareGroup, done: Mapping[uuid.UUID, Iterable[int]],
                       topics: TopicLookup) -> CoordinatorRecord | None:
    """Kafka's ``initializeShareGroupState``: ``done`` moves from initializing to initialized.
    Unlike Kafka, partitions of a topic being deleted only leave initializing: such an answer
    arrived after a DeleteGroups / DeleteShareGroupOffsets sent since, which may delete that
    state; were they initialized, a member could be assigned them with no state behind them.
    A later heartbeat initialises them again (that takes them out of deleting)."""
    if not done:
        return None
    enriched = {t: (_name(topics, t), frozenset(ps)) for t, ps in done.items() if t not in group.deleting_topics}
    if not group.has_state_metadata:
        return rec.state_partition_metadata(group.group_id, {}, enriched, {})
    initializing = {}
    for topic_id, (name, partitions) in group.initializing_topics.items():
        left = partitions - frozenset(done.get(topic_id, ()))
        if left:
            initializing[topic_id] = (name, left)
    return rec.state_partition_metadata(group.group_id, initializing, combine(group.initialized_topics, enriched),
                                        _names(topics, group.deleting_topics))


def uninitialized_record(group: ShareGroup, failed: Mapping[uuid.UUID, Iterable[int]],
                         topics: TopicLookup) -> CoordinatorRecord | None:
    """Kafka's ``uninitializeShareGroupState``: ``failed`` leaves the initializing set (so the
    next heartbeat tries again); nothing to write when it was not initializing."""
    if not group.has_state_metadata or not group.initializing_topics or not failed:
        return None
    initializing = {}
    for topic_id, (name, partitions) in group.initializing_topics.items():
        left = partitions - frozenset(failed.get(topic_id, ()))
        if left:
            initializing[topic_id] = (name, left)
    return rec.state_partition_metadata(group.group_id, initializing, group.initialized_topics,
                                        _names(topics, group.deleting_topics))


def deleting_plan(group: ShareGroup, topics: TopicLookup) -> tuple[CoordinatorRecord | None, StateRequest | None]:
    """Kafka's ``shareGroupBuildPartitionDeleteRequest`` (DeleteGroups): every initialized or
    initializing partition, plus those of earlier unfinished deletes whose topic still
    exists, moves to deleting; the request deletes their state."""
    if not group.has_state_metadata:
        return None, None
    candidates = combine(group.initialized_topics, group.initializing_topics)
    retry = {}
    for topic_id in group.deleting_topics:
        topic = topics.topic_by_id(topic_id)
        if topic is not None:
            retry[topic_id] = (topic.name, frozenset(range(topic.num_partitions)))
    if retry:
        candidates = combine(candidates, retry)
    record = rec.state_partition_metadata(group.group_id, {}, {}, {t: name for t, (name, _) in candidates.items()})
    if not candidates:
        return record, None
    return record, request_of(group.group_id, candidates)


def cleanup_record(group: ShareGroup, topics: TopicLookup) -> CoordinatorRecord | None:
    """Kafka's ``maybeCleanupShareGroupState``: topics that no longer exist leave every set."""
    known = set(group.initializing_topics) | set(group.initialized_topics) | set(group.deleting_topics)
    gone = {t for t in known if topics.topic_by_id(t) is None}
    if not gone:
        return None
    return rec.state_partition_metadata(
        group.group_id,
        {t: v for t, v in group.initializing_topics.items() if t not in gone},
        {t: v for t, v in group.initialized_topics.items() if t not in gone},
        _names(topics, (t for t in group.deleting_topics if t not in gone)),
    )


def initialized_partitions(group: ShareGroup | None, topic_id: uuid.UUID, num_partitions: int) -> frozenset[int]:
    """The partitions of a topic that may be assigned: initialized ones that exist."""
    if group is None:
        return frozenset()
    entry = group.initialized_topics.get(topic_id)
    if entry is None:
        return frozenset()
    return frozenset(p for p in entry[1] if p < num_partitions)


# --- share-group admin (DeleteShareGroupOffsets) ----------------------------------------------

NO_OFFSET_INFORMATION = "There is no offset information to delete."


@dataclass(frozen=True)
class OffsetsDeletePlan:
    """Kafka's ``sharePartitionsEligibleForOffsetDeletion``: the record moving the named topics'
    initialized partitions to deleting, the share partitions whose state to delete (topic id ->
    (name, partitions)), and per-topic errors ``(topic name, error code, message)``. A message
    None means the error code's default message."""

    record: CoordinatorRecord | None
    to_delete: dict[uuid.UUID, tuple[str, frozenset[int]]]
    errors: list[tuple[str, int, str | None]]


def offsets_delete_plan(group: ShareGroup, topic_names: Iterable[str], topics: TopicLookup,
                        unknown_topic_code: int) -> OffsetsDeletePlan:
    """Per named topic: one that does not exist is an error; its initialized partitions move to
    deleting and are deleted; one already deleting (an earlier delete that failed half-way) has
    all its partitions deleted again; anything else has no offset information to delete. Like
    Kafka, a group that never had share state answers nothing for any topic, and the record is
    written whenever the group has share state (even if nothing changed)."""
    if not group.has_state_metadata:
        return OffsetsDeletePlan(None, {}, [])
    initialized = dict(group.initialized_topics)
    deleting = dict(group.deleting_topics)
    to_delete: dict[uuid.UUID, tuple[str, frozenset[int]]] = {}
    errors: list[tuple[str, int, str | None]] = []
    for name in dict.fromkeys(topic_names):
        topic = topics.topic_by_name(name)
        if topic is None:
            errors.append((name, unknown_topic_code, None))
        elif topic.topic_id in initialized:
            to_delete[topic.topic_id] = (topic.name, initialized.pop(topic.topic_id)[1])
            deleting[topic.topic_id] = topic.name
        elif topic.topic_id in deleting:
            to_delete[topic.topic_id] = (topic.name, frozenset(range(topic.num_partitions)))
        else:
            errors.append((name, unknown_topic_code, NO_OFFSET_INFORMATION))
    record = rec.state_partition_metadata(group.group_id, group.initializing_topics, initialized,
                                          {t: _name(topics, t) for t in deleting})
    return OffsetsDeletePlan(record, to_delete, errors)


def offsets_deleted_record(group: ShareGroup, topic_ids: Iterable[uuid.UUID],
                           topics: TopicLookup) -> CoordinatorRecord | None:
    """Kafka's ``completeDeleteShareGroupOffsets``: the topics whose state is gone leave the
    deleting set (nothing to write for a group without share state)."""
    if not group.has_state_metadata:
        return None
    gone = set(topic_ids)
    return rec.state_partition_metadata(group.group_id, group.initializing_topics, group.initialized_topics,
                                        _names(topics, (t for t in group.deleting_topics if t not in gone)))
