"""``kshare-share-groups``: Kafka 4.2's ``kafka-share-groups.sh`` for kshare (and Kafka).

Options, validation messages and output layout follow Kafka's ``ShareGroupCommand`` /
``ShareGroupCommandOptions``; everything goes over the Kafka protocol (``share_admin``), so it
works against any broker with share groups. Actions (exactly one):

* ``--list`` [``--state`` [states]]
* ``--describe`` (``--group`` ... | ``--all-groups``) [``--offsets`` (default) | ``--members`` |
  ``--state``] [``--verbose``]
* ``--reset-offsets --group G`` [``--topic T[:p,...]`` ... | ``--all-topics``] with one of
  ``--to-earliest``, ``--to-latest``, ``--to-datetime``, ``--by-duration``, ``--to-offset`` and
  one of ``--dry-run`` / ``--execute``
* ``--delete-offsets --group G --topic T`` ...
* ``--delete`` (``--group`` ... | ``--all-groups``)

Differences from Kafka's tool, all deliberate: ``--by-duration`` and ``--to-offset`` are also
accepted for share groups (as ``kafka-consumer-groups.sh`` has them); errors and warnings go to
stderr as one line each (Kafka prints some on stdout), and any failure exits with status 1
(Kafka exits 0 when some groups or topics of ``--delete`` / ``--delete-offsets`` fail);
``--command-config`` is read for ``client.id`` only; ``--export`` / ``--from-file`` /
``--to-current`` are not offered.
"""

from __future__ import annotations

import argparse
import errno
import sys
import time
from typing import TextIO

from coordinator.group.broker_defaults import java_integer, java_trim
from protocol.errors import ErrorCode, KafkaError

from ..config import java_split
from .reset_specs import SpecError, parse_datetime, parse_duration
from .share_admin import EARLIEST, LATEST, AdminError, ShareAdmin

MISSING = "-"
EMPTY, STABLE, DEAD = "Empty", "Stable", "Dead"
SHARE_STATES = (DEAD, EMPTY, STABLE)
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
SCENARIOS = ("to_datetime", "by_duration", "to_earliest", "to_latest", "to_offset")
_NOT_GIVEN = object()


class UsageError(Exception):
    """Bad arguments, or what Kafka raises as an IllegalArgumentException (``mainNoExit`` prints
    its message alone): the message is printed as the one line of output, exit status 1."""


class CommandError(Exception):
    """The command could not be carried out: printed as "Error: <message>", exit status 1."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print usage and exit 2
        raise UsageError(message)


def _opt(dest: str) -> str:
    """An option as joptsimple prints it in Kafka's messages: ``[reset-offsets]``."""
    return "[" + dest.replace("_", "-") + "]"


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kshare-share-groups", add_help=False, allow_abbrev=False,
                description="This tool helps to list, describe, reset and delete share groups.")
    a = p.add_argument
    a("--bootstrap-server", metavar="<String: server to connect to>", help="REQUIRED: The server(s) to connect to.")
    a("--group", action="append", metavar="<String: share group>", help="The share group we wish to act on.")
    a("--topic", action="append", metavar="<String: topic>",
      help="The topic whose offset information should be deleted or included in the reset offset process. "
           "When resetting offsets, partitions can be specified using this format: 'topic1:0,1,2', "
           "where 0,1,2 are the partitions to be included.")
    a("--all-topics", action="store_true",
      help="Consider all topics assigned to a share group in the 'reset-offsets' process.")
    a("--list", action="store_true", help="List all share groups.")
    a("--describe", action="store_true", help="Describe share group, members and offset information.")
    a("--all-groups", action="store_true", help="Apply to all share groups.")
    a("--delete", action="store_true", help="Delete share group.")
    a("--timeout", default="30000", metavar="<Long: timeout (ms)>",
      help="The timeout that can be set for some use cases. (default: 30000)")
    a("--command-config", metavar="<String: command config property file>",
      help="Property file containing configs to be passed to Admin Client.")
    a("--reset-offsets", action="store_true",
      help="Reset offsets of share group. Supports one share group at the time, and instances must be inactive. "
           "Has 2 execution options: --dry-run to plan which offsets to reset, and --execute to reset the offsets. "
           "You must choose one of the following reset specifications: --to-datetime, --by-duration, "
           "--to-earliest, --to-latest, --to-offset. To define the scope use --all-topics or --topic.")
    a("--delete-offsets", action="store_true",
      help="Delete offsets of share group. Supports one share group at the time, and multiple topics.")
    a("--dry-run", action="store_true",
      help="Only show results without executing changes on share groups. Supported operations: reset-offsets.")
    a("--execute", action="store_true", help="Execute operation. Supported operations: reset-offsets.")
    a("--to-datetime", metavar="<String: datetime>",
      help="Reset offsets to offset from datetime. Format: 'YYYY-MM-DDThh:mm:ss.sss'")
    a("--by-duration", metavar="<String: duration>",
      help="Reset offsets to offset by duration from current timestamp. Format: 'PnDTnHnMnS'")
    a("--to-earliest", action="store_true", help="Reset offsets to earliest offset.")
    a("--to-latest", action="store_true", help="Reset offsets to latest offset.")
    a("--to-offset", metavar="<Long: offset>", help="Reset offsets to a specific offset.")
    a("--members", action="store_true",
      help="Describe members of the group. This option may be used with the '--describe' option only.")
    a("--offsets", action="store_true",
      help="Describe the group and list all topic partitions in the group along with their offset information. "
           "This is the default sub-action and may be used with the '--describe' option only.")
    a("--state", nargs="?", default=_NOT_GIVEN, const=None, metavar="<String>",
      help="When specified with '--describe', includes the state of the group. When specified with '--list', "
           "it displays the state of all groups. It can also be used to list groups with specific states. "
           "Valid values are Empty, Stable and Dead.")
    a("--verbose", action="store_true",
      help="Provide additional information, if any, when describing the group. "
           "This option may be used with the '--describe' option only.")
    a("--help", action="store_true", help="Print usage information.")
    a("--version", action="store_true", help="Display the kshare version.")
    p.set_defaults(given={})  # every value given to each option: main fills it (values_given)
    return p


def jopt_args(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """The command line as joptsimple reads it, rewritten for argparse: an option that takes a
    value takes the next word whatever it looks like (``--group -g1``), ``--state`` only a word
    that is not an option, ``--`` ends the options, and a word that is not an option is
    ignored. An unknown option or a missing value fails with joptsimple's message."""
    takes = {}
    for action in parser._actions:
        for name in action.option_strings:
            takes[name] = "optional" if action.nargs == "?" else None if action.nargs == 0 else "required"
    out: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if word == "--":
            break
        if not word.startswith("-") or word == "-":
            continue  # a non-option argument: Kafka's tool never reads them
        body, eq, value = word.lstrip("-").partition("=")
        option = "--" + body
        if option not in takes:  # "-x" is a cluster of short options, none of which Kafka's tool has
            name = body if word.startswith("--") or not body else body[0]
            raise UsageError(f"{name} is not a recognized option")
        if takes[option] == "required":
            if not eq:
                if i == len(argv):
                    raise UsageError(f"Option {body} requires an argument")
                value, i = argv[i], i + 1
            out.append(f"{option}={value}")
        elif takes[option] == "optional" and not eq and i < len(argv) and not argv[i].startswith("-"):
            out.append(f"{option}={argv[i]}")
            i += 1
        else:
            out.append(word if eq else option)
    return out


def values_given(words: list[str]) -> dict[str, list[str]]:
    """Every value given to each option (of ``jopt_args``' words), in order."""
    given: dict[str, list[str]] = {}
    for word in words:
        name, eq, value = word[2:].partition("=")
        if eq:
            given.setdefault(name, []).append(value)
    return given


def _multiple(name: str) -> str:
    """joptsimple's ``valueOf`` of an option given more than one value."""
    return f"Found multiple arguments for option {name}, but you asked for only one"


def single_value(o, name: str) -> None:
    """Kafka's tool reads ``name`` with ``valueOf``: a repeated value fails (as a Throwable)."""
    if len(o.given.get(name, ())) > 1:
        raise CommandError(f"Executing share group command failed due to {_multiple(name)}")


def convert_longs(o) -> None:
    """--timeout and --to-offset as joptsimple converts them (Long.valueOf, every value given)
    when Kafka's tool first reads them, after the checks of the command line; --timeout is
    read with valueOf, --to-offset's first value is used."""
    for dest in ("timeout", "to_offset"):
        name = dest.replace("_", "-")
        texts = o.given.get(name) or ([] if getattr(o, dest) is None else [getattr(o, dest)])
        values = []
        for text in texts:
            value = java_integer(str(text), 64)
            if value is None:
                raise CommandError(f"Executing share group command failed due to Cannot parse argument '{text}' "
                                   f"of option {name}")
            values.append(value)
        if dest == "timeout":
            single_value(o, name)
        if values:
            setattr(o, dest, values[0])


def _has(o, dest: str) -> bool:
    value = getattr(o, dest)
    if dest == "state":
        return value is not _NOT_GIVEN
    return value is not None and value is not False  # --to-offset 0 is given (0 == False)


def check_args(o) -> None:
    """Kafka's ``ShareGroupCommandOptions.checkArgs`` (and joptsimple's ``availableIf``), in
    Kafka's order; raises UsageError with Kafka's message."""
    for dest, needs in (("members", ("describe",)), ("offsets", ("describe",)), ("verbose", ("describe",)),
                        ("state", ("describe", "list"))):
        if _has(o, dest) and not any(_has(o, n) for n in needs):
            raise UsageError(f"Option(s) {_opt(dest)} are unavailable given other options on the command line")
    if not _has(o, "bootstrap_server"):
        raise UsageError(f'Missing required argument "{_opt("bootstrap_server")}"')
    if o.describe:
        if not o.group and not o.all_groups:
            raise UsageError(f"Option {_opt('describe')} takes one of these options: {_opt('group')}, {_opt('all_groups')}")
        if sum(_has(o, d) for d in ("members", "offsets", "state")) > 1:
            raise UsageError(f"Option {_opt('describe')} takes at most one of these options: "
                             f"{_opt('members')}, {_opt('offsets')}, {_opt('state')}")
        if len(o.given.get("state", ())) > 1:  # valueOf in checkArgs
            raise UsageError(_multiple("state"))
        if _has(o, "state") and o.state is not None:
            raise UsageError(f"Option {_opt('describe')} does not take a value for {_opt('state')}")
    if o.delete:
        if not o.group and not o.all_groups:
            raise UsageError(f"Option {_opt('delete')} takes the options {_opt('group')} or {_opt('all_groups')}")
        if o.group and o.all_groups:
            raise UsageError(f"Option {_opt('delete')} takes either {_opt('group')} or {_opt('all_groups')}, not both.")
        if o.topic:
            raise UsageError(f"Option {_opt('delete')} does not take the option: {_opt('topic')}")
    if o.delete_offsets and (not o.group or not o.topic):
        raise UsageError(f"Option {_opt('delete_offsets')} takes the following options: {_opt('group')}, {_opt('topic')}")
    if o.reset_offsets:
        if o.dry_run and o.execute:
            raise UsageError(f"Option {_opt('reset_offsets')} only accepts one of {_opt('execute')} and {_opt('dry_run')}")
        if not o.dry_run and not o.execute:
            raise UsageError(f"Option {_opt('reset_offsets')} takes the option: {_opt('execute')} or {_opt('dry_run')}")
        if not o.group:
            raise UsageError(f"Option {_opt('reset_offsets')} takes the option: {_opt('group')}")
        for used in SCENARIOS:
            if _has(o, used):
                for other in SCENARIOS:
                    if other != used and _has(o, other):
                        raise UsageError(f'Option "{_opt(used)}" can\'t be used with option "{_opt(other)}"')
    _check_invalid(o, "group", ("all_groups", "list"))
    _check_invalid(o, "topic", ("list", "describe"))
    if sum(bool(getattr(o, a)) for a in ACTIONS) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                         "--delete-offsets.")


def _check_invalid(o, used: str, invalid: tuple[str, ...]) -> None:
    if _has(o, used):
        for other in invalid:
            if _has(o, other):
                raise UsageError(f'Option "{_opt(used)}" can\'t be used with option "{_opt(other)}"')


def _check_single_group(o) -> None:
    """--reset-offsets and --delete-offsets act on one group: Kafka reads ``--group`` there with
    joptsimple's ``valueOf``, which fails on a repeated option before anything is sent (rather
    than acting on one of the groups)."""
    if (o.reset_offsets or o.delete_offsets) and o.group and len(o.group) > 1:
        raise CommandError("Executing share group command failed due to Found multiple arguments for option "
                           "group, but you asked for only one")


def parse_states(text: str) -> list[str]:
    """Kafka's ``groupStatesFromString`` for share groups: Java's split (trailing empty parts
    dropped), trim and ``GroupState.parse`` (upper-cased names)."""
    by_upper = {s.upper(): s for s in SHARE_STATES}
    states = []
    for part in java_split(text, ","):
        state = by_upper.get(java_trim(part).upper())
        if state is None:
            raise UsageError(f"Invalid state list '{text}'. Valid states are: {', '.join(SHARE_STATES)}")
        states.append(state)
    return list(dict.fromkeys(states))


def _client_id(path: str | None) -> str:
    if path is None:
        return "kshare-share-groups"
    try:
        with open(path, encoding="latin-1") as f:  # java.util.Properties reads ISO 8859-1
            lines = f.read().splitlines()
    except OSError as e:
        # Kafka's Utils.loadProps fails in ShareGroupService's constructor, which wraps the
        # IOException in a RuntimeException: its message is the exception's toString()
        if e.errno == errno.EISDIR:  # Java opens a directory and fails to read it
            cause = f"java.io.IOException: {e.strerror}"
        elif e.errno in (errno.ENOENT, errno.EACCES):
            name = "NoSuchFileException" if e.errno == errno.ENOENT else "AccessDeniedException"
            cause = f"java.nio.file.{name}: {path}"
        else:
            cause = f"java.nio.file.FileSystemException: {path}: {e.strerror}"
        raise CommandError(f"Executing share group command failed due to {cause}") from None
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() == "client.id":
            return value.strip()
    return "kshare-share-groups"


# --- the actions ----------------------------------------------------------------------------------


class ShareGroupCommand:
    def __init__(self, o, admin: ShareAdmin, out: TextIO, err: TextIO) -> None:
        self.o, self.admin, self.out, self.err = o, admin, out, err
        self.failed = False

    def p(self, text: str = "", end: str = "\n") -> None:
        self.out.write(text + end)

    def run(self) -> None:
        o = self.o
        if o.list:
            self.list_groups()
        elif o.describe:
            self.describe()
        elif o.delete:
            self.delete_groups()
        elif o.reset_offsets:
            self.reset_offsets()
        else:
            self.delete_offsets()

    # -- --list

    def list_groups(self) -> None:
        if not _has(self.o, "state"):
            for group_id, _ in self.admin.list_share_groups():
                self.p(group_id)
            return
        single_value(self.o, "state")
        states = parse_states(self.o.state) if self.o.state else []
        groups = self.admin.list_share_groups(states)
        width = max([15, *(len(g) for g, _ in groups)])
        self.p(f"{'GROUP':<{width}} STATE")
        for group_id, state in groups:
            self.p(f"{group_id:<{width}} {state}")

    # -- --describe

    def _group_ids(self) -> list[str]:
        if self.o.all_groups:
            return [g for g, _ in self.admin.list_share_groups()]
        return list(dict.fromkeys(self.o.group))

    def _descriptions(self, group_ids: list[str]) -> dict:
        """Kafka's tool lets the ExecutionException of a failed describe (an unknown group, say)
        escape, so its message names the exception: "...GroupIdNotFoundException: Group g not found."."""
        try:
            return dict(sorted((g, self.admin.describe_share_group(g)) for g in group_ids))
        except AdminError as e:
            raise CommandError(f"Executing share group command failed due to {e.java()}") from None

    def describe(self) -> None:
        group_ids = self._group_ids()
        if self.o.members:
            self.print_members(self._descriptions(group_ids))
        elif _has(self.o, "state"):
            self.print_states(self._descriptions(group_ids))
        else:
            descriptions = self._descriptions(group_ids)
            self.print_offsets({g: self.admin.share_group_offsets(g) for g in descriptions})

    def _maybe_print_empty_group_state(self, group_id: str, state: str, rows: int) -> bool:
        if state == DEAD:
            self.err.write(f"\nError: Share group '{group_id}' does not exist.\n")
        elif state == EMPTY:
            self.err.write(f"\nShare group '{group_id}' has no active members.\n")
        return state != DEAD and rows > 0

    def print_offsets(self, offsets: dict) -> None:
        verbose = self.o.verbose
        for group_id, by_partition in offsets.items():
            rows = sorted(by_partition.items())
            if not rows:
                self.p(f"\nShare group '{group_id}' has no offset information.")
                continue
            gw = max(15, len(group_id))
            tw = max([15, *(len(t) for (t, _), _ in rows)])
            if verbose:
                self._row(f"{'GROUP':<{gw}} {'TOPIC':<{tw}} {'PARTITION':<10} {'LEADER-EPOCH':<13} "
                          f"{'START-OFFSET':<13} LAG")
            else:
                self._row(f"{'GROUP':<{gw}} {'TOPIC':<{tw}} {'PARTITION':<10} {'START-OFFSET':<13} LAG")
            for (topic, partition), info in rows:
                start = _show(info and info.start_offset)
                lag = _show(info and info.lag)
                if verbose:
                    epoch = _show(info and info.leader_epoch)
                    self._row(f"{group_id:<{gw}} {topic:<{tw}} {partition:<10} {epoch:<13} {start:<13} {lag}")
                else:
                    self._row(f"{group_id:<{gw}} {topic:<{tw}} {partition:<10} {start:<13} {lag}")
            self.p()

    def _row(self, text: str) -> None:
        """Kafka's printf formats start every row with a newline."""
        self.out.write("\n" + text)

    def print_states(self, descriptions: dict) -> None:
        for group_id, d in descriptions.items():
            self._maybe_print_empty_group_state(group_id, d.group_state, 1)
            c = self.admin.coordinator(group_id)
            coordinator = f"{c.host}:{c.port}  ({c.node_id})"
            gw, cw = max(15, len(group_id)), max(25, len(coordinator))
            if self.o.verbose:
                self._row(f"{'GROUP':<{gw}} {'COORDINATOR (ID)':<{cw}} {'STATE':<15} {'GROUP-EPOCH':<12} "
                          f"{'ASSIGNMENT-EPOCH':<17} #MEMBERS")
                self._row(f"{group_id:<{gw}} {coordinator:<{cw}} {d.group_state:<15} {d.group_epoch:<12} "
                          f"{d.assignment_epoch:<17} {len(d.members)}")
            else:
                self._row(f"{'GROUP':<{gw}} {'COORDINATOR (ID)':<{cw}} {'STATE':<15} #MEMBERS")
                self._row(f"{group_id:<{gw}} {coordinator:<{cw}} {d.group_state:<15} {len(d.members)}")
            self.p()

    def print_members(self, descriptions: dict) -> None:
        for group_id, d in descriptions.items():
            members = sorted(d.members, key=lambda m: m.member_id)
            if not self._maybe_print_empty_group_state(group_id, d.group_state, len(members)):
                continue
            gw = max(15, len(group_id))
            mw = max([15, *(len(m.member_id) for m in members)])
            hw = max([15, *(len(m.client_host) for m in members)])
            cw = max([15, *(len(m.client_id) for m in members)])
            head = f"{'GROUP':<{gw}} {'CONSUMER-ID':<{mw}} {'HOST':<{hw}} {'CLIENT-ID':<{cw}} {'#PARTITIONS':<12} "
            self._row(head + (f"{'MEMBER-EPOCH':<13} ASSIGNMENT" if self.o.verbose else "ASSIGNMENT"))
            for m in members:
                count = sum(len(tp.partitions) for tp in m.assignment.topic_partitions)
                row = f"{group_id:<{gw}} {m.member_id:<{mw}} {m.client_host:<{hw}} {m.client_id:<{cw}} {count:<12} "
                if self.o.verbose:
                    row += f"{m.member_epoch:<13} "
                self._row(row + _assignment(m.assignment.topic_partitions))
            self.p()

    # -- --delete

    def delete_groups(self) -> None:
        """Kafka prints each failure as its exception's toString(), so every reason starts with
        the Java class name (``...GroupNotEmptyException: Share group 'g' is not EMPTY.``)."""
        listed = dict(self.admin.list_share_groups())
        group_ids = list(listed) if self.o.all_groups else list(dict.fromkeys(self.o.group))
        failed: dict[str, str] = {}
        for group_id in group_ids:
            state = listed.get(group_id)
            if state is None:
                failed[group_id] = f"java.lang.IllegalArgumentException: Group '{group_id}' is not a share group."
            elif state == DEAD:
                failed[group_id] = f"java.lang.IllegalStateException: Share group '{group_id}' group state is DEAD."
            elif state != EMPTY:
                not_empty = AdminError(ErrorCode.NON_EMPTY_GROUP, f"Share group '{group_id}' is not EMPTY.")
                failed[group_id] = not_empty.java()
        remaining = [g for g in group_ids if g not in failed]
        succeeded = []
        for group_id, error in (self.admin.delete_groups(remaining) if remaining else {}).items():
            if error is None:
                succeeded.append(group_id)
            else:
                failed[group_id] = error.java()
        if not failed:
            self.p("Deletion of requested share groups (" + ", ".join(f"'{g}'" for g in succeeded) + ") was successful.")
            return
        self.failed = True
        self.err.write("Error: Deletion of some share groups failed:\n")
        for group_id in group_ids:
            if group_id in failed:
                self.err.write(f"* Group '{group_id}' could not be deleted due to: {failed[group_id]}\n")
        if succeeded:
            self.p("\nThese share groups were deleted successfully: " + ", ".join(f"'{g}'" for g in succeeded))

    # -- --delete-offsets

    def delete_offsets(self) -> None:
        group_id = self.o.group[0]
        topics = list(dict.fromkeys(self.o.topic))
        top, by_topic = self.admin.delete_share_group_offsets(group_id, topics)
        if top is not None:
            # Kafka's DeleteShareGroupOffsetsResult fails every topic's result with the group's
            # error too: ShareGroupCommand.deleteOffsets prints the error, then the table.
            self.failed = True
            if top.code in (ErrorCode.INVALID_GROUP_ID, ErrorCode.GROUP_ID_NOT_FOUND,
                            ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.NON_EMPTY_GROUP):
                self.err.write(f"Error: {top}\n")
            elif top.code not in (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                # any other error: Kafka prints the exception's toString()
                self.err.write(f"Error: Encounter some unknown error: {top.java()}\n")
            by_topic = dict.fromkeys(topics, top)
        width = max([15, *(len(t) for t in topics)])
        self._row(f"{'TOPIC':<{width}} STATUS")
        for topic in sorted(topics):
            if topic in by_topic:
                error = by_topic[topic]
                status = "Successful" if error is None else f"Error: {error}"
            else:
                status = f'Error: Offset deletion result for topic "{topic}" was not included in the response'
            if status != "Successful":
                self.failed = True
            self._row(f"{topic:<{width}} {status}")
        self.p()

    # -- --reset-offsets

    def reset_offsets(self) -> None:
        o = self.o
        group_id = o.group[0]
        try:
            d = self.admin.describe_share_group(group_id)
            if d.group_state not in (EMPTY, DEAD):
                raise UsageError(f"Share group '{group_id}' is not empty.")
        except AdminError as e:
            if e.code != ErrorCode.GROUP_ID_NOT_FOUND:
                raise
        partitions = self._partitions_to_reset(group_id)
        # Kafka's prepareOffsetsToReset: the group and the partitions are checked first, then
        # the scenario is chosen and its --to-datetime parsed
        if not any(_has(o, s) for s in SCENARIOS):
            raise UsageError(f"Option '{_opt('reset_offsets')}' requires one of the following scenarios: "
                             f"[{', '.join(_opt(s) for s in SCENARIOS)}]")
        offsets = self._new_offsets(partitions, self._scenario_timestamp())
        if o.execute and offsets:
            self.admin.alter_share_group_offsets(group_id, offsets)
        self._print_offsets_to_reset(group_id, offsets)

    def _scenario_timestamp(self) -> int | None:
        """The timestamp of --to-datetime / --by-duration, parsed once the group and the
        partitions have been checked (also when there are no partitions), as Kafka does."""
        try:
            if self.o.to_datetime is not None:
                return parse_datetime(self.o.to_datetime)
            if self.o.by_duration is not None:
                single_value(self.o, "by-duration")  # kafka-consumer-groups.sh reads it with valueOf
                return int(time.time() * 1000) - parse_duration(self.o.by_duration)
        except SpecError as e:  # Kafka wraps the ParseException in a RuntimeException
            cause = "java.text.ParseException: " if self.o.to_datetime is not None else ""
            raise CommandError(f"Executing share group command failed due to {cause}{e}") from None
        return None

    def _partitions_to_reset(self, group_id: str) -> list[tuple[str, int]]:
        if not self.o.topic:
            return sorted(self.admin.share_group_offsets(group_id))
        named, explicit = [], []
        for arg in self.o.topic:
            if ":" not in arg:
                named.append(arg)
                continue
            parts = java_split(arg, ":")
            if len(parts) != 2:
                raise UsageError(f"Invalid topic arg '{arg}', expected topic name and partitions")
            topic, text = parts
            for piece in java_split(text, ","):
                partition = java_integer(piece, 32)
                if partition is None:
                    raise UsageError(f"Invalid partition '{piece}' specified in topic arg '{arg}''")
                explicit.append((topic, partition))
        # Kafka describes the named topics first (its error is printed as is), then checks the
        # explicit partitions' topics in a helper that wraps the ExecutionException it gets
        layout = self.admin.topic_partitions(named) if named else {}
        unchecked = [t for t, _ in explicit if t not in layout]
        if unchecked:
            try:
                layout.update(self.admin.topic_partitions(unchecked))
            except AdminError as e:
                raise CommandError("Executing share group command failed due to "
                                   f"java.util.concurrent.ExecutionException: {e.java()}") from None
        missing = [f"{t}-{p}" for t, p in explicit if p not in layout[t]]
        if missing:
            raise CommandError(f'Executing share group command failed due to The partitions "{",".join(missing)}" '
                               "do not exist")
        wanted = explicit + [(t, p) for t in named for p in sorted(layout[t])]
        return sorted(dict.fromkeys(wanted))

    def _new_offsets(self, partitions: list[tuple[str, int]], timestamp: int | None) -> dict[tuple[str, int], int]:
        if not partitions:
            return {}
        o, admin = self.o, self.admin
        if o.to_earliest:
            return admin.log_offsets(partitions, EARLIEST)
        if o.to_latest:
            return admin.log_offsets(partitions, LATEST)
        if o.to_offset is not None:
            earliest, latest = admin.log_offsets(partitions, EARLIEST), admin.log_offsets(partitions, LATEST)
            out = {}
            for tp in partitions:
                offset = o.to_offset
                if offset > latest[tp]:
                    self.err.write(f"New offset ({offset}) is higher than latest offset for topic partition "
                                   f"{tp[0]}-{tp[1]}. Value will be set to {latest[tp]}.\n")
                    offset = latest[tp]
                elif offset < earliest[tp]:
                    self.err.write(f"New offset ({offset}) is lower than earliest offset for topic partition "
                                   f"{tp[0]}-{tp[1]}. Value will be set to {earliest[tp]}.\n")
                    offset = earliest[tp]
                out[tp] = offset
            return out
        by_time = admin.log_offsets(partitions, timestamp)
        empty = [tp for tp, offset in by_time.items() if offset < 0]
        if empty:
            latest = admin.log_offsets(empty, LATEST)
            for topic, p in empty:
                self.err.write(f"Warn: Partition {p} from topic {topic} is empty. Falling back to latest known offset.\n")
                by_time[(topic, p)] = latest[(topic, p)]
        return by_time

    def _print_offsets_to_reset(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        if offsets:
            gw = max(15, len(group_id))
            tw = max([15, *(len(t) for t, _ in offsets)])
            self._row(f"{'GROUP':<{gw}} {'TOPIC':<{tw}} {'PARTITION':<10} NEW-OFFSET")
            for (topic, p), offset in sorted(offsets.items()):
                self._row(f"{group_id:<{gw}} {topic:<{tw}} {p:<10} {offset}")
        self.p()


def _show(value) -> str:
    return MISSING if value is None else str(value)


def _assignment(topic_partitions) -> str:
    """Kafka's ``getAssignmentString``: ``topic:0,1;other:3``, topics and partitions sorted."""
    return ";".join(sorted(f"{tp.topic_name}:" + ",".join(str(p) for p in sorted(tp.partitions))
                           for tp in topic_partitions))


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("kshare")
    except Exception:  # noqa: BLE001  (not installed as a distribution: run from a checkout)
        return "0.1.0"


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the tool; returns the exit status (0 success, 1 on any error)."""
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    try:
        given = sys.argv[1:] if argv is None else argv
        words = jopt_args(parser, given)
        o = parser.parse_args(words)
        o.given = values_given(words)
        if o.to_datetime is not None:  # Kafka resets to the first --to-datetime given
            o.to_datetime = o.given["to-datetime"][0]
        if o.help:
            parser.print_help(out)
            return 0
        if not given:  # Kafka prints the usage and fails
            parser.print_help(err)
            return 1
        if o.version:
            out.write(_version() + "\n")
            return 0
        check_args(o)
        # what ShareGroupService's constructor reads (the --command-config file, then --timeout)
        # fails before what its actions read (the one --group of a reset or an offsets delete)
        single_value(o, "command-config")
        client_id = _client_id(o.command_config)
        single_value(o, "bootstrap-server")
        convert_longs(o)
        _check_single_group(o)
        with ShareAdmin(o.bootstrap_server, timeout_ms=o.timeout, client_id=client_id) as admin:
            command = ShareGroupCommand(o, admin, out, err)
            command.run()
        return 1 if command.failed else 0
    except UsageError as e:
        err.write(f"{e}\n")
    except CommandError as e:
        err.write(f"Error: {e}\n")
    except (AdminError, KafkaError) as e:
        err.write(f"Error: Executing share group command failed due to {e}\n")
    except (OSError, ConnectionError, ValueError) as e:
        err.write(f"Error: Executing share group command failed due to {e}\n")
    return 1


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
