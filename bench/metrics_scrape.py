"""What a Prometheus scrape of many share partitions costs, and how long it holds the broker up.

An in-process broker loads ``--groups`` x ``--partitions`` share partitions (each with a few
acquired records). Each run times ``BrokerMetrics.exposition`` (what ``GET /metrics`` answers)
in the text format and in OpenMetrics (what Prometheus asks for), while a task on the broker's
loop sleeps 1 ms over and over: its worst oversleep is how long a request could have waited
for the loop. Medians of ``--runs``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.test_share_manager import new_broker  # noqa: E402
from tests.test_share_wire_support import share_partition  # noqa: E402

FORMATS = {"text": "", "openmetrics": "application/openmetrics-text; version=1.0.0"}


async def worst_loop_wait(work) -> tuple[float, float]:
    """(seconds ``work`` took, worst extra wait of a 1 ms sleep on the loop meanwhile)."""
    worst, done = 0.0, False

    async def tick():
        nonlocal worst
        while not done:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - t - 0.001)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.05)
    worst = 0.0
    t = time.perf_counter()
    await work()
    took = time.perf_counter() - t
    done = True
    await ticker
    return took, worst


async def main(groups: int, partitions: int, runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        b = new_broker(Path(tmp))
        await b.start()
        try:
            topic_id = b.topics.create("t", partitions).topic_id
            for g in range(groups):
                for p in range(partitions):
                    sp = await share_partition(b, f"group-{g}", topic_id, p, "t")
                    sp.acquire("m", [(0, 4)], fetch_offset=0, max_records=500, batch_size=500)
            print(f"{groups * partitions} share partitions, {runs} runs, medians")
            for name, accept in FORMATS.items():
                took, waits = [], []
                for _ in range(runs):
                    t, w = await worst_loop_wait(lambda: b.metrics.exposition(accept))
                    took.append(t)
                    waits.append(w)
                print(f"{name:12s} scrape {statistics.median(took) * 1000:6.0f} ms   "
                      f"worst loop wait {statistics.median(waits) * 1000:5.1f} ms")
        finally:
            await b.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    asyncio.run(main(args.groups, args.partitions, args.runs))
