"""Kafka's share-group SimpleAssignor as a pure, deterministic function.

Share groups let several members consume one partition, so the assignor balances
*holders per partition* as well as *partitions per member*:

- with m members and p assignable partitions in a scope, every partition wants
  D = ceil(m / p) holders, which makes D * p assignment slots;
- each member's quota is floor or ceil of D * p / m (the multiset Kafka computes
  as ``ceil(x(i+1)) - ceil(x i)`` with x = D * p / m);
- so with m <= p every partition has exactly one holder and member counts differ
  by at most one, and with m > p every partition has at least one holder.

A scope is the whole group when every member subscribes the same topics
(homogeneous) and a single topic otherwise (heterogeneous: each topic is balanced
among its own subscribers), exactly as Kafka chooses.

Stickiness: a member keeps what it holds as long as it stays within its quota and
the partition is not over-shared; the larger quotas go to the members that already
hold the most, so a balanced assignment is a fixed point. Kafka iterates hash maps;
here members are visited in sorted-id order and partitions in sorted order, so the
result depends only on the inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AbstractSet, Hashable, Mapping, Union

__all__ = ["MemberSpec", "assign", "desired_counts"]

TopicPartitions = Mapping[Hashable, AbstractSet[int]]
PartitionsSpec = Union[int, AbstractSet[int], range]


@dataclass(frozen=True)
class MemberSpec:
    """What the assignor knows about a member: its subscription and its current target."""

    subscribed_topic_ids: AbstractSet[Hashable]
    current_target: TopicPartitions = field(default_factory=dict)


def desired_counts(num_members: int, num_partitions: int) -> list[int]:
    """Kafka's per-position quotas: ``ceil(x(i+1)) - ceil(x i)`` with x = D*p/m.

    Exposed for tests; ``assign`` uses the same multiset but gives the larger
    quotas to the members that already hold the most.
    """
    if num_members == 0:
        return []
    if num_partitions == 0:
        return [0] * num_members
    sharing = -(-num_members // num_partitions)
    slots = sharing * num_partitions
    # ceil(slots * i / m) in integer arithmetic, so no float rounding can creep in.
    bounds = [-(-slots * i // num_members) for i in range(num_members + 1)]
    return [bounds[i + 1] - bounds[i] for i in range(num_members)]


def assign(
    members: Mapping[Hashable, MemberSpec],
    topics: Mapping[Hashable, PartitionsSpec],
    homogeneous: bool | None = None,
) -> dict[Hashable, dict[Hashable, set[int]]]:
    """The new target assignment: member id -> topic id -> partitions.

    ``topics`` maps a topic id to its partition count or to the set of partitions that
    may be assigned now (share groups only assign initialised share partitions).
    Subscribed topics missing from ``topics`` contribute nothing (Kafka raises there;
    the coordinator only passes topics that exist). Every member appears in the
    result; topics with no partitions for a member are left out. ``homogeneous``:
    Kafka's subscription type, which it decides from the subscribed topic *names*, a
    topic that does not exist included; None decides it from the assignable topics.
    """
    if not members:
        return {}
    order = sorted(members)
    assignable = {t: _partition_set(spec) for t, spec in topics.items()}
    subscriptions = {
        m: frozenset(t for t in members[m].subscribed_topic_ids if t in assignable) for m in order
    }
    result: dict[Hashable, dict[Hashable, set[int]]] = {m: {} for m in order}

    first = subscriptions[order[0]]
    if homogeneous is None:
        homogeneous = all(subscriptions[m] == first for m in order)
    if homogeneous:
        scopes = [(order, sorted(first))]
    else:
        every_topic = sorted(set().union(*subscriptions.values()))
        scopes = [([m for m in order if t in subscriptions[m]], [t]) for t in every_topic]

    for scope_members, scope_topics in scopes:
        slots = [(t, p) for t in scope_topics for p in sorted(assignable[t])]
        held = {
            m: {
                (t, p)
                for t in scope_topics
                for p in members[m].current_target.get(t, ())
                if p in assignable[t]
            }
            for m in scope_members
        }
        for m, owned in _balance(scope_members, slots, held).items():
            for t, p in owned:
                result[m].setdefault(t, set()).add(p)
    return result


def _partition_set(spec: PartitionsSpec) -> frozenset[int]:
    if isinstance(spec, int):
        return frozenset(range(spec))
    return frozenset(spec)


def _balance(
    members: list[Hashable],
    partitions: list[tuple],
    held: dict[Hashable, set[tuple]],
) -> dict[Hashable, set[tuple]]:
    """Balance one scope. ``members`` and ``partitions`` are sorted; ``held`` is sticky input."""
    m, p = len(members), len(partitions)
    if m == 0 or p == 0:
        return {mem: set() for mem in members}
    sharing = -(-m // p)
    base, extra = divmod(sharing * p, m)

    position = {mem: i for i, mem in enumerate(members)}
    owned = {mem: set(held[mem]) for mem in members}
    holders: dict[tuple, list] = {part: [] for part in partitions}
    for mem in members:
        for part in sorted(owned[mem]):
            holders[part].append(mem)

    # 1. Over-shared partitions lose their surplus holders, starting with the members that
    #    hold the most (they are the likeliest to be over quota anyway).
    for part in partitions:
        surplus = len(holders[part]) - sharing
        if surplus > 0:
            by_load = sorted(holders[part], key=lambda mem: (-len(owned[mem]), position[mem]))
            for mem in by_load[:surplus]:
                owned[mem].discard(part)
                holders[part].remove(mem)

    # 2. Quotas: the `extra` larger ones go to the members already holding the most.
    rank = sorted(range(m), key=lambda i: (-len(owned[members[i]]), i))
    quota = {members[i]: base for i in range(m)}
    for i in rank[:extra]:
        quota[members[i]] = base + 1

    # 3. Members over quota give back their most shared, then their highest, partitions.
    for mem in members:
        surplus = len(owned[mem]) - quota[mem]
        if surplus > 0:
            give_back = sorted(owned[mem], key=lambda part: (len(holders[part]), part), reverse=True)
            for part in give_back[:surplus]:
                owned[mem].discard(part)
                holders[part].remove(mem)

    # 4. Fill: each partition short of holders takes the next member (round robin) that
    #    still has room and does not hold it yet. Total room equals total shortfall, so a
    #    partition with no holder always finds someone.
    room = {mem: quota[mem] - len(owned[mem]) for mem in members}
    needy = [mem for mem in members if room[mem] > 0]
    cursor = 0
    stuck: list[tuple] = []
    for part in partitions:
        while len(holders[part]) < sharing and needy:
            for step in range(len(needy)):
                at = (cursor + step) % len(needy)
                mem = needy[at]
                if part not in owned[mem]:
                    owned[mem].add(part)
                    holders[part].append(mem)
                    room[mem] -= 1
                    if room[mem] == 0:
                        del needy[at]  # the next member slides into `at`
                        cursor = at % len(needy) if needy else 0
                    else:
                        cursor = (at + 1) % len(needy)
                    break
            else:
                stuck.append(part)
                break

    # 5. A partition can be left short only when every member with room already holds it
    #    (possible when m > p). Swap: a member Y without the partition hands another
    #    partition to the needy member X and takes this one instead.
    for part in stuck:
        while len(holders[part]) < sharing and needy:
            if not _swap_in(part, needy, members, owned, holders, room):
                break
    return owned


def _swap_in(part, needy, members, owned, holders, room) -> bool:
    for x in needy:
        for y in members:
            if y == x or part in owned[y]:
                continue
            for other in sorted(owned[y]):
                if other not in owned[x]:
                    owned[y].discard(other)
                    holders[other].remove(y)
                    owned[x].add(other)
                    holders[other].append(x)
                    owned[y].add(part)
                    holders[part].append(y)
                    room[x] -= 1
                    if room[x] == 0:
                        needy.remove(x)
                    return True
    return False
