"""The five share-state RPCs on the wire (InitializeShareGroupState 83, ReadShareGroupState 84,
WriteShareGroupState 85 v0-1, DeleteShareGroupState 86, ReadShareGroupStateSummary 87 v0-1),
answered by a subprocess broker's share coordinator, with Kafka 4.2's error codes and messages.

Not covered here: COORDINATOR_LOAD_IN_PROGRESS (a partition still loading; see
test_share_state_loader and the restart tests) and COORDINATOR_NOT_AVAILABLE before start-up.
NOT_COORDINATOR needs a state partition the broker does not coordinate: one broker coordinates
every partition, so it only happens when a partition could not be loaded (the last test).
"""

from __future__ import annotations

import struct
import time
import uuid

import pytest

from protocol.coordinator_serde import decode, encode_key, encode_value
from protocol.messages import write_share_group_state_request as wreq
from protocol.messages.api_versions_request import ApiVersionsRequest
from protocol.messages.delete_topics_request import (
    DeleteTopicsRequest,
    DeleteTopicState,
)
from protocol.records import check_batch, iter_records
from tests.raw_client import RawClient
from tests.test_produce_support import batch, fetch, list_offset, produce, raw
from tests.test_share_state_support import (
    ACKNOWLEDGED,
    AVAILABLE,
    DELETE,
    INITIALIZE,
    READ,
    STATE_TOPIC,
    SUMMARY,
    WRITE,
    batches_of,
    by_partition,
    create_topic,
    delete_state,
    initialize,
    only,
    read_state,
    state_partition,
    state_records,
    summary,
    unique,
    write_state,
)

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_COORDINATOR = 16
INVALID_REQUEST = 42
FENCED_LEADER_EPOCH = 74
FENCED_STATE_EPOCH = 124

READ_UNINITIALIZED = "Read operation on uninitialized share partition not allowed."
WRITE_UNINITIALIZED = "Write operation on uninitialized share partition not allowed."
NEGATIVE_PARTITION = "The partition id cannot be a negative number."
FENCED_LEADER = "The leader epoch in the request is older than the epoch on the broker."
FENCED_STATE = "The share coordinator rejected the request because the share-group state epoch did not match."
UNKNOWN_TP = "This server does not host this topic-partition."


@pytest.fixture
def client(broker):
    with RawClient(broker.bootstrap) as c:
        yield c


@pytest.fixture
def topic(client, topic_name):
    return create_topic(client, topic_name, partitions=4)


def test_api_versions_advertise_the_state_rpcs(client):
    resp = client.request(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert [versions[k] for k in (INITIALIZE, READ, WRITE, DELETE, SUMMARY)] == [(0, 0), (0, 0), (0, 1), (0, 0), (0, 1)]


def test_initialize_write_read_summary_delete(client, topic):
    g = unique("g")
    assert (only(initialize(client, g, topic, 0, state_epoch=1, start_offset=10)).error_code) == NONE
    p = only(read_state(client, g, topic, 0))
    assert (p.error_code, p.error_message, p.state_epoch, p.start_offset, batches_of(p)) == (NONE, None, 1, 10, [])
    s = only(summary(client, g, [(topic, 0)]))
    assert (s.state_epoch, s.leader_epoch, s.start_offset, s.delivery_complete_count) == (1, 0, 10, 0)

    w = write_state(client, g, topic, 0, state_epoch=1, start_offset=12, delivery_complete_count=2,
                    batches=[(12, 14, AVAILABLE, 1), (15, 16, ACKNOWLEDGED, 1)])
    assert (only(w).error_code, only(w).error_message) == (NONE, None)
    p = only(read_state(client, g, topic, 0))
    assert (p.state_epoch, p.start_offset, batches_of(p)) == (1, 12, [(12, 14, AVAILABLE, 1), (15, 16, ACKNOWLEDGED, 1)])
    # -1 leaves the start offset as it is; the batches are combined with the stored ones.
    write_state(client, g, topic, 0, state_epoch=1, start_offset=-1, delivery_complete_count=3,
                batches=[(14, 14, ACKNOWLEDGED, 2)])
    p = only(read_state(client, g, topic, 0))
    assert (p.start_offset, batches_of(p)) == (
        12, [(12, 13, AVAILABLE, 1), (14, 14, ACKNOWLEDGED, 2), (15, 16, ACKNOWLEDGED, 1)])
    s = only(summary(client, g, [(topic, 0)]))
    assert (s.start_offset, s.delivery_complete_count) == (12, 3)

    assert only(delete_state(client, g, topic, 0)).error_code == NONE
    p = only(read_state(client, g, topic, 0))
    assert (p.error_code, p.error_message) == (INVALID_REQUEST, READ_UNINITIALIZED)


def test_write_v0_leaves_the_delivery_complete_count_unknown_and_summary_v0_has_none(client, topic):
    g = unique("g")
    initialize(client, g, topic, 1, start_offset=0)
    assert only(write_state(client, g, topic, 1, version=0, start_offset=5)).error_code == NONE
    s = only(summary(client, g, [(topic, 1)]))
    assert (s.start_offset, s.delivery_complete_count) == (5, -1)
    write_state(client, g, topic, 1, start_offset=6, delivery_complete_count=4)
    assert only(summary(client, g, [(topic, 1)])).delivery_complete_count == 4
    s0 = only(summary(client, g, [(topic, 1)], version=0))
    assert (s0.start_offset, s0.delivery_complete_count) == (6, -1)  # the field is not in v0


def test_state_never_initialised(client, topic):
    g = unique("g")
    p = only(read_state(client, g, topic, 2))
    assert (p.error_code, p.error_message, p.state_batches) == (INVALID_REQUEST, READ_UNINITIALIZED, [])
    w = only(write_state(client, g, topic, 2, start_offset=3))
    assert (w.error_code, w.error_message) == (INVALID_REQUEST, WRITE_UNINITIALIZED)
    s = only(summary(client, g, [(topic, 2)]))
    assert (s.error_code, s.state_epoch, s.leader_epoch, s.start_offset, s.delivery_complete_count) == (0, 0, 0, -1, -1)
    d = only(delete_state(client, g, topic, 2))
    assert (d.error_code, d.error_message) == (NONE, None)


def test_state_epoch_fences(client, topic):
    g = unique("g")
    initialize(client, g, topic, 0, state_epoch=3, start_offset=0)
    i = only(initialize(client, g, topic, 0, state_epoch=2, start_offset=0))
    assert (i.error_code, i.error_message) == (FENCED_STATE_EPOCH, FENCED_STATE)
    w = only(write_state(client, g, topic, 0, state_epoch=2, start_offset=4))
    assert (w.error_code, w.error_message) == (FENCED_STATE_EPOCH, FENCED_STATE)
    assert only(write_state(client, g, topic, 0, state_epoch=-1, start_offset=4)).error_code == NONE  # -1 skips it
    assert only(write_state(client, g, topic, 0, state_epoch=4, start_offset=5)).error_code == NONE
    assert only(read_state(client, g, topic, 0)).state_epoch == 3  # only an initialisation sets it (KAFKA-19456)
    assert only(initialize(client, g, topic, 0, state_epoch=4, start_offset=1)).error_code == NONE
    assert only(read_state(client, g, topic, 0)).state_epoch == 4


def test_leader_epoch_fences(client, topic):
    g = unique("g")
    initialize(client, g, topic, 0, start_offset=0)
    assert only(read_state(client, g, topic, 0, leader_epoch=5)).error_code == NONE  # records epoch 5
    r = only(read_state(client, g, topic, 0, leader_epoch=4))
    assert (r.error_code, r.error_message) == (FENCED_LEADER_EPOCH, FENCED_LEADER)
    w = only(write_state(client, g, topic, 0, leader_epoch=4, start_offset=1))
    assert (w.error_code, w.error_message) == (FENCED_LEADER_EPOCH, FENCED_LEADER)
    assert only(write_state(client, g, topic, 0, leader_epoch=5, start_offset=1)).error_code == NONE
    assert only(summary(client, g, [(topic, 0)])).leader_epoch == 5


def test_malformed_partitions_and_batches(client, topic):
    g = unique("g")
    i = only(initialize(client, g, topic, -1))
    assert (i.error_code, i.error_message) == (INVALID_REQUEST, NEGATIVE_PARTITION)
    for resp in (read_state(client, g, topic, -1), write_state(client, g, topic, -1),
                 delete_state(client, g, topic, -1), summary(client, g, [(topic, -1)])):
        p = only(resp)
        assert (p.error_code, p.error_message) == (INVALID_REQUEST, NEGATIVE_PARTITION)
    initialize(client, g, topic, 0, start_offset=0)
    w = only(write_state(client, g, topic, 0, batches=[(9, 3, AVAILABLE, 1)]))
    assert w.error_code == INVALID_REQUEST
    assert batches_of(only(read_state(client, g, topic, 0))) == []


@pytest.mark.parametrize("api, version", [(INITIALIZE, 0), (READ, 0), (WRITE, 1), (DELETE, 0), (SUMMARY, 1)])
def test_empty_group_topics_or_partitions_answer_an_empty_response(client, topic, api, version):
    from protocol import messages

    req_mod, req_cls, _, _ = messages.APIS[api]
    module = __import__(f"protocol.messages.{req_mod}", fromlist=["x"])
    request_class = getattr(module, req_cls)
    topic_class = next(v for k, v in vars(module).items() if k.endswith("Data") and k != "PartitionData")
    partition = module.PartitionData(partition=0)
    for req in (request_class(group_id="", topics=[topic_class(topic_id=topic, partitions=[partition])]),
                request_class(group_id="g", topics=[])):
        assert client.request(api, version, req).results == []
    # A topic without partitions beside another: Kafka's initializeState looks only for topics,
    # so the other is initialised; the other APIs answer nothing.
    req = request_class(group_id=unique("g"), topics=[topic_class(topic_id=topic, partitions=[partition]),
                                                      topic_class(topic_id=uuid.uuid4(), partitions=[])])
    results = client.request(api, version, req).results
    if api == INITIALIZE:
        assert [(r.topic_id, [(p.partition, p.error_code) for p in r.partitions]) for r in results] == \
            [(topic, [(0, NONE)])]
    else:
        assert results == []


def test_unknown_topics_and_partitions(client, topic):
    """Unknown topic ids and partitions are UNKNOWN_TOPIC_OR_PARTITION; a read or write of a
    key without state is INVALID_REQUEST first (Kafka checks that before the topic)."""
    g = unique("g")
    ghost = uuid.uuid4()
    for resp in (initialize(client, g, ghost, 0), initialize(client, g, topic, 4),
                 delete_state(client, g, ghost, 0), summary(client, g, [(topic, 4)])):
        p = only(resp)
        assert (p.error_code, p.error_message) == (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TP)
    for resp in (read_state(client, g, ghost, 0), write_state(client, g, topic, 9)):
        assert only(resp).error_code == INVALID_REQUEST


def test_deleting_a_topic_tombstones_its_share_state(client, topic_name):
    g = unique("g")
    t = create_topic(client, topic_name, partitions=2)
    for p in range(2):
        initialize(client, g, t, p, start_offset=p)
    resp = client.request(20, 6, DeleteTopicsRequest(topics=[DeleteTopicState(name=topic_name)], timeout_ms=5000))
    assert resp.responses[0].error_code == NONE
    for p in range(2):
        sp = state_partition(g, t, p)
        deadline = time.monotonic() + 10
        while True:  # the tombstone is written right after the deletion, in the background
            last = [(k, v) for _, k, v in state_records(client, sp) if k.topic_id == t and k.partition == p]
            if last and last[-1][1] is None:
                break
            assert time.monotonic() < deadline, last
        assert only(read_state(client, g, t, p)).error_code == INVALID_REQUEST  # no state any more


def test_one_request_for_keys_of_many_state_partitions(client, topic):
    g = unique("g")
    other = create_topic(client, unique("t"), partitions=3)
    pairs = [(topic, p) for p in range(4)] + [(other, p) for p in range(3)]
    assert len({state_partition(g, t, p) for t, p in pairs}) > 1
    for t, p in pairs:
        initialize(client, g, t, p, state_epoch=1, start_offset=p)
    resp = summary(client, g, pairs)
    assert [r.topic_id for r in resp.results] == [topic, other]
    got = {tp: (s.error_code, s.start_offset) for tp, s in by_partition(resp).items()}
    assert got == {(t, p): (NONE, p) for t, p in pairs}
    resp = delete_state(client, g, topic, [0, 1, 2, 3])
    assert sorted(p.partition for p in resp.results[0].partitions) == [0, 1, 2, 3]
    assert {s.start_offset for (t, _), s in by_partition(summary(client, g, pairs)).items() if t == topic} == {-1}


def test_the_state_log_holds_kafkas_records_byte_for_byte(client, topic):
    """What the coordinator wrote, read back through Fetch: one batch per request part, built
    as Kafka's coordinator runtime builds them, holding ShareSnapshot / ShareUpdate records
    (and a tombstone) that our codec decodes and re-encodes to the very same bytes."""
    g = unique("g")
    sp = state_partition(g, topic, 3)
    start = list_offset(client, STATE_TOPIC, -1, partition=sp).offset  # the log end before these writes
    initialize(client, g, topic, 3, state_epoch=2, start_offset=7)
    write_state(client, g, topic, 3, state_epoch=2, start_offset=8, delivery_complete_count=1,
                batches=[(8, 9, ACKNOWLEDGED, 1)])
    delete_state(client, g, topic, 3)
    data = raw(fetch(client, STATE_TOPIC, start, partition=sp).records)
    kinds = []
    pos = 0
    while pos < len(data):
        h = check_batch(data, pos)
        assert (h.producer_id, h.producer_epoch, h.base_sequence, h.attributes, h.partition_leader_epoch) == (
            -1, -1, 0, 0, 0)
        for r in iter_records(data, pos):
            assert r.timestamp == h.max_timestamp
            key, value = decode(r.key, r.value)
            if getattr(key, "group_id", None) != g:
                continue
            assert encode_key(key) == bytes(r.key)
            assert (encode_value(value) if value is not None else None) == (
                bytes(r.value) if r.value is not None else None)
            kinds.append((type(key).__name__, None if value is None else type(value).__name__))
        pos += h.size
    assert kinds == [("ShareSnapshotKey", "ShareSnapshotValue"), ("ShareUpdateKey", "ShareUpdateValue"),
                     ("ShareSnapshotKey", None)]


def test_a_garbled_state_request_closes_only_that_connection(broker, client, topic):
    body = wreq.WriteShareGroupStateRequest(group_id="g", topics=[wreq.WriteStateData(
        topic_id=topic, partitions=[wreq.PartitionData(partition=0)])]).to_bytes(1)
    with RawClient(broker.bootstrap) as bad:
        frame = bad.frame(WRITE, 1, wreq.WriteShareGroupStateRequest(group_id="g"))
        header_len = len(frame) - 4 - len(wreq.WriteShareGroupStateRequest(group_id="g").to_bytes(1))
        torn = frame[4:4 + header_len] + body[:len(body) // 2]
        bad.send_raw(struct.pack(">i", len(torn)) + torn)
        assert bad.is_closed_by_broker()
    assert only(summary(client, unique("g"), [(topic, 0)])).error_code == NONE


@pytest.mark.needs_private_broker
def test_a_partition_that_cannot_be_loaded_is_not_coordinated(broker_factory):
    """A record the share coordinator cannot read (written to the state topic by the admin
    client, which Kafka lets write internal topics) fails its partition's load after a
    restart: its keys answer NOT_COORDINATOR, every other partition serves as before."""
    b = broker_factory()
    with RawClient(b.bootstrap) as c:
        t = create_topic(c, "t", partitions=8)
        g = "g"
        assert len({state_partition(g, t, p) for p in range(8)}) > 1
        for p in range(8):
            initialize(c, g, t, p, start_offset=p)
        bad_sp = state_partition(g, t, 0)
    with RawClient(b.bootstrap, client_id="__admin_client") as admin:
        r = produce(admin, STATE_TOPIC, batch([b"\x00\x00"], keys=[b"\x00\x00\x00\x09short"]), partition=bad_sp, acks=1)
        assert r.error_code == NONE
    b.restart()
    with RawClient(b.bootstrap) as c:
        resp = by_partition(summary(c, g, [(t, p) for p in range(8)]))
        for p in range(8):
            s = resp[(t, p)]
            if state_partition(g, t, p) == bad_sp:
                assert (s.error_code, s.error_message) == (
                    NOT_COORDINATOR, "Unable to read share group state summary: This is not the correct coordinator.")
            else:
                assert (s.error_code, s.start_offset) == (NONE, p)
        w = only(write_state(c, g, t, 0, start_offset=5))
        assert (w.error_code, w.error_message) == (
            NOT_COORDINATOR, "Unable to write share group state: This is not the correct coordinator.")
    assert f"cannot load {STATE_TOPIC}-{bad_sp}" in b.log()
