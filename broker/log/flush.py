"""Durability off the event loop: group-committed fsync per log, and the store's periodic chores.

``GroupCommit`` makes a log durable up to an offset. Whoever needs it awaits ``wait(offset)``;
if no fsync is running one starts (in a thread), covering everything written so far; waiters
that arrive while it runs wait for it and, if their data came after its snapshot, share the next
one. So N concurrent producers cost at most two fsyncs, and the loop never blocks on the disk.

``Maintenance`` is the one background task a store owns: flush.ms flushes, flushing segments
that were rolled (Kafka flushes a segment when it becomes inactive), retention checks and
checkpoint writes. ``run_once(now_ms)`` is the whole step, so tests drive it without sleeping.
As Kafka's LogManager schedules them, the first retention check and checkpoint come
``log.initial.task.delay.ms`` after the start, then one every interval: a restart does not
hold expired data for a whole ``log.retention.check.interval.ms``. Compacted topics (``compact``
in cleanup.policy) are left to Kafka's log cleaner thread instead, which applies their retention
at its start and then every ``log.cleaner.backoff.ms`` it finds nothing to clean (and never when
``log.cleaner.enable`` is false): LogManager.cleanupLogs and LogCleaner.cleanFilthiestLog.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Awaitable, Callable, ContextManager, Iterable

from .store import KafkaStorageError

log = logging.getLogger(__name__)

FlushJob = Callable[[], None]


class GroupCommit:
    def __init__(
        self,
        prepare: Callable[[], tuple[int, FlushJob | None]],
        *,
        durable: int = 0,
        executor=None,
    ) -> None:
        self._prepare = prepare  # snapshot: (offset made durable by the job, job to run in a thread)
        self.durable = durable
        self.executor = executor
        self.rounds = 0
        self.failure: BaseException | None = None  # a failed fsync, or a read that found the file cut
        self._running: asyncio.Future | None = None

    @property
    def busy(self) -> bool:
        return self._running is not None

    async def wait(self, target: int, *, force: bool = False) -> None:
        """Return once offsets below ``target`` are durable; ``force``: after a fresh round."""
        if force:
            if self._running is not None:
                await asyncio.shield(self._running)
            if self.failure is not None:
                raise KafkaStorageError(f"log is offline: {self.failure}")
            if self._running is None:
                self._running = asyncio.ensure_future(self._run())
            await asyncio.shield(self._running)
        while self.durable < target:
            if self.failure is not None:
                raise KafkaStorageError(f"log is offline: {self.failure}")
            if self._running is None:
                self._running = asyncio.ensure_future(self._run())
            await asyncio.shield(self._running)

    async def _run(self) -> None:
        try:
            try:
                offset, job = self._prepare()
            except OSError as e:
                # No descriptor to sync with (e.g. too many open files): nothing was synced and
                # nothing lost, so this round fails and a later one tries again.
                log.warning("flush could not start, a later one retries: %r", e)
                raise KafkaStorageError(f"flush could not start: {e}") from e
            self.rounds += 1
            if job is not None:
                try:
                    await asyncio.get_running_loop().run_in_executor(self.executor, job)
                except Exception as e:
                    # After a failed fsync the kernel may have dropped dirty pages: never retry and
                    # pretend the data is safe (Kafka takes the log dir offline for the same reason).
                    self.failure = e
                    log.error("flush failed, log is now offline: %r", e)
                    raise KafkaStorageError(f"flush failed: {e}") from e
            if offset > self.durable:
                self.durable = offset
        finally:
            self._running = None


class Maintenance:
    """Periodic work for a store's logs; ``start``/``stop`` own the task, ``run_once`` does it."""

    def __init__(
        self,
        logs: Callable[[], Iterable],
        *,
        clock_ms: Callable[[], int],
        checkpoint: Callable[[], Awaitable[None]] | None = None,
        retention_pass: Callable[[], ContextManager[None]] = contextlib.nullcontext,
        retention_check_interval_ms: int = 300_000,
        checkpoint_interval_ms: int = 60_000,
        initial_delay_ms: int = 30_000,
        tick_ms: int = 1_000,
        cleaner_backoff_ms: Callable[[], int | None] = lambda: 15_000,
    ) -> None:
        self._logs = logs
        self._clock_ms = clock_ms
        self._checkpoint = checkpoint
        self._retention_pass = retention_pass
        self.retention_check_interval_ms = retention_check_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.initial_delay_ms = initial_delay_ms
        self.tick_ms = tick_ms
        self._next_retention: int | None = None
        self._next_checkpoint: int | None = None
        self._cleaner_backoff_ms = cleaner_backoff_ms  # None: log.cleaner.enable=false
        self._next_cleaner_pass: int | None = None
        self._task: asyncio.Task | None = None
        self._stopping: asyncio.Event | None = None

    async def run_once(self, now_ms: int) -> None:
        due = [lg for lg in self._logs() if lg.flush_due(now_ms)]
        if due:
            results = await asyncio.gather(*(lg.flush() for lg in due), return_exceptions=True)
            for lg, res in zip(due, results):
                if isinstance(res, BaseException):
                    log.error("periodic flush of %s-%d failed: %r", lg.topic, lg.partition, res)
        if self._next_retention is None:
            self._next_retention = now_ms + self.initial_delay_ms
        elif now_ms >= self._next_retention:
            self._next_retention = now_ms + self.retention_check_interval_ms
            self._apply_retention([lg for lg in self._logs() if not lg.config.compacts], now_ms)
        backoff = self._cleaner_backoff_ms()
        if backoff is not None and (self._next_cleaner_pass is None or now_ms >= self._next_cleaner_pass):
            self._next_cleaner_pass = now_ms + backoff
            self._apply_retention([lg for lg in self._logs() if lg.config.compacts], now_ms)
        if self._checkpoint is not None:
            if self._next_checkpoint is None:
                self._next_checkpoint = now_ms + self.initial_delay_ms
            elif now_ms >= self._next_checkpoint:
                self._next_checkpoint = now_ms + self.checkpoint_interval_ms
                await self._checkpoint()

    def _apply_retention(self, logs: list, now_ms: int) -> None:
        if not logs:
            return
        with self._retention_pass():
            for lg in logs:
                try:
                    lg.apply_retention(now_ms)
                except Exception:  # one bad log must not stop retention for the others
                    log.exception("retention of %s-%d failed", lg.topic, lg.partition)

    def _interval_s(self) -> float:
        tick = self.tick_ms
        for lg in self._logs():
            ms = lg.config.flush_ms
            if ms is not None and ms < tick:
                tick = ms
        return max(tick, 5) / 1000

    def start(self) -> None:
        if self._task is None:
            self._stopping = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="log-maintenance")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            assert self._stopping is not None
            self._stopping.set()
            await task

    async def _loop(self) -> None:
        assert self._stopping is not None
        while not self._stopping.is_set():
            try:
                await asyncio.wait_for(self._stopping.wait(), self._interval_s())
            except asyncio.TimeoutError:
                pass
            if self._stopping.is_set():
                return
            try:
                await self.run_once(self._clock_ms())
            except Exception:
                log.exception("log maintenance step failed")
