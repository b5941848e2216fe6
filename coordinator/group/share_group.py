"""The share-group coordinator: ShareGroupHeartbeat, leave, session expiry, topic
changes and group deletion, as a sans-IO state machine.

Every operation works the way Kafka's GroupMetadataManager does: it reads the current
state, computes the ShareGroup* records Kafka 4.2 writes (in Kafka's order), applies
them through ``replay`` — the only code that changes group state — and returns them
for the caller to append to ``__consumer_offsets``. Replaying the same records on a
fresh coordinator (a restart) rebuilds the same state. Records are applied before they
are returned so that the next operation always sees them; if appending them fails the
runtime must rebuild the coordinator from the log, as on a restart.

Session deadlines are not records: they live in ``SessionTimers`` and are driven by the
``now_ms`` the caller passes in (an injected clock). After loading from the log, call
``on_loaded(now_ms)`` so every member gets a deadline.

With ``track_share_state`` the coordinator also keeps Kafka's ShareGroupStatePartitionMetadata
(see ``share_state``): only initialized share partitions are assigned, a heartbeat that finds
subscribed partitions without share-coordinator state marks them initializing (its last record)
and returns a ``StateRequest`` for the caller to send to the persister, and the caller reports
the outcome with ``initialize_share_state`` / ``uninitialize_share_state``.

Share groups differ from consumer groups in ways that matter here: no revocation
barrier (a member jumps to its target in one heartbeat), no rebalance timeout, no
static members, member ids chosen by the client.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import AbstractSet, Callable, Collection, Iterable, Mapping

from protocol.coordinator_records.share_group_current_member_assignment_key import (
    ShareGroupCurrentMemberAssignmentKey,
)
from protocol.coordinator_records.share_group_member_metadata_key import ShareGroupMemberMetadataKey
from protocol.coordinator_records.share_group_metadata_key import ShareGroupMetadataKey
from protocol.coordinator_records.share_group_state_partition_metadata_key import (
    ShareGroupStatePartitionMetadataKey,
)
from protocol.coordinator_records.share_group_target_assignment_member_key import (
    ShareGroupTargetAssignmentMemberKey,
)
from protocol.coordinator_records.share_group_target_assignment_metadata_key import (
    ShareGroupTargetAssignmentMetadataKey,
)
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.share_group_heartbeat_response import Assignment as WireAssignment
from protocol.messages.share_group_heartbeat_response import ShareGroupHeartbeatResponse, TopicPartitions

from . import records as rec
from . import share_state
from .assignor import MemberSpec, assign
from .broker_defaults import broker_value
from .configs import EffectiveGroupConfig, effective
from .model import (
    LEAVE_GROUP_MEMBER_EPOCH,
    STATE_DEAD,
    Assignment,
    ShareGroup,
    ShareGroupMember,
    normalize,
)
from .records import MEMBER_STATE_STABLE, CoordinatorRecord
from .session_timers import SessionTimers
from .share_state import StateRequest
from .topics import EMPTY_TOPICS, TopicInfo, TopicLookup, metadata_hash

ASSIGNOR_NAME = "simple"


class ReplayError(RuntimeError):
    """The records are out of the order Kafka writes them in (a corrupt or foreign log)."""


@dataclass
class HeartbeatResult:
    """Fields of the ShareGroupHeartbeat response, plus what the broker must act on.

    ``records`` are already applied; append them to ``__consumer_offsets``.
    ``assignment`` None means the response's Assignment is null; otherwise it is the
    member's full assignment as sorted ``(topic id, partitions)`` pairs (maybe empty).
    ``departed`` lists ``(group id, member id)`` of members that left: their acquired
    records must be released by the share-partition leaders. ``initialize`` (with
    ``track_share_state``) names the share partitions to initialise once ``records`` are
    persisted.
    """

    records: list[CoordinatorRecord] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: list[tuple[uuid.UUID, list[int]]] | None = None
    departed: list[tuple[str, str]] = field(default_factory=list)
    initialize: StateRequest | None = None

    @classmethod
    def failed(cls, code: int, message: str | None) -> "HeartbeatResult":
        return cls(error_code=int(code), error_message=message)

    def to_response(self, throttle_time_ms: int = 0):
        """The generated ShareGroupHeartbeatResponse for these fields."""
        wire_assignment = None
        if self.assignment is not None:
            wire_assignment = WireAssignment([TopicPartitions(t, list(ps)) for t, ps in self.assignment])
        return ShareGroupHeartbeatResponse(
            throttle_time_ms=throttle_time_ms,
            error_code=self.error_code,
            error_message=self.error_message,
            member_id=self.member_id,
            member_epoch=self.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            assignment=wire_assignment,
        )


@dataclass
class StatePlan:
    """Records (already applied) and the persister request that goes with them, if any."""

    records: list[CoordinatorRecord] = field(default_factory=list)
    request: StateRequest | None = None


@dataclass
class OffsetsAlterPlan:
    """AlterShareGroupOffsets, first step: records (already applied) moving the partitions to
    initializing, the InitializeShareGroupState to send (``request``, state epoch = the group
    epoch; ``offsets`` gives each partition's new start offset), and the per-topic answer
    ``(topic name, topic id or None, [(partition, error code)])``."""

    records: list[CoordinatorRecord] = field(default_factory=list)
    request: StateRequest | None = None
    offsets: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    results: list[tuple[str, uuid.UUID | None, list[tuple[int, int]]]] = field(default_factory=list)


@dataclass
class OffsetsDeleteStep:
    """DeleteShareGroupOffsets, first step: records (already applied) moving the topics to
    deleting, the share partitions whose state to delete, and per-topic errors
    ``(topic name, error code, message or None for the code's default)``."""

    records: list[CoordinatorRecord] = field(default_factory=list)
    to_delete: dict[uuid.UUID, tuple[str, frozenset[int]]] = field(default_factory=dict)
    errors: list[tuple[str, int, str | None]] = field(default_factory=list)


@dataclass
class ExpiryResult:
    """Records for members whose session expired (already applied) and who they were."""

    records: list[CoordinatorRecord] = field(default_factory=list)
    departed: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    # current assignment: (topic id, topic name, partitions); topics unknown to the image are left out
    assignment: list[tuple[uuid.UUID, str, list[int]]]


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: list[MemberDescription]


AssignableHook = Callable[[str, TopicInfo], AbstractSet[int]]


def _all_partitions(group_id: str, topic: TopicInfo) -> AbstractSet[int]:
    return range(topic.num_partitions)


def _is_blank(text: str) -> bool:
    """Java's ``trim().isEmpty()``: nothing but code points <= U+0020."""
    return all(ord(c) <= 32 for c in text)


def validate_request(group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                     subscribed_topic_names: Iterable[str] | None) -> str | None:
    """The INVALID_REQUEST message for a malformed ShareGroupHeartbeat, or None if it is fine.

    Kafka's checks in Kafka's order (no length limit on the member id: ShareFetch has one).
    """
    if member_id is None or _is_blank(member_id):
        return "MemberId can't be empty."
    if group_id is None or _is_blank(group_id):
        return "GroupId can't be empty."
    if rack_id is not None and _is_blank(rack_id):
        return "RackId can't be empty."
    if member_epoch == 0 and not subscribed_topic_names:
        return "SubscribedTopicNames must be set in first request."
    if member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        return "MemberEpoch is invalid."
    return None


class ShareGroupCoordinator:
    """All share groups of one ``__consumer_offsets`` partition (one owner, no locks).

    ``topics``: topic lookup (replace it with ``on_metadata_change``).
    ``broker_config``: broker properties (``group.share.max.size``, ``group.share.*``
    defaults). ``group_config(group_id)``: the group's own config props (empty if none).
    ``assignable_partitions(group_id, topic)``: partitions that may be assigned now —
    all of them by default, the group's initialized ones with ``track_share_state``
    (call ``assignable_changed`` when a custom hook starts answering differently).
    ``track_share_state``: keep ShareGroupStatePartitionMetadata as Kafka does (module doc).
    ``foreign_group_type(group_id)``: the type of a non-share group with that id
    (classic/consumer/streams) or None; such ids answer GROUP_ID_NOT_FOUND.
    """

    def __init__(
        self,
        topics: TopicLookup | None = None,
        *,
        broker_config: Mapping[str, str] | None = None,
        group_config: Callable[[str], Mapping[str, str]] | None = None,
        assignable_partitions: AssignableHook | None = None,
        foreign_group_type: Callable[[str], str | None] | None = None,
        track_share_state: bool = False,
    ) -> None:
        self._topics: TopicLookup = topics if topics is not None else EMPTY_TOPICS
        self._broker_config = dict(broker_config or {})
        self._group_config = group_config or (lambda group_id: {})
        self._track = track_share_state
        if assignable_partitions is None:
            assignable_partitions = self._initialized_partitions if track_share_state else _all_partitions
        self._assignable = assignable_partitions
        self._foreign_group_type = foreign_group_type or (lambda group_id: None)
        self._max_size = broker_value("group.share.max.size", self._broker_config)
        self._init_retry_ms = broker_value("group.share.initialize.retry.interval.ms", self._broker_config)
        # group id -> topic id -> when this coordinator marked the topic initializing. Not a
        # record: a topic replayed as initializing has no entry, so it is retried at once.
        # An entry goes when its topic leaves the initializing set (``_set_state_metadata``).
        self._init_since: dict[str, dict[uuid.UUID, int]] = {}
        self._groups: dict[str, ShareGroup] = {}
        # groups whose share-state metadata names a topic id the topic view lacks (an
        # initialization that finished after its topic was deleted): the next metadata change
        # cleans them up, whichever topics it is about
        self._stale_state: set[str] = set()
        # groups a topic change (or a load) may have given another metadata hash: their next
        # heartbeat compares it and bumps the epoch if it differs (Kafka's requestMetadataRefresh;
        # a topic change itself writes no ShareGroupMetadata). Not a record.
        self._refresh: set[str] = set()
        # topic name -> groups with a member subscribed to it; topic id -> groups whose
        # share-state metadata names it. Kept by replay, so that a topic change visits only
        # the groups it can affect.
        self._subscribers: dict[str, set[str]] = {}
        self._listed_in: dict[uuid.UUID, set[str]] = {}
        self._timers = SessionTimers()
        self._settings_cache: dict[str, tuple[dict, EffectiveGroupConfig]] = {}
        # group id -> (assignment epoch, assignable version, topics version) known to have
        # every assignable partition in some target: spares heartbeats an O(partitions) scan
        self._settled: dict[str, tuple[int, int, int]] = {}
        self._assignable_version = 0
        self._topics_version = 0
        self._replayers = {
            ShareGroupMemberMetadataKey: self._replay_member_metadata,
            ShareGroupMetadataKey: self._replay_group_metadata,
            ShareGroupTargetAssignmentMetadataKey: self._replay_target_metadata,
            ShareGroupTargetAssignmentMemberKey: self._replay_target_member,
            ShareGroupCurrentMemberAssignmentKey: self._replay_current_assignment,
            ShareGroupStatePartitionMetadataKey: self._replay_state_partition_metadata,
        }

    # ------------------------------------------------------------------ settings

    def settings(self, group_id: str) -> EffectiveGroupConfig:
        """The group's effective configs (group overrides on broker-derived defaults).
        Cached per group while its props stay equal: every heartbeat asks."""
        props = self._group_config(group_id)
        cached = self._settings_cache.get(group_id)
        if cached is not None and cached[0] == props:
            return cached[1]
        settings = effective(props, self._broker_config)
        if len(self._settings_cache) > 4096:
            self._settings_cache.clear()
        self._settings_cache[group_id] = (dict(props), settings)
        return settings

    # ------------------------------------------------------------------ heartbeat

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        rack_id: str | None,
        subscribed_topic_names: Iterable[str] | None,
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> HeartbeatResult:
        """Handle one ShareGroupHeartbeat (epoch 0 joins, -1 leaves, otherwise heartbeats)."""
        if subscribed_topic_names is not None:
            subscribed_topic_names = list(subscribed_topic_names)
        problem = validate_request(group_id, member_id, member_epoch, rack_id, subscribed_topic_names)
        if problem is not None:
            return HeartbeatResult.failed(ErrorCode.INVALID_REQUEST, problem)
        try:
            if member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                return self._leave(group_id, member_id)
            return self._heartbeat(group_id, member_id, member_epoch, rack_id, subscribed_topic_names,
                                   client_id, client_host, now_ms)
        except KafkaError as e:
            return HeartbeatResult.failed(e.code, e.message)

    def _share_group_or_raise(self, group_id: str, create: bool) -> ShareGroup:
        if self._foreign_group_type(group_id) is not None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        group = self._groups.get(group_id)
        if group is None:
            if not create:
                raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
            group = ShareGroup(group_id)  # materialises when its records are replayed
        return group

    def _heartbeat(self, group_id, member_id, member_epoch, rack_id, subscribed_topic_names,
                   client_id, client_host, now_ms) -> HeartbeatResult:
        group = self._share_group_or_raise(group_id, create=member_epoch == 0)
        if len(group.members) >= self._max_size and member_id not in group.members:
            raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                             f"The share group has reached its maximum capacity of {self._max_size} members.")
        old = group.members.get(member_id)
        is_new = old is None
        if is_new:
            if member_epoch != 0:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group {group_id}.")
            old = ShareGroupMember(member_id)
        elif member_epoch != 0:
            _check_member_epoch(old, member_epoch)

        settings = self.settings(group_id)
        records: list[CoordinatorRecord] = []

        # 1. Member metadata: rack and subscription change only when sent; client always.
        subscription = old.subscribed_topic_names
        if subscribed_topic_names is not None:
            subscription = tuple(sorted(set(subscribed_topic_names)))
        updated = replace(
            old,
            rack_id=old.rack_id if rack_id is None else rack_id,
            client_id=client_id,
            client_host=client_host,
            subscribed_topic_names=subscription,
        )
        if is_new or updated != old:
            records.append(rec.member_metadata(group_id, member_id, updated.rack_id, client_id, client_host,
                                               subscription))
        subscription_changed = subscription != old.subscribed_topic_names

        # 2. Group epoch: bumped by a subscription change, by partitions that became
        #    assignable but are in nobody's target yet, or by subscribed topics whose metadata
        #    changed since the epoch was computed (looked at only after a topic change or a load).
        group_epoch = group.group_epoch
        bump = subscription_changed or self._assignment_pending(group)
        if bump or group_id in self._refresh:
            names = Counter(group.subscribed_names)
            names.subtract(old.subscribed_topic_names)
            names.update(subscription)
            new_hash = metadata_hash((n for n, c in names.items() if c > 0), self._topics)
            if bump or new_hash != group.metadata_hash:
                group_epoch += 1
                records.append(rec.group_metadata(group_id, group_epoch, new_hash))
            self._refresh.discard(group_id)

        # 3. Target assignment, when the group moved past the last one computed.
        target_epoch = group.assignment_epoch
        target = group.targets.get(member_id, {})
        if group_epoch > group.assignment_epoch:
            new_targets = self._compute_targets(group, updated)
            for mid in sorted(new_targets):
                if mid not in group.targets or new_targets[mid] != group.targets[mid]:
                    records.append(rec.target_member(group_id, mid, new_targets[mid]))
            records.append(rec.target_metadata(group_id, group_epoch))
            target_epoch = group_epoch
            target = new_targets[member_id]

        # 4. Reconcile: straight to the target epoch and partitions (no revocation barrier).
        reconciled = updated
        if target_epoch != old.member_epoch:
            reconciled = replace(updated, member_epoch=target_epoch, previous_member_epoch=old.member_epoch,
                                 state=MEMBER_STATE_STABLE, assigned=self._filter(target, subscription))
        elif subscription_changed:
            reconciled = replace(updated, assigned=self._filter(target, subscription))
        if _assignment_fields(reconciled) != _assignment_fields(old):
            records.append(rec.current_assignment(group_id, member_id, reconciled.member_epoch,
                                                  reconciled.previous_member_epoch, reconciled.assigned,
                                                  reconciled.state))

        self.replay_all(records)
        plan = self._plan_initialization(group_id, now_ms) if self._track else StatePlan()
        records += plan.records  # Kafka writes them last in the heartbeat's batch
        self._timers.arm(group_id, member_id, now_ms + settings.share_session_timeout_ms)

        send_assignment = (member_epoch == 0 or subscribed_topic_names is not None
                           or reconciled.assigned != old.assigned)
        return HeartbeatResult(
            records=records,
            member_id=member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=settings.share_heartbeat_interval_ms,
            assignment=_wire_assignment(reconciled.assigned) if send_assignment else None,
            initialize=plan.request,
        )

    def _leave(self, group_id: str, member_id: str) -> HeartbeatResult:
        group = self.share_group(group_id)  # Kafka's leave looks the group up as admin requests do
        if member_id not in group.members:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
        records = self._remove_member(group, member_id)
        return HeartbeatResult(records=records, member_id=member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                               heartbeat_interval_ms=0, assignment=None, departed=[(group_id, member_id)])

    def _remove_member(self, group: ShareGroup, member_id: str) -> list[CoordinatorRecord]:
        """Leave / fence: tombstones in Kafka's order, then an epoch bump (always)."""
        group_id = group.group_id
        names = Counter(group.subscribed_names)
        names.subtract(group.members[member_id].subscribed_topic_names)
        new_hash = metadata_hash((n for n, c in names.items() if c > 0), self._topics)
        records = [
            rec.current_assignment_tombstone(group_id, member_id),
            rec.target_member_tombstone(group_id, member_id),
            rec.member_metadata_tombstone(group_id, member_id),
            rec.group_metadata(group_id, group.group_epoch + 1, new_hash),
        ]
        self.replay_all(records)
        self._timers.cancel(group_id, member_id)
        return records

    # ------------------------------------------------------------------ assignment

    def _topic_ids(self, names: Iterable[str]) -> set[uuid.UUID]:
        ids = set()
        for name in names:
            topic = self._topics.topic_by_name(name)
            if topic is not None:
                ids.add(topic.topic_id)
        return ids

    def _compute_targets(self, group: ShareGroup, updated: ShareGroupMember) -> dict[str, Assignment]:
        members = dict(group.members)
        members[updated.member_id] = updated
        specs = {
            mid: MemberSpec(self._topic_ids(m.subscribed_topic_names), group.targets.get(mid, {}))
            for mid, m in members.items()
        }
        topics = {}
        for name in {n for m in members.values() for n in m.subscribed_topic_names}:
            topic = self._topics.topic_by_name(name)
            if topic is not None:
                topics[topic.topic_id] = self._assignable(group.group_id, topic)
        # Kafka's ModernGroup.subscriptionType: homogeneous when every member names the same topics.
        names = {frozenset(m.subscribed_topic_names) for m in members.values()}
        return {mid: normalize(a) for mid, a in assign(specs, topics, len(names) <= 1).items()}

    def _filter(self, target: Assignment, subscription: tuple[str, ...]) -> Assignment:
        """The part of a target on topics the member subscribes to now."""
        wanted = set(subscription)
        kept = {}
        for topic_id, partitions in target.items():
            topic = self._topics.topic_by_id(topic_id)
            if topic is not None and topic.name in wanted:
                kept[topic_id] = partitions
        return kept

    def _assignment_pending(self, group: ShareGroup) -> bool:
        """Kafka's "initialized assignment pending": some assignable partition of a subscribed
        topic is in no member's target. Only meaningful once the target is current."""
        if not group.members or group.group_epoch != group.assignment_epoch:
            return False
        stamp = (group.assignment_epoch, self._assignable_version, self._topics_version)
        if self._settled.get(group.group_id) == stamp:
            return False
        for name in group.subscribed_names:
            topic = self._topics.topic_by_name(name)
            if topic is None:
                continue
            assignable = self._assignable(group.group_id, topic)
            held = group.target_holders.get(topic.topic_id, {})
            if any(p not in held for p in assignable):
                return True
        self._settled[group.group_id] = stamp
        return False

    def _initialized_partitions(self, group_id: str, topic: TopicInfo) -> AbstractSet[int]:
        return share_state.initialized_partitions(self._groups.get(group_id), topic.topic_id, topic.num_partitions)

    # ------------------------------------------------------------------ share-partition state

    def _fresh(self, group_id: str, topic_id: uuid.UUID, now_ms: int) -> bool:
        since = self._init_since.get(group_id, {}).get(topic_id)
        return since is not None and now_ms - since < self._init_retry_ms

    def _plan_initialization(self, group_id: str, now_ms: int) -> StatePlan:
        """Kafka's ``maybeCreateInitializeShareGroupStateRequest``: subscribed partitions with
        no share state (and not initializing since recently) become initializing."""
        group = self._groups.get(group_id)
        if group is None or not group.subscribed_names:
            return StatePlan()
        change = share_state.to_initialize(group, group.subscribed_names, self._topics,
                                           lambda topic_id: self._fresh(group_id, topic_id, now_ms))
        if not change:
            return StatePlan()
        record = share_state.initializing_record(group, change, self._topics)
        self.replay(record)
        self._init_since.setdefault(group_id, {}).update(dict.fromkeys(change, now_ms))
        # Ahead of a heartbeat that will bump the epoch for a topic change, the state epoch is the
        # bumped one: Kafka initialises those partitions at that heartbeat, with its epoch.
        epoch = group.group_epoch
        if group_id in self._refresh and metadata_hash(group.subscribed_names, self._topics) != group.metadata_hash:
            epoch += 1
        return StatePlan([record], share_state.request_of(group_id, change, epoch))

    def maybe_initialize(self, group_id: str, now_ms: int) -> StatePlan:
        """What a heartbeat of this group would initialise, without a heartbeat: used after
        loading and after topic changes so partitions are ready before members ask."""
        if not self._track:
            return StatePlan()
        return self._plan_initialization(group_id, now_ms)

    def initialize_share_state(self, group_id: str, partitions: Mapping[uuid.UUID, Iterable[int]]
                               ) -> list[CoordinatorRecord]:
        """The persister initialised ``partitions``: they become initialized (assignable)."""
        group = self._groups.get(group_id)
        record = None if group is None else share_state.initialized_record(group, partitions, self._topics)
        return self._apply(record)

    def uninitialize_share_state(self, group_id: str, partitions: Mapping[uuid.UUID, Iterable[int]]
                                 ) -> list[CoordinatorRecord]:
        """Initialising ``partitions`` failed: they stop being initializing (retried later).
        A topic keeps its initialisation time while other partitions of it still initialize
        (as Kafka keeps the timestamp): they must not be initialised a second time meanwhile."""
        group = self._groups.get(group_id)
        record = None if group is None else share_state.uninitialized_record(group, partitions, self._topics)
        return self._apply(record)

    def _forget_init_since(self, group_id: str, topic_ids: Iterable[uuid.UUID]) -> None:
        """Those topics may be initialised again at once."""
        since = self._init_since.get(group_id)
        if since is not None:
            for topic_id in topic_ids:
                since.pop(topic_id, None)
            if not since:
                del self._init_since[group_id]

    def prepare_group_deletion(self, group_id: str) -> StatePlan:
        """First step of DeleteGroups for a share group (Kafka's ``sharePartitionDeleteRequests``):
        raises KafkaError GROUP_ID_NOT_FOUND / NON_EMPTY_GROUP like ``delete_group``; moves
        every share partition with state to deleting and returns the DeleteShareGroupState
        request. ``delete_group`` writes the tombstones once the state is gone."""
        group = self._share_group_or_raise(group_id, create=False)
        if group.members:
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP, f"Share group {group_id} is not empty.")
        record, request = share_state.deleting_plan(group, self._topics)
        return StatePlan(self._apply(record), request)

    def _apply(self, record: CoordinatorRecord | None) -> list[CoordinatorRecord]:
        if record is None:
            return []
        self.replay(record)
        return [record]

    def assignable_changed(self) -> None:
        """Tell the coordinator that ``assignable_partitions`` answers differently now;
        the next heartbeat of each affected group bumps its epoch and reassigns."""
        self._assignable_version += 1

    # ------------------------------------------------------------------ timers

    def expire_sessions(self, now_ms: int) -> ExpiryResult:
        """Fence every member whose session deadline is <= now (same records as a leave)."""
        result = ExpiryResult()
        for group_id, member_id in self._timers.pop_expired(now_ms):
            group = self._groups.get(group_id)
            if group is None or member_id not in group.members:
                continue
            result.records.extend(self._remove_member(group, member_id))
            result.departed.append((group_id, member_id))
        return result

    def next_deadline(self) -> int | None:
        """The earliest session deadline (ms), or None when no member has one."""
        return self._timers.next_deadline()

    def session_deadline(self, group_id: str, member_id: str) -> int | None:
        return self._timers.deadline(group_id, member_id)

    def on_loaded(self, now_ms: int, topics: TopicLookup | None = None) -> list[CoordinatorRecord]:
        """After replaying the log: give every member a fresh session deadline, and have each
        group's next heartbeat compare its metadata hash with ``topics`` (when given, the
        current view otherwise), as Kafka's freshly loaded groups do: topics that changed while
        the coordinator was away bump the epoch then."""
        for group_id, group in self._groups.items():
            timeout = None
            for member_id in group.members:
                if not self._timers.is_armed(group_id, member_id):
                    if timeout is None:
                        timeout = self.settings(group_id).share_session_timeout_ms
                    self._timers.arm(group_id, member_id, now_ms + timeout)
        return self.on_metadata_change(self._topics if topics is None else topics)

    # ------------------------------------------------------------------ topics

    def on_metadata_change(self, topics: TopicLookup, changed: Collection[str] | None = None
                           ) -> list[CoordinatorRecord]:
        """Adopt a new topic view. Groups subscribed to the changed topics compare their
        metadata hash at their next heartbeat, which bumps the epoch if a subscribed topic was
        created, deleted, recreated or resized (Kafka's onNewMetadataImage only requests that
        refresh: the epoch is not bumped until a member heartbeats, and once for several
        changes). Deleted topics leave the groups' share-partition state metadata; returns
        those ShareGroupStatePartitionMetadata records.

        ``changed``: the names of the topics that changed, if known. Only the groups they can
        affect are then looked at (like Kafka's index of groups by subscribed topic): with
        thousands of groups, hashing every group's topics made each topic creation cost
        tens of milliseconds; even a pass over every group cost 10 ms at 10,000 groups."""
        old, self._topics = self._topics, topics
        self._topics_version += 1
        if changed is None:
            group_ids = sorted(self._groups)
        else:
            old_ids = [t.topic_id for n in changed if (t := old.topic_by_name(n)) is not None]
            group_ids = sorted(self._stale_state.union(*(self._subscribers.get(n, ()) for n in changed),
                                                       *(self._listed_in.get(i, ()) for i in old_ids)))
        records = []
        for group_id in group_ids:
            group = self._groups[group_id]
            if group.subscribed_names:
                self._refresh.add(group_id)
            if group.has_state_metadata:
                cleanup = share_state.cleanup_record(group, topics)
                if cleanup is None:
                    self._stale_state.discard(group_id)  # (flagged against an older view)
                records += self._apply(cleanup)
        return records

    @property
    def topics(self) -> TopicLookup:
        return self._topics

    def groups_subscribed_to(self, names: Collection[str]) -> list[str]:
        """The groups with a member subscribed to any of ``names``."""
        return sorted(set().union(*(self._subscribers.get(n, ()) for n in names)))

    # ------------------------------------------------------------------ admin

    def delete_group(self, group_id: str) -> list[CoordinatorRecord]:
        """DeleteGroups for a share group: raises KafkaError GROUP_ID_NOT_FOUND (69) if it
        does not exist, NON_EMPTY_GROUP (68) if it has members."""
        group = self._share_group_or_raise(group_id, create=False)
        if group.members:
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP, f"Share group {group_id} is not empty.")
        records = [rec.target_member_tombstone(group_id, mid) for mid in sorted(group.targets)]
        records += [
            rec.target_metadata_tombstone(group_id),
            rec.state_partition_metadata_tombstone(group_id),
            rec.group_metadata_tombstone(group_id),
        ]
        self.replay_all(records)
        self._settled.pop(group_id, None)
        return records

    # ------------------------------------------------------------------ share-group admin

    def share_group(self, group_id: str) -> ShareGroup:
        """The share group, or KafkaError GROUP_ID_NOT_FOUND with Kafka's messages (those of
        ``GroupMetadataManager.shareGroup``, which admin requests use)."""
        if self._foreign_group_type(group_id) is not None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        group = self._groups.get(group_id)
        if group is None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        return group

    def describe(self, group_id: str) -> GroupDescription:
        """ShareGroupDescribe data; raises KafkaError GROUP_ID_NOT_FOUND like ``share_group``."""
        self.share_group(group_id)
        return self.describe_group(group_id)

    def initialized_partitions(self, group_id: str) -> dict[uuid.UUID, frozenset[int]]:
        """The share partitions of the group whose state is initialized (Kafka's
        ``initializedShareGroupPartitions``): what DescribeShareGroupOffsets lists when asked
        for all topics. Empty for a group that does not exist."""
        group = self._groups.get(group_id)
        if group is None:
            return {}
        return {t: ps for t, (_, ps) in group.initialized_topics.items()}

    def prepare_offsets_alter(self, group_id: str, topics: Iterable[tuple[str, Iterable[tuple[int, int]]]],
                              now_ms: int) -> OffsetsAlterPlan:
        """AlterShareGroupOffsets (Kafka's ``alterShareGroupOffsets``): ``topics`` is
        ``(name, [(partition, start offset)])``. A group that does not exist is created (it
        materialises when the record is replayed), one with members is NON_EMPTY_GROUP, a
        non-share group GROUP_ID_NOT_FOUND. Partitions of unknown topics, or beyond a topic's
        partition count, are UNKNOWN_TOPIC_OR_PARTITION; the others become initializing and
        are to be initialised with their new start offset (state epoch = group epoch). As in
        Kafka, every existing topic named joins the initializing set, with no partitions when
        none of its partitions exists, so the record is written (and a new group created) even
        when there is nothing to initialise."""
        if self._foreign_group_type(group_id) is not None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        group = self._groups.get(group_id) or ShareGroup(group_id)
        if group.members:
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP, "The group is not empty.")
        plan = OffsetsAlterPlan()
        change: dict[uuid.UUID, tuple[str, frozenset[int]]] = {}
        for name, partitions in topics:
            partitions = list(partitions)
            topic = self._topics.topic_by_name(name)
            if topic is None:
                plan.results.append((name, None, [(p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for p, _ in partitions]))
                continue
            rows, valid = [], set()
            for p, offset in partitions:
                if 0 <= p < topic.num_partitions:
                    rows.append((p, ErrorCode.NONE))
                    valid.add(p)
                    plan.offsets[(topic.topic_id, p)] = offset
                else:
                    rows.append((p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            plan.results.append((name, topic.topic_id, rows))
            _, before = change.get(topic.topic_id, ("", frozenset()))
            change[topic.topic_id] = (topic.name, before | frozenset(valid))
        if not change:
            return plan
        record = share_state.initializing_record(group, change, self._topics)
        self.replay(record)
        plan.records.append(record)
        change = {t: v for t, v in change.items() if v[1]}
        if change:
            self._init_since.setdefault(group_id, {}).update(dict.fromkeys(change, now_ms))
            plan.request = share_state.request_of(group_id, change, self._groups[group_id].group_epoch)
        return plan

    def prepare_offsets_delete(self, group_id: str, topic_names: Iterable[str]) -> OffsetsDeleteStep:
        """DeleteShareGroupOffsets (Kafka's ``initiateDeleteShareGroupOffsets``): raises
        KafkaError GROUP_ID_NOT_FOUND / NON_EMPTY_GROUP (any member forbids it, whatever it
        subscribes to); otherwise moves the topics' share partitions to deleting."""
        group = self.share_group(group_id)
        if group.members:
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP, "The group is not empty.")
        plan = share_state.offsets_delete_plan(group, topic_names, self._topics, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        records = self._apply(plan.record)
        self._forget_init_since(group_id, plan.to_delete)
        return OffsetsDeleteStep(records, plan.to_delete, plan.errors)

    def complete_offsets_delete(self, group_id: str, topic_ids: Iterable[uuid.UUID]) -> list[CoordinatorRecord]:
        """The state of ``topic_ids`` is deleted: they leave the deleting set."""
        group = self._groups.get(group_id)
        return [] if group is None else self._apply(share_state.offsets_deleted_record(group, topic_ids, self._topics))

    def has_group(self, group_id: str) -> bool:
        return group_id in self._groups

    def group_ids(self) -> list[str]:
        return sorted(self._groups)

    def group_state(self, group_id: str) -> str:
        group = self._groups.get(group_id)
        return STATE_DEAD if group is None else group.state

    def group_summaries(self) -> list[tuple[str, str, int]]:
        """``(group id, state, member count)`` of every share group (for metrics)."""
        return [(gid, g.state, len(g.members)) for gid, g in self._groups.items()]

    def list_groups(self, states: Iterable[str] | None = None) -> list[tuple[str, str]]:
        """``(group id, state)`` for every share group, optionally only the given states
        (compared case-insensitively, as ListGroups does)."""
        wanted = None if not states else {s.lower() for s in states}
        return [(gid, g.state) for gid, g in sorted(self._groups.items())
                if wanted is None or g.state.lower() in wanted]

    def describe_group(self, group_id: str) -> GroupDescription | None:
        """ShareGroupDescribe data, or None when there is no such share group."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        members = []
        for mid, m in sorted(group.members.items()):
            assignment = []
            for topic_id, partitions in sorted(m.assigned.items()):
                topic = self._topics.topic_by_id(topic_id)
                if topic is not None:
                    assignment.append((topic_id, topic.name, sorted(partitions)))
            members.append(MemberDescription(mid, m.rack_id, m.member_epoch, m.client_id, m.client_host,
                                             list(m.subscribed_topic_names), assignment))
        return GroupDescription(group_id, group.state, group.group_epoch, group.assignment_epoch,
                                ASSIGNOR_NAME, members)

    def member(self, group_id: str, member_id: str) -> ShareGroupMember | None:
        group = self._groups.get(group_id)
        return None if group is None else group.members.get(member_id)

    def target_assignment(self, group_id: str, member_id: str) -> Assignment | None:
        group = self._groups.get(group_id)
        return None if group is None else group.targets.get(member_id)

    def snapshot(self) -> dict:
        """Plain data of everything the records built (not timers): equal after a replay."""
        return {gid: g.snapshot() for gid, g in sorted(self._groups.items())}

    # ------------------------------------------------------------------ replay

    def snapshot_records(self) -> list[CoordinatorRecord]:
        """Every group's current records, as a compacted ``__consumer_offsets`` keeps them
        (the latest value of each live key): replaying them alone rebuilds every group."""
        out: list[CoordinatorRecord] = []
        for group_id, group in self._groups.items():
            out.append(rec.group_metadata(group_id, group.group_epoch, group.metadata_hash))
            for m in group.members.values():
                out.append(rec.member_metadata(group_id, m.member_id, m.rack_id, m.client_id, m.client_host,
                                               m.subscribed_topic_names))
                out.append(rec.current_assignment(group_id, m.member_id, m.member_epoch, m.previous_member_epoch,
                                                  m.assigned, m.state))
            out.append(rec.target_metadata(group_id, group.assignment_epoch))
            out.extend(rec.target_member(group_id, member_id, a) for member_id, a in group.targets.items())
            if group.has_state_metadata:
                out.append(rec.state_partition_metadata(group_id, group.initializing_topics, group.initialized_topics,
                                                        group.deleting_topics))
        return out

    def replay_all(self, records: Iterable[CoordinatorRecord]) -> None:
        for record in records:
            self.replay(record)

    def replay(self, record: CoordinatorRecord) -> None:
        """Apply one ShareGroup* record; the only code that changes group state."""
        key, value = record
        handler = self._replayers.get(type(key))
        if handler is None:
            raise ReplayError(f"not a share-group record: {type(key).__name__}")
        handler(key, value)

    def _group_for(self, group_id: str, value) -> ShareGroup | None:
        group = self._groups.get(group_id)
        if group is None and value is not None:
            group = self._groups[group_id] = ShareGroup(group_id)
        return group

    def _replay_member_metadata(self, key, value) -> None:
        group = self._group_for(key.group_id, value)
        if group is None:
            return
        before = set(group.subscribed_names)
        self._set_member_metadata(group, key, value)
        _reindex(self._subscribers, key.group_id, before, group.subscribed_names)

    @staticmethod
    def _set_member_metadata(group: ShareGroup, key, value) -> None:
        old = group.members.get(key.member_id)
        if value is None:
            if old is None:
                return
            if old.member_epoch != LEAVE_GROUP_MEMBER_EPOCH:
                raise ReplayError(f"tombstone for member {key.member_id} of group {key.group_id} before its "
                                  "ShareGroupCurrentMemberAssignment tombstone")
            if key.member_id in group.targets:
                raise ReplayError(f"tombstone for member {key.member_id} of group {key.group_id} before its "
                                  "ShareGroupTargetAssignmentMember tombstone")
            group.remove_member(key.member_id)
            return
        base = old if old is not None else ShareGroupMember(key.member_id)
        group.set_member(replace(
            base,
            rack_id=value.rack_id,
            client_id=value.client_id,
            client_host=value.client_host,
            subscribed_topic_names=tuple(sorted(set(value.subscribed_topic_names))),
        ))

    def _replay_group_metadata(self, key, value) -> None:
        group = self._group_for(key.group_id, value)
        if group is None:
            return
        if value is None:
            if group.members:
                raise ReplayError(f"tombstone for share group {key.group_id} while it still has members")
            del self._groups[key.group_id]
            _reindex(self._listed_in, key.group_id, _state_ids(group), ())
            self._settled.pop(key.group_id, None)
            self._stale_state.discard(key.group_id)
            self._init_since.pop(key.group_id, None)
            self._refresh.discard(key.group_id)
            return
        group.group_epoch = value.epoch
        group.metadata_hash = value.metadata_hash

    def _replay_target_metadata(self, key, value) -> None:
        group = self._group_for(key.group_id, value)
        if group is not None:
            group.assignment_epoch = 0 if value is None else value.assignment_epoch

    def _replay_target_member(self, key, value) -> None:
        group = self._group_for(key.group_id, value)
        if group is None:
            return
        if value is None:
            group.set_target(key.member_id, None)
        else:
            group.set_target(key.member_id, normalize({tp.topic_id: tp.partitions for tp in value.topic_partitions}))

    def _replay_current_assignment(self, key, value) -> None:
        group = self._group_for(key.group_id, value)
        if group is None:
            return
        old = group.members.get(key.member_id)
        if value is None:
            if old is not None:
                group.set_member(replace(old, member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                         previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH, assigned={}))
            return
        base = old if old is not None else ShareGroupMember(key.member_id)
        group.set_member(replace(
            base,
            member_epoch=value.member_epoch,
            previous_member_epoch=value.previous_member_epoch,
            state=value.state,
            assigned=normalize({tp.topic_id: tp.partitions for tp in value.assigned_partitions}),
        ))

    def _replay_state_partition_metadata(self, key, value) -> None:
        group = self._group_for(key.group_id, value)
        if group is None:
            return
        self._settled.pop(key.group_id, None)  # what may be assigned can have changed
        before = _state_ids(group)
        self._set_state_metadata(group, value)
        _reindex(self._listed_in, key.group_id, before, _state_ids(group))

    def _set_state_metadata(self, group: ShareGroup, value) -> None:
        group.has_state_metadata = value is not None
        if value is None:
            group.initializing_topics = {}
            group.initialized_topics = {}
            group.deleting_topics = {}
            self._stale_state.discard(group.group_id)
            self._init_since.pop(group.group_id, None)
            return
        group.initializing_topics = {t.topic_id: (t.topic_name, frozenset(t.partitions))
                                     for t in value.initializing_topics}
        # A topic no longer initializing (initialized, failed, deleted, reset) needs no retry
        # time: without this, a group kept one per topic id it ever initialised.
        since = self._init_since.get(group.group_id, ())
        self._forget_init_since(group.group_id, [t for t in since if t not in group.initializing_topics])
        group.initialized_topics = {t.topic_id: (t.topic_name, frozenset(t.partitions))
                                    for t in value.initialized_topics}
        group.deleting_topics = {t.topic_id: t.topic_name for t in value.deleting_topics}
        lookup = self._topics.topic_by_id
        if any(lookup(t) is None for t in _state_ids(group)):
            self._stale_state.add(group.group_id)
        else:
            self._stale_state.discard(group.group_id)


def _check_member_epoch(member: ShareGroupMember, received: int) -> None:
    """FENCED_MEMBER_EPOCH unless the epoch is the member's current or previous one
    (the previous one is accepted in case the response that moved it on was lost)."""
    if received > member.member_epoch:
        raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                         f"The share group member has a greater member epoch ({received}) than the one known "
                         f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
                         "partitions and rejoin.")
    if received < member.member_epoch and received != member.previous_member_epoch:
        raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                         f"The share group member has a smaller member epoch ({received}) than the one known "
                         f"by the group coordinator ({member.member_epoch}), and it does not match the previous "
                         f"member epoch ({member.previous_member_epoch}). The member must abandon all its "
                         "partitions and rejoin.")


def _assignment_fields(member: ShareGroupMember) -> tuple:
    return (member.member_epoch, member.previous_member_epoch, member.state, member.assigned)


def _wire_assignment(assigned: Assignment) -> list[tuple[uuid.UUID, list[int]]]:
    return [(t, sorted(ps)) for t, ps in sorted(assigned.items())]


def _state_ids(group: ShareGroup) -> set[uuid.UUID]:
    """The topic ids the group's share-state metadata names."""
    return {*group.initializing_topics, *group.initialized_topics, *group.deleting_topics}


def _reindex(index: dict, group_id: str, before: Iterable, after: Iterable) -> None:
    """Move ``group_id`` in ``index`` (key -> groups) from the keys ``before`` to ``after``."""
    before, after = set(before), set(after)
    for key in before - after:
        holders = index[key]
        holders.discard(group_id)
        if not holders:
            del index[key]
    for key in after - before:
        index.setdefault(key, set()).add(group_id)
