"""Helpers for the share-state tests over the wire (nothing here is collected).

Builders for the five state RPCs, a minimal share-group member (ShareFetch / ShareAcknowledge
with its share-session epoch) and a reader of ``__share_group_state`` through Fetch.
"""

from __future__ import annotations

import time
import uuid

from coordinator.share.routing import partition_for
from protocol.coordinator_serde import decode
from protocol.errors import ErrorCode
from protocol.messages import delete_share_group_state_request as dreq
from protocol.messages import initialize_share_group_state_request as ireq
from protocol.messages import read_share_group_state_request as rreq
from protocol.messages import read_share_group_state_summary_request as sreq
from protocol.messages import share_acknowledge_request as ack_req
from protocol.messages import share_fetch_request as fetch_req
from protocol.messages import write_share_group_state_request as wreq
from protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from protocol.records import check_batch, iter_records
from tests.raw_client import RawClient
from tests.test_produce_support import batch, fetch, list_offset, produce, raw
from tests.test_share_wire_support import initialize_share_state

INITIALIZE, READ, WRITE, DELETE, SUMMARY = 83, 84, 85, 86, 87
SHARE_FETCH, SHARE_ACKNOWLEDGE, CREATE_TOPICS = 78, 79, 19
STATE_TOPIC = "__share_group_state"
ACCEPT, RELEASE, REJECT = 1, 2, 3
AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(client: RawClient, name: str, partitions: int = 1) -> uuid.UUID:
    resp = client.request(CREATE_TOPICS, 7, CreateTopicsRequest(
        topics=[CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=10000))
    (t,) = resp.topics
    assert t.error_code == 0, (t.error_code, t.error_message)
    return t.topic_id


# --- the state RPCs ---------------------------------------------------------------------------------


def initialize(client, group, topic_id, partition, *, state_epoch=0, start_offset=-1):
    return client.request(INITIALIZE, 0, ireq.InitializeShareGroupStateRequest(group_id=group, topics=[
        ireq.InitializeStateData(topic_id=topic_id, partitions=[
            ireq.PartitionData(partition=partition, state_epoch=state_epoch, start_offset=start_offset)])]))


def read_state(client, group, topic_id, partitions, *, leader_epoch=0):
    partitions = [partitions] if isinstance(partitions, int) else partitions
    return client.request(READ, 0, rreq.ReadShareGroupStateRequest(group_id=group, topics=[
        rreq.ReadStateData(topic_id=topic_id, partitions=[
            rreq.PartitionData(partition=p, leader_epoch=leader_epoch) for p in partitions])]))


def write_state(client, group, topic_id, partition, *, version=1, state_epoch=0, leader_epoch=0, start_offset=-1,
                delivery_complete_count=-1, batches=()):
    return client.request(WRITE, version, wreq.WriteShareGroupStateRequest(group_id=group, topics=[
        wreq.WriteStateData(topic_id=topic_id, partitions=[wreq.PartitionData(
            partition=partition, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
            delivery_complete_count=delivery_complete_count,
            state_batches=[wreq.StateBatch(first_offset=f, last_offset=l, delivery_state=s, delivery_count=c)
                           for f, l, s, c in batches])])]))


def delete_state(client, group, topic_id, partitions):
    partitions = [partitions] if isinstance(partitions, int) else partitions
    return client.request(DELETE, 0, dreq.DeleteShareGroupStateRequest(group_id=group, topics=[
        dreq.DeleteStateData(topic_id=topic_id, partitions=[dreq.PartitionData(partition=p) for p in partitions])]))


def summary(client, group, pairs, *, version=1):
    by_topic: dict = {}
    for t, p in pairs:
        by_topic.setdefault(t, []).append(sreq.PartitionData(partition=p))
    return client.request(SUMMARY, version, sreq.ReadShareGroupStateSummaryRequest(group_id=group, topics=[
        sreq.ReadStateSummaryData(topic_id=t, partitions=ps) for t, ps in by_topic.items()]))


def only(resp):
    """The single partition result of a one-partition response."""
    (t,) = resp.results
    (p,) = t.partitions
    return p


def by_partition(resp) -> dict:
    return {(t.topic_id, p.partition): p for t in resp.results for p in t.partitions}


def batches_of(p) -> list[tuple[int, int, int, int]]:
    return [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches]


def state_partition(group, topic_id, partition, num_partitions=50) -> int:
    return partition_for(group, topic_id, partition, num_partitions)


# --- __share_group_state through Fetch --------------------------------------------------------------


def state_records(client, state_partition_index: int) -> list[tuple[int, object, object]]:
    """(offset, key, value) of every record of a state partition from its log start.

    Pruning may move the log start past the offset being read (OFFSET_OUT_OF_RANGE, as Kafka
    answers); the read then starts again from the new log start.
    """
    for _ in range(20):
        out = _state_records_from_log_start(client, state_partition_index)
        if out is not None:
            return out
    raise AssertionError("the log start kept moving under 20 reads")


def _state_records_from_log_start(client, state_partition_index):
    out = []
    offset = log_start(client, state_partition_index)
    while True:
        part = fetch(client, STATE_TOPIC, offset, partition=state_partition_index)
        if part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and offset < log_start(client, state_partition_index):
            return None
        assert part.error_code == 0, part.error_code
        buf = raw(part.records)
        if not buf:
            return out
        pos = 0
        while pos < len(buf):
            h = check_batch(buf, pos)
            for r in iter_records(buf, pos):
                if r.offset >= offset:
                    out.append((r.offset, *decode(r.key, r.value)))
            pos += h.size
        next_offset = out[-1][0] + 1 if out else offset
        if next_offset == offset:
            return out
        offset = next_offset


def log_start(client, state_partition_index: int) -> int:
    return list_offset(client, STATE_TOPIC, -2, partition=state_partition_index).offset


# --- a share-group member ---------------------------------------------------------------------------


class Member:
    """ShareFetch / ShareAcknowledge on one connection, tracking the share-session epoch. The
    partitions it fetches are initialised first, as the group coordinator does before assigning
    them (``initialize_share_state``)."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self.client = RawClient(bootstrap, client_id="share-state-tests")
        self.bootstrap = bootstrap
        self.group = group
        self.member_id = uuid.uuid4().hex[:22]
        self.epoch = 0

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Member:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def fetch(self, tps, *, acks=None, max_wait_ms=0, max_records=500):
        """``acks``: {(topic id, partition): [(first, last, type)]}."""
        topics: dict = {}
        for t, p in dict.fromkeys([*tps, *(acks or {})]):
            batches = [fetch_req.AcknowledgementBatch(first_offset=f, last_offset=l, acknowledge_types=[k])
                       for f, l, k in (acks or {}).get((t, p), [])]
            topics.setdefault(t, []).append(fetch_req.FetchPartition(partition_index=p,
                                                                     acknowledgement_batches=batches))
        initialize_share_state(self.bootstrap, self.group,
                               [(t, p.partition_index) for t, ps in topics.items() for p in ps])
        req = fetch_req.ShareFetchRequest(
            group_id=self.group, member_id=self.member_id, share_session_epoch=self.epoch, max_wait_ms=max_wait_ms,
            min_bytes=1, max_bytes=1 << 20, max_records=max_records, batch_size=max_records,
            topics=[fetch_req.FetchTopic(topic_id=t, partitions=ps) for t, ps in topics.items()])
        resp = self.client.request(SHARE_FETCH, 1, req)
        assert resp.error_code == 0, (resp.error_code, resp.error_message)
        self.epoch += 1
        return resp

    def acknowledge(self, acks):
        topics: dict = {}
        for (t, p), items in acks.items():
            topics.setdefault(t, []).append(ack_req.AcknowledgePartition(partition_index=p, acknowledgement_batches=[
                ack_req.AcknowledgementBatch(first_offset=f, last_offset=l, acknowledge_types=[k])
                for f, l, k in items]))
        resp = self.client.request(SHARE_ACKNOWLEDGE, 1, ack_req.ShareAcknowledgeRequest(
            group_id=self.group, member_id=self.member_id, share_session_epoch=self.epoch,
            topics=[ack_req.AcknowledgeTopic(topic_id=t, partitions=ps) for t, ps in topics.items()]))
        assert resp.error_code == 0, (resp.error_code, resp.error_message)
        self.epoch += 1
        return {(t.topic_id, p.partition_index): p.error_code for t in resp.responses for p in t.partitions}


def acquired(resp, tp) -> list[tuple[int, int]]:
    """[(offset, delivery count)] acquired for ``tp``, one per offset."""
    out = []
    for t in resp.responses:
        for p in t.partitions:
            if (t.topic_id, p.partition_index) == tp:
                assert p.error_code == 0, (p.error_code, p.error_message)
                out += [(o, a.delivery_count) for a in p.acquired_records
                        for o in range(a.first_offset, a.last_offset + 1)]
    return out


def partition_errors(resp) -> dict:
    return {(t.topic_id, p.partition_index): p.error_code for t in resp.responses for p in t.partitions}


def fetch_until(member: Member, tp, want: int, timeout_s: float = 20.0) -> list[tuple[int, int]]:
    """Fetch until ``want`` offsets were acquired in total (bounded); returns them all."""
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want:
        assert time.monotonic() < deadline, f"acquired only {got}"
        got += acquired(member.fetch([tp], max_wait_ms=500), tp)
    return got


def produce_values(client, topic: str, n: int, *, partition: int = 0) -> int:
    """Produce ``n`` records in one batch; returns its base offset."""
    resp = produce(client, topic, batch([f"v{i}".encode() for i in range(n)]), partition=partition)
    assert resp.error_code == 0, resp.error_code
    return resp.base_offset
