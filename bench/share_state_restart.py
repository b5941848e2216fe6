"""Share-state restart: how fast a broker serves 1,000 share-partitions' state again after
1,000,000 state updates, and how much disk ``__share_group_state`` holds.

Workload (over the wire, against a broker subprocess): one topic with ``--partitions``
partitions and ``--groups`` share groups, i.e. groups x partitions share-partitions (1,000 by
default). Every share-partition is initialised, then written ``--rounds`` times (1,000 by
default: 1,000,000 updates) with WriteShareGroupState v1: each write moves the start offset on
by 10 and carries two state batches (AVAILABLE and ACKNOWLEDGED) and a delivery-complete count,
as a share-partition leader does. Like Kafka's persister, which batches the writes of one
group to one coordinator, a request holds one group's writes for all its partitions; requests
are pipelined on a few connections.

Measured, each the median of ``--runs``:

- *restart-to-serving*: from spawning the broker process until ReadShareGroupStateSummary
  answers every share-partition without error (loading partitions answer
  COORDINATOR_LOAD_IN_PROGRESS, which the client retries at once);
  - after kill -9 (the log holds the whole history since the last prune),
  - after a graceful stop (the coordinator snapshots every key and prunes on the way down);
- disk held by ``__share_group_state`` right after the writes, after a periodic prune, and
  after a graceful stop.

The writing broker is killed after the writes and its data directory copied: the copy serves
the kill -9 restarts and the periodic prune, the original recovers, replays every key in the
background, stops gracefully and serves the graceful restarts.

    .venv/bin/python bench/share_state_restart.py [--rounds 1000] [--runs 3] [--segment-bytes 1048576]

``--segment-bytes`` sets ``share.coordinator.state.topic.segment.bytes`` (Kafka's smallest
valid segment.bytes is 1 MiB; pruning frees whole segments only, so with the 100 MiB default
this data set never fills one and nothing is freed).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from protocol.messages import initialize_share_group_state_request as ireq
from protocol.messages import read_share_group_state_summary_request as sreq
from protocol.messages import write_share_group_state_request as wreq
from protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from tests.broker_process import BrokerProcess
from tests.raw_client import RawClient

INITIALIZE, WRITE, SUMMARY, CREATE_TOPICS = 83, 85, 87, 19
STATE_TOPIC = "__share_group_state"
LOAD_IN_PROGRESS = 14


def disk_bytes(data_dir: Path) -> int:
    return sum(f.stat().st_size for d in data_dir.glob(f"{STATE_TOPIC}-*") for f in d.iterdir() if f.is_file())


def segment_count(data_dir: Path) -> int:
    return sum(1 for d in data_dir.glob(f"{STATE_TOPIC}-*") for _ in d.glob("*.log"))


def peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def write_request(group: str, topic_id, partitions: int, rnd: int):
    start = 10 * rnd
    return wreq.WriteShareGroupStateRequest(group_id=group, topics=[wreq.WriteStateData(topic_id=topic_id, partitions=[
        wreq.PartitionData(partition=p, state_epoch=0, leader_epoch=0, start_offset=start, delivery_complete_count=5,
                           state_batches=[wreq.StateBatch(start + 2, start + 4, 0, 1 + rnd % 3),
                                          wreq.StateBatch(start + 5, start + 9, 2, 1)])
        for p in range(partitions)])])


def summary_requests(groups: list[str], topic_id, partitions: int):
    return [sreq.ReadShareGroupStateSummaryRequest(group_id=g, topics=[sreq.ReadStateSummaryData(
        topic_id=topic_id, partitions=[sreq.PartitionData(partition=p) for p in range(partitions)])]) for g in groups]


def pipelined(client: RawClient, api: int, version: int, requests, window: int = 16) -> list:
    """Send ``requests`` keeping up to ``window`` in flight; returns the responses in order."""
    out = []
    sent = 0
    for req in requests:
        client.send_raw(client.frame(api, version, req))
        sent += 1
        if sent - len(out) >= window:
            out.append(client.read_response(api, version))
    while len(out) < sent:
        out.append(client.read_response(api, version))
    return out


def check(responses) -> None:
    for r in responses:
        for t in r.results:
            for p in t.partitions:
                assert p.error_code == 0, (p.partition, p.error_code, p.error_message)


def write_phase(b: BrokerProcess, groups: list[str], partitions: int, rounds: int):
    with RawClient(b.bootstrap, timeout_s=120) as c:
        resp = c.request(CREATE_TOPICS, 7, CreateTopicsRequest(topics=[CreatableTopic(
            name="bench", num_partitions=partitions, replication_factor=1)], timeout_ms=10000))
        topic_id = resp.topics[0].topic_id
        check(pipelined(c, INITIALIZE, 0, [ireq.InitializeShareGroupStateRequest(group_id=g, topics=[
            ireq.InitializeStateData(topic_id=topic_id, partitions=[
                ireq.PartitionData(partition=p, state_epoch=0, start_offset=0) for p in range(partitions)])])
            for g in groups]))
        t0 = time.perf_counter()
        for rnd in range(rounds):
            check(pipelined(c, WRITE, 1, [write_request(g, topic_id, partitions, rnd) for g in groups]))
            if rnd % 100 == 99:
                rate = (rnd + 1) * len(groups) * partitions / (time.perf_counter() - t0)
                print(f"  {rnd + 1}/{rounds} rounds, {rate:,.0f} updates/s", flush=True)
        elapsed = time.perf_counter() - t0
    return topic_id, elapsed


def serving(b: BrokerProcess, requests, expect_start: int, deadline_s: float = 600.0) -> None:
    """Until every share-partition's summary answers without error (retrying loading ones)."""
    deadline = time.monotonic() + deadline_s
    with RawClient(b.bootstrap, timeout_s=120) as c:
        todo = list(requests)
        while todo:
            assert time.monotonic() < deadline, "not serving in time"
            retry = []
            for req, resp in zip(todo, pipelined(c, SUMMARY, 1, todo)):
                parts = [p for t in resp.results for p in t.partitions]
                if any(p.error_code == LOAD_IN_PROGRESS for p in parts):
                    retry.append(req)
                    continue
                for p in parts:
                    assert p.error_code == 0, (p.error_code, p.error_message)
                    assert p.start_offset == expect_start, (p.partition, p.start_offset)
            todo = retry


def last_line(b: BrokerProcess, text: str) -> str:
    return [ln for ln in b.log().splitlines() if text in ln][-1]


def wait_for_line(b: BrokerProcess, text: str, *, after: str, timeout_s: float) -> bool:
    """Until the broker logs ``text`` after its latest ``after`` line; False on timeout."""
    deadline = time.monotonic() + timeout_s
    while text not in b.log().split(after)[-1]:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def restart_to_serving(b: BrokerProcess, requests, expect_start: int) -> float:
    t0 = time.perf_counter()
    b.start(timeout_s=600)
    serving(b, requests, expect_start)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--segment-bytes", type=int, default=1 << 20)
    args = ap.parse_args()
    groups = [f"bench-group-{i}" for i in range(args.groups)]
    keys = args.groups * args.partitions
    expect_start = 10 * (args.rounds - 1)
    with tempfile.TemporaryDirectory(prefix="kshare-bench-") as tmp:
        data = Path(tmp) / "data"
        overrides = {"share.coordinator.state.topic.segment.bytes": str(args.segment_bytes)}
        b = BrokerProcess(data, overrides, log_level="INFO")
        c = BrokerProcess(Path(tmp) / "crashed", dict(overrides), log_level="INFO")
        try:
            b.start()
            print(f"writing {keys * args.rounds:,} updates to {keys:,} share-partitions "
                  f"({args.groups} groups x {args.partitions} partitions)", flush=True)
            topic_id, elapsed = write_phase(b, groups, args.partitions, args.rounds)
            requests = summary_requests(groups, topic_id, args.partitions)
            serving(b, requests, expect_start)
            disk_written = disk_bytes(data)
            segments_written = segment_count(data)
            rss = peak_rss_mb(b.proc.pid)
            print(f"write phase: {elapsed:.1f} s, {keys * args.rounds / elapsed:,.0f} updates/s, "
                  f"broker peak RSS {rss:.0f} MB", flush=True)
            b.kill()
            crashed = Path(tmp) / "crashed"
            shutil.copytree(data, crashed)

            # Crash: every restart reads the whole history since the last prune (none so far).
            crash = []
            for _ in range(args.runs):
                crash.append(restart_to_serving(c, requests, expect_start))
                print(f"  restart after kill -9: {crash[-1]:.2f} s", flush=True)
                c.kill()
            crash_line = last_line(c, "loaded __share_group_state")

            # A periodic prune, on the crashed copy: restart with a short interval and wait for it.
            c.overrides["share.coordinator.state.topic.prune.interval.ms"] = "500"
            c.start(timeout_s=600)
            serving(c, requests, expect_start)
            if not wait_for_line(c, "pruned", after="loaded __share_group_state", timeout_s=20):
                print("  (nothing to prune: no key was snapshotted twice)", flush=True)
            disk_pruned, segments_pruned = disk_bytes(crashed), segment_count(crashed)
            c.kill()

            # Graceful: the writing broker recovers from its crash, replays every key in the
            # background, and stops; every later start reads one snapshot per key.
            b.start(timeout_s=600)
            serving(b, requests, expect_start)
            assert wait_for_line(b, "replayed", after="loaded __share_group_state", timeout_s=300)
            assert b.stop() == 0
            disk_stopped, segments_stopped = disk_bytes(data), segment_count(data)
            graceful = []
            for _ in range(args.runs):
                graceful.append(restart_to_serving(b, requests, expect_start))
                print(f"  restart after a graceful stop: {graceful[-1]:.2f} s", flush=True)
                assert b.stop() == 0
            graceful_line = last_line(b, "loaded __share_group_state")
            for broker in (b, c):
                assert "Traceback" not in broker.log(), broker.log()[-5000:]
        finally:
            for broker in (b, c):
                broker.kill()

    mb = 1 << 20
    print()
    print(f"share-partitions: {keys:,}; state updates: {keys * args.rounds:,}; "
          f"state topic segment.bytes: {args.segment_bytes:,}")
    print(f"restart-to-serving after kill -9:        median {statistics.median(crash):.2f} s  "
          f"(runs: {', '.join(f'{x:.2f}' for x in crash)})")
    print(f"    {crash_line.split(': ', 1)[1]}")
    print(f"restart-to-serving after graceful stop:  median {statistics.median(graceful):.2f} s  "
          f"(runs: {', '.join(f'{x:.2f}' for x in graceful)})")
    print(f"    {graceful_line.split(': ', 1)[1]}")
    print(f"__share_group_state on disk after the writes:      {disk_written / mb:8.1f} MiB in {segments_written} segments")
    print(f"__share_group_state on disk after a periodic prune: {disk_pruned / mb:8.1f} MiB in {segments_pruned} segments")
    print(f"__share_group_state on disk after a graceful stop:  {disk_stopped / mb:8.1f} MiB in {segments_stopped} segments")
    return 0


if __name__ == "__main__":
    sys.exit(main())
