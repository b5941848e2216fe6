"""Loading one ``__consumer_offsets`` partition into a share-group coordinator.

Like Kafka's coordinator loader: read the partition from its start to the end it had when
loading began (nothing else writes to it meanwhile: its groups answer
COORDINATOR_LOAD_IN_PROGRESS), replay every ShareGroup* record in order, skip what belongs to
other coordinators (offset commits, classic and consumer groups) and control batches. The
partition is read ``offsets.load.buffer.size`` bytes at a time, and the event loop is given
back every few milliseconds of replay, so the broker keeps serving (other partitions' groups,
everything else) while a big partition loads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from protocol.records import iter_records

from .records import decode

if TYPE_CHECKING:
    from .offsets_topic import OffsetsTopic
    from .share_group import ShareGroupCoordinator

log = logging.getLogger("kshare.group_coordinator")

DEFAULT_LOAD_BUFFER_BYTES = 5 * 1024 * 1024  # offsets.load.buffer.size
SLICE_S = 0.005  # replay at most this long between yields to the event loop


@dataclass
class LoadSummary:
    replayed: int = 0  # ShareGroup* records applied
    skipped: int = 0  # records of other coordinators (and keyless ones)
    end_offset: int = 0  # where loading stopped


async def load_partition(topic: OffsetsTopic, partition: int, coordinator: ShareGroupCoordinator, *,
                         chunk_bytes: int = DEFAULT_LOAD_BUFFER_BYTES) -> LoadSummary:
    """Replay ``partition`` into ``coordinator``. Raises DecodeError / ReplayError for a
    record this broker cannot apply (the partition then stays unavailable, as in Kafka)."""
    lg = topic.log(partition)
    offset = lg.start_offset
    end = lg.end_offset
    summary = LoadSummary(end_offset=offset)
    slice_end = time.monotonic() + SLICE_S
    while offset < end:
        result = topic.read(partition, offset, max(chunk_bytes, 1))
        if not result.batches:
            break
        for batch in result.batches:
            if batch.header.is_control:
                continue
            for record in iter_records(result.chunks[batch.chunk], batch.pos):
                if record.offset < offset:  # the log starts inside this batch
                    continue
                decoded = None if record.key is None else decode(record.key, record.value)
                if decoded is None:
                    summary.skipped += 1
                    continue
                coordinator.replay(decoded)
                summary.replayed += 1
            if time.monotonic() >= slice_end:
                await asyncio.sleep(0)
                slice_end = time.monotonic() + SLICE_S
        offset = result.next_offset
        summary.end_offset = offset
    return summary
