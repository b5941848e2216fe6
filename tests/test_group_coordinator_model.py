"""Random client behaviour against the share-group coordinator (hypothesis state machine).

Simulated clients behave like librdkafka: join with epoch 0, heartbeat with the last
epoch they were given, rejoin with the same id after UNKNOWN_MEMBER_ID or
FENCED_MEMBER_EPOCH. Meanwhile time passes, sessions expire, responses get lost and
topics change. Checked throughout: no fatal error ever reaches a well-behaved client,
state is exactly what replaying the records rebuilds (also when the log was compacted to the
current records first), and once everyone has caught up
the group converges to one epoch with a balanced, complete assignment.
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
from protocol.errors import ErrorCode

TOPIC_NAMES = ["a", "b", "c"]
MEMBERS = [f"member-{i}" for i in range(5)]
SESSION_MS = 45_000


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.sizes = {"a": 3, "b": 1}
        self.ids = {name: uuid.UUID(int=i + 1) for i, name in enumerate(TOPIC_NAMES)}
        self.c = ShareGroupCoordinator(self.image())
        self.log = []
        self.shadow = ShareGroupCoordinator(self.image())  # fed only the records, as after a restart
        self.replayed = 0
        self.now = 0
        self.epochs = {}  # member id -> epoch the client believes it has (absent: not joined)
        self.subs = {}
        self.expired = set()  # members the coordinator dropped since they last heard back

    def image(self):
        return TopicsImage(TopicInfo(self.ids[n], n, p) for n, p in self.sizes.items())

    def send(self, member, epoch, subs, lose_response=False):
        r = self.c.heartbeat("g", member, epoch, None, subs, "client", "/10.0.0.1", self.now)
        self.log += r.records
        assert r.error_code in (0, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH), r
        if r.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
            assert member in self.expired or epoch == -1
        if r.error_code == 0 and epoch != -1:
            assert r.heartbeat_interval_ms == 5000
            if epoch == 0 or subs is not None:
                assert r.assignment is not None
            if not lose_response:
                self.epochs[member] = r.member_epoch
        if r.error_code != 0 and epoch != -1:
            # librdkafka rejoins at once, same member id, full request
            self.expired.discard(member)
            r = self.send(member, 0, self.subs[member])
            assert r.error_code == 0
        return r

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

    @rule(ms=st.integers(1, 60_000))
    def time_passes(self, ms):
        self.now += ms
        out = self.c.expire_sessions(self.now)
        self.log += out.records
        for _, member in out.departed:
            self.expired.add(member)
        deadline = self.c.next_deadline()
        assert deadline is None or deadline > self.now

    @rule(topic=st.sampled_from(TOPIC_NAMES), size=st.integers(0, 6))
    def topic_changes(self, topic, size):
        if size == 0:
            self.sizes.pop(topic, None)
        elif topic in self.sizes and size < self.sizes[topic]:
            self.ids[topic] = uuid.uuid4()  # shrinking is only possible by recreating
            self.sizes[topic] = size
        else:
            self.sizes[topic] = size
        self.log += self.c.on_metadata_change(self.image())

    @rule()
    def compact(self):
        """What the runtime's compaction leaves of the log: every group's current records, then
        whatever is written later."""
        self.log = self.c.snapshot_records()
        self.shadow = ShareGroupCoordinator(self.image())
        self.replayed = 0

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

    @precondition(lambda self: self.epochs)
    @rule()
    def everyone_catches_up(self):
        # two rounds: the first may compute a new target, the second lets all reach it
        for _ in range(2):
            for member in sorted(self.epochs):
                self.send(member, self.epochs[member], None)
        group = self.c.describe_group("g")
        if not group.members:
            return
        epochs = {m.member_epoch for m in group.members}
        assert epochs == {group.group_epoch} == {group.assignment_epoch}
        self.check_balanced(group)

    def check_balanced(self, group):
        subscribers = {}
        for m in group.members:
            for name in m.subscribed_topic_names:
                if name in self.sizes:
                    subscribers.setdefault(name, []).append(m)
        homogeneous = len({tuple(n for n in m.subscribed_topic_names if n in self.sizes)
                           for m in group.members}) == 1
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
    machine.time_passes(50_000)
    for record in machine.log:
        assert rec.decode(*rec.encode(record)) == record
