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

from protocol.primitives import DecodeError
from tests.protocol_strategies import SCHEMAS, message_strategy, module_for, schema

CASES = []
for path in sorted((SCHEMAS / "message").glob("*.json")):
    s = schema("message", path.stem)
    if s.kind not in ("request", "response"):
        continue
    api = s.module.rsplit("_", 1)[0]
    for v in range(s.valid.lo, s.valid.hi + 1):
        try:
            kio_mod = import_module(f"kio.schema.{api}.v{v}.{s.kind}")
        except ModuleNotFoundError:
            continue
        CASES.append(pytest.param(path.stem, v, kio_mod, id=f"{path.stem}-v{v}"))

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


SETTINGS = settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


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


@pytest.mark.parametrize("stem,version,kio_mod", CASES)
@SETTINGS
@given(data=st.data())
def test_ours_to_kio(stem, version, kio_mod, data):
    s = schema("message", stem)
    msg = data.draw(message_strategy(s, version, overrides=kio_overrides(kio_mod)))
    ours = msg.to_bytes(version)
    cls = kio_class(kio_mod, s.name)
    theirs = kio_encode(cls, kio_decode(cls, ours))
    assert theirs == ours
    back = type(msg).from_bytes(ours, version)
    assert back == msg


@pytest.mark.parametrize("stem,version,kio_mod", CASES)
@SETTINGS
@given(data=st.data())
def test_kio_to_ours(stem, version, kio_mod, data):
    s = schema("message", stem)
    cls = kio_class(kio_mod, s.name)
    kmsg = data.draw(st.from_type(cls))
    theirs = kio_encode(cls, kmsg)
    ours_cls = getattr(module_for(s), s.name)
    msg = ours_cls.from_bytes(theirs, version)
    assert msg.to_bytes(version) == theirs


def test_every_schema_version_has_a_kio_peer_or_is_known_missing():
    """kio lags Kafka trunk by a version here and there; make the gap visible, not silent."""
    covered = {(c.values[0], c.values[1]) for c in CASES}
    missing = []
    for path in sorted((SCHEMAS / "message").glob("*.json")):
        s = schema("message", path.stem)
        if s.kind in ("request", "response"):
            missing += [f"{path.stem} v{v}" for v in range(s.valid.lo, s.valid.hi + 1) if (path.stem, v) not in covered]
    assert len(covered) > 500
    assert len(missing) < 40, missing


def test_truncated_input_raises_decode_error_only():
    from protocol.messages.metadata_response import MetadataResponse, MetadataResponseTopic

    msg = MetadataResponse(topics=[MetadataResponseTopic(name="t", partitions=[])])
    raw = msg.to_bytes(12)
    for cut in range(len(raw)):
        with pytest.raises(DecodeError):
            MetadataResponse.from_bytes(raw[:cut], 12)
