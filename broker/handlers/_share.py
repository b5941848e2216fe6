"""What ShareFetch and ShareAcknowledge share: identity checks, topic-id lookups, ack parsing,
and the share-session lifecycle tied to the client connection."""

from __future__ import annotations

from uuid import UUID

from protocol.errors import ErrorCode, KafkaError

from ..share.ack_batches import validate_ack_batches

MAX_MEMBER_ID_LENGTH = 36


def check_identity(group_id: str | None, member_id: str | None) -> None:
    """Kafka's top-level checks (KafkaApis): a group id, and a member id of 1-36 characters."""
    if group_id is None:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "GroupId is required.")
    if not member_id or len(member_id) > MAX_MEMBER_ID_LENGTH:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid member id.")


def resolve(broker, topic_id: UUID, partition: int) -> tuple[str | None, ErrorCode]:
    """(topic name, NONE) or (None, UNKNOWN_TOPIC_ID / UNKNOWN_TOPIC_OR_PARTITION)."""
    topic = broker.topics.by_id(topic_id)
    if topic is None:
        return None, ErrorCode.UNKNOWN_TOPIC_ID
    if not 0 <= partition < topic.partitions:
        return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return topic.name, ErrorCode.NONE


def resolve_in_session(broker, topic_id: UUID, partition: int, known_as: str | None) -> tuple[str | None, ErrorCode]:
    """``resolve`` for a session partition that joined when its topic was ``known_as`` (None:
    unknown). Kafka's session keeps that name, so an id unknown then stays UNKNOWN_TOPIC_ID and a
    topic deleted since is UNKNOWN_TOPIC_OR_PARTITION (KafkaApis.handleFetchFromShareFetchRequest)."""
    if known_as is None:
        return None, ErrorCode.UNKNOWN_TOPIC_ID
    name, code = resolve(broker, topic_id, partition)
    return name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if code == ErrorCode.UNKNOWN_TOPIC_ID else code


def split_acks(broker, partitions, version: int, is_renew_ack: bool):
    """``partitions``: (topic id, partition, AcknowledgementBatch list). Returns the acks to
    apply as {(topic id, partition): [(first, last, types)]} and the codes of the others.

    Kafka's order (KafkaApis.handleAcknowledgements): an unknown topic id, then the batches'
    shape, then an unknown partition. A partition without batches is NONE and does nothing,
    even with no share partition loaded (see ``apply_acks``). A partition named twice keeps
    its last entry's batches, as Kafka's map of them does (getAcknowledgeBatchesFrom*Request)."""
    acks: dict[tuple[UUID, int], list] = {}
    codes: dict[tuple[UUID, int], ErrorCode] = {}
    for tp, batches in {(t, p): batches for t, p, batches in partitions}.items():
        topic_id, p = tp
        _, code = resolve(broker, topic_id, p)
        if code == ErrorCode.UNKNOWN_TOPIC_ID:
            codes[tp] = code
            continue
        parsed = [(b.first_offset, b.last_offset, b.acknowledge_types) for b in batches]
        if validate_ack_batches(parsed, version, is_renew_ack) is not None:
            codes[tp] = ErrorCode.INVALID_REQUEST
        elif code or not parsed:
            codes[tp] = code
        else:
            acks[tp] = parsed
    return acks, codes


async def apply_acks(broker, group_id: str, member_id: str, acks, codes: dict) -> dict:
    """Apply ``split_acks``' acks, adding each partition's code to ``codes``; returns the
    messages of the refused ones (SharePartition's reasons).

    With no acknowledgement left to apply, Kafka (KafkaApis.handleAcknowledgements) answers
    only the refused partitions: those without batches are dropped from ``codes``."""
    if not acks:
        for tp in [tp for tp, code in codes.items() if not code]:
            del codes[tp]
        return {}
    messages = {}
    for tp, (code, msg) in (await broker.share_manager.acknowledge(group_id, member_id, acks)).items():
        codes[tp] = code
        if msg:
            messages[tp] = msg
    return messages


def tie_session_to_connection(ctx, session) -> None:
    """Kafka drops a member's share session, releasing its records, when its connection closes.

    One close hook per connection, over the sessions opened on it (a re-open replaces the entry).
    """
    conn = ctx.connection
    opened = getattr(conn, "share_sessions", None)
    if opened is None:
        opened = conn.share_sessions = {}
        conn.on_close(lambda: _connection_closed(ctx.broker, opened))
    # Forget the ones closed or replaced since: a client opening sessions for one member after
    # another over this connection would otherwise keep every one of them until it closes.
    cache = ctx.broker.share_sessions
    for key in [k for k, s in opened.items() if cache.get(*k) is not s]:
        del opened[key]
    opened[session.key] = session


def _connection_closed(broker, opened: dict) -> None:
    for session in opened.values():
        if broker.share_sessions.evict(session):
            broker.share_manager.release_soon(session.group_id, session.member_id, set(session.partitions))


def connection_gone(ctx) -> bool:
    """Whether the request's connection has closed (its response can no longer be sent)."""
    transport = getattr(ctx.connection, "transport", None)
    return transport is not None and transport.is_closing()


async def close_session(broker, session) -> None:
    """Epoch -1: forget the session, then release what its member still holds there."""
    broker.share_sessions.close(session.group_id, session.member_id)
    await broker.share_manager.release(session.group_id, session.member_id, set(session.partitions))

