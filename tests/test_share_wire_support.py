"""Helpers for the ShareFetch / ShareAcknowledge wire tests (nothing here is collected).

``ShareMember`` is one share-group member speaking raw ShareFetch (78) and ShareAcknowledge (79)
over its own connection, tracking its share-session epoch the way librdkafka does: 0 opens,
each successful reply moves it on, -1 closes. Tests pass ``epoch=`` to send anything else.

The leader never initialises share-partition state (Kafka 4.1+: the group coordinator does,
before it assigns a partition). A member that has not heartbeaten gets UNKNOWN_SERVER_ERROR for
a partition nobody initialised, so ``ShareMember`` first initialises the partitions it fetches
(``initialize_share_state``, once each) unless made with ``initialize=False``; in-process tests
use ``share_partition``.
"""

from __future__ import annotations

import time
import uuid

from protocol.errors import ErrorCode
from protocol.messages import initialize_share_group_state_request as init_req
from protocol.messages import read_share_group_state_request as read_req
from protocol.messages import share_acknowledge_request as ack_req
from protocol.messages import share_fetch_request as fetch_req
from protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from protocol.records import check_batch, iter_records
from tests.raw_client import RawClient
from tests.test_produce_support import batch, produce

SHARE_FETCH, SHARE_ACKNOWLEDGE, CREATE_TOPICS, METADATA = 78, 79, 19, 3
INITIALIZE_SHARE_GROUP_STATE, READ_SHARE_GROUP_STATE = 83, 84

GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4

# Lock-expiry tests run their own broker with the shortest lock Kafka allows.
SHORT_LOCKS = {
    "group.share.record.lock.duration.ms": "1000",
    "group.share.min.record.lock.duration.ms": "1000",
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def new_member_id() -> str:
    """A 22-character id, like librdkafka's base64 UUIDs."""
    return uuid.uuid4().hex[:22]


# --- topics and records ----------------------------------------------------------------------------


def create_topic(client: RawClient, name: str, partitions: int = 1):
    """Create ``name`` with CreateTopics v7 and return its topic id."""
    resp = client.request(CREATE_TOPICS, 7, CreateTopicsRequest(
        topics=[CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=10000,
    ))
    (t,) = resp.topics
    assert t.error_code == 0, (t.error_code, t.error_message)
    md = client.request(METADATA, 12, MetadataRequest(topics=[MetadataRequestTopic(name=name)]))
    assert md.topics[0].topic_id == t.topic_id
    return t.topic_id


def produce_batches(client: RawClient, topic: str, sizes, *, partition: int = 0) -> list[tuple[int, int]]:
    """Produce one log batch per entry of ``sizes``; returns each batch's (base, last) offsets."""
    out = []
    for n in sizes:
        p = produce(client, topic, batch([f"v{i}".encode() for i in range(n)]), partition=partition)
        assert p.error_code == 0, p.error_code
        out.append((p.base_offset, p.base_offset + n - 1))
    return out


# --- share-partition state ---------------------------------------------------------------------

# (group, topic id, partition) initialised by a test already; topic ids are never reused
_INITIALIZED: set = set()


def initialize_share_state(bootstrap: str, group: str, partitions) -> None:
    """InitializeShareGroupState (start offset -1: share.auto.offset.reset applies when loaded) for
    the (topic id, partition) pairs that have no share state yet (ReadShareGroupState answers
    INVALID_REQUEST), as the group coordinator sends it before it assigns them; state that exists
    (an AlterShareGroupOffsets) is kept. Errors (an unknown topic a test fetches on purpose) are
    left to the fetch."""
    todo = [tp for tp in dict.fromkeys(partitions) if (group, *tp) not in _INITIALIZED]
    if not group or not todo:
        return
    with RawClient(bootstrap, client_id="share-wire-tests") as client:
        read = client.request(READ_SHARE_GROUP_STATE, 0, read_req.ReadShareGroupStateRequest(
            group_id=group, topics=[read_req.ReadStateData(topic_id=t, partitions=[
                read_req.PartitionData(partition=p, leader_epoch=-1) for p in ps])  # -1: a plain read
                for t, ps in _by_topic(todo).items()]))
        _INITIALIZED.update((group, t.topic_id, p.partition) for t in read.results for p in t.partitions
                            if p.error_code == 0)
        absent = [(t.topic_id, p.partition) for t in read.results for p in t.partitions
                  if p.error_code == ErrorCode.INVALID_REQUEST]
        if not absent:
            return
        init = client.request(INITIALIZE_SHARE_GROUP_STATE, 0, init_req.InitializeShareGroupStateRequest(
            group_id=group, topics=[init_req.InitializeStateData(topic_id=t, partitions=[
                init_req.PartitionData(partition=p, state_epoch=0, start_offset=-1) for p in ps])
                for t, ps in _by_topic(absent).items()]))
    _INITIALIZED.update((group, t.topic_id, p.partition) for t in init.results for p in t.partitions
                        if p.error_code == 0)


async def share_partition(broker, group: str, topic_id, partition: int, topic: str):
    """The loaded share partition of an in-process broker, its state initialised first (once) the
    way the group coordinator does before assigning it."""
    persister = broker.share_manager.persister
    if (group, topic_id, partition) not in _INITIALIZED:
        read = await persister.read_state(group, topic_id, partition, leader_epoch=-1)  # -1: a plain read
        if read.error_code == ErrorCode.INVALID_REQUEST:
            code, msg = await persister.initialize_state(group, topic_id, partition, state_epoch=0, start_offset=-1)
            assert code == 0, (code, msg)
        _INITIALIZED.add((group, topic_id, partition))
    return await broker.share_manager.partition(group, topic_id, partition, topic)


# --- responses ------------------------------------------------------------------------------------


def parts(resp) -> dict:
    """{(topic id, partition): partition data} of a ShareFetch / ShareAcknowledge response."""
    out = {}
    for t in resp.responses:
        for p in t.partitions:
            key = (t.topic_id, p.partition_index)
            assert key not in out, f"{key} answered twice"
            out[key] = p
    return out


def acquired(part) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count) for a in part.acquired_records]


def acquired_offsets(part) -> list[int]:
    return [o for a in part.acquired_records for o in range(a.first_offset, a.last_offset + 1)]


def all_acquired(resp) -> dict:
    """{(topic id, partition): [(first, last, delivery count)]} for partitions with records."""
    return {tp: acquired(p) for tp, p in parts(resp).items() if p.acquired_records}


def batch_headers(part) -> list:
    """Headers of the whole log batches in a partition's Records (CRC-checked)."""
    buf = bytes(part.records)
    out, pos = [], 0
    while pos < len(buf):
        h = check_batch(buf, pos)
        out.append(h)
        pos += h.size
    return out


def record_offsets(part) -> list[int]:
    """Offsets of every record in a partition's Records, decoding each batch."""
    return offsets_in(bytes(part.records))


def offsets_in(buf: bytes) -> list[int]:
    """Offsets of every record in ``buf``'s whole batches (CRC-checked)."""
    out, pos = [], 0
    while pos < len(buf):
        h = check_batch(buf, pos)
        out.extend(r.offset for r in iter_records(buf, pos))
        pos += h.size
    return out


# --- a member -------------------------------------------------------------------------------------


class ShareMember:
    """A share-group member on its own connection, with librdkafka-like epoch bookkeeping."""

    def __init__(self, bootstrap: str, group: str, member_id: str | None = None, *, initialize: bool = True) -> None:
        self.client = RawClient(bootstrap, client_id="share-wire-tests")
        self.bootstrap = bootstrap
        self.initialize = initialize
        self.group = group
        self.member_id = member_id if member_id is not None else new_member_id()
        self.epoch: int | None = 0

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> ShareMember:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- requests

    def fetch_request(
        self, partitions=(), *, acks=None, epoch=None, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
        max_records=500, batch_size=500, acquire_mode=0, is_renew_ack=False, forgotten=(),
        group=..., member_id=..., topics=None,
    ):
        """``partitions``: (topic id, partition) to list; ``acks``: {(topic id, partition):
        [(first, last, types)]}; ``topics`` replaces the built Topics array entirely."""
        if topics is None:
            topics = _group_by_topic(partitions, acks, fetch_req.FetchTopic, fetch_req.FetchPartition,
                                     fetch_req.AcknowledgementBatch)
        return fetch_req.ShareFetchRequest(
            group_id=self.group if group is ... else group,
            member_id=self.member_id if member_id is ... else member_id,
            share_session_epoch=self.epoch if epoch is None else epoch,
            max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes, max_records=max_records,
            batch_size=batch_size, share_acquire_mode=acquire_mode, is_renew_ack=is_renew_ack,
            topics=topics,
            forgotten_topics_data=[
                fetch_req.ForgottenTopic(topic_id=t, partitions=ps) for t, ps in _by_topic(forgotten).items()
            ],
        )

    def fetch(self, partitions=(), *, version: int = 1, **kw):
        req = self.fetch_request(partitions, **kw)
        self._initialize(req)
        resp = self.client.request(SHARE_FETCH, version, req)
        self._moved_on(req.share_session_epoch, resp.error_code)
        return resp

    def send_fetch(self, partitions=(), *, version: int = 1, **kw):
        """Send a ShareFetch without waiting; returns a function that reads its response."""
        req = self.fetch_request(partitions, **kw)
        self._initialize(req)
        self.client.send_raw(self.client.frame(SHARE_FETCH, version, req))

        def result():
            resp = self.client.read_response(SHARE_FETCH, version)
            self._moved_on(req.share_session_epoch, resp.error_code)
            return resp

        return result

    def timed_fetch(self, partitions=(), **kw):
        """(response, seconds it took)."""
        t0 = time.monotonic()
        resp = self.fetch(partitions, **kw)
        return resp, time.monotonic() - t0

    def acknowledge(self, acks, *, version: int = 1, epoch=None, is_renew_ack=False, group=..., member_id=...,
                    topics=None):
        """ShareAcknowledge; ``acks``: {(topic id, partition): [(first, last, types)]}; ``topics``
        replaces the built Topics array entirely."""
        if topics is None:
            topics = _group_by_topic((), acks, ack_req.AcknowledgeTopic, ack_req.AcknowledgePartition,
                                     ack_req.AcknowledgementBatch)
        req = ack_req.ShareAcknowledgeRequest(
            group_id=self.group if group is ... else group,
            member_id=self.member_id if member_id is ... else member_id,
            share_session_epoch=self.epoch if epoch is None else epoch,
            is_renew_ack=is_renew_ack,
            topics=topics,
        )
        resp = self.client.request(SHARE_ACKNOWLEDGE, version, req)
        self._moved_on(req.share_session_epoch, resp.error_code)
        return resp

    def open(self, partitions, **kw):
        """Epoch 0 (also loads the share partitions, so ``latest`` resets to the current end)."""
        resp = self.fetch(partitions, epoch=0, **kw)
        assert resp.error_code == 0, (resp.error_code, resp.error_message)
        return resp

    def _initialize(self, req) -> None:
        """What the group coordinator does before assigning a member these partitions."""
        if self.initialize:
            initialize_share_state(self.bootstrap, req.group_id,
                                   [(t.topic_id, p.partition_index) for t in req.topics for p in t.partitions])

    def _moved_on(self, epoch: int, error_code: int) -> None:
        if error_code:
            return
        if epoch == -1:
            self.epoch = None
        elif epoch == 0 or epoch == self.epoch:
            self.epoch = 1 if epoch >= 2**31 - 1 else epoch + 1


def _by_topic(pairs) -> dict:
    out: dict = {}
    for t, p in pairs:
        out.setdefault(t, []).append(p)
    return out


def _group_by_topic(partitions, acks, topic_cls, partition_cls, batch_cls) -> list:
    acks = acks or {}
    order = list(dict.fromkeys([*partitions, *acks]))
    topics: dict = {}
    for t, p in order:
        batches = [batch_cls(first_offset=f, last_offset=l, acknowledge_types=list(types))
                   for f, l, types in acks.get((t, p), [])]
        topics.setdefault(t, []).append(partition_cls(partition_index=p, acknowledgement_batches=batches))
    return [topic_cls(topic_id=t, partitions=ps) for t, ps in topics.items()]
