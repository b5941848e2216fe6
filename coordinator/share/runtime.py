"""Builds the share coordinator service for a broker and owns its lifecycle.

The service's shards live in memory; their records go to the journal (``None``: memory only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .service import ShareCoordinatorService

if TYPE_CHECKING:
    from broker.broker import Broker


class ShareCoordinatorRuntime:
    def __init__(self, broker: Broker) -> None:
        cfg = broker.config
        self.broker = broker
        self.service = ShareCoordinatorService(
            num_partitions=cfg["share.coordinator.state.topic.num.partitions"],
            records_per_snapshot=cfg["share.coordinator.snapshot.update.records.per.snapshot"],
            topic_partitions=lambda tid: (t.partitions if (t := broker.topics.by_id(tid)) else None),
        )

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass


def install(broker: Broker) -> ShareCoordinatorRuntime:
    runtime = ShareCoordinatorRuntime(broker)
    broker.share_coordinator = runtime.service
    return runtime
