"""The default persister: the share coordinator's RPCs as in-process calls.

It builds the request messages a network persister would send, and hands them to the share
coordinator service in this process, so both paths exercise the same coordinator code. One
shortcut: a write's state batches are the shard's own StateBatch tuples (same fields), marked
as the normal form a share partition writes, which the shard takes without converting or
checking them again.
"""

from __future__ import annotations

from itertools import repeat
from uuid import UUID

from coordinator.share.combiner import NormalBatches
from coordinator.share.combiner import StateBatch as ShardStateBatch
from protocol.messages import (
    delete_share_group_state_request as delete_req,
    initialize_share_group_state_request as init_req,
    read_share_group_state_request as read_req,
    read_share_group_state_summary_request as summary_req,
    write_share_group_state_request as write_req,
)

from .api import ReadResult, StateBatch, SummaryResult, TopicPartition


def _by_topic(partitions: list[TopicPartition]) -> dict[UUID, list[int]]:
    out: dict[UUID, list[int]] = {}
    for topic_id, p in partitions:
        out.setdefault(topic_id, []).append(p)
    return out


def _single(response):
    """The one partition result of a single-partition request."""
    return response.results[0].partitions[0]


class InProcessPersister:
    def __init__(self, service) -> None:
        self.service = service

    async def initialize_state(self, group_id, topic_id, partition, *, state_epoch, start_offset):
        req = init_req.InitializeShareGroupStateRequest(group_id=group_id, topics=[init_req.InitializeStateData(
            topic_id=topic_id,
            partitions=[init_req.PartitionData(partition=partition, state_epoch=state_epoch, start_offset=start_offset)],
        )])
        r = _single(await self.service.initialize_state(req))
        return r.error_code, r.error_message

    async def read_state(self, group_id, topic_id, partition, *, leader_epoch) -> ReadResult:
        req = read_req.ReadShareGroupStateRequest(group_id=group_id, topics=[read_req.ReadStateData(
            topic_id=topic_id, partitions=[read_req.PartitionData(partition=partition, leader_epoch=leader_epoch)],
        )])
        r = _single(await self.service.read_state(req))
        return ReadResult(
            r.error_code, r.error_message, r.state_epoch, r.start_offset,
            [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in r.state_batches],
        )

    async def write_state(self, group_id, topic_id, partition, *, state_epoch, leader_epoch, start_offset,
                          delivery_complete_count, batches: list[StateBatch]):
        req = write_req.WriteShareGroupStateRequest(group_id=group_id, topics=[write_req.WriteStateData(
            topic_id=topic_id,
            partitions=[write_req.PartitionData(
                partition=partition, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
                delivery_complete_count=delivery_complete_count,
                # The shortcut of the module docstring; tuple.__new__ over repeat() makes the
                # StateBatch tuples without a Python-level call per batch.
                state_batches=NormalBatches(map(tuple.__new__, repeat(ShardStateBatch), batches)),
            )],
        )])
        r = _single(await self.service.write_state(req, 1))
        return r.error_code, r.error_message

    async def delete_state(self, group_id, partitions):
        req = delete_req.DeleteShareGroupStateRequest(group_id=group_id, topics=[
            delete_req.DeleteStateData(topic_id=t, partitions=[delete_req.PartitionData(partition=p) for p in ps])
            for t, ps in _by_topic(partitions).items()
        ])
        resp = await self.service.delete_state(req)
        return {(t.topic_id, p.partition): (p.error_code, p.error_message) for t in resp.results for p in t.partitions}

    async def read_summary(self, group_id, partitions):
        req = summary_req.ReadShareGroupStateSummaryRequest(group_id=group_id, topics=[
            summary_req.ReadStateSummaryData(topic_id=t, partitions=[summary_req.PartitionData(partition=p) for p in ps])
            for t, ps in _by_topic(partitions).items()
        ])
        resp = await self.service.read_state_summary(req, 1)
        return {
            (t.topic_id, p.partition): SummaryResult(
                p.error_code, p.error_message, p.state_epoch, p.leader_epoch, p.start_offset, p.delivery_complete_count
            )
            for t in resp.results for p in t.partitions
        }
