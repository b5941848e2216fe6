"""Hypothesis strategies for generated messages, built from the same schema model as the codegen.

Only fields present in the requested version get random values; the rest keep their defaults,
which is exactly what a decoder of that version produces.
"""

from __future__ import annotations

import functools
from importlib import import_module
from pathlib import Path

from hypothesis import strategies as st

from protocol.codegen.schema import Field, Schema, Struct, load
from protocol.errors import ErrorCode

SCHEMAS = Path(__file__).resolve().parent.parent / "protocol" / "schemas"

_INTS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


@functools.cache
def schema(kind_dir: str, file_stem: str) -> Schema:
    return load(SCHEMAS / kind_dir / f"{file_stem}.json")


def module_for(s: Schema, package: str = "messages"):
    return import_module(f"protocol.{package}.{s.module}")


_ERROR_CODES = st.sampled_from([int(e) for e in ErrorCode])


def _scalar(f: Field, nullable: bool, flexible: bool):
    t = f.type
    if t == "int16" and f.name.endswith("ErrorCode"):
        base = _ERROR_CODES
    elif t in _INTS:
        lo, hi = _INTS[t]
        base = st.one_of(st.sampled_from([lo, hi, 0, -1 if lo < 0 else 1]), st.integers(lo, hi))
    elif t == "bool":
        base = st.booleans()
    elif t == "float64":
        base = st.floats(allow_nan=False)
    elif t == "uuid":
        base = st.uuids()
    elif t == "string":
        base = st.text(max_size=12)
    elif t == "bytes":
        base = st.binary(max_size=16)
    elif t == "records":
        base = st.binary(max_size=24).map(memoryview)
    else:
        raise AssertionError(t)
    return st.one_of(st.none(), base) if nullable else base


def field_strategy(module, f: Field, version: int, flexible: bool, overrides: dict):
    nullable = version in f.nullable
    if f.is_struct:
        elem = struct_strategy(module, f.struct, version, flexible, overrides)
    else:
        elem = overrides[f.attr] if f.attr in overrides else _scalar(f, False, flexible)
    if f.is_array:
        base = st.lists(elem, max_size=3)
        return st.one_of(st.none(), base) if nullable else base
    if f.is_struct or f.attr in overrides:
        return st.one_of(st.none(), elem) if nullable else elem
    return _scalar(f, nullable, flexible)


def struct_strategy(module, s: Struct, version: int, flexible: bool, overrides: dict):
    cls = getattr(module, s.name)
    kwargs = {}
    for f in s.fields:
        if version not in f.versions:
            continue
        if f.tag is not None and not (flexible and version in f.tagged):
            continue
        kwargs[f.attr] = st.deferred(lambda f=f: field_strategy(module, f, version, flexible, overrides))
    return st.builds(cls, **kwargs)


def message_strategy(s: Schema, version: int, package: str = "messages", overrides: dict | None = None):
    """``overrides`` maps a field attribute to a narrower value strategy (for peers such as
    kio that give some integer fields a richer type with a smaller domain)."""
    return struct_strategy(module_for(s, package), s.top, version, version in s.flexible, overrides or {})
