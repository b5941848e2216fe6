"""Acknowledgement round trips after the client was idle: kshare against Redis Streams.

Why: in ``share_throughput.py`` at K=1 a ShareConsumer's poll hands over a whole log batch
(~7,000 records, as Kafka's batch-optimized acquisition does), which librdkafka takes ~15 ms to
receive and parse. The broker is idle meanwhile, and the first ``commit_sync`` after each poll
is the slowest of the run: one commit in 14, so it sets the p99. Redis' consumers read 500
entries per XREADGROUP and never leave their server idle that long. This script asks whether
that commit is slow because of what kshare does, or because of the idle time itself.

For each system and each ``--idle`` (ms), one run: kshare with one confluent-kafka
ShareConsumer (explicit mode; per chunk of 500 records, ``acknowledge`` each, sleep the idle
time, then time ``commit_sync``); Redis with one consumer (XREADGROUP COUNT 500, sleep, then time
the pipelined XACK of the 500 ids). Runs alternate between the systems. A control times a fixed
piece of pure Python work in this process after the same sleeps: on a VM whose idle vCPU is
descheduled, it slows down too, with no server involved.

    .venv/bin/python bench/ack_after_idle.py [--records 100000] [--idle 0 --idle 17] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import percentile  # noqa: E402
from confluent_kafka import AcknowledgeType, ShareConsumer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from share_throughput import (  # noqa: E402
    RedisServer,
    ensure_redis_client,
    find_redis_server,
    prefill_kshare,
    prefill_redis,
)

from tests.broker_process import BrokerProcess  # noqa: E402

CHUNK = 500


def kshare_run(tmp: Path, records: int, idle_s: float) -> list[float]:
    """Commit round trips (seconds) of one ShareConsumer reading ``records`` records."""
    broker = BrokerProcess(tmp / "data", log_level="WARNING").start()
    try:
        topic, group = "idle", "idle-group"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        (future,) = admin.incremental_alter_configs([ConfigResource(
            ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
                "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values()
        future.result(30)
        del admin, future
        prefill_kshare(broker.bootstrap, topic, records, 100, 1, 1_000_000)
        consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                                  "share.acknowledgement.mode": "explicit", "max.poll.records": CHUNK,
                                  "log_level": 3})
        consumer.subscribe([topic])
        latencies: list[float] = []
        done, deadline = 0, time.monotonic() + 300
        while done < records and time.monotonic() < deadline:
            msgs = consumer.poll(0.05)
            if not msgs:
                continue
            msgs = list(msgs)
            for lo in range(0, len(msgs), CHUNK):
                for m in msgs[lo:lo + CHUNK]:
                    consumer.acknowledge(m, AcknowledgeType.ACCEPT)
                if idle_s:
                    time.sleep(idle_s)
                t = time.perf_counter()
                outcome = consumer.commit_sync()
                latencies.append(time.perf_counter() - t)
                if any(err is not None for err in outcome.values()):
                    raise RuntimeError(f"commit_sync: {outcome}")
                done += len(msgs[lo:lo + CHUNK])
        consumer.close()
        if done < records:
            raise RuntimeError(f"only {done} of {records} records consumed")
        return latencies
    finally:
        broker.stop()


def redis_run(tmp: Path, binary: str, records: int, idle_s: float) -> list[float]:
    """XACK round trips (seconds) of one consumer reading ``records`` entries, 500 at a time."""
    import redis

    server = RedisServer(binary, tmp).start()
    try:
        prefill_redis(server.port, "idle", "idle-group", records, 100)
        r = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=60, protocol=2)
        latencies: list[float] = []
        done = 0
        while done < records:
            reply = r.xreadgroup("idle-group", "c0", {"idle": ">"}, count=CHUNK)
            ids = [entry_id for _, entries in reply for entry_id, _ in entries]
            if not ids:
                break
            if idle_s:
                time.sleep(idle_s)
            t = time.perf_counter()
            pipe = r.pipeline(transaction=False)
            pipe.xack("idle", "idle-group", *ids)
            pipe.execute()
            latencies.append(time.perf_counter() - t)
            done += len(ids)
        r.close()
        if done < records:
            raise RuntimeError(f"only {done} of {records} entries consumed")
        return latencies
    finally:
        server.stop()


def control(idle_s: float, rounds: int = 200) -> list[float]:
    """Seconds a fixed piece of pure Python work takes right after sleeping ``idle_s``."""
    data = list(range(2000))
    out = []
    for _ in range(rounds):
        if idle_s:
            time.sleep(idle_s)
        t = time.perf_counter()
        sorted({x * 7 % 2003: x for x in data}.items())
        out.append(time.perf_counter() - t)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--idle", type=float, action="append", help="ms of sleep before each ack; repeatable")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    idles = args.idle or [0.0, 17.0]
    binary = find_redis_server() if ensure_redis_client() else None
    if binary is None:
        print("Redis is not available: only kshare runs")
    rows: dict[tuple[str, float], list[tuple[float, float]]] = {}
    for run in range(args.runs):
        for idle in idles:
            systems = ["kshare", "redis"] if binary else ["kshare"]
            for system in systems if run % 2 == 0 else reversed(systems):
                with tempfile.TemporaryDirectory(prefix="kshare-idle-") as tmp:
                    lat = (kshare_run(Path(tmp), args.records, idle / 1000) if system == "kshare"
                           else redis_run(Path(tmp), binary, args.records, idle / 1000))
                p50, p99 = statistics.median(lat) * 1e3, percentile(lat, 99) * 1e3
                rows.setdefault((system, idle), []).append((p50, p99))
                print(f"run {run + 1} {system:6} idle {idle:g} ms: {len(lat)} acks, p50 {p50:.2f} ms, p99 {p99:.2f} ms",
                      flush=True)
            c = control(idle / 1000)
            rows.setdefault(("control", idle), []).append((statistics.median(c) * 1e3, percentile(c, 99) * 1e3))
    print(f"\nmedians over {args.runs} runs (the control: pure Python work in this process, ms)")
    print("| system | idle before each ack ms | ack p50 ms | ack p99 ms |")
    print("|---|---|---|---|")
    for (system, idle), xs in rows.items():
        print(f"| {system} | {idle:g} | {statistics.median(x[0] for x in xs):.3f} "
              f"| {statistics.median(x[1] for x in xs):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
