"""Random client behaviour against the share-group coordinator (hypothesis state machine).

Simulated clients behave like librdkafka: join with epoch 0, heartbeat with the last
epoch they were given, rejoin with the same id after UNKNOWN_MEMBER_ID or
FENCED_MEMBER_EPOCH. Meanwhile time passes, sessions expire, responses get lost and
topics change (created, deleted, recreated under the same name, grown).

The coordinator tracks share-partition state as Kafka 4.1+ does, and the model plays the
runtime and the share coordinator around it: every InitializeShareGroupState the coordinator
plans (from heartbeats, ``maybe_initialize`` after topic changes, AlterShareGroupOffsets) is
answered later in any order, successfully or not, or never (the retry interval then lets a
heartbeat plan it again); an empty group may be deleted (DeleteShareGroupState between the two
steps), have a topic's offsets deleted (both steps) or its offsets reset.

Checked throughout: no fatal error ever reaches a well-behaved client; state is exactly what
replaying the records rebuilds (also when the log was compacted to the current records first);
whatever a member is or would be handed (targets, current assignments, heartbeat responses) is
initialised for the group under the topic's current id and not being deleted; a partition is
initializing and initialized at once only while an offsets reset re-initialises it; the
coordinator's bookkeeping only holds live entries. Once everyone has caught up (every pending
initialisation answered successfully, time past the retry interval) every subscribed partition
is initialised and the group converges to one epoch with a balanced, complete assignment.
"""

import uuid
from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from coordinator.group import records as rec
from coordinator.group.assignor import desired_counts
from coordinator.group.share_group import ShareGroupCoordinator
from coordinator.group.topics import TopicInfo, TopicsImage
from protocol.errors import ErrorCode, KafkaError

TOPIC_NAMES = ["a", "b", "c"]
MEMBERS = [f"member-{i}" for i in range(5)]
SESSION_MS = 45_000
RETRY_MS = 10_000  # group.share.initialize.retry.interval.ms (shorter than a session)
BROKER = {"group.share.initialize.retry.interval.ms": str(RETRY_MS)}


def new_coordinator(image):
    return ShareGroupCoordinator(image, broker_config=BROKER, track_share_state=True)


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.sizes = {"a": 3, "b": 1}
        self.ids = {name: uuid.UUID(int=i + 1) for i, name in enumerate(TOPIC_NAMES)}
        self.c = new_coordinator(self.image())
        self.log = []
        self.shadow = new_coordinator(self.image())  # fed only the records, as after a restart
        self.replayed = 0
        self.now = 0
        self.epochs = {}  # member id -> epoch the client believes it has (absent: not joined)
        self.subs = {}
        self.expired = set()  # members the coordinator dropped since they last heard back
        # requests sent to the share coordinator, not answered yet: (kind, payload)
        #   ("init", StateRequest)  InitializeShareGroupState planned by a heartbeat / maybe_initialize
        #   ("alter", StateRequest) InitializeShareGroupState of an offsets reset (the runtime
        #                           records only its success; a failure stays initializing)
        #   ("delete_group", None)  DeleteShareGroupState of a group deletion (second step pending)
        #   ("delete_offsets", [topic ids]) DeleteShareGroupState of an offsets delete
        self.pending = []
        self.reset_named = set()  # (topic id, partition) an offsets reset re-initialises

    def image(self):
        return TopicsImage(TopicInfo(self.ids[n], n, p) for n, p in self.sizes.items())

    def group(self):
        return self.c._groups.get("g")

    def plan(self, kind, request):
        if request is not None:
            assert request.group_id == "g"
            self.pending.append((kind, request))

    def send(self, member, epoch, subs, lose_response=False):
        r = self.c.heartbeat("g", member, epoch, None, subs, "client", "/10.0.0.1", self.now)
        self.log += r.records
        self.plan("init", r.initialize)
        assert r.error_code in (0, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH,
                                ErrorCode.GROUP_ID_NOT_FOUND), r
        if r.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
            assert member in self.expired or epoch == -1
        if r.error_code == ErrorCode.GROUP_ID_NOT_FOUND:  # expired, then the empty group was deleted
            assert member in self.expired and self.group() is None
        if r.error_code == 0 and epoch != -1:
            assert r.heartbeat_interval_ms == 5000
            if epoch == 0 or subs is not None:
                assert r.assignment is not None
            self.check_handed_out(r.assignment or [])
            if not lose_response:
                self.epochs[member] = r.member_epoch
        if r.error_code != 0 and epoch != -1:
            # librdkafka rejoins at once, same member id, full request
            self.expired.discard(member)
            r = self.send(member, 0, self.subs[member])
            assert r.error_code == 0
        return r

    def check_handed_out(self, assignment):
        """What a heartbeat response hands a member: only current topic ids, initialised
        partitions of them, none being deleted."""
        group = self.group()
        for topic_id, partitions in assignment:
            topic = self.c.topics.topic_by_id(topic_id)
            assert topic is not None, (topic_id, partitions)
            assert topic_id not in group.deleting_topics, (topic.name, group.deleting_topics)
            assert set(partitions) <= group.initialized_topics.get(topic_id, ("", frozenset()))[1], \
                (topic.name, partitions, group.initialized_topics)

    # ------------------------------------------------------------------ clients

    @rule(member=st.sampled_from(MEMBERS), topics=st.sets(st.sampled_from(TOPIC_NAMES), min_size=1))
    def join(self, member, topics):
        self.subs[member] = sorted(topics)
        self.expired.discard(member)
        assert self.send(member, 0, sorted(topics)).error_code == 0

    @rule(member=st.sampled_from(MEMBERS), full=st.booleans(), lose=st.booleans())
    def heartbeat(self, member, full, lose):
        if member in self.epochs:
            self.send(member, self.epochs[member], self.subs[member] if full else None, lose_response=lose)

    @rule(member=st.sampled_from(MEMBERS), topics=st.sets(st.sampled_from(TOPIC_NAMES), min_size=1))
    def resubscribe(self, member, topics):
        if member in self.epochs:
            self.subs[member] = sorted(topics)
            self.send(member, self.epochs[member], sorted(topics))

    @rule(member=st.sampled_from(MEMBERS))
    def leave(self, member):
        if member in self.epochs:
            r = self.send(member, -1, None)
            if r.error_code == 0:
                assert r.departed == [("g", member)] and r.member_epoch == -1
            del self.epochs[member]

    @precondition(lambda self: self.epochs)
    @rule()
    def everyone_leaves(self):
        """The group empties (then admin operations may run)."""
        for member in sorted(self.epochs):
            self.leave(member)

    @rule(ms=st.integers(1, 60_000))
    def time_passes(self, ms):
        self.now += ms
        out = self.c.expire_sessions(self.now)
        self.log += out.records
        for _, member in out.departed:
            self.expired.add(member)
        deadline = self.c.next_deadline()
        assert deadline is None or deadline > self.now

    # ------------------------------------------------------------------ share coordinator answers

    @precondition(lambda self: self.pending)
    @rule(data=st.data(), outcome=st.sampled_from(["ok", "ok", "failed", "lost"]))
    def share_coordinator_answers(self, data, outcome):
        """Some outstanding request is answered (any order): success, failure, or never (the
        runtime gave up on it, e.g. its shard was rebuilt)."""
        kind, payload = self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1)))
        if outcome == "lost":
            return
        ok = outcome == "ok"
        if kind in ("init", "alter"):
            if ok:
                self.log += self.c.initialize_share_state("g", payload.partitions)
            elif kind == "init":
                self.log += self.c.uninitialize_share_state("g", payload.partitions)
        elif kind == "delete_group" and ok:
            self.delete_group_second_step()
        elif kind == "delete_offsets" and ok:
            self.log += self.c.complete_offsets_delete("g", payload)

    @rule()
    def maybe_initialize(self):
        """The runtime's ``_initialize_groups`` (after loading, after topic changes)."""
        plan = self.c.maybe_initialize("g", self.now)
        self.log += plan.records
        self.plan("init", plan.request)

    # ------------------------------------------------------------------ admin

    def expect_admin_error(self, e):
        if self.group() is None:
            assert e.code == ErrorCode.GROUP_ID_NOT_FOUND, e
        else:
            assert self.group().members and e.code == ErrorCode.NON_EMPTY_GROUP, e

    @rule()
    def delete_group(self):
        """DeleteGroups, first step; the second follows a successful DeleteShareGroupState."""
        try:
            plan = self.c.prepare_group_deletion("g")
        except KafkaError as e:
            self.expect_admin_error(e)
            return
        assert not self.group().members
        self.log += plan.records
        if plan.request is None:
            self.delete_group_second_step()
        else:
            self.pending.append(("delete_group", None))

    def delete_group_second_step(self):
        try:
            self.log += self.c.delete_group("g")
        except KafkaError as e:  # a member joined in between
            self.expect_admin_error(e)

    @rule(topic=st.sampled_from(TOPIC_NAMES))
    def delete_offsets(self, topic):
        """DeleteShareGroupOffsets of one topic, first step."""
        try:
            step = self.c.prepare_offsets_delete("g", [topic])
        except KafkaError as e:
            self.expect_admin_error(e)
            return
        assert not self.group().members
        self.log += step.records
        if step.to_delete:
            assert list(step.to_delete) == [self.ids[topic]] and topic in self.sizes
            self.pending.append(("delete_offsets", list(step.to_delete)))

    @rule(topic=st.sampled_from(TOPIC_NAMES), partitions=st.sets(st.integers(0, 6), min_size=1))
    def reset_offsets(self, topic, partitions):
        """AlterShareGroupOffsets (creates the group if needed)."""
        try:
            plan = self.c.prepare_offsets_alter("g", [(topic, [(p, 0) for p in sorted(partitions)])], self.now)
        except KafkaError as e:
            assert self.group() is not None and self.group().members and e.code == ErrorCode.NON_EMPTY_GROUP, e
            return
        self.log += plan.records
        if plan.request is not None:
            self.reset_named.update(plan.request.pairs())
            self.pending.append(("alter", plan.request))

    # ------------------------------------------------------------------ topics

    @rule(topic=st.sampled_from(TOPIC_NAMES), size=st.integers(0, 6), recreate=st.booleans(), named=st.booleans())
    def topic_changes(self, topic, size, recreate, named):
        """A topic is created, deleted, grown, or deleted and created again under the same name
        (a new topic id, any size); the runtime then initialises the subscribed groups."""
        if size == 0:
            self.sizes.pop(topic, None)
            self.ids[topic] = uuid.uuid4()  # created again later, it gets a new id
        elif topic in self.sizes and (recreate or size < self.sizes[topic]):
            self.ids[topic] = uuid.uuid4()  # shrinking is only possible by recreating
            self.sizes[topic] = size
        else:
            self.sizes[topic] = size
        self.log += self.c.on_metadata_change(self.image(), [topic] if named else None)
        if "g" in self.c.groups_subscribed_to([topic]):
            self.maybe_initialize()

    @rule()
    def compact(self):
        """What the runtime's compaction leaves of the log: every group's current records, then
        whatever is written later."""
        self.log = self.c.snapshot_records()
        self.shadow = new_coordinator(self.image())
        self.replayed = 0

    # ------------------------------------------------------------------ invariants

    @invariant()
    def state_is_what_the_records_replay_to(self):
        self.shadow.replay_all(self.log[self.replayed:])
        self.replayed = len(self.log)
        assert self.shadow.snapshot() == self.c.snapshot()

    @invariant()
    def members_hold_only_subscribed_targets(self):
        snap = self.c.snapshot().get("g")
        if snap is None:
            return
        assert snap["assignment_epoch"] <= snap["group_epoch"]
        for mid, m in snap["members"].items():
            assert m["member_epoch"] <= snap["assignment_epoch"]
            target = snap["targets"].get(mid, {})
            for topic, parts in m["assigned"].items():
                if m["member_epoch"] == snap["assignment_epoch"]:
                    assert set(parts) <= set(target.get(topic, []))

    @invariant()
    def only_initialized_partitions_are_assigned(self):
        """Targets and current assignments name only initialised, not deleting partitions of
        current topics; an entry of a topic id the image no longer has (deleted or recreated)
        only lingers until the member's next heartbeat, which bumps the epoch (the topic change
        asked the group for a metadata refresh) and so reconciles."""
        group = self.group()
        if group is None:
            return
        held = [(mid, a, group.assignment_epoch) for mid, a in group.targets.items()]
        held += [(mid, m.assigned, m.member_epoch) for mid, m in group.members.items()]
        for mid, assignment, epoch in held:
            for topic_id, partitions in assignment.items():
                topic = self.c.topics.topic_by_id(topic_id)
                if topic is None:
                    assert epoch < group.group_epoch or "g" in self.c._refresh, (mid, topic_id)
                    continue
                assert topic_id not in group.deleting_topics, (mid, topic.name, group.deleting_topics)
                initialized = group.initialized_topics.get(topic_id, ("", frozenset()))[1]
                assert set(partitions) <= initialized, (mid, topic.name, partitions, group.initialized_topics)
                assert max(partitions) < topic.num_partitions

    @invariant()
    def state_sets_are_disjoint_but_for_resets(self):
        group = self.group()
        if group is None:
            return
        for topic_id, (_, partitions) in group.initializing_topics.items():
            both = partitions & group.initialized_topics.get(topic_id, ("", frozenset()))[1]
            assert {(topic_id, p) for p in both} <= self.reset_named, (topic_id, both)
        assert not set(group.initialized_topics) & set(group.deleting_topics)

    @invariant()
    def bookkeeping_holds_only_live_entries(self):
        c = self.c
        groups = c._groups
        assert set(c._init_since) <= set(groups)
        for group_id, since in c._init_since.items():
            assert since and set(since) <= set(groups[group_id].initializing_topics), (since, groups[group_id])
        assert set(c._settled) <= set(groups)
        assert c._stale_state <= set(groups)
        listed = {}
        for group_id, group in groups.items():
            ids = {*group.initializing_topics, *group.initialized_topics, *group.deleting_topics}
            for topic_id in ids:
                listed.setdefault(topic_id, set()).add(group_id)
            if any(c.topics.topic_by_id(t) is None for t in ids):
                assert group_id in c._stale_state  # the next topic change cleans it up
        assert c._listed_in == listed
        subscribers = {}
        for group_id, group in groups.items():
            for name in group.subscribed_names:
                subscribers.setdefault(name, set()).add(group_id)
        assert c._subscribers == subscribers

    # ------------------------------------------------------------------ liveness

    def answer_everything(self):
        """The share coordinator answers every outstanding request successfully."""
        while self.pending:
            kind, payload = self.pending[0]
            self.pending.pop(0)
            if kind in ("init", "alter"):
                self.log += self.c.initialize_share_state("g", payload.partitions)
            elif kind == "delete_group":
                self.delete_group_second_step()
            else:
                self.log += self.c.complete_offsets_delete("g", payload)

    @precondition(lambda self: self.epochs)
    @rule()
    def everyone_catches_up(self):
        # Everything outstanding is answered and time passes the retry interval (after a
        # heartbeat, so no session expires); then heartbeat rounds: the first plans what is
        # still missing (answered at once), the next bump the epoch, the last let all reach it.
        self.answer_everything()
        for member in sorted(self.epochs):
            self.send(member, self.epochs[member], None)
        self.now += RETRY_MS
        for _ in range(3):
            for member in sorted(self.epochs):
                self.send(member, self.epochs[member], None)
                self.answer_everything()
        for _ in range(2):
            for member in sorted(self.epochs):
                self.send(member, self.epochs[member], None)
        assert not self.pending
        group = self.c.describe_group("g")
        if group is None or not group.members:
            return
        state = self.group()
        for name in {n for m in group.members for n in m.subscribed_topic_names if n in self.sizes}:
            topic_id = self.ids[name]
            assert state.initialized_topics[topic_id][1] == frozenset(range(self.sizes[name]))
            # only a reset whose re-initialisation failed (nothing retries an initialized partition)
            left = state.initializing_topics.get(topic_id, ("", frozenset()))[1]
            assert {(topic_id, p) for p in left} <= self.reset_named
        epochs = {m.member_epoch for m in group.members}
        assert epochs == {group.group_epoch} == {group.assignment_epoch}
        self.check_balanced(group)

    def check_balanced(self, group):
        subscribers = {}
        for m in group.members:
            for name in m.subscribed_topic_names:
                if name in self.sizes:
                    subscribers.setdefault(name, []).append(m)
        # Kafka's subscription type counts every subscribed name, topics that do not exist too.
        homogeneous = len({frozenset(m.subscribed_topic_names) for m in group.members}) == 1
        if homogeneous:
            scopes = [(group.members, [n for n in subscribers])]
        else:
            scopes = [(subs, [n]) for n, subs in subscribers.items()]
        for members, names in scopes:
            parts = [(n, p) for n in names for p in range(self.sizes[n])]
            held = Counter()
            per_member = []
            for m in members:
                mine = [(name, p) for _, name, ps in m.assignment if name in names for p in ps]
                held.update(mine)
                per_member.append(len(mine))
            if parts:
                sharing = -(-len(members) // len(parts))
                assert all(held[x] == sharing for x in parts)
                assert sorted(per_member) == sorted(desired_counts(len(members), len(parts)))


TestCoordinatorMachine = CoordinatorMachine.TestCase
TestCoordinatorMachine.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)


def test_records_survive_the_wire_format():
    """Everything a busy run writes decodes to the same records."""
    machine = CoordinatorMachine()
    for i, member in enumerate(MEMBERS):
        machine.join(member, {TOPIC_NAMES[i % 3], "a"})
    machine.answer_everything()
    machine.time_passes(50_000)
    machine.delete_offsets("a")
    machine.delete_group()
    for record in machine.log:
        assert rec.decode(*rec.encode(record)) == record
