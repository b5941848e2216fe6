"""Creating and deleting thousands of topics: what AdminClient waits for, batch by batch.

Against a broker subprocess, confluent-kafka's AdminClient creates ``--topics`` one-partition
topics in CreateTopics requests of ``--batch`` topics, then the broker is stopped (SIGTERM) and
started again, twice (the second stop follows a start with nothing written since: an idle
broker's stop), then every topic is deleted in DeleteTopics requests of ``--batch``. Reported:
the total of each phase, the last batch of the creations and the first of the deletions (the
cost per topic while the broker holds them all: a cost that grows with the number of topics
shows here), and the stop and start times.

With ``--share``, before the restart one record goes to every topic and a share group of two
ShareConsumers subscribed to all the topics receives them all, so the deletions also remove
that group's share state (its ShareGroupStatePartitionMetadata lists every topic).

With ``--groups G``, G share groups (one member each, raw ShareGroupHeartbeats, subscribed to
one other topic) exist before the topics are created: each topic change concerns none of them.
Their session timeout is raised so that none expires during a slow run.

    .venv/bin/python bench/topic_admin.py [--topics 5000] [--batch 500] [--share] [--groups 10000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer, ShareConsumer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402
from tests.raw_client import RawClient  # noqa: E402

SHARE_GROUP_HEARTBEAT = 76
LONG_SESSIONS = {"group.share.session.timeout.ms": "3600000", "group.share.max.session.timeout.ms": "3600000"}


def batches(names: list[str], size: int):
    for i in range(0, len(names), size):
        yield names[i:i + size]


def timed_batches(admin: AdminClient, names: list[str], size: int, create: bool) -> list[float]:
    """Seconds per request, each waited for in full (every topic's future)."""
    out = []
    for chunk in batches(names, size):
        t0 = time.perf_counter()
        if create:
            futures = admin.create_topics([NewTopic(n, 1, 1) for n in chunk], request_timeout=600)
        else:
            futures = admin.delete_topics(chunk, request_timeout=600, operation_timeout=600)
        for f in futures.values():
            f.result()
        out.append(time.perf_counter() - t0)
    return out


def share_everything(bootstrap: str, admin: AdminClient, names: list[str]) -> float:
    """One record per topic, received by a share group subscribed to every topic; seconds taken."""
    group = "bench-share-group"
    reset = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                             incremental_configs=[reset])]).values():
        f.result()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for n in names:
        producer.produce(n, b"v")
        producer.poll(0)
    assert producer.flush(120) == 0
    t0 = time.perf_counter()
    consumers = [ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group}) for _ in range(2)]
    for c in consumers:
        c.subscribe(names)
    got, deadline = 0, time.monotonic() + 300
    while got < len(names):
        assert time.monotonic() < deadline, f"the share group received {got} of {len(names)} records"
        for c in consumers:
            got += sum(1 for m in c.poll(0.2) if m.error() is None)
    for c in consumers:
        c.close()
    return time.perf_counter() - t0


def admin_client(bootstrap: str) -> AdminClient:
    """An AdminClient that waits out slow requests: a CreateTopics of 500 topics could take
    longer than librdkafka's 60 s socket timeout before 5224562."""
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 300_000})


def join_groups(bootstrap: str, admin: AdminClient, groups: int) -> float:
    """``groups`` share groups of one member subscribed to "bench-other"; seconds taken."""
    for f in admin.create_topics([NewTopic("bench-other", 1, 1)]).values():
        f.result()
    t0 = time.perf_counter()
    with RawClient(bootstrap) as client:
        for g in range(groups):
            req = ShareGroupHeartbeatRequest(group_id=f"bench-group-{g}", member_id=f"bench-member-{g:013d}",
                                             member_epoch=0, subscribed_topic_names=["bench-other"])
            resp = client.request(SHARE_GROUP_HEARTBEAT, 1, req)
            assert resp.error_code == 0, resp
    return time.perf_counter() - t0


def restart(broker: BrokerProcess) -> tuple[float, float]:
    """Seconds a SIGTERM stop took, then a start."""
    t0 = time.perf_counter()
    broker.stop(timeout_s=600)
    t1 = time.perf_counter()
    broker.start(timeout_s=600)
    return t1 - t0, time.perf_counter() - t1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--share", action="store_true", help="give a share group state on every topic first")
    ap.add_argument("--groups", type=int, default=0, help="share groups that exist before the topics")
    args = ap.parse_args()
    names = [f"bench-topic-{i}" for i in range(args.topics)]
    with tempfile.TemporaryDirectory(prefix="kshare-topic-admin-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", LONG_SESSIONS if args.groups else None,
                               log_level="WARNING").start()
        try:
            admin = admin_client(broker.bootstrap)
            joined_s = join_groups(broker.bootstrap, admin, args.groups) if args.groups else None
            created = timed_batches(admin, names, args.batch, create=True)
            shared_s = share_everything(broker.bootstrap, admin, names) if args.share else None
            del admin  # (its handle would retry the stopped broker, loudly)
            restarts = [restart(broker) for _ in range(2)]
            admin = admin_client(broker.bootstrap)
            deleted = timed_batches(admin, names, args.batch, create=False)
        finally:
            broker.stop(timeout_s=600)
    last = args.topics - (len(created) - 1) * args.batch
    print(f"topics {args.topics}, batches of {args.batch}")
    if joined_s is not None:
        print(f"{args.groups} share groups joined in {joined_s:.2f} s")
    print(f"create: total {sum(created):.2f} s, last batch {created[-1]:.2f} s "
          f"({created[-1] / last * 1000:.2f} ms/topic)")
    if shared_s is not None:
        print(f"a share group received one record from each topic in {shared_s:.2f} s")
    for what, (stop_s, start_s) in zip(("stop", "idle stop"), restarts):
        print(f"{what} with {args.topics} topics: {stop_s:.2f} s; start: {start_s:.2f} s")
    print(f"delete: total {sum(deleted):.2f} s, first batch {deleted[0]:.2f} s "
          f"({deleted[0] / min(args.batch, args.topics) * 1000:.2f} ms/topic)")


if __name__ == "__main__":
    main()
