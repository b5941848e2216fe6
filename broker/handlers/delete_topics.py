"""DeleteTopics: by name (v1-5, and v6 entries with a name) or by topic id (v6).

Follows Kafka's ControllerApis.deleteTopics: names or ids given twice, an entry with both or
neither, and a name that maps to an id also given are INVALID_REQUEST; unknown names are
UNKNOWN_TOPIC_OR_PARTITION, unknown ids UNKNOWN_TOPIC_ID. With ``delete.topic.enable=false``
every topic fails: TOPIC_DELETION_DISABLED from v3, INVALID_REQUEST before. The coordinators'
topics (``__consumer_offsets``, ``__share_group_state``) are refused with POLICY_VIOLATION, where
Kafka would delete them and every share group with them. A topic created again gets a new id.
"""

from __future__ import annotations

import uuid

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.delete_topics_response import DeletableTopicResult, DeleteTopicsResponse
from protocol.primitives import ZERO_UUID

from ._admin import COORDINATOR_TOPICS, coordinator_topic_refusal, default_message

API_KEY = 20
MIN_VERSION, MAX_VERSION = 1, 6


def _result(name, topic_id, code=ErrorCode.NONE, message=None) -> DeletableTopicResult:
    return DeletableTopicResult(name=name, topic_id=topic_id, error_code=code, error_message=message)


async def handle(ctx, req) -> DeleteTopicsResponse:
    broker = ctx.broker
    if not broker.config["delete.topic.enable"]:
        code = ErrorCode.TOPIC_DELETION_DISABLED if ctx.api_version >= 3 else ErrorCode.INVALID_REQUEST
        entries = [(n, ZERO_UUID) for n in req.topic_names] + [(t.name, t.topic_id) for t in req.topics]
        return DeleteTopicsResponse(responses=[_result(n, i, code) for n, i in entries])

    out: list[DeletableTopicResult] = []
    names: dict[str, None] = {}  # insertion-ordered sets
    dup_names: dict[str, None] = {}
    ids: dict[uuid.UUID, None] = {}
    dup_ids: dict[uuid.UUID, None] = {}

    def add_name(name: str) -> None:
        if name in dup_names or name in names:
            dup_names[name] = None
            names.pop(name, None)
        else:
            names[name] = None

    for name in req.topic_names:
        add_name(name)
    for t in req.topics:
        if t.name is None:
            if t.topic_id == ZERO_UUID:
                out.append(_result(None, ZERO_UUID, ErrorCode.INVALID_REQUEST,
                                   "Neither topic name nor id were specified."))
            elif t.topic_id in dup_ids or t.topic_id in ids:
                dup_ids[t.topic_id] = None
                ids.pop(t.topic_id, None)
            else:
                ids[t.topic_id] = None
        elif t.topic_id == ZERO_UUID:
            add_name(t.name)
        else:
            out.append(_result(t.name, t.topic_id, ErrorCode.INVALID_REQUEST,
                               "You may not specify both topic name and topic id."))
    out += [_result(n, ZERO_UUID, ErrorCode.INVALID_REQUEST, "Duplicate topic name.") for n in dup_names]
    out += [_result(None, i, ErrorCode.INVALID_REQUEST, "Duplicate topic id.") for i in dup_ids]

    id_to_name: dict[uuid.UUID, str] = {}
    for topic_id in ids:
        topic = broker.topics.by_id(topic_id)
        if topic is None:
            out.append(_result(None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID, default_message(ErrorCode.UNKNOWN_TOPIC_ID)))
        else:
            id_to_name[topic_id] = topic.name
    for name in names:
        topic = broker.topics.get(name)
        if topic is None:
            out.append(_result(name, ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               default_message(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
        elif topic.topic_id in dup_ids or topic.topic_id in id_to_name:
            dup_ids[topic.topic_id] = None
            id_to_name.pop(topic.topic_id, None)
            out.append(_result(name, topic.topic_id, ErrorCode.INVALID_REQUEST,
                               "The provided topic name maps to an ID that was already supplied."))
        else:
            id_to_name[topic.topic_id] = name

    doomed = []
    for topic_id, name in id_to_name.items():
        if name in COORDINATOR_TOPICS:
            refusal = coordinator_topic_refusal(name, "delete")
            out.append(_result(name, topic_id, refusal.code, refusal.message))
            continue
        doomed.append(_result(name, topic_id))
        out.append(doomed[-1])
    try:  # one registry save and one checkpoint write for them all
        broker.topics.delete_many(r.name for r in doomed)
    except KafkaError as e:  # the registry could not be written (a full disk): none is deleted
        for r in doomed:
            r.error_code, r.error_message = e.code, e.message
    return DeleteTopicsResponse(responses=out)


def error_response(req, version: int, code: int) -> DeleteTopicsResponse:
    """Every requested topic with the error and no message: by name before v6, by name and id from v6."""
    if version >= 6:
        entries = [(t.name, t.topic_id) for t in req.topics]
    else:
        entries = [(name, ZERO_UUID) for name in req.topic_names]
    return DeleteTopicsResponse(responses=[_result(name, topic_id, code) for name, topic_id in entries])
