"""``kshare-share-groups`` argument checking (Kafka's ShareGroupCommandOptions messages, one line
on stderr, exit status 1, nothing sent to any broker) and the parsing of --to-datetime and
--by-duration."""

from __future__ import annotations

import io
from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.tools.reset_specs import SpecError, parse_datetime, parse_duration
from broker.tools.share_admin import AdminError
from broker.tools.share_groups import ShareGroupCommand, build_parser, jopt_args, main
from protocol.errors import ErrorCode

# A port nothing listens on: any attempt to connect fails differently from the expected message.
NOWHERE = "127.0.0.1:1"


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def bad(*args: str) -> str:
    """The one stderr line of an invocation that must fail without output."""
    code, out, err = run(*args)
    assert (code, out) == (1, ""), (code, out, err)
    assert err.endswith("\n") and err.count("\n") == 1, err
    return err.rstrip("\n")


B = ("--bootstrap-server", NOWHERE)


@pytest.mark.parametrize("args, message", [
    (("--list",), 'Missing required argument "[bootstrap-server]"'),
    (B, "Command must include exactly one action: --list, --describe, --delete, --reset-offsets, --delete-offsets."),
    ((*B, "--list", "--describe", "--all-groups"),
     "Command must include exactly one action: --list, --describe, --delete, --reset-offsets, --delete-offsets."),
    ((*B, "--describe"), "Option [describe] takes one of these options: [group], [all-groups]"),
    ((*B, "--describe", "--group", "g", "--members", "--state"),
     "Option [describe] takes at most one of these options: [members], [offsets], [state]"),
    ((*B, "--describe", "--group", "g", "--state", "Stable"), "Option [describe] does not take a value for [state]"),
    ((*B, "--delete"), "Option [delete] takes the options [group] or [all-groups]"),
    ((*B, "--delete", "--group", "g", "--all-groups"), "Option [delete] takes either [group] or [all-groups], not both."),
    ((*B, "--delete", "--group", "g", "--topic", "t"), "Option [delete] does not take the option: [topic]"),
    ((*B, "--delete-offsets", "--group", "g"), "Option [delete-offsets] takes the following options: [group], [topic]"),
    ((*B, "--delete-offsets", "--topic", "t"), "Option [delete-offsets] takes the following options: [group], [topic]"),
    ((*B, "--reset-offsets", "--group", "g", "--to-earliest"),
     "Option [reset-offsets] takes the option: [execute] or [dry-run]"),
    ((*B, "--reset-offsets", "--group", "g", "--to-earliest", "--execute", "--dry-run"),
     "Option [reset-offsets] only accepts one of [execute] and [dry-run]"),
    ((*B, "--reset-offsets", "--to-earliest", "--execute"), "Option [reset-offsets] takes the option: [group]"),
    ((*B, "--reset-offsets", "--group", "g", "--to-earliest", "--to-latest", "--execute"),
     'Option "[to-earliest]" can\'t be used with option "[to-latest]"'),
    ((*B, "--reset-offsets", "--group", "g", "--to-datetime", "2020-01-01T00:00:00.000", "--to-offset", "3",
      "--dry-run"), 'Option "[to-datetime]" can\'t be used with option "[to-offset]"'),
    ((*B, "--list", "--group", "g"), 'Option "[group]" can\'t be used with option "[list]"'),
    ((*B, "--describe", "--group", "g", "--all-groups"), 'Option "[group]" can\'t be used with option "[all-groups]"'),
    ((*B, "--describe", "--group", "g", "--topic", "t"), 'Option "[topic]" can\'t be used with option "[describe]"'),
    ((*B, "--list", "--members"), "Option(s) [members] are unavailable given other options on the command line"),
    ((*B, "--delete", "--group", "g", "--state"),
     "Option(s) [state] are unavailable given other options on the command line"),
    ((*B, "--list", "--state", "Stable,Rebalancing"),
     "Invalid state list 'Stable,Rebalancing'. Valid states are: Dead, Empty, Stable"),
])
def test_bad_arguments_are_one_line_and_status_1(args, message):
    assert bad(*args) == message


class EmptyGroupAdmin:
    """A broker on which group "g" is empty and "busy" has a member; topic "t" has one partition."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def describe_share_group(self, group_id):
        class Description:
            group_state = "Stable" if group_id == "busy" else "Empty"
        return Description()

    def share_group_offsets(self, group_id):
        return {}

    def topic_partitions(self, topics):
        if set(topics) != {"t"}:
            raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        return {"t": {0: 1}}


@pytest.mark.parametrize("args, message", [
    (("--reset-offsets", "--group", "g", "--execute"),
     ("Option '[reset-offsets]' requires one of the following scenarios: "
      "[[to-datetime], [by-duration], [to-earliest], [to-latest], [to-offset]]")),
    (("--reset-offsets", "--group", "g", "--to-datetime", "2020-01-01", "--execute"),
     ("Error: Executing share group command failed due to java.text.ParseException: Error parsing timestamp. "
      "It does not contain a 'T' according to ISO8601 format")),
    (("--reset-offsets", "--group", "g", "--to-datetime", "2020-01-01T", "--execute"),
     ("Error: Executing share group command failed due to java.text.ParseException: Error parsing timestamp. "
      "It does not contain a 'T' according to ISO8601 format")),
    (("--reset-offsets", "--group", "g", "--to-datetime", "2020-13-01T00:00:00.000", "--execute"),
     'Error: Executing share group command failed due to java.text.ParseException: '
     'Unparseable date: "2020-13-01T00:00:00.000Z"'),  # Kafka quotes the text with the "Z" it appended
    (("--reset-offsets", "--group", "g", "--to-datetime", "2020-13-01T00:00:00.000+01:00", "--execute"),
     'Error: Executing share group command failed due to java.text.ParseException: '
     'Unparseable date: "2020-13-01T00:00:00.000+01:00"'),
    (("--reset-offsets", "--group", "g", "--by-duration", "3 hours", "--execute"),
     "Error: Executing share group command failed due to Text cannot be parsed to a Duration"),
    # Kafka checks the group, then the partitions, and only then parses the scenario's value
    (("--reset-offsets", "--group", "busy", "--to-datetime", "2020-01-01", "--execute"),
     "Share group 'busy' is not empty."),
    (("--reset-offsets", "--group", "busy", "--dry-run"), "Share group 'busy' is not empty."),
    (("--reset-offsets", "--group", "g", "--topic", "nosuch", "--to-datetime", "2020-01-01", "--execute"),
     "Error: Executing share group command failed due to This server does not host this topic-partition."),
    (("--reset-offsets", "--group", "g", "--topic", "t:0,3", "--by-duration", "3 hours", "--execute"),
     'Error: Executing share group command failed due to The partitions "t-3" do not exist'),
    (("--reset-offsets", "--group", "g", "--topic", "t", "--dry-run"),
     ("Option '[reset-offsets]' requires one of the following scenarios: "
      "[[to-datetime], [by-duration], [to-earliest], [to-latest], [to-offset]]")),
])
def test_reset_refusals_in_kafkas_order(monkeypatch, args, message):
    monkeypatch.setattr("broker.tools.share_groups.ShareAdmin", EmptyGroupAdmin)
    assert bad(*B, *args) == message


def test_reset_to_offset_zero_is_a_scenario(monkeypatch):
    """--to-offset 0 is given (an int 0 must not read as "not given", as 0 == False would)."""

    class Admin(EmptyGroupAdmin):
        def log_offsets(self, partitions, spec):
            return {tp: 0 for tp in partitions}

    monkeypatch.setattr("broker.tools.share_groups.ShareAdmin", Admin)
    code, out, err = run(*B, "--reset-offsets", "--group", "g", "--topic", "t", "--to-offset", "0", "--dry-run")
    assert (code, err) == (0, "")
    assert out == f"\n{'GROUP':<15} {'TOPIC':<15} {'PARTITION':<10} NEW-OFFSET\n{'g':<15} {'t':<15} {0:<10} 0\n"


@pytest.mark.parametrize("action", [("--reset-offsets", "--to-earliest", "--execute"),
                                    ("--reset-offsets", "--to-latest", "--dry-run"),
                                    ("--delete-offsets", "--topic", "t")])
def test_a_single_group_action_refuses_a_repeated_group(action):
    """Kafka's ShareGroupService reads --group with valueOf for these actions: two groups fail
    (before anything is sent: NOWHERE is never dialled) instead of acting on the first only."""
    assert bad(*B, *action, "--group", "a", "--group", "b") == (
        "Error: Executing share group command failed due to Found multiple arguments for option group, "
        "but you asked for only one")


def test_delete_offsets_reports_a_topic_missing_from_the_response():
    """Kafka's DeleteShareGroupOffsetsResult fails the result of a topic the response left out."""

    class Admin:
        def delete_share_group_offsets(self, group_id, topics):
            return None, {"t1": None}

    out, err = io.StringIO(), io.StringIO()
    o = build_parser().parse_args([*B, "--delete-offsets", "--group", "g", "--topic", "t1", "--topic", "t2"])
    command = ShareGroupCommand(o, Admin(), out, err)
    command.run()
    assert command.failed and err.getvalue() == ""
    assert out.getvalue() == (f"\n{'TOPIC':<15} STATUS\n{'t1':<15} Successful\n"
                              f"{'t2':<15} Error: Offset deletion result for topic \"t2\" was not included in the response\n")


def test_delete_reports_each_failure_as_kafkas_exception():
    """Kafka prints a failed group's exception with toString(): the Java class name comes first."""

    class Admin:
        def list_share_groups(self):
            return [("dead", "Dead"), ("gone", "Empty")]

        def delete_groups(self, group_ids):
            return {"gone": AdminError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Not authorized to access group: gone")}

    out, err = io.StringIO(), io.StringIO()
    o = build_parser().parse_args([*B, "--delete", "--group", "dead", "--group", "gone"])
    command = ShareGroupCommand(o, Admin(), out, err)
    command.run()
    assert command.failed and out.getvalue() == ""
    assert err.getvalue() == (
        "Error: Deletion of some share groups failed:\n"
        "* Group 'dead' could not be deleted due to: java.lang.IllegalStateException: "
        "Share group 'dead' group state is DEAD.\n"
        "* Group 'gone' could not be deleted due to: org.apache.kafka.common.errors.GroupAuthorizationException: "
        "Not authorized to access group: gone\n")


def test_unknown_options_and_missing_values_fail_with_joptsimples_messages():
    """Kafka's options are parsed by joptsimple: its exception's message is the line printed."""
    assert bad(*B, "--list", "--frobnicate") == "frobnicate is not a recognized option"
    assert bad(*B, "--list", "--frobnicate=1") == "frobnicate is not a recognized option"
    assert bad(*B, "--list", "-q") == "q is not a recognized option"
    assert bad(*B, "--describe", "--group") == "Option group requires an argument"
    assert bad("--bootstrap-server") == "Option bootstrap-server requires an argument"


@pytest.mark.parametrize("args, message", [
    (("--list", "--timeout", "abc"), "Cannot parse argument 'abc' of option timeout"),
    (("--list", "--timeout", " 5"), "Cannot parse argument ' 5' of option timeout"),
    (("--list", "--timeout", "9223372036854775808"),
     "Cannot parse argument '9223372036854775808' of option timeout"),
    (("--reset-offsets", "--group", "g", "--to-offset", "1_000", "--execute"),
     "Cannot parse argument '1_000' of option to-offset"),
    # converted when first read, after the checks of the command line
    (("--reset-offsets", "--group", "g", "--to-offset", "x", "--to-latest", "--execute"),
     'Option "[to-latest]" can\'t be used with option "[to-offset]"'),
])
def test_a_number_that_does_not_parse_is_reported_as_kafka_reads_it(args, message):
    if not message.startswith("Option"):
        message = f"Error: Executing share group command failed due to {message}"
    assert bad(*B, *args) == message


def test_words_that_are_not_options_are_ignored_and_values_may_look_like_options():
    """joptsimple keeps a word that is not an option aside (Kafka's tool never reads it), and
    an option that needs a value takes the next word even if it starts with "-"."""
    assert bad(*B, "--list", "extra", "words").startswith(
        "Error: Executing share group command failed due to cannot reach any bootstrap server")
    o = build_parser().parse_args(jopt_args(build_parser(), [*B, "--describe", "--group", "-g1", "--state", "--",
                                                             "--frobnicate"]))
    assert (o.group, o.state, o.describe) == (["-g1"], None, True)


def test_an_unreachable_broker_is_one_error_line():
    message = bad(*B, "--list")
    assert message.startswith("Error: Executing share group command failed due to cannot reach any bootstrap server")


def test_help_version_and_no_arguments():
    code, out, err = run("--help")
    assert code == 0 and err == "" and "--reset-offsets" in out and "--by-duration" in out
    code, out, err = run("--version")
    assert code == 0 and out.strip()
    code, out, err = run()
    assert code == 1 and out == "" and "--bootstrap-server" in err


# --- --to-datetime and --by-duration -----------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("2021-03-04T05:06:07.089", datetime(2021, 3, 4, 5, 6, 7, 89_000, tzinfo=timezone.utc)),  # no zone: UTC
    ("2021-03-04T05:06:07.089Z", datetime(2021, 3, 4, 5, 6, 7, 89_000, tzinfo=timezone.utc)),
    ("2021-03-04T07:06:07.5+02:00", datetime(2021, 3, 4, 5, 6, 7, 500_000, tzinfo=timezone.utc)),
    ("2021-03-04T07:06:07.000+0200", datetime(2021, 3, 4, 5, 6, 7, tzinfo=timezone.utc)),
    ("2021-03-04T02:06:07.000-03", datetime(2021, 3, 4, 5, 6, 7, tzinfo=timezone.utc)),
])
def test_to_datetime_formats(text, expected):
    assert parse_datetime(text) == int(expected.timestamp() * 1000)


@pytest.mark.parametrize("text", ["2021-03-04 05:06:07.000", "2021-03-04T05:06:07", "2021-02-30T00:00:00.000",
                                  "2021-03-04T05:06:07.000+2"])
def test_to_datetime_rejects(text):
    with pytest.raises(SpecError):
        parse_datetime(text)


@pytest.mark.parametrize("text, ms", [
    ("PT1H", 3_600_000), ("P1D", 86_400_000), ("p2dt3h4m5.5s", ((2 * 24 + 3) * 60 + 4) * 60_000 + 5_500),
    ("PT0.001S", 1), ("-PT1M", -60_000), ("PT-30S", -30_000), ("PT1H-30M", 1_800_000),
])
def test_by_duration_formats(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "1H", "PT1X", "P1H", "PT1.5M"])
def test_by_duration_rejects(text):
    with pytest.raises(SpecError):
        parse_duration(text)


@given(days=st.integers(0, 400), hours=st.integers(0, 48), minutes=st.integers(0, 120), seconds=st.integers(0, 500),
       millis=st.integers(0, 999))
def test_by_duration_adds_its_fields(days, hours, minutes, seconds, millis):
    text = f"P{days}DT{hours}H{minutes}M{seconds}.{millis:03d}S"
    assert parse_duration(text) == (((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000 + millis


def test_describe_leaves_out_a_partition_that_answers_an_error():
    """Kafka's ListShareGroupOffsetsHandler skips a partition whose row carries an error (only a
    start offset of -1 maps to null, shown as "-"), so kafka-share-groups.sh prints no row for it."""
    from broker.tools.share_admin import ShareAdmin
    from protocol.messages.describe_share_group_offsets_response import (
        DescribeShareGroupOffsetsResponse,
        DescribeShareGroupOffsetsResponseGroup,
        DescribeShareGroupOffsetsResponsePartition,
        DescribeShareGroupOffsetsResponseTopic,
    )

    Partition = DescribeShareGroupOffsetsResponsePartition
    response = DescribeShareGroupOffsetsResponse(groups=[DescribeShareGroupOffsetsResponseGroup(group_id="g", topics=[
        DescribeShareGroupOffsetsResponseTopic(topic_name="t", partitions=[
            Partition(partition_index=0, start_offset=4, leader_epoch=0, lag=2),
            Partition(partition_index=1, start_offset=-1, leader_epoch=-1, lag=-1),
            Partition(partition_index=2, start_offset=0, leader_epoch=0, lag=0,
                      error_code=ErrorCode.LEADER_NOT_AVAILABLE, error_message="offline")])])])
    admin = ShareAdmin.__new__(ShareAdmin)
    admin._to_coordinator = lambda group_id, request, check: (check(response), response)[1]

    class Description:
        group_state = "Empty"

    admin.describe_share_group = lambda group_id: Description()
    out, err = io.StringIO(), io.StringIO()
    o = build_parser().parse_args([*B, "--describe", "--group", "g"])
    ShareGroupCommand(o, admin, out, err).run()
    assert out.getvalue() == (f"\n{'GROUP':<15} {'TOPIC':<15} {'PARTITION':<10} {'START-OFFSET':<13} LAG"
                              f"\n{'g':<15} {'t':<15} {0:<10} {4:<13} 2"
                              f"\n{'g':<15} {'t':<15} {1:<10} {'-':<13} -\n")


@pytest.mark.parametrize("code, message, line", [
    (ErrorCode.NON_EMPTY_GROUP, "The group is not empty.", "Error: The group is not empty."),
    (ErrorCode.UNKNOWN_SERVER_ERROR, "boom",
     "Error: Encounter some unknown error: org.apache.kafka.common.errors.UnknownServerException: boom"),
    (ErrorCode.KAFKA_STORAGE_ERROR, "Disk error when trying to access log file on the disk.",
     "Error: Encounter some unknown error: org.apache.kafka.common.errors.KafkaStorageException: "
     "Disk error when trying to access log file on the disk."),
])
def test_delete_offsets_reports_a_group_error_as_kafka_does(code, message, line):
    """ShareGroupCommand.deleteOffsets prints the message of the four group errors it expects and
    "Encounter some unknown error: " with the exception's toString() for any other; every topic
    then shows the error's message."""

    class Admin:
        def delete_share_group_offsets(self, group_id, topics):
            return AdminError(code, message), {}

    out, err = io.StringIO(), io.StringIO()
    o = build_parser().parse_args([*B, "--delete-offsets", "--group", "g", "--topic", "t1"])
    command = ShareGroupCommand(o, Admin(), out, err)
    command.run()
    assert command.failed and err.getvalue() == line + "\n"
    assert out.getvalue() == f"\n{'TOPIC':<15} STATUS\n{'t1':<15} Error: {message}\n"


def test_a_command_config_that_cannot_be_read_fails_as_kafkas_loadprops(tmp_path):
    """Utils.loadProps' IOException, wrapped in a RuntimeException by ShareGroupService's
    constructor: printed with its Java class, and before a repeated --group is noticed."""
    missing = tmp_path / "nope.properties"
    prefix = "Error: Executing share group command failed due to "
    not_found = f"{prefix}java.nio.file.NoSuchFileException: {missing}"
    assert bad(*B, "--list", "--command-config", str(missing)) == not_found
    assert bad(*B, "--list", "--command-config", str(tmp_path)) == f"{prefix}java.io.IOException: Is a directory"
    assert bad(*B, "--delete-offsets", "--group", "a", "--group", "b", "--topic", "t",
               "--command-config", str(missing)) == not_found
    assert bad(*B, "--list", "--timeout", "x", "--command-config", str(missing)) == not_found


def test_list_prints_the_groups_in_the_order_listgroups_answers():
    """Kafka's tool prints ListGroupsResult as the brokers answered, without sorting."""
    from broker.tools.share_admin import ShareAdmin
    from protocol.messages.list_groups_response import ListGroupsResponse, ListedGroup

    class Conn:
        def version(self, api_key):
            return 5

        def send(self, request, version):
            return ListGroupsResponse(groups=[ListedGroup(group_id=g, protocol_type="share", group_state="Empty",
                                                          group_type="Share") for g in ("zz", "aa", "mm")])

    class Client:
        def metadata(self, topics):
            class Broker:
                node_id = 1

            class Metadata:
                brokers = [Broker()]
            return Metadata()

        def node(self, node_id):
            return Conn()

    admin = ShareAdmin.__new__(ShareAdmin)
    admin.client, admin.timeout_s = Client(), 1.0
    out, err = io.StringIO(), io.StringIO()
    ShareGroupCommand(build_parser().parse_args([*B, "--list"]), admin, out, err).run()
    assert out.getvalue() == "zz\naa\nmm\n"
    out = io.StringIO()
    ShareGroupCommand(build_parser().parse_args([*B, "--list", "--state"]), admin, out, err).run()
    assert out.getvalue() == f"{'GROUP':<15} STATE\n{'zz':<15} Empty\n{'aa':<15} Empty\n{'mm':<15} Empty\n"


def test_state_lists_split_and_trim_as_java_does():
    from broker.tools.share_groups import parse_states
    assert parse_states("Stable,") == ["Stable"]  # String.split drops trailing empty parts
    assert parse_states(",,") == []  # ... all of them: no filter
    assert parse_states("\tempty , DEAD\x1f") == ["Empty", "Dead"]
    assert parse_states("\u017ftable") == ["Stable"]  # "ſ".toUpperCase() is "S"
    with pytest.raises(Exception, match="Invalid state list ',Stable'"):
        parse_states(",Stable")
    with pytest.raises(Exception, match="Invalid state list 'Stable\\u00a0'"):
        parse_states("Stable\u00a0")  # trim() leaves a no-break space


@pytest.mark.parametrize("piece", [" 1", "1_0", "2147483648", "x"])
def test_a_partition_that_integer_parseint_refuses(monkeypatch, piece):
    monkeypatch.setattr("broker.tools.share_groups.ShareAdmin", EmptyGroupAdmin)
    assert bad(*B, "--reset-offsets", "--group", "g", "--topic", f"t:0,{piece}", "--to-earliest", "--dry-run") == (
        f"Invalid partition '{piece}' specified in topic arg 't:0,{piece}''")


@pytest.mark.parametrize("args, message", [
    (("--list", "--bootstrap-server", "h:1"), "Error: Executing share group command failed due to " + (
        "Found multiple arguments for option bootstrap-server, but you asked for only one")),
    (("--list", "--timeout", "5", "--timeout", "6"), "Error: Executing share group command failed due to " + (
        "Found multiple arguments for option timeout, but you asked for only one")),
    (("--list", "--timeout", "5", "--timeout", "x"), "Error: Executing share group command failed due to " + (
        "Cannot parse argument 'x' of option timeout")),  # every value is converted first
    (("--list", "--command-config", "a", "--command-config", "b"), "Error: Executing share group command failed "
     "due to Found multiple arguments for option command-config, but you asked for only one"),
    (("--describe", "--group", "g", "--state", "Stable", "--state", "Empty"),
     "Found multiple arguments for option state, but you asked for only one"),  # valueOf in checkArgs
])
def test_an_option_read_with_valueof_refuses_a_second_value(args, message):
    assert bad(*B, *args) == message


def test_list_state_read_with_valueof_and_the_first_to_datetime_wins(monkeypatch):
    monkeypatch.setattr("broker.tools.share_groups.ShareAdmin", EmptyGroupAdmin)
    assert bad(*B, "--list", "--state", "Stable", "--state", "Empty") == (
        "Error: Executing share group command failed due to "
        "Found multiple arguments for option state, but you asked for only one")
    # OffsetsUtils.resetToDateTime parses the first value: the second one is never looked at
    assert bad(*B, "--reset-offsets", "--group", "g", "--to-datetime", "bad", "--to-datetime",
               "2020-01-01T00:00:00.000", "--execute") == (
        "Error: Executing share group command failed due to java.text.ParseException: Error parsing timestamp. "
        "It does not contain a 'T' according to ISO8601 format")
