"""Helpers shared by the admin handlers (not a handler: the name starts with an underscore)."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Callable, Iterable

from protocol.errors import ErrorCode, KafkaError

from ..topics import CONSUMER_OFFSETS, SHARE_GROUP_STATE

log = logging.getLogger("kshare.admin")

# Kafka's default messages (Errors.java), used where Kafka answers with ``error.message()``.
DEFAULT_MESSAGES = {
    ErrorCode.INVALID_REQUEST: (
        "This most likely occurs because of a request being malformed by the client library or the message "
        "was sent to an incompatible broker. See the broker logs for more details."
    ),
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    ErrorCode.POLICY_VIOLATION: "Request parameters do not satisfy the configured policy.",
    ErrorCode.TOPIC_DELETION_DISABLED: "Topic deletion is disabled.",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    ErrorCode.UNKNOWN_TOPIC_ID: "This server does not host this topic ID.",
    ErrorCode.INVALID_GROUP_ID: "The configured groupId is invalid.",
    ErrorCode.GROUP_ID_NOT_FOUND: "The group id does not exist.",
    ErrorCode.NON_EMPTY_GROUP: "The group is not empty.",
    ErrorCode.NOT_COORDINATOR: "This is not the correct coordinator.",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
    ErrorCode.UNKNOWN_SERVER_ERROR: "The server experienced an unexpected error when processing the request.",
    ErrorCode.LEADER_NOT_AVAILABLE: "There is no leader for this topic-partition as we are in the middle of a "
                                    "leadership election.",
}


# The internal topics the coordinators keep their state in. A group's (share-partition's) records
# live in the partition its key hashes to over the topic's partition count, so more partitions
# would strand them at the next start, and deleting the topic takes every share group with it.
# Kafka's broker allows both (its kafka-topics.sh refuses to delete internal topics); kshare
# refuses them, with POLICY_VIOLATION, instead of losing groups.
COORDINATOR_TOPICS = frozenset({CONSUMER_OFFSETS, SHARE_GROUP_STATE})


_REFUSED = {"delete": "deleted", "grow": "given more partitions"}


def coordinator_topic_refusal(name: str, action: str) -> KafkaError:
    """``action``: "delete" or "grow"."""
    log.info("refused to %s %s: it holds the share groups' state", action, name)
    return KafkaError(ErrorCode.POLICY_VIOLATION,
                      f"Topic {name} holds the share groups' state; kshare does not allow it to be {_REFUSED[action]}.")


def default_message(code: ErrorCode) -> str:
    """``Errors.message()``: the default text, or the constant's name for codes without one (NONE)."""
    return DEFAULT_MESSAGES.get(code, code.name)


def duplicates(names: Iterable) -> set:
    return {n for n, count in Counter(names).items() if count > 1}


def alter_each(broker, req, alter_one: Callable, response_class) -> list:
    """The resource loop both AlterConfigs flavours share: every resource gets its own result,
    a resource named twice is INVALID_REQUEST, and one failing never affects the others."""
    dup = duplicates((r.resource_type, r.resource_name) for r in req.resources)
    responses = []
    for r in req.resources:
        code, message = ErrorCode.NONE, None
        if (r.resource_type, r.resource_name) in dup:
            code, message = ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."
        else:
            try:
                alter_one(broker, r, req.validate_only)
            except KafkaError as e:
                code, message = e.code, e.message
        responses.append(response_class(error_code=code, error_message=message,
                                        resource_type=r.resource_type, resource_name=r.resource_name))
    return responses


def check_manual_assignment(replicas: list[int], node_id: int, expected_rf: int | None) -> str | None:
    """Kafka's ``validateManualPartitionAssignment`` on a one-broker cluster: the error message
    (INVALID_REPLICA_ASSIGNMENT), or None when the assignment is valid."""
    if not replicas:
        return "The manual partition assignment includes an empty replica list."
    previous = None
    for broker_id in sorted(replicas):
        if broker_id != node_id:
            return f"The manual partition assignment includes broker {broker_id}, but no such broker is registered."
        if broker_id == previous:
            return f"The manual partition assignment includes the broker {broker_id} more than once."
        previous = broker_id
    if expected_rf is not None and len(replicas) != expected_rf:
        return (f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but this "
                f"is not consistent with previous partitions, which have {expected_rf} replica(s).")
    return None


def check_replication_factor(rf: int) -> None:
    """Kafka's createTopic with StripedReplicaPlacer on one registered broker: more than one
    replica is INVALID_REPLICATION_FACTOR."""
    if rf > 1:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"Unable to replicate the partition {rf} time(s): The target replication factor of {rf} "
                         "cannot be reached because only 1 broker(s) are registered.")


# Kafka's ReplicationControlManager.MAX_PARTITIONS_PER_BATCH
MAX_PARTITIONS_PER_BATCH = 10_000
