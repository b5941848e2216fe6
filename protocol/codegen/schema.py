"""Load Kafka's JSON message schemas into a small model the emitter walks.

The files carry ``//`` comments, so they are stripped (outside of strings) before parsing.
"""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path

MAX_VERSION = 32767

FIXED_TYPES = {  # Kafka type -> struct format character
    "bool": "?",
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "float64": "d",
    "uuid": "16s",
}
VARIABLE_TYPES = {"string", "bytes", "records"}


def strip_comments(text: str) -> str:
    out = []
    i, n, in_str = 0, len(text), False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


@dataclass(frozen=True)
class Versions:
    lo: int
    hi: int  # inclusive; lo > hi means "none"

    @classmethod
    def parse(cls, s: str | None, default: Versions | None = None) -> Versions:
        if s is None:
            return default if default is not None else NONE
        s = s.strip()
        if s == "none":
            return NONE
        if s.endswith("+"):
            return cls(int(s[:-1]), MAX_VERSION)
        if "-" in s:
            lo, hi = s.split("-")
            return cls(int(lo), int(hi))
        return cls(int(s), int(s))

    def __contains__(self, v: int) -> bool:
        return self.lo <= v <= self.hi

    @property
    def empty(self) -> bool:
        return self.lo > self.hi


NONE = Versions(1, 0)


def snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    s = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s)
    s = s.lower()
    return s + "_" if keyword.iskeyword(s) else s


@dataclass
class Field:
    name: str  # schema name, e.g. ThrottleTimeMs
    attr: str  # python attribute, e.g. throttle_time_ms
    type: str  # element type for arrays, e.g. int32 or a struct name
    is_array: bool
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: object  # raw default from the schema (string/number/bool) or None
    flexible: Versions | None  # per-field override (RequestHeader.ClientId)
    struct: Struct | None = None  # resolved struct for struct/array-of-struct fields

    @property
    def is_struct(self) -> bool:
        return self.struct is not None


@dataclass
class Struct:
    name: str
    fields: list[Field]
    versions: Versions


@dataclass
class Schema:
    path: Path
    name: str
    kind: str  # request / response / header / data / coordinator-key / coordinator-value
    api_key: int | None
    valid: Versions
    flexible: Versions
    top: Struct
    structs: list[Struct] = field(default_factory=list)  # every struct, nested ones first
    latest_unstable: bool = False  # Kafka serves the last version only with unstable.api.versions.enable

    @property
    def stable_hi(self) -> int:
        return self.valid.hi - 1 if self.latest_unstable else self.valid.hi

    @property
    def module(self) -> str:
        return snake(self.name)


def _parse_fields(raw_fields, versions: Versions, named: dict[str, Struct], pending: list):
    fields = []
    for rf in raw_fields:
        t = rf["type"]
        is_array = t.startswith("[]")
        elem = t[2:] if is_array else t
        fversions = Versions.parse(rf.get("versions"), versions)
        f = Field(
            name=rf["name"],
            attr=snake(rf["name"]),
            type=elem,
            is_array=is_array,
            versions=fversions,
            nullable=Versions.parse(rf.get("nullableVersions")),
            tagged=Versions.parse(rf.get("taggedVersions")),
            tag=rf.get("tag"),
            default=rf.get("default"),
            flexible=Versions.parse(rf["flexibleVersions"]) if "flexibleVersions" in rf else None,
        )
        if "fields" in rf:
            sub = Struct(elem, [], fversions)
            named[elem] = sub
            sub.fields = _parse_fields(rf["fields"], fversions, named, pending)
            pending.append(sub)
        elif elem not in FIXED_TYPES and elem not in VARIABLE_TYPES:
            pass  # a reference to a common struct, resolved once all are known
        fields.append(f)
    return fields


def _resolve(fields: list[Field], named: dict[str, Struct]) -> None:
    for f in fields:
        if f.type in named:
            f.struct = named[f.type]
        elif f.type not in FIXED_TYPES and f.type not in VARIABLE_TYPES:
            raise ValueError(f"unknown type {f.type!r} of field {f.name}")


def load(path: Path) -> Schema:
    raw = json.loads(strip_comments(path.read_text()))
    valid = Versions.parse(raw["validVersions"])
    named: dict[str, Struct] = {}
    ordered: list[Struct] = []
    for cs in raw.get("commonStructs", []):
        s = Struct(cs["name"], [], Versions.parse(cs.get("versions"), valid))
        named[cs["name"]] = s
        s.fields = _parse_fields(cs["fields"], s.versions, named, ordered)
        ordered.append(s)
    top = Struct(raw["name"], [], valid)
    top.fields = _parse_fields(raw["fields"], valid, named, ordered)
    ordered.append(top)
    for s in ordered:
        _resolve(s.fields, named)
    names = [s.name for s in ordered]
    if len(set(names)) != len(names):
        raise ValueError(f"{path.name}: duplicate struct names")
    return Schema(
        path=path,
        name=raw["name"],
        kind=raw["type"],
        api_key=raw.get("apiKey"),
        valid=valid,
        flexible=Versions.parse(raw.get("flexibleVersions"), NONE),
        top=top,
        structs=_topo_order(ordered),
        latest_unstable=raw.get("latestVersionUnstable", False),
    )


def _topo_order(structs: list[Struct]) -> list[Struct]:
    """Children before parents, so emitted encoders can refer to already-named helpers."""
    seen: set[str] = set()
    out: list[Struct] = []

    def visit(s: Struct) -> None:
        if s.name in seen:
            return
        seen.add(s.name)
        for f in s.fields:
            if f.struct is not None:
                visit(f.struct)
        out.append(s)

    for s in structs:
        visit(s)
    return out
