"""The group-coordinator runtime: the one owner of the ShareGroupCoordinator in a broker.

The coordinator is a sans-IO state machine; this shell gives it its inputs and carries out
what it asks for:

* time: ``now_ms`` for every operation, and one timer armed at the coordinator's earliest
  session deadline (re-armed after every operation) that fences silent members;
* topics: a ``TopicLookup`` snapshot of the broker's TopicRegistry, refreshed on every
  registry change, which may bump group epochs (``on_metadata_change``);
* group configs: overrides from the ``GroupConfigStore`` layered on the broker's
  ``group.*`` properties (``group_settings``), also used by the share-partition leaders;
* records: every record the coordinator returns goes through ``_persist`` in the order it
  was produced, and a heartbeat is answered only after its records (and all earlier ones)
  are persisted. ``_persist`` does nothing yet: the records only live in memory until the
  durable-state work appends them to ``__consumer_offsets`` there;
* departures: members that leave or whose session expires are reported, after their
  records are persisted, to the callbacks registered with ``on_member_departed`` (the
  share-partition leaders release the records those members had acquired).

Everything runs on the event loop's thread and the coordinator is only touched between
awaits, so no operation sees another's half-done state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Awaitable, Callable, Iterable, Mapping, Protocol

from protocol.errors import ErrorCode
from protocol.messages.share_group_heartbeat_response import ShareGroupHeartbeatResponse

from .broker_defaults import BROKER_CONFIG_DEFS, validate_broker_config
from .config_store import GroupConfigStore
from .configs import EffectiveGroupConfig
from .records import CoordinatorRecord
from .share_group import HeartbeatResult, ShareGroupCoordinator
from .topics import TopicInfo, TopicsImage

if TYPE_CHECKING:
    from broker.broker import Broker
    from broker.topics import Topic, TopicRegistry

log = logging.getLogger("kshare.group_coordinator")

DepartureListener = Callable[[str, str], None]


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Milliseconds for the coordinator, and timers at such a time."""

    def now_ms(self) -> int: ...

    def call_at(self, when_ms: int, callback: Callable[[], None]) -> TimerHandle: ...


class LoopClock:
    """Wall-clock milliseconds (records carry them, as Kafka's do) with timers on the running
    event loop. A wall-clock step only makes the timer fire early or late; the coordinator
    then finds nothing (or more) expired and the timer is re-armed."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def call_at(self, when_ms: int, callback: Callable[[], None]) -> TimerHandle:
        loop = asyncio.get_running_loop()
        return loop.call_at(loop.time() + max(0, when_ms - self.now_ms()) / 1000, callback)


def group_broker_properties(static: Mapping[str, str], dynamic_default: Mapping[str, str] | None = None,
                            dynamic: Mapping[str, str] | None = None) -> dict[str, str]:
    """The broker's ``group.*`` properties as set (not defaults), dynamic layers winning."""
    layered = {**static, **(dynamic_default or {}), **(dynamic or {})}
    return {k: str(v) for k, v in layered.items() if k in BROKER_CONFIG_DEFS}


class RegistryTopics:
    """Adapts the broker's TopicRegistry to the coordinator's ``TopicLookup``: an immutable
    snapshot, so one coordinator operation never sees a topic change half-way."""

    def __init__(self, registry: TopicRegistry) -> None:
        self._registry = registry

    def snapshot(self) -> TopicsImage:
        return TopicsImage(TopicInfo(t.topic_id, t.name, t.partitions) for t in self._registry)


class GroupCoordinatorRuntime:
    def __init__(
        self,
        topics: TopicRegistry,
        broker_config: Mapping[str, str],
        config_store: GroupConfigStore,
        clock: Clock | None = None,
    ) -> None:
        """``broker_config``: the broker's ``group.*`` properties (see ``group_broker_properties``)."""
        self._clock: Clock = clock or LoopClock()
        self._topics = RegistryTopics(topics)
        self.config_store = config_store
        self.broker_config = dict(broker_config)
        self.coordinator = ShareGroupCoordinator(
            self._topics.snapshot(), broker_config=self.broker_config, group_config=config_store.get,
        )
        self._departure_listeners: list[DepartureListener] = []
        self._timer: TimerHandle | None = None
        self._timer_deadline: int | None = None
        self._tail: asyncio.Future | None = None  # resolves when the last queued write is done
        self._backlog: list[CoordinatorRecord] = []  # produced while no event loop ran
        self._tasks: set[asyncio.Task] = set()
        self._stopped = False
        topics.on_change(self._topic_changed)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Give loaded members their session deadlines and arm the expiry timer."""
        self._stopped = False
        records = self._backlog + self.coordinator.on_loaded(self._clock.now_ms())
        self._backlog = []
        self._rearm()
        await self._settled(self._queue(records))

    async def stop(self) -> None:
        """Disarm the timer and wait for queued writes (their departures are still reported)."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_deadline = None, None
        await self.flush()

    async def flush(self) -> None:
        """Wait until every write queued so far is done and its departures reported."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # ------------------------------------------------------------------ API

    async def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        rack_id: str | None,
        subscribed_topic_names: Iterable[str] | None,
        client_id: str,
        client_host: str,
    ) -> ShareGroupHeartbeatResponse:
        """One ShareGroupHeartbeat (join with epoch 0, leave with -1), answered once its
        records are persisted."""
        result = self.coordinator.heartbeat(group_id, member_id, member_epoch, rack_id, subscribed_topic_names,
                                             client_id, client_host, self._clock.now_ms())
        self._rearm()
        try:
            await self._settled(self._queue(result.records, result.departed))
        except Exception:
            log.exception("persisting the heartbeat of member %s of share group %s failed", member_id, group_id)
            return HeartbeatResult.failed(ErrorCode.COORDINATOR_NOT_AVAILABLE, None).to_response()
        return result.to_response()

    async def delete_group(self, group_id: str) -> None:
        """DeleteGroups for a share group; raises KafkaError GROUP_ID_NOT_FOUND / NON_EMPTY_GROUP."""
        await self._settled(self._queue(self.coordinator.delete_group(group_id)))

    def group_settings(self, group_id: str) -> EffectiveGroupConfig:
        """The configs a group runs with: its overrides on the broker's ``group.*`` values.
        Changes apply from the next call (a heartbeat, a lock acquired afterwards)."""
        return self.coordinator.settings(group_id)

    def group_configs(self, group_id: str) -> Mapping[str, str]:
        return self.config_store.get(group_id)

    def set_group_configs(self, group_id: str, props: Mapping[str, str]) -> None:
        """Replace a group's overrides (already validated) and persist them."""
        if self.config_store.replace(group_id, props):
            log.info("configs of group %s set to %s", group_id, dict(props))

    def on_member_departed(self, callback: DepartureListener) -> None:
        """``callback(group_id, member_id)`` after a member left or was fenced by session
        expiry, once the records removing it are persisted. Called on the event loop; it
        must not block (schedule a task for async work)."""
        self._departure_listeners.append(callback)

    # ------------------------------------------------------------------ records

    async def _persist(self, records: list[CoordinatorRecord]) -> None:
        """The one place records leave the coordinator: ``__consumer_offsets`` later.
        Called in production order, one call at a time."""

    def _queue(self, records: list[CoordinatorRecord], departed: Iterable[tuple[str, str]] = ()) -> Awaitable[None]:
        """Take the next place in the write order now, synchronously, and return what
        completes that write: ``records`` persisted after every earlier write, then
        ``departed`` reported. The write runs as its own task, so a caller that stops
        waiting (a closed connection) cannot leave a hole in the order. Awaiting it raises
        what ``_persist`` raised; later writes go on regardless."""
        departed = list(departed)
        previous = self._tail
        if not records and (previous is None or previous.done()):
            self._notify(departed)
            return _DONE
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # e.g. a topic changed before the broker's loop runs
            self._backlog.extend(records)
            self._notify(departed)
            return _DONE
        done = loop.create_future()
        self._tail = done

        async def write() -> None:
            try:
                if previous is not None:
                    await previous
                if records:
                    await self._persist(records)
            except Exception:
                log.exception("persisting %d share-group record(s) failed", len(records))
                raise
            finally:
                done.set_result(None)
                self._notify(departed)

        task = loop.create_task(write())
        self._tasks.add(task)
        task.add_done_callback(self._write_done)
        return task

    @staticmethod
    async def _settled(write: Awaitable[None]) -> None:
        """Wait for a write without being able to cancel it."""
        if write is not _DONE:
            await asyncio.shield(write)

    def _write_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # logged in write(); retrieved so asyncio does not warn again

    def _notify(self, departed: list[tuple[str, str]]) -> None:
        for group_id, member_id in departed:
            for listener in self._departure_listeners:
                try:
                    listener(group_id, member_id)
                except Exception:
                    log.exception("departure listener failed for member %s of group %s", member_id, group_id)

    # ------------------------------------------------------------------ session timer

    def _rearm(self) -> None:
        """Keep a timer at or before the earliest session deadline. A later deadline
        leaves the armed timer alone (it fires early, finds nothing, re-arms), so steady
        heartbeats do not cancel and re-create timers."""
        if self._stopped:
            return
        deadline = self.coordinator.next_deadline()
        if deadline is None:
            return
        if self._timer is not None and self._timer_deadline is not None and self._timer_deadline <= deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_deadline = deadline
        self._timer = self._clock.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer, self._timer_deadline = None, None
        if self._stopped:
            return
        result = self.coordinator.expire_sessions(self._clock.now_ms())
        self._rearm()
        if result.records:
            for group_id, member_id in result.departed:
                log.info("session of member %s of share group %s expired", member_id, group_id)
            self._queue(result.records, result.departed)

    # ------------------------------------------------------------------ topics

    def _topic_changed(self, name: str, topic: Topic | None) -> None:
        records = self.coordinator.on_metadata_change(self._topics.snapshot())
        if records:
            self._queue(records)


class _Done:
    """An already-finished write (awaiting it does not yield)."""

    def __await__(self):
        return iter(())


_DONE = _Done()


def install(broker: Broker) -> GroupCoordinatorRuntime:
    """Build the runtime for ``broker`` and register it: ``broker.group_coordinator``, the
    topic-change listener and the GROUP config resource. Checks the broker's ``group.*``
    properties the way Kafka does at start-up (raises ConfigError)."""
    from broker import group_configs_provider  # noqa: F401  (registers the GROUP provider)
    from broker.config import ConfigError

    cfg = broker.config
    props = group_broker_properties(cfg.static, cfg.dynamic_default, cfg.dynamic)
    try:
        validate_broker_config(props)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    runtime = GroupCoordinatorRuntime(broker.topics, props, GroupConfigStore(broker.data_dir))
    broker.group_coordinator = runtime
    return runtime
