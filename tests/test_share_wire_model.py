"""Random sequences of ShareFetch and ShareAcknowledge from three raw members, good requests and
bad ones mixed, checked on the wire against a per-offset model of what KIP-932 promises.

Each step's answer must be the one the model predicts: wrong epochs and malformed
acknowledgements change nothing; an acknowledgement applies only when every offset in it is
held by its sender; a record is held by one member at a time, is never delivered again once
finished, and comes back with its count one higher until the delivery limit archives it.
At the end every member closes its session and a new member must get exactly the records the
model says are left, while DescribeShareGroupOffsets reports exactly that many as lag.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from protocol.errors import ErrorCode
from tests.raw_client import RawClient
from tests.test_share_admin_rpcs import offsets, rows
from tests.test_share_wire_support import (
    ShareMember,
    all_acquired,
    create_topic,
    parts,
    produce_batches,
    unique,
)

pytestmark = pytest.mark.timeout(300)

GAP, ACCEPT, RELEASE, REJECT, RENEW = range(5)
LIMIT = 5  # group.share.delivery.count.limit
SIZES = (2, 1, 3)  # log batches: offsets 0-1, 2, 3-5
END = sum(SIZES)
BATCH_END = [end for i, n in enumerate(SIZES) for end in [sum(SIZES[:i + 1]) - 1] * n]
MEMBERS = 3

# An acknowledgement batch: offsets near the log (one past its end too) and one type for the
# batch or one per offset, occasionally a type the request may not carry.
_TYPE = st.sampled_from([GAP, ACCEPT, ACCEPT, RELEASE, RELEASE, REJECT, RENEW])


@st.composite
def ack_batch(draw):
    first = draw(st.integers(0, END))
    last = first + draw(st.sampled_from([0, 0, 0, 1, 2, 3, -1]))
    if draw(st.integers(0, 3)) == 0 and last >= first:
        types = draw(st.lists(_TYPE, min_size=last - first + 1, max_size=last - first + 1))
    else:
        types = [draw(_TYPE)]
    return first, last, types


def sorted_batches(batches):
    """Most generated requests are well shaped: ascending, not overlapping."""
    out, prev = [], -1
    for first, last, types in sorted(batches):
        if first > prev and last >= first:
            out.append((first, last, types))
            prev = last
    return out


RANDOM_ACKS = st.one_of(st.lists(ack_batch(), max_size=4).map(sorted_batches), st.lists(ack_batch(), max_size=3))


@st.composite
def acks_for(draw, held: list[int]):
    """Mostly what a client sends: some of the offsets it holds, in runs, with one type per run
    (or per offset); otherwise anything (RANDOM_ACKS)."""
    if not held or draw(st.integers(0, 3)) == 0:
        return draw(RANDOM_ACKS)
    chosen = sorted(draw(st.sets(st.sampled_from(held), min_size=1)))
    runs: list[list[int]] = []
    for o in chosen:
        if runs and o == runs[-1][-1] + 1 and draw(st.booleans()):
            runs[-1].append(o)
        else:
            runs.append([o])
    usual = st.sampled_from([ACCEPT, RELEASE, RELEASE, RELEASE, RELEASE, REJECT])
    return [(r[0], r[-1], draw(st.lists(usual, min_size=len(r), max_size=len(r)) if draw(st.integers(0, 4)) == 0
                               else st.lists(usual, min_size=1, max_size=1))) for r in runs]


EPOCH = st.sampled_from(["next"] * 8 + ["wrong", "open", "close"])


def shape_error(batches, renew_flag: bool) -> bool:
    """Kafka's request-level rules (KafkaApis) for one partition's batches, at version 2."""
    prev_last = -1
    for first, last, types in batches:
        if first > last or first < prev_last or not types:
            return True
        if len(types) > 1 and len(types) != last - first + 1:
            return True
        if any(t == RENEW and not renew_flag for t in types):
            return True
        prev_last = last
    return False


class ShareWire(RuleBasedStateMachine):
    bootstrap: str

    @initialize()
    def start(self):
        self.admin = RawClient(self.bootstrap)
        name = unique("model")
        self.tp = (create_topic(self.admin, name), 0)
        self.topic = name
        self.group = unique("g")
        self.members = [ShareMember(self.bootstrap, self.group) for _ in range(MEMBERS)]
        for m in self.members:
            m.open([self.tp], version=2)  # the first open loads the share partition at the log end
        produce_batches(self.admin, name, SIZES)
        self.count = [0] * END  # deliveries so far
        self.holder: list[str | None] = [None] * END
        self.done = [False] * END  # accepted, rejected, or archived

    def teardown(self):
        try:
            if getattr(self, "settled", False):
                self.check_the_rest()
        finally:
            for m in getattr(self, "members", []):
                m.close()
            if hasattr(self, "admin"):
                self.admin.close()

    # -- the model

    def _available(self) -> list[int]:
        return [o for o in range(END) if not self.done[o] and self.holder[o] is None]

    def _release(self, o: int) -> None:
        self.holder[o] = None
        if self.count[o] >= LIMIT:
            self.done[o] = True

    def _spso(self) -> int:
        return next((o for o in range(END) if not self.done[o]), END)

    def _expected_ack(self, member_id: str, batches, renew_flag: bool):
        """(error code, offsets' new states) for one partition's acknowledgements, by Kafka's
        SharePartition rules: batches wholly below the SPSO are skipped; one starting before
        anything cached is INVALID_RECORD_STATE, one ending past the cached records is
        INVALID_REQUEST; every offset from the SPSO on must be held by the sender."""
        if not batches:
            return ErrorCode.NONE, {}
        if shape_error(batches, renew_flag):
            return ErrorCode.INVALID_REQUEST, {}
        spso = self._spso()
        # In-flight entries cover whole log batches, also when record_limit acquired part of one.
        cached = max((BATCH_END[o] for o in range(END) if self.count[o]), default=-1)
        changes: dict[int, str] = {}
        for first, last, types in batches:
            if last < spso:
                continue
            if cached < spso:
                return ErrorCode.INVALID_RECORD_STATE, {}  # nothing cached at or after the SPSO
            if last > cached:
                return ErrorCode.INVALID_REQUEST, {}
            for o in range(max(first, spso), last + 1):
                t = types[0] if len(types) == 1 else types[o - first]
                if self.holder[o] != member_id or changes.get(o, "held") != "held":
                    return ErrorCode.INVALID_RECORD_STATE, {}
                changes[o] = {RELEASE: "released", RENEW: "held"}.get(t, "done")
        return ErrorCode.NONE, changes

    def _apply(self, changes) -> None:
        for o, what in changes.items():
            if what == "released":
                self._release(o)
            elif what == "done":
                self.holder[o] = None
                self.done[o] = True

    def _close(self, m: ShareMember) -> None:
        for o in range(END):
            if self.holder[o] == m.member_id:
                self._release(o)

    @staticmethod
    def _epoch(m: ShareMember, kind: str, draw_wrong: int):
        if kind == "open":
            return 0
        if kind == "close":
            return -1
        if kind == "wrong" or m.epoch is None:
            return (m.epoch or 1) + draw_wrong
        return m.epoch

    def _session_error(self, m: ShareMember, epoch: int, *, acknowledge: bool):
        if acknowledge and epoch == 0:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH
        if epoch == 0:
            return None
        if m.epoch is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND
        if epoch != -1 and epoch != m.epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH
        return None

    # -- the rules

    def _draw_acks(self, data, m: ShareMember):
        return data.draw(acks_for([o for o in range(END) if self.holder[o] == m.member_id]))

    @rule(i=st.integers(0, MEMBERS - 1), data=st.data(), kind=EPOCH, wrong=st.integers(1, 3),
          max_records=st.sampled_from([1, 2, 8]), mode=st.sampled_from([0, 1]))
    def fetch(self, i, data, kind, wrong, max_records, mode):
        self.settled = False
        m = self.members[i]
        acks = self._draw_acks(data, m)
        epoch = self._epoch(m, kind, wrong)
        expected = self._session_error(m, epoch, acknowledge=False)
        if epoch == 0 and acks:
            expected = ErrorCode.INVALID_REQUEST  # no acknowledgements on an opening fetch
        ack_map = {self.tp: acks} if acks else None
        resp = m.fetch([self.tp] if epoch == 0 else [], version=2, epoch=epoch, acks=ack_map,
                       max_records=max_records, batch_size=max_records, acquire_mode=mode)
        assert resp.error_code == (expected or ErrorCode.NONE), (resp.error_code, resp.error_message, epoch)
        if expected:
            return
        code, changes = self._expected_ack(m.member_id, acks, False)
        event(f"fetch acknowledgement: {code.name}")
        part = parts(resp).get(self.tp)
        if acks:
            assert part is not None and part.acknowledge_error_code == code, (part, acks)
        self._apply(changes)
        if epoch == -1:
            assert all_acquired(resp) == {}
            self._close(m)
            return
        available = self._available()
        got = all_acquired(resp).get(self.tp, [])
        if available:
            assert got, f"nothing acquired while {available} are available"
        for first, last, count in got:
            for o in range(first, last + 1):
                assert o in available, (o, self.holder[o], self.done[o])
                assert count == self.count[o] + 1 <= LIMIT, (o, count, self.count[o])
                self.count[o] = count
                self.holder[o] = m.member_id

    @rule(i=st.integers(0, MEMBERS - 1), data=st.data(), kind=EPOCH, wrong=st.integers(1, 3),
          renew=st.booleans(), stranger=st.booleans())
    def acknowledge(self, i, data, kind, wrong, renew, stranger):
        """ShareAcknowledge v2, sometimes with a second partition of a topic that does not exist."""
        self.settled = False
        m = self.members[i]
        acks = self._draw_acks(data, m)
        epoch = self._epoch(m, kind, wrong)
        bogus = (uuid.uuid4(), 0)
        ack_map = {self.tp: acks}
        if stranger:
            ack_map[bogus] = [(0, 0, [ACCEPT])]
        expected = self._session_error(m, epoch, acknowledge=True)
        resp = m.acknowledge(ack_map, version=2, epoch=epoch, is_renew_ack=renew)
        assert resp.error_code == (expected or ErrorCode.NONE), (resp.error_code, resp.error_message, epoch)
        if expected:
            return
        code, changes = self._expected_ack(m.member_id, acks, renew)
        event(f"acknowledge: {code.name}")
        results = parts(resp)
        assert (results[self.tp].error_code if self.tp in results else ErrorCode.NONE) == code, (results, acks, renew)
        if stranger:
            assert results[bogus].error_code == ErrorCode.UNKNOWN_TOPIC_ID
        self._apply(changes)
        if epoch == -1:
            self._close(m)

    @rule(i=st.integers(0, MEMBERS - 1), member_id=st.sampled_from(["", "x" * 37]))
    def bad_member_id(self, i, member_id):
        self.settled = False
        m = self.members[i]
        resp = m.fetch(version=2, member_id=member_id, epoch=m.epoch or 1, acks={self.tp: [(0, END - 1, [ACCEPT])]})
        assert resp.error_code == ErrorCode.INVALID_REQUEST

    @invariant()
    def step_done(self):
        """Runs after every step that passed: teardown's final check only follows a clean run."""
        self.settled = True

    def check_the_rest(self):
        """Every member closes; a new member gets exactly what is left, and the lag agrees."""
        for m in self.members:
            if m.epoch is not None:
                resp = m.acknowledge({}, version=2, epoch=-1)
                assert resp.error_code == ErrorCode.NONE
                self._close(m)
        left = self._available()
        ((start, _, lag, _),) = rows(offsets(self.admin, self.group, {self.topic: [0]})).values()
        if start == -1:  # nothing was ever written: acquisitions alone are not persisted
            assert len(left) == END, (self.count, self.done)
        else:
            assert lag == len(left), (start, lag, left, self.count, self.done)
        got = []
        with ShareMember(self.bootstrap, self.group) as last:
            resp = last.open([self.tp], version=2, max_records=END, batch_size=END)
            for _ in range(END + 1):
                ranges = all_acquired(resp).get(self.tp, [])
                if not ranges:
                    break
                got += [(o, c) for a, b, c in ranges for o in range(a, b + 1)]
                resp = last.fetch(version=2, max_records=END, batch_size=END)
        assert sorted(got) == [(o, self.count[o] + 1) for o in left]
        event(f"records finished at the end: {END - len(left)}; most deliveries: {max(self.count)}")


def test_random_share_requests_follow_the_model(broker):
    class Run(ShareWire):
        bootstrap = broker.bootstrap

    # No shrinking: every step is a round trip, and shrinking a long failing run takes minutes;
    # the report lists the whole failing sequence instead.
    run_state_machine_as_test(Run, settings=settings(
        max_examples=80, stateful_step_count=50, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    ))
