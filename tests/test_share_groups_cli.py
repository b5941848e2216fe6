"""``kshare-share-groups`` end to end against the shared broker with real confluent-kafka
ShareConsumers: list (with state filters), describe (offsets, members, state), lag under a
mixed workload, every reset specification, delete offsets and delete group. Each change is
checked against the broker's state: DescribeShareGroupOffsets on the wire and what consumers
receive afterwards."""

from __future__ import annotations

import io
import socket
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone

import pytest
from confluent_kafka import AcknowledgeType

from broker.tools.share_groups import main
from protocol.messages.describe_share_group_offsets_request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
)
from tests.broker_process import ROOT
from tests.raw_client import RawClient
from tests.test_e2e_share_support import (
    TIMEOUT,
    create_topic,
    earliest_group,
    members_of,
    poll_until,
    produce,
    shared_consumers,
    unique_group,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]


@pytest.fixture
def consumers(broker):
    yield from shared_consumers(broker)


@pytest.fixture
def cli(broker):
    """Run the tool in-process: (exit status, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = main(["--bootstrap-server", broker.bootstrap, *args], out=out, err=err)
        return code, out.getvalue(), err.getvalue()

    return run


def ok(result) -> str:
    code, out, err = result
    assert code == 0, (code, out, err)
    return out


def table(out: str) -> list[list[str]]:
    """The whitespace-separated cells of the non-empty lines of a table printed by the tool."""
    return [line.split() for line in out.splitlines() if line.strip()]


def share_offsets(bootstrap: str, group: str) -> dict:
    """{(topic, partition): (start offset, lag)} straight from DescribeShareGroupOffsets v1."""
    with RawClient(bootstrap) as c:
        (g,) = c.request(90, 1, DescribeShareGroupOffsetsRequest(groups=[
            DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)])).groups
    assert g.error_code == 0, g
    return {(t.topic_name, p.partition_index): (p.start_offset, p.lag) for t in g.topics for p in t.partitions}


def wait_for_assignment(bootstrap, group, consumers_, partitions: int) -> None:
    """Poll the consumers until the group's members own all ``partitions`` between them."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        owned = sum(len(tp.partitions) for m in members_of(bootstrap, group) for tp in m.assignment.topic_partitions)
        if len(members_of(bootstrap, group)) == len(consumers_) and owned == partitions:
            return
        assert time.monotonic() < deadline, "the group never settled"
        for c in consumers_:
            c.poll(0.1)


def client_host(bootstrap: str) -> str:
    """The HOST Kafka's tool shows for this test's consumers: the address the broker sees them
    connect from ("/127.0.0.1" on loopback; the e2e container's own address under compose)."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host.strip("[]"), int(port)), TIMEOUT) as s:
        return "/" + s.getsockname()[0]


def iso(ms: int) -> str:
    """--to-datetime text for a time in ms (UTC, no zone: Kafka reads it as UTC)."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


# --- list, describe, and what is refused while members are active -------------------------------


def test_list_describe_and_refusals_with_active_members(broker, consumers, cli, topic_name):
    bs = broker.bootstrap
    create_topic(bs, topic_name, 2)
    group, idle = unique_group(), unique_group()
    ok(cli("--reset-offsets", "--group", idle, "--topic", topic_name, "--to-earliest", "--execute"))
    a, b = consumers.new(group, topic_name), consumers.new(group, topic_name)
    wait_for_assignment(bs, group, [a, b], 2)

    listed = ok(cli("--list")).split()
    assert group in listed and idle in listed
    states = {row[0]: row[1] for row in table(ok(cli("--list", "--state")))[1:]}
    assert (states[group], states[idle]) == ("Stable", "Empty")
    assert table(ok(cli("--list", "--state")))[0] == ["GROUP", "STATE"]
    empty_only = {row[0] for row in table(ok(cli("--list", "--state", "empty")))[1:]}
    assert idle in empty_only and group not in empty_only

    code, out, err = cli("--describe", "--group", group, "--members", "--verbose")
    assert (code, err) == (0, "")
    lines = out.split("\n")
    assert lines[0] == ""  # Kafka's rows each start with a newline
    ids = sorted(m.member_id for m in members_of(bs, group))
    width = max(15, *(len(i) for i in ids))
    assert lines[1] == (f"{'GROUP':<15} {'CONSUMER-ID':<{width}} {'HOST':<15} {'CLIENT-ID':<15} {'#PARTITIONS':<12} "
                        f"{'MEMBER-EPOCH':<13} ASSIGNMENT")
    rows = [line.split() for line in lines[2:4]]
    assert [r[1] for r in rows] == ids
    assert {r[0] for r in rows} == {group} and {r[2] for r in rows} == {client_host(bs)}
    assert sorted(r[6] for r in rows) == [f"{topic_name}:0", f"{topic_name}:1"] and {r[4] for r in rows} == {"1"}
    assert lines[4:] == [""]

    (head, row) = table(ok(cli("--describe", "--group", group, "--state", "--verbose")))
    assert head == ["GROUP", "COORDINATOR", "(ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert row[0] == group and row[1] == bs and row[2] == "(1)" and row[3] == "Stable" and row[-1] == "2"

    code, out, err = cli("--describe", "--group", idle, "--members")
    assert (code, out, err) == (0, "", f"\nShare group '{idle}' has no active members.\n")
    both = ok(cli("--describe", "--group", group, "--group", idle, "--state"))
    assert [r[0] for r in table(both) if r[0] != "GROUP"] == sorted([group, idle])

    # with members, nothing may be reset or deleted
    assert cli("--reset-offsets", "--group", group, "--to-earliest", "--execute") == (
        1, "", f"Share group '{group}' is not empty.\n")  # Kafka's IllegalArgumentException: no "Error: "
    width = max(15, len(topic_name))  # as in Kafka, every topic's status carries the group's error
    assert cli("--delete-offsets", "--group", group, "--topic", topic_name) == (
        1, f"\n{'TOPIC':<{width}} STATUS\n{topic_name:<{width}} Error: The group is not empty.\n",
        "Error: The group is not empty.\n")
    assert cli("--delete", "--group", group) == (1, "", (
        "Error: Deletion of some share groups failed:\n"
        f"* Group '{group}' could not be deleted due to: org.apache.kafka.common.errors.GroupNotEmptyException: "
        f"Share group '{group}' is not EMPTY.\n"))
    assert members_of(bs, group)  # still there


@pytest.mark.parametrize("variant", [(), ("--members",), ("--state", "--verbose")])
def test_describing_an_unknown_group_fails(cli, variant):
    """Kafka's tool prints the escaping exception's toString(): its class name, then the message."""
    group = unique_group()
    assert cli("--describe", "--group", group, *variant) == (
        1, "", "Error: Executing share group command failed due to "
               f"org.apache.kafka.common.errors.GroupIdNotFoundException: Group {group} not found.\n")


# --- lag -------------------------------------------------------------------------------------------


def test_lag_under_a_mixed_workload(broker, consumers, cli, topic_name):
    """Ten records: 0-2 accepted, 3-4 released, 5 rejected, 6-9 still in flight. Lag counts the
    released and in-flight ones: 10 - SPSO - DeliveryCompleteCount = 6."""
    bs = broker.bootstrap
    create_topic(bs, topic_name)
    group = earliest_group(bs)
    produce(bs, topic_name, [f"v{i}".encode() for i in range(10)])
    c = consumers.new(group, topic_name, explicit=True)
    got = poll_until(c, lambda got: len(got) >= 10)
    assert sorted(m.offset() for m in got) == list(range(10))
    unknown = table(ok(cli("--describe", "--group", group)))
    assert unknown == [["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"], [group, topic_name, "0", "-", "-"]]
    for m in got:
        if m.offset() <= 2:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        elif m.offset() <= 4:
            c.acknowledge(m, AcknowledgeType.RELEASE)
        elif m.offset() == 5:
            c.acknowledge(m, AcknowledgeType.REJECT)
    assert all(err is None for err in c.commit_sync(TIMEOUT).values())
    ((start, lag),) = share_offsets(bs, group).values()
    assert lag == 6 and start in (0, 3), (start, lag)
    out = ok(cli("--describe", "--group", group, "--offsets", "--verbose"))
    assert table(out) == [["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"],
                          [group, topic_name, "0", "0", str(start), "6"]]
    consumers.close(c)  # 6-9 are released, still to be delivered
    ((_, lag),) = share_offsets(bs, group).values()
    assert lag == 6


# --- reset-offsets ---------------------------------------------------------------------------------


def test_every_reset_specification(broker, consumers, cli, topic_name):
    bs = broker.bootstrap
    create_topic(bs, topic_name)
    now = int(time.time() * 1000)
    old = now - 2 * 3600_000
    produce(bs, topic_name, [(None, f"old-{i}".encode(), None, old + i) for i in range(3)]
            + [(None, f"new-{i}".encode(), None, now + i) for i in range(3)])
    group = unique_group()

    def start() -> int:
        ((offset, lag),) = share_offsets(bs, group).values()
        assert lag == 6 - offset
        return offset

    out = ok(cli("--reset-offsets", "--group", group, "--topic", topic_name, "--to-earliest", "--dry-run"))
    assert out == f"\n{'GROUP':<15} {'TOPIC':<{len(topic_name)}} {'PARTITION':<10} NEW-OFFSET" \
                  f"\n{group:<15} {topic_name} {0:<10} 0\n"
    assert share_offsets(bs, group) == {}  # a dry run changes nothing
    # bad --topic values, as Kafka's GroupOffsetsResetter reports them
    assert cli("--reset-offsets", "--group", group, "--topic", f"{topic_name}:0:1", "--to-earliest", "--dry-run") \
        == (1, "", f"Invalid topic arg '{topic_name}:0:1', expected topic name and partitions\n")
    assert cli("--reset-offsets", "--group", group, "--topic", f"{topic_name}:", "--to-earliest", "--dry-run") \
        == (1, "", f"Invalid topic arg '{topic_name}:', expected topic name and partitions\n")
    assert cli("--reset-offsets", "--group", group, "--topic", f"{topic_name}:0,x", "--to-earliest", "--dry-run") \
        == (1, "", f"Invalid partition 'x' specified in topic arg '{topic_name}:0,x''\n")
    assert cli("--reset-offsets", "--group", group, "--topic", f"{topic_name}:0,3", "--to-earliest", "--dry-run") \
        == (1, "", f'Error: Executing share group command failed due to The partitions "{topic_name}-3" do not exist\n')
    assert table(ok(cli("--reset-offsets", "--group", group, "--topic", topic_name, "--to-latest", "--execute")))[1] \
        == [group, topic_name, "0", "6"]
    assert start() == 6
    ok(cli("--reset-offsets", "--group", group, "--topic", topic_name, "--to-datetime", iso(now - 3600_000),
           "--execute"))
    assert start() == 3
    ok(cli("--reset-offsets", "--group", group, "--topic", f"{topic_name}:0", "--to-datetime", iso(old + 1),
           "--execute"))
    assert start() == 1
    ok(cli("--reset-offsets", "--group", group, "--all-topics", "--by-duration", "PT3H", "--execute"))
    assert start() == 0
    ok(cli("--reset-offsets", "--group", group, "--all-topics", "--by-duration", "PT1H", "--execute"))
    assert start() == 3
    ok(cli("--reset-offsets", "--group", group, "--to-offset", "4", "--execute"))  # scope: all topics
    assert start() == 4
    code, out, err = cli("--reset-offsets", "--group", group, "--to-offset", "100", "--execute")
    assert code == 0 and table(out)[1] == [group, topic_name, "0", "6"]
    assert err == f"New offset (100) is higher than latest offset for topic partition {topic_name}-0. " \
                  "Value will be set to 6.\n"
    assert start() == 6
    code, out, err = cli("--reset-offsets", "--group", group, "--all-topics", "--to-datetime",
                         iso(now + 3600_000), "--execute")
    assert (code, err) == (0, (f"Warn: Partition 0 from topic {topic_name} is empty. Falling back to latest known "
                               "offset.\n"))
    ok(cli("--reset-offsets", "--group", group, "--topic", topic_name, "--to-earliest", "--execute"))
    assert start() == 0
    ok(cli("--reset-offsets", "--group", group, "--topic", topic_name, "--to-offset", "2", "--execute"))
    c = consumers.new(group, topic_name)
    got = poll_until(c, lambda got: len(got) >= 4)
    assert sorted((m.offset(), m.delivery_count()) for m in got) == [(o, 1) for o in range(2, 6)]


def test_a_reset_of_a_missing_topic_fails_as_kafkas(broker, cli, topic_name):
    """A named topic fails with describeTopics' error as is; a missing topic named only with
    partitions fails in Kafka's partition check, which wraps the ExecutionException."""
    create_topic(broker.bootstrap, topic_name)
    group, missing = unique_group(), f"missing-{uuid.uuid4().hex[:6]}"
    prefix = "Error: Executing share group command failed due to "
    assert cli("--reset-offsets", "--group", group, "--topic", missing, "--to-earliest", "--dry-run") == (
        1, "", prefix + "This server does not host this topic-partition.\n")
    assert cli("--reset-offsets", "--group", group, "--topic", topic_name, "--topic", f"{missing}:0", "--to-earliest",
               "--dry-run") == (1, "", prefix + "java.util.concurrent.ExecutionException: org.apache.kafka.common."
                                "errors.UnknownTopicOrPartitionException: This server does not host this "
                                "topic-partition.\n")


def test_a_reset_discards_in_flight_state_and_delivery_counts(broker, consumers, cli, topic_name):
    bs = broker.bootstrap
    create_topic(bs, topic_name)
    group = earliest_group(bs)
    produce(bs, topic_name, [f"v{i}".encode() for i in range(6)])
    a = consumers.new(group, topic_name, explicit=True)
    poll_until(a, lambda got: len(got) >= 6, on_message=lambda m: a.acknowledge(
        m, AcknowledgeType.RELEASE if m.offset() < 3 else AcknowledgeType.ACCEPT))
    again = poll_until(a, lambda got: len(got) >= 3)  # 0-2 redelivered, now in flight unacknowledged
    assert sorted((m.offset(), m.delivery_count()) for m in again) == [(0, 2), (1, 2), (2, 2)]
    consumers.close(a)
    ok(cli("--reset-offsets", "--group", group, "--topic", topic_name, "--to-earliest", "--execute"))
    b = consumers.new(group, topic_name)
    got = poll_until(b, lambda got: len(got) >= 6)
    assert sorted((m.offset(), m.delivery_count()) for m in got) == [(o, 1) for o in range(6)]


# --- delete-offsets and delete ---------------------------------------------------------------------


def test_delete_offsets_then_delete_the_group(broker, cli, topic_name):
    bs = broker.bootstrap
    kept = f"{topic_name}-kept"
    create_topic(bs, topic_name)
    create_topic(bs, kept)
    group = unique_group()
    for t in (topic_name, kept):
        ok(cli("--reset-offsets", "--group", group, "--topic", t, "--to-earliest", "--execute"))
    missing = f"missing-{uuid.uuid4().hex[:6]}"
    code, out, err = cli("--delete-offsets", "--group", group, "--topic", topic_name, "--topic", missing)
    width = max(15, len(topic_name), len(missing))
    rows = sorted([f"{topic_name:<{width}} Successful",
                   f"{missing:<{width}} Error: This server does not host this topic-partition."])
    assert (code, err) == (1, "")  # one topic failed
    assert out == f"\n{'TOPIC':<{width}} STATUS\n" + "\n".join(rows) + "\n"
    assert set(share_offsets(bs, group)) == {(kept, 0)}
    assert table(ok(cli("--describe", "--group", group)))[1][:2] == [group, kept]

    assert ok(cli("--delete", "--group", group)) == f"Deletion of requested share groups ('{group}') was successful.\n"
    assert group not in ok(cli("--list")).split()
    assert share_offsets(bs, group) == {}
    code, out, err = cli("--delete", "--group", group)
    assert (code, err) == (1, (
        "Error: Deletion of some share groups failed:\n"
        f"* Group '{group}' could not be deleted due to: java.lang.IllegalArgumentException: "
        f"Group '{group}' is not a share group.\n"))


def test_the_console_script_module_runs(broker):
    """``python -m broker.tools.share_groups`` (what the console script calls) in a subprocess."""
    proc = subprocess.run([sys.executable, "-m", "broker.tools.share_groups", "--bootstrap-server", broker.bootstrap,
                           "--list", "--state", "Stable,Empty"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].split() == ["GROUP", "STATE"]
