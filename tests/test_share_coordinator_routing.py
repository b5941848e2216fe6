"""Routing a share-partition to its __share_group_state partition, exactly as Kafka does."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.share.routing import (
    STATE_TOPIC_NUM_PARTITIONS_DEFAULT,
    java_string_hash,
    key_string,
    parse_key_string,
    partition_for,
    partition_for_key,
)

TOPIC_ID = uuid.UUID(bytes=bytes(range(16)))


def test_key_string_uses_kafkas_base64url_topic_id():
    assert key_string("grp", TOPIC_ID, 7) == "grp:AAECAwQFBgcICQoLDA0ODw:7"
    assert key_string("g", uuid.UUID(bytes=b"\xff" * 16), 0) == "g:_____________________w:0"


def test_java_string_hash_known_values():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    # Supplementary characters hash as their two UTF-16 surrogates.
    assert java_string_hash("\U0001F600") == 31 * 0xD83D + 0xDE00
    assert java_string_hash("polygenelubricants") == -(2**31)


def test_utils_abs_maps_int_min_to_zero():
    # abs(Integer.MIN_VALUE) overflows in Java; Kafka's Utils.abs returns 0 for it.
    assert partition_for_key("polygenelubricants", 50) == 0
    assert partition_for_key("polygenelubricants", 7) == 0


def test_partition_for_matches_the_formula():
    key = key_string("grp", TOPIC_ID, 7)
    assert partition_for("grp", TOPIC_ID, 7) == abs(java_string_hash(key)) % 50
    assert STATE_TOPIC_NUM_PARTITIONS_DEFAULT == 50
    with pytest.raises(ValueError):
        partition_for("grp", TOPIC_ID, 7, 0)


def _reference_hash(text: str) -> int:
    h = 0
    for unit in (int.from_bytes(text.encode("utf-16-be")[i:i + 2], "big")
                 for i in range(0, len(text.encode("utf-16-be")), 2)):
        h = (h * 31 + unit) % 2**32
    return h - 2**32 if h >= 2**31 else h


@given(st.text(max_size=40), st.uuids(), st.integers(0, 2**31 - 1), st.integers(1, 200))
def test_partition_in_range_and_key_round_trips(group, topic_id, partition, n):
    assert 0 <= partition_for(group or "g", topic_id, partition, n) < n
    key = key_string(group or "g", topic_id, partition)
    assert java_string_hash(key) == _reference_hash(key)
    if (group or "g").strip("".join(map(chr, range(0x21)))):
        assert parse_key_string(key) == (group or "g", topic_id, partition)
    else:  # SharePartitionKey.getInstance: a group id blank after String.trim is refused
        with pytest.raises(ValueError):
            parse_key_string(key)
