"""Coordinator record serde: type/version prefixes, every record type round-trips, golden bytes.

kio (the peer codec used elsewhere in the suite) ships only Kafka's *message* schemas, none
of the coordinator record schemas, so the golden bytes below are derived by hand from
protocol/schemas/records/*.json instead of being cross-checked against kio.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.coordinator_records.offset_commit_key import OffsetCommitKey
from protocol.coordinator_records.offset_commit_value import OffsetCommitValue
from protocol.coordinator_records.share_snapshot_key import ShareSnapshotKey
from protocol.coordinator_records.share_snapshot_value import ShareSnapshotValue
from protocol.coordinator_records.share_snapshot_value import StateBatch as SnapBatch
from protocol.coordinator_records.share_update_key import ShareUpdateKey
from protocol.coordinator_records.share_update_value import ShareUpdateValue
from protocol.coordinator_records.share_update_value import StateBatch as UpdBatch
from protocol.coordinator_records.transaction_log_key import TransactionLogKey
from protocol.coordinator_serde import (
    CONSUMER_OFFSETS_TOPIC,
    SHARE_GROUP_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC,
    UnknownRecordTypeError,
    decode,
    encode_key,
    encode_value,
    record_types,
)
from protocol.primitives import DecodeError
from tests.protocol_strategies import message_strategy, schema

TOPICS = [SHARE_GROUP_STATE_TOPIC, CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC]
# Every (topic, record type) a coordinator writes; type 0 of __consumer_offsets is the
# decode-only legacy offset commit.
CASES = [(t, rt) for t in TOPICS for rt in sorted(record_types(t))]
TOPIC_ID = uuid.UUID(bytes=bytes(range(16)))
UUID_HEX = bytes(range(16)).hex()


def _strategy(cls, version):
    return message_strategy(schema("records", cls.__name__), version, package="coordinator_records")


@st.composite
def _records(draw, topic, record_type):
    key_cls, value_cls = record_types(topic)[record_type]
    key = draw(_strategy(key_cls, 0))
    lo, hi = value_cls.VALID_VERSIONS
    version = draw(st.integers(lo, hi))
    value = draw(st.one_of(st.none(), _strategy(value_cls, version)))
    return key, value, version


def test_every_generated_coordinator_record_has_a_topic():
    """A coordinator schema added to protocol/coordinator_records must get a serde table entry."""
    import pkgutil
    from importlib import import_module

    import protocol.coordinator_records as package
    from protocol.message import Message

    generated = set()
    for info in pkgutil.iter_modules(package.__path__):
        module = import_module(f"{package.__name__}.{info.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Message) and obj.API_KEY is not None:
                generated.add(obj)
    covered = {cls for t in TOPICS for pair in record_types(t).values() for cls in pair}
    assert len(generated) == 24   # 12 key/value pairs
    assert generated == covered


@pytest.mark.parametrize("topic,record_type", CASES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_round_trip_every_record_type(topic, record_type, data):
    key, value, version = data.draw(_records(topic, record_type))
    kb = encode_key(key)
    vb = encode_value(value, version)
    assert kb[:2] == key.API_KEY.to_bytes(2, "big", signed=True)
    if value is None:
        assert vb is None
    else:
        assert vb[:2] == version.to_bytes(2, "big")
    if record_type == 0 and topic == CONSUMER_OFFSETS_TOPIC:
        kb = b"\x00\x00" + kb[2:]   # what a pre-0.10 broker wrote
    got_key, got_value = decode(kb, vb, topic)
    assert got_key == key
    assert got_value == value


def test_same_type_number_means_different_records_per_topic():
    key = ShareUpdateKey("g", TOPIC_ID, 3)
    kb = encode_key(key)
    assert decode(kb, None, SHARE_GROUP_STATE_TOPIC)[0] == key
    # Type 1 on __consumer_offsets is an offset commit: the same bytes do not parse as one.
    with pytest.raises(DecodeError):
        decode(kb, None, CONSUMER_OFFSETS_TOPIC)
    offset_key = OffsetCommitKey("g", "t", 3)
    assert decode(encode_key(offset_key), None, CONSUMER_OFFSETS_TOPIC)[0] == offset_key
    txn_key = TransactionLogKey("txn")
    assert decode(encode_key(txn_key), None, TRANSACTION_STATE_TOPIC)[0] == txn_key


def test_share_snapshot_golden_bytes():
    key = ShareSnapshotKey("grp", TOPIC_ID, 5)
    value = ShareSnapshotValue(
        snapshot_epoch=1, state_epoch=2, leader_epoch=3, start_offset=100, delivery_complete_count=7,
        create_timestamp=0x0102, write_timestamp=0x0203,
        state_batches=[SnapBatch(100, 109, 2, 1), SnapBatch(110, 110, 0, 3)])
    key_hex = (
        "0000"                      # record type 0 = ShareSnapshot
        "0003" "677270"             # GroupId: int16 length + "grp" (keys are not flexible)
        + UUID_HEX +                # TopicId
        "00000005"                  # Partition
    )
    value_hex = (
        "0000"                      # value version 0
        "00000001"                  # SnapshotEpoch
        "00000002"                  # StateEpoch
        "00000003"                  # LeaderEpoch
        "0000000000000064"          # StartOffset 100
        # (DeliveryCompleteCount is tagged: it goes in the tag section at the end)
        "0000000000000102"          # CreateTimestamp
        "0000000000000203"          # WriteTimestamp
        "03"                        # StateBatches: compact array, 2 + 1
        "0000000000000064" "000000000000006d" "02" "0001" "00"   # 100..109 ACKNOWLEDGED x1, no tags
        "000000000000006e" "000000000000006e" "00" "0003" "00"   # 110..110 AVAILABLE x3, no tags
        "01" "00" "04" "00000007"   # one tagged field: tag 0, 4 bytes, DeliveryCompleteCount 7
    )
    assert encode_key(key).hex() == key_hex
    assert encode_value(value).hex() == value_hex
    assert decode(bytes.fromhex(key_hex), bytes.fromhex(value_hex)) == (key, value)


def test_share_update_golden_bytes_and_default_count_is_not_written():
    key = ShareUpdateKey("grp", TOPIC_ID, 5)
    value = ShareUpdateValue(snapshot_epoch=1, leader_epoch=3, start_offset=-1,
                             state_batches=[UpdBatch(110, 110, 2, 2)])
    assert value.delivery_complete_count == -1
    key_hex = "0001" "0003" "677270" + UUID_HEX + "00000005"
    value_hex = (
        "0000"                      # value version 0
        "00000001"                  # SnapshotEpoch
        "00000003"                  # LeaderEpoch
        "ffffffffffffffff"          # StartOffset -1: not being updated
        "02"                        # one batch
        "000000000000006e" "000000000000006e" "02" "0002" "00"
        "00"                        # no tagged fields: DeliveryCompleteCount is its default -1
    )
    assert encode_key(key).hex() == key_hex
    assert encode_value(value).hex() == value_hex
    assert decode(bytes.fromhex(key_hex), bytes.fromhex(value_hex)) == (key, value)


def test_tombstone_is_a_null_value():
    key = ShareSnapshotKey("grp", TOPIC_ID, 0)
    assert encode_value(None) is None
    assert decode(encode_key(key), None) == (key, None)


def test_unknown_record_type_is_a_clear_error():
    kb = b"\x00\x07" + ShareSnapshotKey("g", TOPIC_ID, 0).to_bytes(0)
    with pytest.raises(UnknownRecordTypeError, match="record type 7 on __share_group_state") as info:
        decode(kb, None)
    assert info.value.record_type == 7
    assert isinstance(info.value, DecodeError)
    with pytest.raises(ValueError, match="not a coordinator topic"):
        decode(kb, None, "orders")


def test_bad_versions_and_lengths():
    kb = encode_key(ShareSnapshotKey("g", TOPIC_ID, 0))
    good = encode_value(ShareSnapshotValue())
    with pytest.raises(DecodeError, match="no version 1"):
        decode(kb, b"\x00\x01" + good[2:])
    with pytest.raises(DecodeError):
        decode(kb[:1], None)
    with pytest.raises(DecodeError):
        decode(kb, b"\x00")
    with pytest.raises(DecodeError):
        decode(kb[:-1], None)           # truncated key struct
    with pytest.raises(DecodeError):
        decode(kb + b"\x00", None)      # trailing garbage
    with pytest.raises(ValueError, match="no version 4"):
        encode_value(ShareSnapshotValue(), 4)
    with pytest.raises(ValueError, match="not a coordinator record"):
        encode_key(ShareSnapshotValue())
    with pytest.raises(ValueError, match="not a coordinator record"):
        encode_value(ShareSnapshotKey())


def test_default_value_versions():
    assert encode_value(ShareSnapshotValue())[:2] == b"\x00\x00"
    assert encode_value(ShareUpdateValue())[:2] == b"\x00\x00"
    assert encode_value(OffsetCommitValue())[:2] == b"\x00\x03"
    assert encode_value(OffsetCommitValue(expire_timestamp=5), 1)[:2] == b"\x00\x01"
