"""Builds the share coordinator for a broker and owns its lifecycle.

- **Topic.** ``__share_group_state`` is created at start (if missing) with
  ``share.coordinator.state.topic.num.partitions`` partitions and Kafka 4.2's topic configs
  (``shareGroupStateTopicConfigs``): cleanup.policy=delete, compression.type=producer,
  segment.bytes from ``share.coordinator.state.topic.segment.bytes``, min.insync.replicas from
  ``share.coordinator.state.topic.min.isr`` and retention.ms=-1. An existing topic keeps its
  partition count, which then routes keys (Kafka's ``startup`` reads it from the metadata).
- **Journal.** Records are appended to the log as one batch per request part
  (``journal.LogJournal``) and synced per ``log.flush.interval.messages``.
- **Loading.** Every partition answers COORDINATOR_LOAD_IN_PROGRESS until it is loaded
  (``loader``: one pass over record keys; a key's state batches are combined when a request
  first needs them, or by a background task that replays the untouched keys one at a time
  afterwards). Loading runs in the background as in Kafka, a buffer at a time between which
  the broker serves requests; ``start`` waits for it at most ``STARTUP_LOAD_WAIT_S`` so that
  a small state is fully served as soon as the broker listens. A partition whose records do
  not parse is not coordinated: its keys answer NOT_COORDINATOR.
- **Cold snapshots.** Every ``share.coordinator.cold.partition.snapshot.interval.ms`` each key
  whose last snapshot is that old gets a fresh one (Kafka's ``snapshotColdPartitions``), so
  that an idle share-partition does not hold back pruning.
- **Pruning.** Every ``share.coordinator.state.topic.prune.interval.ms`` each partition's log
  start offset is moved up to the shard's ``last_redundant_offset`` (the oldest record some key
  still needs), once the records before it are committed (fsynced if they asked for it), which
  deletes the segments wholly below it.
- **Checkpoints.** Every ``kshare.share.coordinator.state.checkpoint.interval.ms`` a partition
  that a load would have to read many records of gets a state checkpoint beside its log
  (``checkpoint``): the loader's result up to the log end, written once the log is fsynced
  there. A load seeds from a valid checkpoint and scans only the records after it; an invalid
  one is deleted with a warning and the partition is read from its log start. kshare's own
  file: the records of the topic are exactly Kafka's either way.
- **Stopping.** Before the logs close, every key with updates since its last snapshot gets a
  fresh ShareSnapshot (what Kafka writes for cold partitions: same state, snapshot epoch + 1)
  and the partitions are pruned, so the next start reads about one record per key. Not a
  Kafka behaviour; it only changes which valid records the log holds. A crash skips it and
  the next start reads everything after the last prune.
- **Deleted topics.** When a topic is deleted, every key of its id gets a tombstone (Kafka's
  ``onPartitionsDeleted`` -> ``maybeCleanupShareState``), so its state does not outlive it.
  A partition that was loading then, or a crash between DeleteTopics' answer and those
  tombstones, leaves keys of a topic that no longer exists: a load tombstones them once the
  partition is served (the topic registry is kshare's record of which topics exist, where
  Kafka's broker replays the deletion from its metadata log).
- **Persister.** ``kshare.share.persister`` = ``in-process`` (default) or ``network``
  (``persister.network``: FindCoordinator and the state RPCs over loopback).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from broker.partitions import AppendError
from persister.in_process import InProcessPersister
from persister.network import NetworkPersister
from protocol.coordinator_serde import SHARE_GROUP_STATE_TOPIC

from .checkpoint import Checkpointer, load_partition
from .journal import LogJournal
from .loader import LoadError
from .service import ShareCoordinatorService

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger("kshare.share_coordinator")

STARTUP_LOAD_WAIT_S = 1.0
SNAPSHOTS_PER_BATCH = 100  # keeps a shutdown batch well below max.message.bytes


def state_topic_configs(cfg) -> dict[str, str]:
    """Kafka 4.2's ``ShareCoordinatorService.shareGroupStateTopicConfigs``."""
    return {
        "cleanup.policy": "delete",
        "compression.type": "producer",
        "segment.bytes": str(cfg["share.coordinator.state.topic.segment.bytes"]),
        "min.insync.replicas": str(cfg["share.coordinator.state.topic.min.isr"]),
        "retention.ms": "-1",
    }


class ShareCoordinatorRuntime:
    def __init__(self, broker: Broker) -> None:
        cfg = broker.config
        self.broker = broker
        self.journal = LogJournal(
            broker.store, broker.partitions, compression=cfg["share.coordinator.state.topic.compression.codec"]
        )
        self.service = ShareCoordinatorService(
            num_partitions=cfg["share.coordinator.state.topic.num.partitions"],
            records_per_snapshot=cfg["share.coordinator.snapshot.update.records.per.snapshot"],
            topic_partitions=lambda tid: (t.partitions if (t := broker.topics.by_id(tid)) else None),
            journal=self.journal,
            active=False,
        )
        self.prune_interval_s = cfg["share.coordinator.state.topic.prune.interval.ms"] / 1000
        self.cold_snapshot_interval_ms = cfg["share.coordinator.cold.partition.snapshot.interval.ms"]
        self.load_buffer_size = cfg["share.coordinator.load.buffer.size"]
        self.checkpoint_interval_s = cfg["kshare.share.coordinator.state.checkpoint.interval.ms"] / 1000
        self.checkpointer = Checkpointer(
            self.service, self.journal, lambda p: broker.store.get(SHARE_GROUP_STATE_TOPIC, p),
            min_records=cfg["kshare.share.coordinator.state.checkpoint.min.records"],
            logs_flushed=getattr(broker.store, "checkpoint", None),
        )
        if cfg["kshare.share.persister"] == "network":
            self.persister = NetworkPersister(lambda: (broker.host, broker.port),
                                              should_retry=lambda: not broker.server.stopping)
        else:
            self.persister = InProcessPersister(self.service)
        self._load_task: asyncio.Task | None = None
        self._prune_task: asyncio.Task | None = None
        self._cold_task: asyncio.Task | None = None
        self._replay_task: asyncio.Task | None = None
        self._checkpoint_task: asyncio.Task | None = None
        self._cleanups: set[asyncio.Task] = set()
        self._topic_ids = {t.name: t.topic_id for t in broker.topics}
        broker.topics.on_change(self._topic_changed)
        self.loaded: asyncio.Event | None = None  # set once every partition is loaded (or failed)

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        broker = self.broker
        topic = broker.internal_topic(SHARE_GROUP_STATE_TOPIC, self.service.num_partitions,
                                      state_topic_configs(broker.config))
        self.service.num_partitions = topic.partitions
        for p in range(topic.partitions):
            self.service.set_loading(p)
        self.service.active = True
        self.loaded = asyncio.Event()
        loop = asyncio.get_running_loop()
        self._load_task = loop.create_task(self._load_all(topic.partitions))
        self._prune_task = loop.create_task(self._prune_loop())
        self._cold_task = loop.create_task(self._cold_snapshot_loop())
        if self.checkpoint_interval_s > 0:
            self._checkpoint_task = loop.create_task(self._checkpoint_loop())
        done, _ = await asyncio.wait({self._load_task}, timeout=STARTUP_LOAD_WAIT_S)
        if not done:
            log.info("loading %s continues in the background: %d partition(s) left",
                     SHARE_GROUP_STATE_TOPIC, len(self.service.loading()))

    async def stop(self) -> None:
        if self._cleanups:
            await asyncio.gather(*self._cleanups, return_exceptions=True)
        for task in (self._load_task, self._prune_task, self._cold_task, self._replay_task, self._checkpoint_task):
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        self._load_task = self._prune_task = self._cold_task = self._replay_task = self._checkpoint_task = None
        await self.checkpointer.idle()
        if self.service.active:
            await self.snapshot_and_prune()
            if self.checkpoint_interval_s > 0:
                await self.checkpointer.run_once()
        self.service.active = False
        if isinstance(self.persister, NetworkPersister):
            await self.persister.close()

    # --- deleted topics -------------------------------------------------------------------------

    def _topic_changed(self, changes) -> None:
        gone = []
        for name, topic in changes:
            if topic is not None:
                self._topic_ids[name] = topic.topic_id
            elif (topic_id := self._topic_ids.pop(name, None)) is not None:
                gone.append(topic_id)
        if gone and self.service.active:
            self._clean_up(self.forget_topics(gone))

    def _clean_up(self, coro) -> None:
        """Run a cleanup write in the background; ``stop`` waits for it."""
        task = asyncio.get_running_loop().create_task(coro)
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    async def forget_topics(self, topic_ids) -> None:
        """Tombstone every key of deleted topics in the partitions served now."""
        await self._write_served(lambda shard: shard.tombstones_for_topics(topic_ids),
                                 "could not delete the share state of a deleted topic: %s")

    def _forget_gone_topics(self, p: int) -> None:
        """Tombstone the keys of topics that no longer exist, found in a just-loaded partition."""
        topic_ids = {k.topic_id for k in self.service.shard(p).keys()}
        gone = {t for t in topic_ids if self.broker.topics.by_id(t) is None}
        if gone:
            log.info("%s-%d holds state of %d deleted topic(s); deleting it", SHARE_GROUP_STATE_TOPIC, p, len(gone))
            self._clean_up(self.forget_topics(gone))

    async def _write_served(self, records_of, failed: str) -> None:
        """Write ``records_of(shard)`` to every partition served now, in batches of at most
        SNAPSHOTS_PER_BATCH (each applied when computed: ``write_records``); a batch that
        fails is logged with ``failed`` (a %s for the error)."""
        writes = []
        for p, shard in list(self.service.shards.items()):
            if self.service.serving(p):
                records = records_of(shard)
                for i in range(0, len(records), SNAPSHOTS_PER_BATCH):
                    writes.append(self.service.write_records(p, records[i:i + SNAPSHOTS_PER_BATCH]))
        for r in await asyncio.gather(*writes, return_exceptions=True):
            if isinstance(r, BaseException):
                log.warning(failed, r)

    # --- loading --------------------------------------------------------------------------------

    async def _load_all(self, partitions: int) -> None:
        t0 = time.monotonic()
        keys = records = seeded = 0
        for p in range(partitions):
            lg = self.broker.store.get(SHARE_GROUP_STATE_TOPIC, p)
            if lg is None:
                log.error("%s-%d has no log; it is not coordinated", SHARE_GROUP_STATE_TOPIC, p)
                self.service.set_failed(p)
                continue
            try:
                loader, (loaded, last_offset) = await load_partition(lg, self.load_buffer_size)
            except LoadError as e:
                log.error("cannot load %s-%d, it is not coordinated: %s", SHARE_GROUP_STATE_TOPIC, p, e)
                self.service.set_failed(p)
                continue
            except Exception:
                log.exception("cannot load %s-%d, it is not coordinated", SHARE_GROUP_STATE_TOPIC, p)
                self.service.set_failed(p)
                continue
            self.service.shards.pop(p, None)
            self.service.shard(p).load(loaded, last_offset)
            self.checkpointer.loaded(p, lg, loader.seed_offset)
            self.service.set_loaded(p)
            self._forget_gone_topics(p)
            keys += len(loaded)
            records += loader.records
            seeded += loader.seed_offset is not None
            await asyncio.sleep(0)
        log.info("loaded %s: %d key(s) from %d record(s) in %.3f s%s",
                 SHARE_GROUP_STATE_TOPIC, keys, records, time.monotonic() - t0,
                 f" ({seeded} partition(s) from a checkpoint)" if seeded else "")
        if self.loaded is not None:
            self.loaded.set()
        self._replay_task = asyncio.get_running_loop().create_task(self._replay_pending())

    async def _replay_pending(self) -> None:
        """Replay the keys no request has touched yet, one at a time between requests, so
        that the next graceful stop can snapshot them (a pending key's records otherwise stay
        in the log, and the next start reads them again)."""
        t0 = time.monotonic()
        n = 0
        for p, shard in list(self.service.shards.items()):
            for key in shard.pending_keys():
                if not self.service.serving(p) or self.service.shards.get(p) is not shard:
                    break
                try:
                    shard.entry(key)
                except Exception:
                    log.exception("cannot replay the state of %s", key)
                    continue
                n += 1
                await asyncio.sleep(0)
        if n:
            log.info("replayed %d loaded key(s) in the background in %.3f s", n, time.monotonic() - t0)

    # --- checkpoints, pruning and snapshots -----------------------------------------------------

    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(self.checkpoint_interval_s)
            try:
                await self.checkpointer.run_once()
            except Exception:
                log.exception("checkpointing %s failed", SHARE_GROUP_STATE_TOPIC)

    async def _prune_loop(self) -> None:
        while True:
            await asyncio.sleep(self.prune_interval_s)
            try:
                await self.prune()
            except Exception:
                log.exception("pruning %s failed", SHARE_GROUP_STATE_TOPIC)

    async def _cold_snapshot_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cold_snapshot_interval_ms / 1000)
            try:
                await self.snapshot_cold()
            except Exception:
                log.exception("snapshotting idle %s keys failed", SHARE_GROUP_STATE_TOPIC)

    async def snapshot_cold(self) -> None:
        """Kafka's cold-partition snapshots, in every partition served now."""
        await self._write_served(lambda shard: shard.cold_snapshot_records(self.cold_snapshot_interval_ms),
                                 f"could not snapshot idle {SHARE_GROUP_STATE_TOPIC} keys: %s")

    async def prune(self) -> dict[int, int]:
        """Move each served partition's log start up to its last redundant offset; returns the
        new log start offsets of the partitions that moved."""
        moved = {}
        for p, shard in list(self.service.shards.items()):
            if not self.service.serving(p):
                continue
            offset = shard.last_redundant_offset()
            lg = self.broker.store.get(SHARE_GROUP_STATE_TOPIC, p)
            if offset is None or lg is None or offset <= lg.start_offset:
                continue
            # The offset counts records replayed as soon as they were appended. As Kafka, which
            # reads lastRedundantOffset in a write operation that completes only once every
            # record written before it is committed, delete below it only once those records
            # are fsynced (when log.flush.interval.messages asks for it): a failed or lost fsync
            # must not leave the log without the records they superseded.
            try:
                await self.journal.committed(p)
            except AppendError as e:
                log.warning("not pruning %s-%d: %s", SHARE_GROUP_STATE_TOPIC, p, e)
                continue
            if not self.service.serving(p) or self.broker.store.get(SHARE_GROUP_STATE_TOPIC, p) is not lg:
                continue
            lg.delete_records_before(min(offset, lg.end_offset))
            moved[p] = lg.start_offset
        if moved:
            log.info("pruned %d %s partition(s)", len(moved), SHARE_GROUP_STATE_TOPIC)
        return moved

    async def snapshot_and_prune(self) -> None:
        """Snapshot every key with updates since its last snapshot, then prune."""
        await self._write_served(lambda shard: shard.snapshot_records(),
                                 f"could not snapshot {SHARE_GROUP_STATE_TOPIC} at shutdown: %s")
        await self.prune()


def install(broker: Broker) -> ShareCoordinatorRuntime:
    runtime = ShareCoordinatorRuntime(broker)
    broker.share_coordinator = runtime.service
    return runtime
