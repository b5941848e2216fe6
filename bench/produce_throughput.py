"""Produce throughput: one confluent-kafka producer against a kshare broker subprocess.

For each compression (none, lz4) a fresh broker is started with a temporary data directory;
three runs each send ``--records`` records of ``--size`` bytes (linger.ms 5, librdkafka's
defaults otherwise, i.e. acks=all) to a new topic and time from the first produce() until
flush() returns, i.e. until every record is acknowledged. Delivery reports go to one
producer-wide callback for failures only (``delivery.report.only.error``): a per-message Python
callback costs the client more CPU than the broker spends per record on this 2-core box. The
log end offset is checked afterwards instead. Reports the
median run's records/s and MB/s (of record values) and the broker's peak RSS (VmHWM).

    .venv/bin/python bench/produce_throughput.py [--records 1000000] [--size 100] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from bench._common import peak_rss_mb  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402


def one_run(bootstrap: str, topic: str, records: int, size: int, compression: str) -> float:
    failed = []

    def on_delivery(err, _msg) -> None:  # failures only (delivery.report.only.error)
        if err is not None:
            failed.append(err)

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "compression.type": compression,
        "queue.buffering.max.messages": 1_000_000,
        "delivery.report.only.error": True,
        "on_delivery": on_delivery,
    })
    producer.produce(topic, b"warm-up")  # creates the topic, connects
    producer.flush(30)
    value = os.urandom(size // 2).hex().encode()[:size]
    produce = producer.produce
    poll = producer.poll
    start = time.perf_counter()
    for i in range(records):
        try:
            produce(topic, value)
        except BufferError:
            poll(0.001)
            produce(topic, value)
    left = producer.flush(120)
    elapsed = time.perf_counter() - start
    if left or failed:
        raise RuntimeError(f"{left} undelivered, {len(failed)} failed (first: {failed[:1]})")
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench"})
    low, high = check.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    check.close()
    if high - low != records + 1:
        raise RuntimeError(f"log holds {high - low} records, expected {records + 1}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--compression", action="append", help="repeatable; default none and lz4")
    args = ap.parse_args()
    for compression in args.compression or ["none", "lz4"]:
        with tempfile.TemporaryDirectory(prefix="kshare-bench-") as tmp:
            broker = BrokerProcess(Path(tmp) / "data", log_level="WARNING").start()
            try:
                times = []
                for run in range(args.runs):
                    times.append(one_run(broker.bootstrap, f"bench-{compression}-{run}", args.records, args.size,
                                         compression))
                    print(f"  {compression} run {run + 1}: {args.records / times[-1]:,.0f} records/s", flush=True)
                rss = peak_rss_mb(broker.proc.pid)
            finally:
                code = broker.stop()
            med = statistics.median(times)
            print(
                f"compression={compression}: {args.records / med:,.0f} records/s, "
                f"{args.records * args.size / med / 1e6:.1f} MB/s (median of {args.runs}), "
                f"broker peak RSS {rss:.0f} MiB, broker exit {code}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
