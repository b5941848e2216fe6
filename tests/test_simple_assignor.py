"""SimpleAssignor: exact small layouts and property tests of the invariants."""

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.group.assignor import MemberSpec, assign, desired_counts


def counts(result, topic="t"):
    return sorted((len(a.get(topic, ())) for a in result.values()), reverse=True)


def holders(result, topic="t"):
    c = Counter()
    for a in result.values():
        c.update(a.get(topic, ()))
    return c


def same_topic(members, current=None):
    current = current or {}
    return {m: MemberSpec({"t"}, current.get(m, {})) for m in members}


# --- exact examples -------------------------------------------------------------------

def test_desired_counts_match_kafka_formula():
    assert desired_counts(3, 7) == [3, 2, 2]
    assert desired_counts(5, 2) == [2, 1, 1, 1, 1]
    assert desired_counts(2, 2) == [1, 1]
    assert desired_counts(4, 0) == [0, 0, 0, 0]
    assert desired_counts(0, 5) == []


def test_three_members_seven_partitions():
    result = assign(same_topic("abc"), {"t": 7})
    assert counts(result) == [3, 2, 2]
    assert holders(result) == Counter({p: 1 for p in range(7)})


def test_five_members_two_partitions_share_every_partition():
    result = assign(same_topic("abcde"), {"t": 2})
    assert counts(result) == [2, 1, 1, 1, 1]
    # D = 3: six slots over two partitions, each held by exactly three members
    assert holders(result) == Counter({0: 3, 1: 3})


def test_more_members_than_partitions_single_partition():
    result = assign(same_topic("abcd"), {"t": 1})
    assert all(a == {"t": {0}} for a in result.values())


def test_stickiness_fixed_point():
    first = assign(same_topic("abc"), {"t": 7})
    again = assign(same_topic("abc", first), {"t": 7})
    assert again == first


def test_new_member_only_takes_from_members_over_quota():
    before = assign(same_topic("ab"), {"t": 6})  # 3 + 3
    after = assign(same_topic("abc", before), {"t": 6})  # 2 + 2 + 2
    for m in "ab":
        assert after[m]["t"] <= before[m]["t"]
        assert len(after[m]["t"]) == 2
    assert after["c"]["t"] == (before["a"]["t"] - after["a"]["t"]) | (before["b"]["t"] - after["b"]["t"])


def test_leaving_member_partitions_go_to_the_rest():
    before = assign(same_topic("abc"), {"t": 6})
    after = assign(same_topic("ab", before), {"t": 6})
    for m in "ab":
        assert before[m]["t"] <= after[m]["t"]
    assert after["a"]["t"] | after["b"]["t"] == set(range(6))


def test_unsubscribed_topic_is_dropped_and_partition_set_respected():
    current = {"a": {"t": {0, 1}, "gone": {0}}}
    result = assign({"a": MemberSpec({"t"}, current["a"]), "b": MemberSpec({"t"})}, {"t": {0, 1, 3}, "gone": 2})
    assert set().union(*(a.keys() for a in result.values())) == {"t"}
    assert holders(result) == Counter({0: 1, 1: 1, 3: 1})
    assert result["a"]["t"] <= {0, 1}  # a keeps what it can


def test_heterogeneous_balances_each_topic_among_its_subscribers():
    members = {"a": MemberSpec({"x", "y"}), "b": MemberSpec({"x"}), "c": MemberSpec({"y"})}
    result = assign(members, {"x": 4, "y": 3})
    assert sorted(len(result[m].get("x", ())) for m in "ab") == [2, 2]
    assert sorted(len(result[m].get("y", ())) for m in "ac") == [1, 2]
    assert "y" not in result["b"] and "x" not in result["c"]


def test_homogeneous_scope_is_the_whole_group():
    # three single-partition topics, three members: one partition each, not all three each
    members = {m: MemberSpec({"x", "y", "z"}) for m in "abc"}
    result = assign(members, {"x": 1, "y": 1, "z": 1})
    assert sorted(sum(len(ps) for ps in a.values()) for a in result.values()) == [1, 1, 1]


def test_no_members_and_no_partitions():
    assert assign({}, {"t": 3}) == {}
    assert assign(same_topic("ab"), {"t": 0}) == {"a": {}, "b": {}}
    assert assign({"a": MemberSpec(set())}, {"t": 3}) == {"a": {}}
    assert assign({"a": MemberSpec({"missing"})}, {"t": 3}) == {"a": {}}


# --- properties -------------------------------------------------------------------------

TOPICS = ["t0", "t1", "t2"]


def _bits(mask: int) -> set[int]:
    return {i for i in range(mask.bit_length()) if mask >> i & 1}


@st.composite
def scenarios(draw, fresh=False):
    """Members (1-12) over three topics (0-9 partitions each), homogeneous or not, with
    arbitrary current targets (stale topics, out-of-range and over-shared partitions)."""
    sizes = dict(zip(TOPICS, draw(st.tuples(*[st.integers(0, 9)] * 3))))
    count = draw(st.integers(1, 12))
    homogeneous = draw(st.booleans())
    common = draw(st.integers(0, 7))
    members = {}
    for i in range(count):
        subs = common if homogeneous else draw(st.integers(0, 7))
        masks = (0, 0, 0) if fresh else draw(st.tuples(*[st.integers(0, 4095)] * 3))
        current = {t: _bits(mask) for t, mask in zip(TOPICS, masks) if mask}
        members[f"m{i:02d}"] = MemberSpec(frozenset(TOPICS[j] for j in _bits(subs)), current)
    return members, sizes


def scopes(members, sizes):
    """(member ids, [(topic, partition)]) per balancing scope, as Kafka picks them."""
    subs = {m: frozenset(spec.subscribed_topic_ids) for m, spec in members.items()}
    if len(set(subs.values())) == 1:
        topics = sorted(next(iter(subs.values())))
        yield list(members), [(t, p) for t in topics for p in range(sizes[t])]
    else:
        for t in sorted(set().union(*subs.values())):
            yield [m for m in members if t in subs[m]], [(t, p) for p in range(sizes[t])]


def check_balance(members, sizes, result):
    assert set(result) == set(members)
    for m, a in result.items():
        for t, ps in a.items():
            assert t in members[m].subscribed_topic_ids
            assert ps and ps <= set(range(sizes[t]))
    for scope_members, parts in scopes(members, sizes):
        m, p = len(scope_members), len(parts)
        held = {mem: {(t, x) for t, ps in result[mem].items() for x in ps if (t, x) in set(parts)}
                for mem in scope_members}
        per_partition = Counter(x for hs in held.values() for x in hs)
        if p == 0:
            continue
        sharing = -(-m // p)
        # every partition is held by exactly D members and quotas are Kafka's multiset
        assert all(per_partition[x] == sharing for x in parts), per_partition
        assert sorted(len(h) for h in held.values()) == sorted(desired_counts(m, p))
        if m <= p:
            assert max(len(h) for h in held.values()) - min(len(h) for h in held.values()) <= 1


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_balance_invariants_from_any_current_target(scenario):
    members, sizes = scenario
    check_balance(members, sizes, assign(members, sizes))


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_output_is_a_fixed_point(scenario):
    members, sizes = scenario
    first = assign(members, sizes)
    rerun = {m: MemberSpec(spec.subscribed_topic_ids, first[m]) for m, spec in members.items()}
    assert assign(rerun, sizes) == first


@settings(max_examples=100, deadline=None)
@given(scenarios(), st.randoms(use_true_random=False))
def test_deterministic_whatever_the_input_order(scenario, rnd):
    members, sizes = scenario
    items = list(members.items())
    rnd.shuffle(items)
    topic_items = list(sizes.items())
    rnd.shuffle(topic_items)
    assert assign(dict(items), dict(topic_items)) == assign(members, sizes)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 30), st.integers(1, 10), st.integers(0, 9))
def test_join_and_leave_move_only_what_they_must(num_partitions, num_members, leaver):
    ids = [f"m{i:02d}" for i in range(num_members)]
    before = assign(same_topic(ids), {"t": num_partitions})
    # a member joins: while m <= p, old members only lose, and only down to their new quota
    joined = assign(same_topic(ids + ["new"], before), {"t": num_partitions})
    check_balance(same_topic(ids + ["new"]), {"t": num_partitions}, joined)
    if num_members + 1 <= num_partitions:
        for m in ids:
            assert joined[m].get("t", set()) <= before[m].get("t", set())
        moved = set().union(*(before[m].get("t", set()) - joined[m].get("t", set()) for m in ids))
        assert moved == joined["new"].get("t", set())
    # a member leaves: nobody else loses anything when every partition had one holder
    if num_members > 1:
        gone = ids[leaver % num_members]
        rest = [m for m in ids if m != gone]
        left = assign(same_topic(rest, before), {"t": num_partitions})
        check_balance(same_topic(rest), {"t": num_partitions}, left)
        if num_members <= num_partitions:
            for m in rest:
                assert before[m].get("t", set()) <= left[m].get("t", set())


def test_kept_partitions_within_quota_never_move():
    # a holds 2 of 6, b holds 4: with quotas 3/3, a keeps both and b keeps three of its four
    current = {"a": {"t": {0, 1}}, "b": {"t": {2, 3, 4, 5}}}
    result = assign(same_topic("ab", current), {"t": 6})
    assert {0, 1} <= result["a"]["t"]
    assert result["b"]["t"] < {2, 3, 4, 5} and len(result["b"]["t"]) == 3
