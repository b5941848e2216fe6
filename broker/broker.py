"""The broker: builds the services from the config and owns their lifecycle.

Handlers reach every service through ``ctx.broker``. Start-up opens the data directory
(recovering the logs), then listens; shutdown stops accepting, lets in-flight requests finish,
then flushes and closes the logs so the next start finds a clean shutdown marker.
"""

from __future__ import annotations

import logging
import os
import time

from .config import BrokerConfig
from .log import FileLogStore, LogConfig, LogStore
from .meta import load_or_create
from .partitions import Partitions
from .producer_ids import ProducerIdAllocator
from .server import Server
from .topics import Topic, TopicRegistry
from .waiters import Waiters

log = logging.getLogger("kshare.broker")


class Broker:
    def __init__(self, config: BrokerConfig, *, store: LogStore | None = None) -> None:
        self.config = config
        self.data_dir = str(config.data_dir)
        os.makedirs(self.data_dir, exist_ok=True)
        meta = load_or_create(self.data_dir, config["node.id"])
        self.node_id = meta.node_id
        self.cluster_id = meta.cluster_id
        self.store: LogStore = store if store is not None else FileLogStore(
            self.data_dir,
            default_config=self.log_config({}),
            retention_check_interval_ms=config["log.retention.check.interval.ms"],
            checkpoint_interval_ms=config["log.flush.offset.checkpoint.interval.ms"] or 60_000,
        )
        self.topics = TopicRegistry(self.data_dir, self.store, self.log_config)
        self.waiters = Waiters()
        self.partitions = Partitions(self.store, self.waiters, config)  # the data path (produce/fetch)
        self.topics.on_change(self.partitions.topic_changed)
        self.producer_ids = ProducerIdAllocator(self.data_dir)
        self.server = Server(self)
        self.host, self.port = config.advertised_address()
        config.on_change(lambda _names: self.topics.refresh_log_configs())

    def auto_create_topic(self, name: str) -> Topic:
        """Create ``name`` with broker defaults (Metadata and Produce auto-creation)."""
        topic = self.topics.create(name, self.config["num.partitions"])
        log.info("auto-created topic %s", name)
        return topic

    def log_config(self, topic_overrides: dict[str, str]) -> LogConfig:
        return LogConfig.from_properties(self.config.raw_properties(), topic_overrides)

    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000

    async def start(self) -> tuple[str, int]:
        """Listen on the configured listener; returns the bound (host, port)."""
        host, port = self.config.listener_address()
        bound_host, bound_port = await self.server.start(host, port)
        if port == 0 or not self.config["advertised.listeners"]:
            self.port = bound_port  # port 0 (tests): advertise the port the OS picked
        self.store.start()
        self.partitions.start()
        log.info(
            "kshare broker %d (cluster %s) listening on %s:%d, data in %s",
            self.node_id, self.cluster_id, bound_host, bound_port, self.data_dir,
        )
        return bound_host, bound_port

    async def stop(self) -> None:
        log.info("shutting down: finishing in-flight requests")
        self.partitions.begin_shutdown()
        await self.server.stop()
        await self.partitions.close()
        await self.store.close()
        log.info("shutdown complete")
