"""Broker CPU per produce while many share-group members wait in ShareFetch long polls.

Each run starts a broker subprocess, creates a topic of ``--partitions`` partitions and joins
``--groups`` share groups of M members each (raw ShareGroupHeartbeat and ShareFetch on one
connection per member, one thread each; every member's share session lists every partition).
Every member loops: ShareFetch with MaxWaitMs 2000, then ShareAcknowledge (accept) of what it
got. Once they are all parked, one connection produces ``--produces`` single-record batches,
``--rate`` a second, to the partitions in turn. Reported: broker CPU (cores) while producing,
its CPU per produce, and a check that every group received each record exactly once.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import cpu_seconds  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402
from tests.raw_client import RawClient  # noqa: E402
from tests.test_share_heartbeat_wire import heartbeat  # noqa: E402
from tests.test_share_wire_support import ACCEPT, ShareMember, acquired, create_topic, parts, produce_batches  # noqa: E402


def run_once(members: int, groups: int, partitions: int, produces: int, rate: float) -> tuple[float, float]:
    """(broker cores while producing, broker CPU ms per produce)."""
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", log_level="WARNING").start()
        stop = threading.Event()
        got: dict[str, list[tuple[int, int]]] = {}
        delivered = threading.Condition()
        joined: list[ShareMember] = []
        try:
            client = RawClient(broker.bootstrap, timeout_s=60)
            tid = create_topic(client, "t", partitions)
            for g in range(groups):
                for _ in range(members):
                    m = ShareMember(broker.bootstrap, f"g{g}")
                    m.client.sock.settimeout(60)
                    assert heartbeat(m.client, m.group, m.member_id, 0, ["t"]).error_code == 0
                    m.open([(tid, p) for p in range(partitions)])
                    joined.append(m)

            def consume(m: ShareMember) -> None:
                while not stop.is_set():
                    acks = {}
                    for key, part in parts(m.fetch(max_wait_ms=2000)).items():
                        for first, last, _ in acquired(part):
                            acks.setdefault(key, []).append((first, last, [ACCEPT]))
                            with delivered:
                                got.setdefault(m.group, []).extend((key[1], o) for o in range(first, last + 1))
                                delivered.notify_all()
                    if acks:
                        m.acknowledge(acks)

            threads = [threading.Thread(target=consume, args=(m,)) for m in joined]
            for t in threads:
                t.start()
            time.sleep(2)  # every member has sent its first fetch and parked
            cpu0, t0 = cpu_seconds(broker.proc.pid), time.monotonic()
            for i in range(produces):
                produce_batches(client, "t", [1], partition=i % partitions)
                time.sleep(max(0.0, t0 + (i + 1) / rate - time.monotonic()))
            with delivered:  # until the last record is delivered (or it never will be)
                delivered.wait_for(lambda: sum(map(len, got.values())) >= groups * produces, timeout=30)
            cpu, elapsed = cpu_seconds(broker.proc.pid) - cpu0, time.monotonic() - t0
            stop.set()
            for t in threads:
                t.join()
            for g in range(groups):
                records = sorted(got.get(f"g{g}", []))
                expected = [(p, o) for p in range(partitions) for o in range(len(range(p, produces, partitions)))]
                assert records == expected, f"group g{g} got {len(records)} deliveries"
            return cpu / elapsed, cpu / produces * 1000
        finally:
            stop.set()
            for m in joined:
                m.close()
            broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--members", type=int, action="append", help="members per group (repeatable; 2, 20, 200)")
    ap.add_argument("--groups", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--produces", type=int, default=300)
    ap.add_argument("--rate", type=float, default=100.0, help="produces a second")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print("| groups | members per group | partitions | broker cores while producing | broker CPU ms per produce "
          "| runs |")
    print("| --- | --- | --- | --- | --- | --- |")
    for members in args.members or [2, 20, 200]:
        results = [run_once(members, args.groups, args.partitions, args.produces, args.rate)
                   for _ in range(args.runs)]
        cores = statistics.median(r[0] for r in results)
        ms = statistics.median(r[1] for r in results)
        runs = ", ".join(f"{r[1]:.2f}" for r in results)
        print(f"| {args.groups} | {members} | {args.partitions} | {cores:.2f} | {ms:.2f} | {runs} |", flush=True)


if __name__ == "__main__":
    main()
