"""The code generator: committed output is fresh, every primitive works, records stay zero-copy."""

from __future__ import annotations

import importlib.util
import json
import struct
import sys
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.codegen.__main__ import check
from protocol.codegen.emit import emit_module
from protocol.codegen.schema import load, strip_comments
from protocol.primitives import DecodeError


def test_committed_code_matches_the_generator():
    assert check() == [], "run `python -m protocol.codegen` and commit the result"


def test_comment_stripping_keeps_slashes_inside_strings():
    text = '{"about": "see http://x // y", // trailing\n "a": 1} // end'
    assert json.loads(strip_comments(text)) == {"about": "see http://x // y", "a": 1}


SYNTHETIC = {
    "apiKey": 9999,
    "type": "response",
    "name": "SyntheticResponse",
    "validVersions": "0-2",
    "flexibleVersions": "1+",
    "fields": [
        {"name": "Small", "type": "uint16", "versions": "0+"},
        {"name": "Big", "type": "uint32", "versions": "0+"},
        {"name": "Ratio", "type": "float64", "versions": "0+"},
        {"name": "Flag", "type": "bool", "versions": "0+", "default": "true"},
        {"name": "Id", "type": "uuid", "versions": "0+"},
        {"name": "Raw", "type": "bytes", "versions": "0+", "nullableVersions": "0+"},
        {"name": "Name", "type": "string", "versions": "0+", "flexibleVersions": "none"},
        {"name": "Limit", "type": "int32", "versions": "2+", "default": "0x7fffffff"},
        {"name": "Ints", "type": "[]int64", "versions": "0+"},
        {"name": "Names", "type": "[]string", "versions": "0+", "nullableVersions": "1+"},
        {"name": "Maybe", "type": "Inner", "versions": "0+", "nullableVersions": "0+", "default": "null",
         "fields": [{"name": "X", "type": "int8", "versions": "0+"}]},
        {"name": "Items", "type": "[]Inner", "versions": "0+"},
        {"name": "Note", "type": "string", "versions": "1+", "nullableVersions": "1+", "default": "null",
         "taggedVersions": "1+", "tag": 0},
        {"name": "Leader", "type": "Epoch", "versions": "1+", "taggedVersions": "1+", "tag": 3,
         "fields": [{"name": "LeaderEpoch", "type": "int32", "versions": "0+", "default": "-1"}]},
        {"name": "Tagged", "type": "[]int32", "versions": "2+", "taggedVersions": "2+", "tag": 1},
        {"name": "Data", "type": "records", "versions": "0+", "nullableVersions": "0+"},
    ],
}


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    d = tmp_path_factory.mktemp("synthetic")
    path = d / "SyntheticResponse.json"
    path.write_text(json.dumps(SYNTHETIC))
    src = emit_module(load(path), "synthetic")
    mod_path = d / "synthetic_response.py"
    mod_path.write_text(src)
    spec = importlib.util.spec_from_file_location("synthetic_response", mod_path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["synthetic_response"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_defaults_follow_the_schema(synthetic):
    m = synthetic.SyntheticResponse()
    assert m.flag is True and m.limit == 0x7FFFFFFF and m.maybe is None and m.note is None
    assert m.leader.leader_epoch == -1 and m.ints == [] and m.items == [] and m.id == uuid.UUID(int=0)
    assert m.items is not synthetic.SyntheticResponse().items  # fresh list per instance


def test_exact_bytes_of_a_flexible_version(synthetic):
    S = synthetic
    m = S.SyntheticResponse(
        small=65535, big=2**32 - 1, ratio=1.5, flag=False, id=uuid.UUID(int=1), raw=None, name="ab",
        ints=[1], names=None, maybe=S.Inner(x=-1), items=[], note="hi", leader=S.Epoch(leader_epoch=7),
        data=b"\x01\x02",
    )
    expected = (
        struct.pack(">HId?", 65535, 2**32 - 1, 1.5, False)
        + uuid.UUID(int=1).bytes
        + b"\x00"  # null compact bytes
        + b"\x00\x02ab"  # flexibleVersions none: classic int16 string even in a flexible version
        + b"\x02" + struct.pack(">q", 1)  # compact array of one int64
        + b"\x00"  # null compact array
        + b"\x01" + b"\xff" + b"\x00"  # present nullable struct: marker, X, no tags
        + b"\x01"  # empty compact array
        + b"\x03\x01\x02"  # compact records
        + b"\x02"  # two tagged fields, ascending
        + b"\x00\x03\x03hi"  # tag 0: compact string "hi"
        + b"\x03\x05" + struct.pack(">i", 7) + b"\x00"  # tag 3: struct with its own empty tags
    )
    assert m.to_bytes(1) == expected
    assert S.SyntheticResponse.from_bytes(expected, 1) == m


def test_default_tagged_fields_are_not_written(synthetic):
    raw = synthetic.SyntheticResponse(name="").to_bytes(2)
    assert raw.endswith(b"\x00")  # empty tag section
    m = synthetic.SyntheticResponse(name="", tagged=[5, 6])
    assert synthetic.SyntheticResponse.from_bytes(m.to_bytes(2), 2).tagged == [5, 6]


def test_version_gating(synthetic):
    m = synthetic.SyntheticResponse(name="n", limit=5, note="dropped in v0")
    back = synthetic.SyntheticResponse.from_bytes(m.to_bytes(0), 0)
    assert back.limit == 0x7FFFFFFF and back.note is None and back.name == "n"


def test_records_are_zero_copy(synthetic):
    chunk1, chunk2 = memoryview(b"a" * 10), b"b" * 5
    parts = synthetic.SyntheticResponse(name="", data=[chunk1, chunk2]).encode(1)
    assert any(p is chunk1 for p in parts) and any(p is chunk2 for p in parts)
    joined = b"".join(parts)
    back = synthetic.SyntheticResponse.from_bytes(joined, 1)
    assert isinstance(back.data, memoryview) and bytes(back.data) == b"a" * 10 + b"b" * 5
    assert back.data.obj is not None  # a view into the frame, not a copy


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=80), version=st.integers(0, 2))
def test_random_bytes_raise_decode_error_only(synthetic, data, version):
    try:
        synthetic.SyntheticResponse.from_bytes(data, version)
    except DecodeError:
        pass


def test_forged_array_count_is_refused_without_allocating(synthetic):
    head = synthetic.SyntheticResponse(name="").to_bytes(0)
    prefix_len = 2 + 4 + 8 + 1 + 16 + 4 + 2  # fixed fields, null bytes, empty name
    forged = head[:prefix_len] + struct.pack(">i", 2**31 - 1) + head[prefix_len + 4:]
    with pytest.raises(DecodeError, match="exceeds"):
        synthetic.SyntheticResponse.from_bytes(forged, 0)


def test_request_header_v2_keeps_a_classic_client_id():
    from protocol.messages.request_header import RequestHeader

    h = RequestHeader(request_api_key=18, request_api_version=3, correlation_id=7, client_id="rdkafka")
    assert h.to_bytes(2) == struct.pack(">hhih", 18, 3, 7, 7) + b"rdkafka" + b"\x00"
    assert h.to_bytes(1) == struct.pack(">hhih", 18, 3, 7, 7) + b"rdkafka"


# (bytes, UTF-16 code units) as Java 17's new String(bytes, UTF_8) decodes them
_JAVA_UTF8 = [
    ("63616fe9", "00630061006ffffd"), ("eda080", "fffd"), ("eda041", "fffd0041"),
    ("41eda0", "0041fffd"), ("ededa0eef808", "fffdfffdfffdfffd0008"), ("80eda8", "fffdfffd"),
    ("41edb2e0f497f4", "0041fffdfffdfffdfffdfffd"), ("eda91542c0f3f8", "fffd00150042fffdfffdfffd"),
    ("f0908041", "fffd0041"), ("e18041", "fffd0041"), ("c0af", "fffdfffd"),
    ("f4908080", "fffdfffdfffdfffd"), ("f09f98", "fffd"), ("e282ac", "20ac"),
]


@pytest.mark.parametrize("raw, utf16", _JAVA_UTF8)
def test_malformed_utf8_decodes_as_java_does(raw, utf16):
    """Java replaces an encoded surrogate (ED A0-BF ..) as one sequence where Python's own
    "replace" gives a U+FFFD per byte; a group id must decode, and so hash to a partition,
    exactly as on Kafka."""
    from protocol.primitives import r_string

    data = bytes.fromhex(raw)
    frame = b"\xed" + struct.pack(">h", len(data)) + data  # read from a memoryview, as requests are
    value, pos = r_string(memoryview(frame), 1)
    assert (value.encode("utf-16-be").hex(), pos) == (utf16, 3 + len(data))


@pytest.mark.parametrize("reader, width", [("r_nstring", 2), ("r_nbytes", 4), ("r_nrecords", 4), ("r_nlen", 4)])
@pytest.mark.parametrize("length", [-1, -2, -(2**15)])
def test_any_negative_length_of_a_nullable_field_is_null(reader, width, length):
    """Kafka's generated readers test ``length < 0`` for null, so a client id (or any nullable
    string, bytes, records or array) of length -2 is null there, not a malformed request; the
    non-nullable readers refuse it, as Kafka's "non-nullable field ... was serialized as null"."""
    from protocol import primitives

    frame = memoryview(struct.pack(">h" if width == 2 else ">i", length) + b"rest")
    value, pos = getattr(primitives, reader)(frame, 0)
    assert (value, pos) == (-1 if reader == "r_nlen" else None, width)
    with pytest.raises(DecodeError):
        getattr(primitives, reader.replace("r_n", "r_"))(frame, 0)


@pytest.mark.parametrize("marker", [0xFF, 0x80])
def test_a_negative_nullable_struct_marker_is_null(marker):
    """Kafka reads a nullable struct's marker as ``if (readByte() < 0)`` null: any byte from 0x80."""
    from protocol.messages.describe_topic_partitions_request import DescribeTopicPartitionsRequest

    raw = bytearray(DescribeTopicPartitionsRequest(topics=[], response_partition_limit=5).to_bytes(0))
    assert raw[-2] == 0xFF
    raw[-2] = marker
    assert DescribeTopicPartitionsRequest.from_bytes(bytes(raw), 0).cursor is None


def test_api_versions_response_tagged_fields():
    from protocol.messages.api_versions_response import ApiVersionsResponse, ApiVersion, FinalizedFeatureKey

    r = ApiVersionsResponse(
        api_keys=[ApiVersion(api_key=0, min_version=3, max_version=11)],
        finalized_features_epoch=5,
        finalized_features=[FinalizedFeatureKey(name="share.version", max_version_level=1, min_version_level=1)],
    )
    back = ApiVersionsResponse.from_bytes(r.to_bytes(3), 3)
    assert back == r
    assert ApiVersionsResponse.from_bytes(r.to_bytes(2), 2).finalized_features == []
