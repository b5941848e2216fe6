"""Helpers shared by the log store tests (batches, a brute-force model, store fixtures)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from broker.log.config import LogConfig
from broker.log.file import FileLogStore
from broker.log.memory import MemoryLogStore
from protocol.records import build_batch, check_batches, iter_records, walk_headers

TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")


class FakeClock:
    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now = now_ms

    def __call__(self) -> int:
        return self.now


def make_batch(
    n: int = 1,
    *,
    ts: int = 1000,
    timestamps: list[int] | None = None,
    value_size: int = 10,
    tag: int = 0,
    compression: int = 0,
) -> bytes:
    """A v2 batch of ``n`` records (offsets from 0), CreateTime, as a producer sends it."""
    records = []
    for i in range(n):
        value = bytes([(tag + i) % 256]) * value_size
        t = timestamps[i] if timestamps is not None else ts
        records.append((None, value, [], t))
    return build_batch(records, timestamp_ms=ts, compression=compression)


def blob(*batches: bytes):
    buf = bytearray(b"".join(batches))
    return buf, check_batches(buf)


def append(log, *batches: bytes, **kw):
    buf, headers = blob(*batches)
    return log.append(buf, headers, **kw)


def joined(result) -> bytes:
    return b"".join(bytes(c) for c in result.chunks)


def result_batches(result) -> list[bytes]:
    """The batches of a ReadResult, cut by its own batch info (and cross-checked by walking)."""
    data = joined(result)
    walked = [data[p : p + h.size] for p, h in walk_headers(data)]
    via_info = [bytes(result.chunks[b.chunk][b.pos : b.pos + b.size]) for b in result.batches]
    assert walked == via_info
    assert sum(len(b) for b in walked) == result.size == len(data)
    return via_info


def stored_model(log) -> list[tuple[int, int, bytes]]:
    """Brute force: every batch of the log as (base, last, bytes), by reading it all."""
    out = []
    offset = log.start_offset
    while offset < log.end_offset:
        res = log.read(offset, 1 << 30)
        for b in result_batches(res):
            h = check_batches(b)[0]
            out.append((h.base_offset, h.last_offset, b))
        offset = res.next_offset
    return out


def records_of(batch: bytes) -> list[tuple[int, int]]:
    return [(r.offset, r.timestamp) for r in iter_records(batch)]


def open_store(kind: str, path, clock=None, **config):
    cfg = LogConfig(**config)
    clock = clock or FakeClock()
    if kind == "memory":
        return MemoryLogStore(default_config=cfg, clock_ms=clock)
    return FileLogStore(str(path), default_config=cfg, clock_ms=clock)


def close_store(store) -> None:
    asyncio.run(store.close())


@pytest.fixture(params=["memory", "file"])
def kind(request):
    return request.param


@pytest.fixture
def make_store(kind, tmp_path):
    """``make_store(**config)`` -> a store of the parametrised backend in ``tmp_path``."""

    def make(clock=None, **config):
        return open_store(kind, tmp_path / "data", clock, **config)

    return make


def test_make_batch_is_valid_and_counts_records():
    b = make_batch(3, timestamps=[5, 9, 7])
    (h,) = check_batches(b)
    assert (h.records_count, h.last_offset_delta, h.base_timestamp, h.max_timestamp) == (3, 2, 5, 9)
    assert records_of(b) == [(0, 5), (1, 9), (2, 7)]
