"""Metadata: brokers, cluster id and topics (by name, or by topic id from v12).

A single broker leads every partition with leader epoch 0, except one whose log went offline
(no leader, as Kafka). Unknown topics are created when ``auto.create.topics.enable`` and the
request allow it (synchronously, so the answer already carries the new topic where Kafka's
AutoTopicCreationManager answers UNKNOWN_TOPIC_OR_PARTITION while the controller creates it),
and refused where CreateTopics would refuse it: ``default.replication.factor`` above 1 leaves the
topic missing, as Kafka's controller refuses it and the metadata stays UNKNOWN_TOPIC_OR_PARTITION
(the broker logs why). A missing topic not created is answered as Kafka's
getTopicMetadata does: INVALID_TOPIC_EXCEPTION for a name that could never be a topic, else
UNKNOWN_TOPIC_OR_PARTITION, and IsInternal for the internal names. ``__transaction_state``
is never auto-created: Kafka would create it with ``transaction.state.log.replication.factor``
(3) replicas, which a one-broker cluster refuses, so it answers UNKNOWN_TOPIC_OR_PARTITION
there; kshare has no transactions to use it. Nor is ``__cluster_metadata``, KRaft's metadata
log, which Kafka's controller refuses to create. A topic named twice is answered once (Kafka takes
the requested topics as a set). Once a v12+ request gives a topic id, its names are ignored.
"""

from __future__ import annotations

import logging

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.metadata_response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from protocol.primitives import ZERO_UUID

from ..authz import CLUSTER_OPERATIONS, NOT_REQUESTED, TOPIC_OPERATIONS
from ..partitions import leader_of
from ..topics import CLUSTER_METADATA, INTERNAL_TOPICS, unknown_topic_error
from ._admin import check_replication_factor

API_KEY = 3
log = logging.getLogger("kshare.metadata")
_NEVER_AUTO_CREATED = INTERNAL_TOPICS | {CLUSTER_METADATA}
MIN_VERSION, MAX_VERSION = 0, 13


def topic_metadata(broker, topic, include_ops: bool) -> MetadataResponseTopic:
    node = broker.node_id
    partitions = []
    for p in range(topic.partitions):
        error, leader, offline = leader_of(broker.store, node, topic.name, p)
        partitions.append(MetadataResponsePartition(
            error_code=error, partition_index=p, leader_id=leader, leader_epoch=0,
            replica_nodes=[node], isr_nodes=[node], offline_replicas=offline,
        ))
    return MetadataResponseTopic(
        error_code=ErrorCode.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=partitions,
        topic_authorized_operations=TOPIC_OPERATIONS if include_ops else NOT_REQUESTED,
    )


def _error_topic(code: ErrorCode, name, topic_id=ZERO_UUID) -> MetadataResponseTopic:
    return MetadataResponseTopic(error_code=code, name=name, topic_id=topic_id)


def _missing(name: str) -> MetadataResponseTopic:
    return MetadataResponseTopic(error_code=unknown_topic_error(name), name=name, topic_id=ZERO_UUID,
                                 is_internal=name in INTERNAL_TOPICS)


def _auto_create(broker, name: str, name_error: KafkaError | None):
    """The new topic, or None when a one-broker cluster cannot place default.replication.factor.
    The name is checked first (``name_error``, against the topics before the request, as
    AutoTopicCreationManager asks for every missing name in one CreateTopics), as Kafka's
    controller validates names before placing replicas: a collision is INVALID_TOPIC_EXCEPTION
    whatever the replication factor."""
    if name_error is not None:
        raise name_error
    try:
        check_replication_factor(broker.config["default.replication.factor"])
    except KafkaError as e:
        log.info("not auto-creating topic %s: %s", name, e.message)
        return None
    return broker.auto_create_topic(name, name_checked=True)


def _unique(requested: list) -> list:
    """The requested topics once each, in request order (by name, or by id when unnamed)."""
    seen = set()
    out = []
    for t in requested:
        key = t.name if t.name is not None else t.topic_id
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def _by_ids(broker, requested: list, include_ops: bool) -> list:
    """Kafka's handleTopicMetadataRequest once a topic id is given (v12+): the ids alone, each
    looked up by id (a name beside it, or in another entry, is ignored), the unknown ones first."""
    unknown, known = [], []
    for topic_id in dict.fromkeys(t.topic_id for t in requested if t.topic_id != ZERO_UUID):
        topic = broker.topics.by_id(topic_id)
        if topic is None:
            unknown.append(_error_topic(ErrorCode.UNKNOWN_TOPIC_ID, None, topic_id))
        else:
            known.append(topic_metadata(broker, topic, include_ops))
    return unknown + known


def _invalid_request(req) -> MetadataResponse:
    """Kafka's answer when v10-11 name a topic by id or by a null name (ids are served from
    v12): every requested topic with INVALID_REQUEST, a null name as "", and no brokers."""
    return MetadataResponse(topics=[
        MetadataResponseTopic(error_code=ErrorCode.INVALID_REQUEST, name=t.name or "", topic_id=t.topic_id)
        for t in req.topics
    ])


def error_response(req, version: int, code: int) -> MetadataResponse:
    """Kafka's getErrorResponse: every requested topic (a null name as "", its id) with the error,
    no partitions, and the error at the top level (v13+)."""
    topics = [_error_topic(code, t.name or "", t.topic_id) for t in req.topics or ()]
    return MetadataResponse(topics=topics, error_code=code)


async def handle(ctx, req) -> MetadataResponse:
    broker = ctx.broker
    v = ctx.api_version
    include_ops = req.include_topic_authorized_operations
    if v < 12 and req.topics and any(t.name is None or t.topic_id != ZERO_UUID for t in req.topics):
        return _invalid_request(req)
    topics = []
    # v0 uses an empty list for "all topics"; later versions use null.
    if req.topics is None or (v == 0 and not req.topics):
        topics = [topic_metadata(broker, t, include_ops) for t in broker.topics]
    elif any(t.topic_id != ZERO_UUID for t in req.topics):
        topics = _by_ids(broker, req.topics, include_ops)
    else:
        allow_create = broker.config["auto.create.topics.enable"] and (v < 4 or req.allow_auto_topic_creation)
        missing = [t.name for t in req.topics if t.name is not None and broker.topics.get(t.name) is None]
        name_errors = broker.topics.new_name_errors(missing) if allow_create else {}
        for t in _unique(req.topics):
            if t.name is None:
                topics.append(_error_topic(ErrorCode.INVALID_REQUEST, None, t.topic_id))
                continue
            topic = broker.topics.get(t.name)
            if topic is None and allow_create and t.name not in _NEVER_AUTO_CREATED:
                try:
                    topic = _auto_create(broker, t.name, name_errors.get(t.name))
                except KafkaError as e:
                    topics.append(_error_topic(e.code, t.name))
                    continue
            if topic is None:
                topics.append(_missing(t.name))
            else:
                topics.append(topic_metadata(broker, topic, include_ops))
        if include_ops:  # Kafka sets them on every topic it looked up by name, errors included
            for t in topics:
                if t.name is not None:
                    t.topic_authorized_operations = TOPIC_OPERATIONS
    return MetadataResponse(
        brokers=[MetadataResponseBroker(node_id=broker.node_id, host=broker.host, port=broker.port, rack=None)],
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        topics=topics,
        cluster_authorized_operations=CLUSTER_OPERATIONS if req.include_cluster_authorized_operations else NOT_REQUESTED,
    )
