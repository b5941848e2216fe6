"""FindCoordinator: every coordinator kshare runs lives in this broker.

Key types (Kafka 4.2 CoordinatorType): GROUP 0 answers this broker for any group id; SHARE 2
(``groupId:topicId:partition``, only from v6) answers this broker too, the share coordinator
being in-process, and a malformed key is INVALID_REQUEST; TRANSACTION 1 answers this broker as
well, so a transactional producer goes on to InitProducerId and gets the fatal refusal there
(a retriable error here would keep ``init_transactions()`` retrying until it times out, with no
cause given). Any other type fails the whole request as Kafka's ``CoordinatorType.forId`` does:
INVALID_REQUEST with its default message for every key (``getErrorResponse``).
A GROUP or SHARE key whose ``__consumer_offsets`` or ``__share_group_state`` partition is
offline (no leader in Metadata) gets COORDINATOR_NOT_AVAILABLE, as Kafka answers a coordinator
partition without a live leader; clients retry FindCoordinator after their backoff.
v0-3 carry one key (and, like Kafka, the message "NONE" on success); v4+ a batch of keys, each
with its own error and node (-1, "", -1 on error).
"""

from __future__ import annotations

from typing import Callable

from coordinator.share.routing import parse_key_string, partition_for
from protocol.errors import ErrorCode
from protocol.messages.find_coordinator_response import Coordinator, FindCoordinatorResponse

from ..partitions import NO_LEADER, leader_of
from ..topics import CONSUMER_OFFSETS, SHARE_GROUP_STATE
from ._admin import default_message
from ._group_admin import error_message

API_KEY = 10
MIN_VERSION, MAX_VERSION = 0, 6

GROUP, TRANSACTION, SHARE = 0, 1, 2


def _lookup(version: int, key_type: int, key: str, offline: Callable[[str], bool]) -> ErrorCode:
    if key_type == TRANSACTION:
        return ErrorCode.NONE
    if key_type == SHARE:
        if version < 6:
            return ErrorCode.INVALID_REQUEST
        try:
            parse_key_string(key)
        except (ValueError, TypeError, AttributeError):
            return ErrorCode.INVALID_REQUEST
    return ErrorCode.COORDINATOR_NOT_AVAILABLE if offline(key) else ErrorCode.NONE


def _offline_check(broker, key_type: int) -> Callable[[str], bool]:
    """Whether a key's coordinator partition is offline. Usually no partition is, and then no
    key is hashed: Java's String.hashCode costs about 0.3 s per MB of keys in Python."""
    if key_type == GROUP:
        topic, count = CONSUMER_OFFSETS, broker.group_coordinator.num_partitions
        partition_of = broker.group_coordinator.partition_for
    elif key_type == SHARE:
        # Kafka hashes the parsed key's canonical form (SharePartitionKey.asCoordinatorKey).
        topic, count = SHARE_GROUP_STATE, broker.share_coordinator.num_partitions
        partition_of = lambda key: partition_for(*parse_key_string(key), count)  # noqa: E731
    else:
        return lambda key: False  # TRANSACTION: no coordinator partition
    offline = {p for p in range(count) if leader_of(broker.store, broker.node_id, topic, p)[1] == NO_LEADER}
    return (lambda key: partition_of(key) in offline) if offline else (lambda key: False)


async def handle(ctx, req) -> FindCoordinatorResponse:
    broker = ctx.broker
    v = ctx.api_version
    if req.key_type not in (GROUP, TRANSACTION, SHARE):
        return error_response(req, v, ErrorCode.INVALID_REQUEST)
    offline = _offline_check(broker, req.key_type)

    def node(code: ErrorCode) -> tuple[int, str, int]:
        return (broker.node_id, broker.host, broker.port) if code == ErrorCode.NONE else (-1, "", -1)

    if v < 4:
        code = _lookup(v, req.key_type, req.key, offline)
        node_id, host, port = node(code)
        return FindCoordinatorResponse(error_code=code, error_message=default_message(code), node_id=node_id,
                                       host=host, port=port)
    coordinators = []
    for key in req.coordinator_keys:
        code = _lookup(v, req.key_type, key, offline)
        node_id, host, port = node(code)
        coordinators.append(Coordinator(key=key, node_id=node_id, host=host, port=port, error_code=code))
    return FindCoordinatorResponse(coordinators=coordinators)


def error_response(req, version: int, code: int) -> FindCoordinatorResponse:
    """The error with its default message and no node (-1, "", -1): top-level before v4, per key from v4."""
    message = error_message(code)
    if version < 4:
        return FindCoordinatorResponse(error_code=code, error_message=message, node_id=-1, host="", port=-1)
    return FindCoordinatorResponse(coordinators=[
        Coordinator(key=key, node_id=-1, host="", port=-1, error_code=code, error_message=message)
        for key in req.coordinator_keys
    ])
