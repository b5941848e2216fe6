"""DescribeLogDirs: the broker's one log directory, the size of each partition in it and the
space on its volume (``kafka-log-dirs.sh``, kafka-python's ``describe_log_dirs``, the topic sizes
of Kafka UIs).

As Kafka's ReplicaManager.describeLogDirs: null Topics means every partition; partitions named
but not here are left out, and so are topics with none left; OffsetLag is 0 (one replica: the
high watermark is the log end); TotalBytes and UsableBytes (v4) are the volume's total and
available bytes. A directory that cannot be examined is answered with its error alone.
"""

from __future__ import annotations

import logging
import os

from protocol.errors import ErrorCode
from protocol.messages.describe_log_dirs_response import (
    DescribeLogDirsPartition,
    DescribeLogDirsResponse,
    DescribeLogDirsResult,
    DescribeLogDirsTopic,
)

API_KEY = 35
MIN_VERSION, MAX_VERSION = 1, 4

log = logging.getLogger("kshare.admin")


def error_response(req, version: int, code: int) -> DescribeLogDirsResponse:
    """Kafka's getErrorResponse: no results, the error at the top level (v3+; none before)."""
    return DescribeLogDirsResponse(error_code=code)


async def handle(ctx, req) -> DescribeLogDirsResponse:
    broker = ctx.broker
    log_dir = os.path.abspath(broker.data_dir)
    try:
        volume = os.statvfs(log_dir)
    except OSError as e:
        log.warning("cannot describe log directory %s: %s", log_dir, e)
        result = DescribeLogDirsResult(error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=log_dir, topics=[])
        return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=[result])
    wanted = None if req.topics is None else {(t.topic, p) for t in req.topics for p in t.partitions}
    topics: dict[str, list[DescribeLogDirsPartition]] = {}
    for lg in broker.store.partitions():
        if wanted is None or (lg.topic, lg.partition) in wanted:
            topics.setdefault(lg.topic, []).append(DescribeLogDirsPartition(
                partition_index=lg.partition, partition_size=lg.size, offset_lag=0, is_future_key=False))
    result = DescribeLogDirsResult(
        error_code=0, log_dir=log_dir,
        topics=[DescribeLogDirsTopic(name=name, partitions=sorted(ps, key=lambda p: p.partition_index))
                for name, ps in sorted(topics.items())],
        total_bytes=volume.f_blocks * volume.f_frsize, usable_bytes=volume.f_bavail * volume.f_frsize,
    )
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=[result])
