"""The admin-client calls behind ``kshare-share-groups``, on the blocking ``protocol.client``.

Only the Kafka protocol is spoken (ListGroups, FindCoordinator, ShareGroupDescribe,
DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups,
Metadata, ListOffsets), at the newest version both sides know, so the tool works against
Apache Kafka 4.2 as well as kshare. Like Kafka's admin client, group requests go to the group's
coordinator and are retried (finding the coordinator again) while it answers
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR, until the
operation's timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from protocol.client import KafkaClient
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.alter_share_group_offsets_request import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from protocol.messages.delete_groups_request import DeleteGroupsRequest
from protocol.messages.delete_share_group_offsets_request import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequestTopic,
)
from protocol.messages.describe_share_group_offsets_request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)
from protocol.messages.list_groups_request import ListGroupsRequest
from protocol.messages.list_offsets_request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from protocol.messages.share_group_describe_request import ShareGroupDescribeRequest

LIST_GROUPS, LIST_OFFSETS = 16, 2
UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."  # Kafka's Errors.java
EARLIEST, LATEST = -2, -1
SHARE = "share"
_RETRY = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    ErrorCode.NOT_COORDINATOR})
_BACKOFF_S = 0.1

T = TypeVar("T")
TopicPartition = tuple[str, int]


# The exception Kafka's admin client fails a result with, per error code. Where Kafka's tool
# hands that on inside an ExecutionException, it prints the exception's toString(): the class
# name before the message.
_JAVA_EXCEPTIONS = {
    ErrorCode.UNKNOWN_SERVER_ERROR: "UnknownServerException",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "UnknownTopicOrPartitionException",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "CoordinatorLoadInProgressException",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "CoordinatorNotAvailableException",
    ErrorCode.NOT_COORDINATOR: "NotCoordinatorException",
    ErrorCode.INVALID_GROUP_ID: "InvalidGroupIdException",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "TopicAuthorizationException",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "GroupAuthorizationException",
    ErrorCode.UNSUPPORTED_VERSION: "UnsupportedVersionException",
    ErrorCode.INVALID_REQUEST: "InvalidRequestException",
    ErrorCode.KAFKA_STORAGE_ERROR: "KafkaStorageException",
    ErrorCode.NON_EMPTY_GROUP: "GroupNotEmptyException",
    ErrorCode.GROUP_ID_NOT_FOUND: "GroupIdNotFoundException",
    ErrorCode.REQUEST_TIMED_OUT: "TimeoutException",
    ErrorCode.LEADER_NOT_AVAILABLE: "LeaderNotAvailableException",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "NotLeaderOrFollowerException",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "InvalidTopicException",
    ErrorCode.UNKNOWN_TOPIC_ID: "UnknownTopicIdException",
}


class AdminError(Exception):
    """A Kafka error the tool reports: ``code`` and the broker's (or Kafka's) message."""

    def __init__(self, code: int, message: str | None = None) -> None:
        self.code = ErrorCode(code)
        super().__init__(message or self.code.name)

    def java(self) -> str:
        """The error as Java's ``Throwable.toString()`` prints Kafka's exception for it."""
        name = _JAVA_EXCEPTIONS.get(self.code)
        return f"org.apache.kafka.common.errors.{name}: {self}" if name else str(self)


@dataclass(frozen=True)
class Coordinator:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class OffsetInfo:
    """One share partition of DescribeShareGroupOffsets; None fields are unknown."""

    start_offset: int | None
    leader_epoch: int | None
    lag: int | None


class ShareAdmin:
    def __init__(self, bootstrap: str, timeout_ms: int = 30_000, client_id: str = "kshare-share-groups") -> None:
        self.timeout_s = timeout_ms / 1000
        self.client = KafkaClient(bootstrap, client_id=client_id, timeout_s=max(self.timeout_s, 1.0))
        self._coordinators: dict[str, Coordinator] = {}

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> ShareAdmin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- coordinators and retries ------------------------------------------------------------

    def coordinator(self, group_id: str) -> Coordinator:
        found = self._coordinators.get(group_id)
        if found is None:
            node = self._retrying(lambda: self._find(group_id))
            host, port = self.client.node(node).address
            found = self._coordinators[group_id] = Coordinator(node, host, port)
        return found

    def _find(self, group_id: str) -> int:
        try:
            return self.client.group_coordinator(group_id)
        except KafkaError as e:
            raise AdminError(e.code, e.message) from None

    def _retrying(self, call: Callable[[], T]) -> T:
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return call()
            except AdminError as e:
                if e.code not in _RETRY or time.monotonic() + _BACKOFF_S >= deadline:
                    raise
            time.sleep(_BACKOFF_S)

    def _to_coordinator(self, group_id: str, request, check: Callable[[object], None]):
        """Send ``request`` to the group's coordinator; ``check(response)`` raises AdminError
        for an error in it. Coordinator errors re-find the coordinator and retry."""

        def attempt():
            node = self.coordinator(group_id).node_id
            resp = self.client.send(request, node=node)
            try:
                check(resp)
            except AdminError as e:
                if e.code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                    self._coordinators.pop(group_id, None)
                raise
            return resp

        return self._retrying(attempt)

    # --- groups --------------------------------------------------------------------------------

    def list_share_groups(self, states: Iterable[str] = ()) -> list[tuple[str, str]]:
        """``(group id, state)`` of the share groups of every broker (ListGroups with the
        "share" type filter, or by protocol type from brokers older than v5)."""
        states = list(states)
        brokers = self.client.metadata([]).brokers
        found: dict[str, str] = {}
        for b in brokers:
            conn = self.client.node(b.node_id)
            v = conn.version(LIST_GROUPS)
            if states and v < 4:
                raise AdminError(ErrorCode.UNSUPPORTED_VERSION, "The broker does not support listing groups by state.")
            req = ListGroupsRequest(states_filter=states, types_filter=[SHARE] if v >= 5 else [])

            def attempt(conn=conn, req=req, v=v):
                resp = conn.send(req, v)
                if resp.error_code:
                    raise AdminError(resp.error_code)
                return resp

            resp = self._retrying(attempt)
            for g in resp.groups:
                if v >= 5 and g.group_type.lower() != SHARE or v < 5 and g.protocol_type != SHARE:
                    continue
                found[g.group_id] = g.group_state if v >= 4 else "Unknown"
        return list(found.items())  # in the order of the answers, as Kafka's ListGroupsResult

    def describe_share_group(self, group_id: str):
        """The ShareGroupDescribe result for one group; raises AdminError for its error."""

        def check(resp):
            g = resp.groups[0]
            if g.error_code:
                raise AdminError(g.error_code, g.error_message)

        resp = self._to_coordinator(group_id, ShareGroupDescribeRequest(group_ids=[group_id]), check)
        return resp.groups[0]

    def delete_groups(self, group_ids: list[str]) -> dict[str, AdminError | None]:
        out: dict[str, AdminError | None] = {}
        for group_id in group_ids:
            def check(resp):
                r = resp.results[0]
                if r.error_code in _RETRY:
                    raise AdminError(r.error_code, r.error_message)

            try:
                resp = self._to_coordinator(group_id, DeleteGroupsRequest(groups_names=[group_id]), check)
            except AdminError as e:
                out[group_id] = e
                continue
            r = resp.results[0]
            out[group_id] = AdminError(r.error_code, r.error_message) if r.error_code else None
        return out

    # --- share-group offsets -------------------------------------------------------------------

    def share_group_offsets(self, group_id: str, topics: dict[str, list[int]] | None = None
                            ) -> dict[TopicPartition, OffsetInfo | None]:
        """DescribeShareGroupOffsets (all initialized share partitions when ``topics`` is None).
        Like Kafka's admin client, a partition without a start offset maps to None, one that
        answers an error is left out (ListShareGroupOffsetsHandler skips it); the lag is
        unknown from a broker without v1."""
        req_topics = None if topics is None else [
            DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps) for t, ps in topics.items()]
        req = DescribeShareGroupOffsetsRequest(
            groups=[DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=req_topics)])

        def check(resp):
            g = resp.groups[0]
            if g.error_code:
                raise AdminError(g.error_code, g.error_message)

        resp = self._to_coordinator(group_id, req, check)
        out: dict[TopicPartition, OffsetInfo | None] = {}
        for t in resp.groups[0].topics:
            for p in t.partitions:
                if p.error_code:
                    continue
                if p.start_offset < 0:
                    out[(t.topic_name, p.partition_index)] = None
                    continue
                out[(t.topic_name, p.partition_index)] = OffsetInfo(
                    p.start_offset, p.leader_epoch if p.leader_epoch >= 0 else None,
                    p.lag if p.lag >= 0 else None)
        return out

    def alter_share_group_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """AlterShareGroupOffsets; raises AdminError for the first error (group or partition)."""
        by_topic: dict[str, list[AlterShareGroupOffsetsRequestPartition]] = {}
        for (topic, p), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(AlterShareGroupOffsetsRequestPartition(partition_index=p,
                                                                                         start_offset=offset))
        req = AlterShareGroupOffsetsRequest(group_id=group_id, topics=[
            AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps) for t, ps in by_topic.items()])

        def check(resp):
            if resp.error_code:
                raise AdminError(resp.error_code, resp.error_message)

        resp = self._to_coordinator(group_id, req, check)
        for t in resp.responses:
            for p in t.partitions:
                if p.error_code:
                    raise AdminError(p.error_code, p.error_message)

    def delete_share_group_offsets(self, group_id: str, topics: list[str]
                                   ) -> tuple[AdminError | None, dict[str, AdminError | None]]:
        """DeleteShareGroupOffsets: (group-level error, {topic: error or None})."""
        req = DeleteShareGroupOffsetsRequest(group_id=group_id, topics=[
            DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics])

        def check(resp):
            if resp.error_code in _RETRY:
                raise AdminError(resp.error_code, resp.error_message)

        resp = self._to_coordinator(group_id, req, check)
        if resp.error_code:
            return AdminError(resp.error_code, resp.error_message), {}
        by_topic = {t.topic_name: (AdminError(t.error_code, t.error_message) if t.error_code else None)
                    for t in resp.responses}
        return None, by_topic

    # --- topics and log offsets ----------------------------------------------------------------

    def topic_partitions(self, topics: Iterable[str]) -> dict[str, dict[int, int]]:
        """{topic: {partition: leader id}}; raises AdminError for a topic that does not exist."""
        md = self.client.metadata(list(dict.fromkeys(topics)))
        out = {}
        for t in md.topics:
            if t.error_code:  # Kafka's describeTopics fails with the error's default message
                unknown = t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                raise AdminError(t.error_code, UNKNOWN_TOPIC_MESSAGE if unknown else None)
            out[t.name] = {p.partition_index: p.leader_id for p in t.partitions}
        return out

    def log_offsets(self, partitions: Iterable[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        """ListOffsets at ``timestamp`` (EARLIEST, LATEST or a time in ms) from each partition's
        leader; -1 where no record has a timestamp at or after it."""
        partitions = list(dict.fromkeys(partitions))
        leaders = self.topic_partitions(t for t, _ in partitions)
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, p in partitions:
            if p not in leaders[topic]:
                raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Partition {topic}-{p} does not exist.")
            by_leader.setdefault(leaders[topic][p], {}).setdefault(topic, []).append(p)
        out: dict[TopicPartition, int] = {}
        for leader, topics in by_leader.items():
            req = ListOffsetsRequest(replica_id=-1, topics=[
                ListOffsetsTopic(name=t, partitions=[ListOffsetsPartition(partition_index=p, timestamp=timestamp)
                                                     for p in ps])
                for t, ps in topics.items()])
            resp = self.client.send(req, node=leader)
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise AdminError(p.error_code, f"ListOffsets failed for {t.name}-{p.partition_index}")
                    out[(t.name, p.partition_index)] = p.offset
        return out
