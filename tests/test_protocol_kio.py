"""Our generated codecs against kio, an independent implementation of the Kafka protocol.

Forward: random messages from our schema model, encoded by us, must decode with kio and
re-encode to the same bytes. Reverse: random kio messages, encoded by kio, must decode with
us and re-encode to the same bytes. Together they pin both directions byte for byte.
"""

from __future__ import annotations

import io
from importlib import import_module

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from broker.handlers import REGISTRY
from protocol import messages
from protocol.primitives import DecodeError
from tests.protocol_strategies import SCHEMAS, message_strategy, module_for, schema

def _case(stem: str, kind: str, v: int):
    api = schema("message", stem).module.rsplit("_", 1)[0]
    try:
        return import_module(f"kio.schema.{api}.v{v}.{kind}")
    except ModuleNotFoundError:
        return None


# Every API version the broker advertises, request and response: the contract with clients.
ADVERTISED = []
MISSING_IN_KIO = []
for h in REGISTRY.values():
    req_mod, req_cls, resp_mod, resp_cls = messages.APIS[h.api_key]
    for stem, kind in ((req_cls, "request"), (resp_cls, "response")):
        for v in range(h.min_version, h.max_version + 1):
            kio_mod = _case(stem, kind, v)
            if kio_mod is None:
                MISSING_IN_KIO.append(f"{stem} v{v}")
            else:
                ADVERTISED.append(pytest.param(stem, v, kio_mod, id=f"{stem}-v{v}"))

# Every other schema version, for a cheap sweep of the generator itself.
OTHERS = []
_advertised = {(p.values[0], p.values[1]) for p in ADVERTISED}
for path in sorted((SCHEMAS / "message").glob("*.json")):
    s = schema("message", path.stem)
    if s.kind in ("request", "response"):
        for v in range(s.valid.lo, s.valid.hi + 1):
            kio_mod = _case(path.stem, s.kind, v)
            if kio_mod is not None and (path.stem, v) not in _advertised:
                OTHERS.append(pytest.param(path.stem, v, kio_mod, id=f"{path.stem}-v{v}"))

st.register_type_strategy(Records, st.binary(max_size=24).map(Records))

# kio turns some integer fields into datetimes and timedeltas, whose ranges are narrower
# than the wire type's; keep our random values inside them for the forward direction.
_KIO_DOMAINS = {
    "datetime_i64": st.integers(0, 2**41),
    "timedelta_i64": st.integers(-(2**46), 2**46),
    "timedelta_i32": st.integers(-(2**31), 2**31 - 1),
}


def kio_overrides(kio_mod) -> dict:
    out = {}
    for obj in vars(kio_mod).values():
        for f in getattr(obj, "__dataclass_fields__", {}).values():
            domain = _KIO_DOMAINS.get(f.metadata.get("kafka_type"))
            if domain is not None:
                out[f.name] = out[f.name + "_ms"] = domain
    return out


_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large]
SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=_HEALTH)
SWEEP = settings(max_examples=2, deadline=None, suppress_health_check=_HEALTH)


def kio_class(kio_mod, name):
    return getattr(kio_mod, name)


def kio_encode(cls, obj) -> bytes:
    out = io.BytesIO()
    entity_writer(cls)(out, obj)
    return out.getvalue()


def kio_decode(cls, data: bytes):
    obj, size = entity_reader(cls)(data, 0)
    assert size == len(data)
    return obj


def ours_to_kio(stem, version, kio_mod, data):
    s = schema("message", stem)
    msg = data.draw(message_strategy(s, version, overrides=kio_overrides(kio_mod)))
    ours = msg.to_bytes(version)
    cls = kio_class(kio_mod, s.name)
    theirs = kio_encode(cls, kio_decode(cls, ours))
    assert theirs == ours
    back = type(msg).from_bytes(ours, version)
    assert back == msg


def kio_to_ours(stem, version, kio_mod, data):
    s = schema("message", stem)
    cls = kio_class(kio_mod, s.name)
    kmsg = data.draw(st.from_type(cls))
    theirs = kio_encode(cls, kmsg)
    ours_cls = getattr(module_for(s), s.name)
    msg = ours_cls.from_bytes(theirs, version)
    assert msg.to_bytes(version) == theirs


@pytest.mark.parametrize("stem,version,kio_mod", ADVERTISED)
@SETTINGS
@given(data=st.data())
def test_advertised_ours_to_kio(stem, version, kio_mod, data):
    ours_to_kio(stem, version, kio_mod, data)


@pytest.mark.parametrize("stem,version,kio_mod", ADVERTISED)
@SETTINGS
@given(data=st.data())
def test_advertised_kio_to_ours(stem, version, kio_mod, data):
    kio_to_ours(stem, version, kio_mod, data)


@pytest.mark.parametrize("stem,version,kio_mod", OTHERS)
@SWEEP
@given(data=st.data())
def test_other_versions_round_trip(stem, version, kio_mod, data):
    ours_to_kio(stem, version, kio_mod, data)
    kio_to_ours(stem, version, kio_mod, data)


def test_every_advertised_version_has_a_kio_peer():
    assert MISSING_IN_KIO == []
    assert len(ADVERTISED) > 100


def test_truncated_input_raises_decode_error_only():
    from protocol.messages.metadata_response import MetadataResponse, MetadataResponseTopic

    msg = MetadataResponse(topics=[MetadataResponseTopic(name="t", partitions=[])])
    raw = msg.to_bytes(12)
    for cut in range(len(raw)):
        with pytest.raises(DecodeError):
            MetadataResponse.from_bytes(raw[:cut], 12)


def test_inline_compact_paths_truncated_and_long():
    """Generated decoders read one-byte compact lengths, one-element int arrays and empty tag
    sections inline: every cut still gives DecodeError, and lengths of two varint bytes, null
    arrays and tagged fields still take the checked path."""
    from uuid import UUID

    from protocol.messages.share_acknowledge_request import (
        AcknowledgementBatch, AcknowledgePartition, AcknowledgeTopic, ShareAcknowledgeRequest)

    def request(n_batches: int) -> ShareAcknowledgeRequest:
        batches = [AcknowledgementBatch(i * 10, i * 10 + (i % 3), [1] if i % 3 == 0 else [1] * (i % 3 + 1))
                   for i in range(n_batches)]
        return ShareAcknowledgeRequest(group_id="g", member_id="m", share_session_epoch=2, topics=[
            AcknowledgeTopic(UUID(int=7), [AcknowledgePartition(0, batches)])])

    raw = request(3).to_bytes(2)
    for cut in range(len(raw)):
        with pytest.raises(DecodeError):
            ShareAcknowledgeRequest.from_bytes(raw[:cut], 2)
    big = request(300)  # 301 needs two varint bytes
    assert ShareAcknowledgeRequest.from_bytes(big.to_bytes(2), 2) == big
    null_group = request(1)
    null_group.group_id = None
    assert ShareAcknowledgeRequest.from_bytes(null_group.to_bytes(2), 2) == null_group


def test_array_of_one_element_batches_read_at_once_and_its_fallbacks():
    """A ShareAcknowledge's batches, when every one has one type and no tags, are read in one
    pass; a batch of another layout anywhere (first, in the middle, last) sends the array
    through the per-batch path to the same result, and every cut still gives DecodeError."""
    import struct
    from uuid import UUID

    from protocol.messages.share_acknowledge_request import (
        AcknowledgementBatch, AcknowledgePartition, AcknowledgeTopic, ShareAcknowledgeRequest)

    def request(types_of: list[list[int]]) -> ShareAcknowledgeRequest:
        batches = [AcknowledgementBatch(i * 10, i * 10 + len(t) - 1, t) for i, t in enumerate(types_of)]
        return ShareAcknowledgeRequest(group_id="g", member_id="m", share_session_epoch=2, topics=[
            AcknowledgeTopic(UUID(int=7), [AcknowledgePartition(0, batches)])])

    for odd in (None, 0, 17, 39):
        types_of = [[i % 4] for i in range(40)]
        if odd is not None:
            types_of[odd] = [1, 2]
        req = request(types_of)
        assert ShareAcknowledgeRequest.from_bytes(req.to_bytes(2), 2) == req
    req = request([[1]] * 40)
    raw = bytes(req.to_bytes(2))
    for cut in range(len(raw)):
        with pytest.raises(DecodeError):
            ShareAcknowledgeRequest.from_bytes(raw[:cut], 2)
    for i in (0, 17, 39):  # an unknown tagged field in one batch
        one = struct.pack(">qq", i * 10, i * 10) + b"\x02\x01"
        tagged = raw.replace(one + b"\x00", one + b"\x01\x07\x00")
        assert len(tagged) == len(raw) + 2
        assert ShareAcknowledgeRequest.from_bytes(tagged, 2) == req


def test_one_element_array_fast_path_and_its_fallbacks():
    """An AcknowledgementBatch with one type and no tags is read in one unpack; tags, other
    counts and a buffer too short for that unpack take the general path to the same result."""
    import struct

    from protocol.messages.share_acknowledge_request import _d_AcknowledgementBatch_0 as decode

    head = struct.pack(">qq", 5, 6)
    cases = {
        head + b"\x02\x01\x00": [1],  # one type, no tags: the fast path
        head + b"\x02\x03\x01\x00\x01\x07": [3],  # an unknown tagged field
        head + b"\x03\x01\x02\x00": [1, 2],  # a type per offset
        head + b"\x01\x00": [],  # none (18 bytes: shorter than the fast path reads)
    }
    for raw, types in cases.items():
        batch, pos = decode(memoryview(raw), 0)
        assert (batch.first_offset, batch.last_offset, batch.acknowledge_types, pos) == (5, 6, types, len(raw))
