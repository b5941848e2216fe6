"""The broker: builds the services from the config and owns their lifecycle.

Handlers reach every service through ``ctx.broker``. Start-up opens the data directory
(recovering the logs), then listens; shutdown stops accepting, lets in-flight requests finish,
then flushes and closes the logs so the next start finds a clean shutdown marker.
"""

from __future__ import annotations

import logging
import os
import time

from coordinator.group import runtime as group_runtime
from coordinator.share import runtime as share_runtime
from protocol import messages
from protocol.errors import ErrorCode, KafkaError

from .config import BrokerConfig
from .handlers import REGISTRY
from .log import FileLogStore, KafkaStorageError, LogConfig, LogStore
from .meta import load_or_create, lock_data_dir
from .metrics import BrokerMetrics
from .partitions import Partitions
from .producer_ids import ProducerIdAllocator
from .server import Server
from .share.manager import SharePartitionManager
from .share.sessions import ShareSessionCache
from .topics import Topic, TopicRegistry
from .waiters import Waiters

log = logging.getLogger("kshare.broker")


def _api_names() -> list[tuple[int, str]]:
    """(API key, Kafka's name for it) of every registered handler, for per-API metrics."""
    return [(key, messages.APIS[key][1].removesuffix("Request")) for key in REGISTRY]


class Broker:
    def __init__(self, config: BrokerConfig, *, store: LogStore | None = None,
                 metrics_address: tuple[str, int] | None = None) -> None:
        """``metrics_address``: (host, port) to serve Prometheus metrics on; None serves none."""
        self.config = config
        self.metrics_address = metrics_address
        self.metrics_bound: tuple[str, int] | None = None  # where metrics are served, once started
        self.metrics = BrokerMetrics(self, _api_names())
        self.data_dir = str(config.data_dir)
        os.makedirs(self.data_dir, exist_ok=True)
        self._data_dir_lock = lock_data_dir(self.data_dir)  # released by stop() or when the process exits
        meta = load_or_create(self.data_dir, config["node.id"])
        self.node_id = meta.node_id
        self.cluster_id = meta.cluster_id
        self.store: LogStore = store if store is not None else FileLogStore(
            self.data_dir,
            default_config=self.log_config({}),
            retention_check_interval_ms=config["log.retention.check.interval.ms"],
            checkpoint_interval_ms=config["log.flush.offset.checkpoint.interval.ms"] or 60_000,
            initial_task_delay_ms=config["log.initial.task.delay.ms"],
            # compacted topics' retention runs on Kafka's log cleaner thread
            cleaner_backoff_ms=lambda: config["log.cleaner.backoff.ms"] if config["log.cleaner.enable"] else None,
        )
        self.topics = TopicRegistry(self.data_dir, self.store, self.log_config)
        self.group_coordinator = group_runtime.install(self)  # share-group membership and GROUP configs
        self.waiters = Waiters()
        self.partitions = Partitions(self.store, self.waiters, config)  # the data path (produce/fetch)
        self.topics.on_change(self.partitions.topic_changed)
        self.producer_ids = ProducerIdAllocator(self.data_dir)
        # Share groups: the share coordinator (durable share-partition state) behind the
        # persister seam, and the share-partition leaders with their sessions.
        self.share_coordinator_runtime = share_runtime.install(self)  # sets self.share_coordinator
        self.share_sessions = ShareSessionCache(config["group.share.max.share.sessions"])
        self.share_manager = SharePartitionManager(
            self, self.share_coordinator_runtime.persister, settings=self.group_coordinator.group_settings,
            stats=self.metrics.share,
        )
        self.group_coordinator.on_member_departed(self._member_departed)
        self.topics.on_change(self._share_topic_changed)
        self.server = Server(self)
        self.host, self.port = config.advertised_address()
        config.on_change(lambda _names: self.topics.refresh_log_configs())

    def _member_departed(self, group_id: str, member_id: str) -> None:
        """A member left or was fenced: free its records unless its share session is still open.

        librdkafka's close() sends the leave heartbeat and the final ShareAcknowledge (epoch -1,
        carrying its last acceptances) at the same time; releasing on the leave would race those
        acks. An open session releases its records itself when it closes (or its connection
        drops), as in Kafka; locks expire in any case.
        """
        if self.share_sessions.get(group_id, member_id) is None:
            self.share_manager.release_soon(group_id, member_id)

    def _share_topic_changed(self, changes: list[tuple[str, Topic | None]]) -> None:
        deleted = [name for name, topic in changes if topic is None]
        for name in deleted:  # its share request counters go, share partitions or not (Kafka:
            self.metrics.share.forget_topic(name)  # ReplicaManager.stopPartitions -> maybeRemoveTopicMetrics)
        if deleted:  # (the listener is not told the deleted ids)
            gone = {key[1] for key, _ in self.share_manager.share_partitions() if self.topics.by_id(key[1]) is None}
            for topic_id in gone:  # (share sessions keep them, as Kafka's do: see ShareSession)
                self.share_manager.forget_topic(topic_id)

    def auto_create_topic(self, name: str, name_checked: bool = False) -> Topic:
        """Create ``name`` with broker defaults (Metadata auto-creation: Produce never creates topics)."""
        topic = self.topics.create(name, self.config["num.partitions"], name_checked=name_checked)
        log.info("auto-created topic %s", name)
        return topic

    def internal_topic(self, name: str, partitions: int, configs: dict[str, str]) -> Topic:
        """The internal topic ``name``, created with ``partitions`` and ``configs`` if missing.

        Kafka creates its internal topics on first use; kshare creates them when a coordinator
        starts, so loading never races creation. An existing topic is kept as it is.
        """
        topic = self.topics.get(name)
        if topic is None:
            try:
                topic = self.topics.create(name, partitions, configs)
            except KafkaError as e:  # the registry cannot be written: the start fails with why
                if e.code != ErrorCode.KAFKA_STORAGE_ERROR:
                    raise
                raise KafkaStorageError(e.message) from None
        return topic

    def log_config(self, topic_overrides: dict[str, str]) -> LogConfig:
        return LogConfig.from_properties(self.config.raw_properties(), topic_overrides)

    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000

    async def start(self) -> tuple[str, int]:
        """Listen on the configured listener; returns the bound (host, port)."""
        host, port = self.config.listener_address()
        await self.share_coordinator_runtime.start()
        await self.group_coordinator.start()
        if self.metrics_address is not None:
            self.metrics_bound = await self.metrics.serve(*self.metrics_address)
            self.server.request_metrics = self.metrics.requests  # before the first connection
        bound_host, bound_port = await self.server.start(host, port)
        if self.config.advertised_address()[1] == 0:
            self.port = bound_port  # advertised port 0 (tests): the OS's pick (Kafka's withEphemeralPortsCorrected)
        self.store.start()
        self.partitions.start()
        log.info(
            "kshare broker %d (cluster %s) listening on %s:%d, data in %s",
            self.node_id, self.cluster_id, bound_host, bound_port, self.data_dir,
        )
        return bound_host, bound_port

    async def stop(self) -> bool:
        """Stop serving, then close every owner of state. A step that fails (a snapshot or a
        checkpoint on a full disk) is logged and the later ones still run, so the logs are
        flushed whatever happened before. False if any step failed."""
        log.info("shutting down: finishing in-flight requests")
        self.partitions.begin_shutdown()
        ok = True
        for step in (self.server.stop, self.metrics.close, self.group_coordinator.stop, self.share_manager.close,
                     self.share_coordinator_runtime.stop, self.partitions.close, self.store.close):
            try:
                await step()
            except Exception:
                log.exception("shutting down: %s failed; going on", step.__qualname__)
                ok = False
        if self._data_dir_lock is not None:
            os.close(self._data_dir_lock)
            self._data_dir_lock = None
        if ok:
            log.info("shutdown complete")
        else:
            log.warning("shutdown finished with errors")
        return ok
