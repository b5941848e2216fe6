"""In-memory log store for tests: the same ``Log`` as the file backend, bytes in bytearrays."""

from __future__ import annotations

import uuid
from typing import Callable, Iterable

from .config import LogConfig
from .flush import Maintenance
from .partition import Log, wall_clock_ms
from .segment import MemorySegmentData, Segment
from .store import InconsistentTopicId


class MemoryLogStore:
    def __init__(
        self,
        *,
        default_config: LogConfig = LogConfig(),
        clock_ms: Callable[[], int] = wall_clock_ms,
        retention_check_interval_ms: int = 300_000,
        initial_task_delay_ms: int = 30_000,
    ) -> None:
        self.default_config = default_config
        self._clock_ms = clock_ms
        self._logs: dict[tuple[str, int], Log] = {}
        self.maintenance = Maintenance(
            self.partitions,
            clock_ms=clock_ms,
            retention_check_interval_ms=retention_check_interval_ms,
            initial_delay_ms=initial_task_delay_ms,
        )

    def _new_segment(self, base_offset: int) -> Segment:
        return Segment(base_offset, MemorySegmentData(), self._clock_ms())

    def create(
        self,
        topic: str,
        partition: int,
        topic_id: uuid.UUID | None = None,
        config: LogConfig | None = None,
    ) -> Log:
        existing = self._logs.get((topic, partition))
        if existing is not None:
            if topic_id is not None and existing.topic_id not in (None, topic_id):
                raise InconsistentTopicId(
                    f"{topic}-{partition} has topic id {existing.topic_id}, not {topic_id}"
                )
            existing.topic_id = existing.topic_id or topic_id
            if config is not None:
                existing.config = config
            return existing
        lg = Log(
            topic,
            partition,
            topic_id,
            config or self.default_config,
            [self._new_segment(0)],
            new_segment=self._new_segment,
            clock_ms=self._clock_ms,
        )
        self._logs[(topic, partition)] = lg
        return lg

    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def delete(self, partitions: Iterable[tuple[str, int]]) -> None:
        for key in partitions:
            lg = self._logs.pop(key, None)
            if lg is not None:
                lg.close()
                for seg in lg.segments:
                    seg.data.delete()

    def mark_stray(self, topic: str, partition: int) -> str | None:
        self.delete([(topic, partition)])  # nothing outlives the process to keep
        return None

    def partitions(self) -> Iterable[Log]:
        return list(self._logs.values())

    def update_config(self, topic: str, config: LogConfig) -> None:
        for (t, _), lg in self._logs.items():
            if t == topic:
                lg.config = config

    def start(self) -> None:
        self.maintenance.start()

    async def stop(self) -> None:
        await self.maintenance.stop()

    async def close(self) -> None:
        await self.stop()
        for lg in self._logs.values():
            lg.close()
