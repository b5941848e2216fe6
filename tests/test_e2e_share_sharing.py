"""Several real ShareConsumers (one per thread) in one share group: together they receive every
record exactly once, whether they outnumber the partitions or all share a single one."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.test_e2e_share_support import (
    TIMEOUT,
    ConsumerThread,
    consumer_config,
    create_topic,
    earliest_group,
    produce,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]


def consume_together(bootstrap: str, group: str, topic: str, n_consumers: int, produce_wave, waves: int,
                     expected_per_wave: int) -> list[ConsumerThread]:
    """Start the consumers, then produce ``waves`` waves, each once the previous one has been
    fully received (so consumers that joined late still get a share), and stop them."""
    # Small polls: the broker acquires whole log batches up to max.poll.records, so several
    # consumers get records even from one partition.
    cfg = consumer_config(bootstrap, group, extra={"max.poll.records": 5, "fetch.wait.max.ms": 100})
    threads = [ConsumerThread(cfg, topic) for _ in range(n_consumers)]
    for t in threads:
        t.start()
    try:
        for w in range(waves):
            produce_wave(w)
            deadline = time.monotonic() + TIMEOUT
            while sum(len(t.received) for t in threads) < (w + 1) * expected_per_wave:
                assert time.monotonic() < deadline, (
                    f"wave {w}: {sum(len(t.received) for t in threads)} of {(w + 1) * expected_per_wave} received")
                assert not any(t.errors for t in threads), [t.errors for t in threads]
                time.sleep(0.02)  # waiting on other threads' progress (checked against a deadline)
    finally:
        for t in threads:
            t.stop.set()
        for t in threads:
            t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a consumer did not close"
    assert not any(t.errors for t in threads), [t.errors for t in threads]
    return threads


def assert_exactly_once(threads: list[ConsumerThread], expected: set[tuple[int, int]]) -> None:
    counts = Counter((p, o) for t in threads for p, o, _ in t.received)
    duplicates = {k: n for k, n in counts.items() if n > 1}
    assert not duplicates, f"delivered more than once: {sorted(duplicates)[:20]}"
    missing, extra = sorted(expected - set(counts)), sorted(set(counts) - expected)
    assert not missing and not extra, f"missing {missing[:20]}, extra {extra[:20]}"


def test_three_consumers_share_one_partition(broker, topic_name):
    """Three consumers on a one-partition topic receive disjoint records that cover everything,
    and the work is actually shared."""
    create_topic(broker.bootstrap, topic_name)
    per_wave, waves = 40, 5

    def wave(w: int) -> None:
        produce(broker.bootstrap, topic_name, [f"w{w}-{i}".encode() for i in range(per_wave)])

    threads = consume_together(broker.bootstrap, earliest_group(broker.bootstrap), topic_name, 3, wave, waves, per_wave)
    assert_exactly_once(threads, {(0, o) for o in range(per_wave * waves)})
    busy = [len(t.received) for t in threads]
    assert all(busy), f"records per consumer: {busy}"


def test_more_consumers_than_partitions(broker, topic_name):
    """Three consumers, two partitions: every record of both partitions is consumed exactly once."""
    create_topic(broker.bootstrap, topic_name, partitions=2)
    per_partition, waves = 20, 4

    def wave(w: int) -> None:
        for p in range(2):
            produce(broker.bootstrap, topic_name, [f"w{w}-p{p}-{i}".encode() for i in range(per_partition)], partition=p)

    threads = consume_together(broker.bootstrap, earliest_group(broker.bootstrap), topic_name, 3, wave, waves,
                               2 * per_partition)
    assert_exactly_once(threads, {(p, o) for p in range(2) for o in range(per_partition * waves)})
    busy = [len(t.received) for t in threads]
    assert sum(1 for n in busy if n) >= 2, f"records per consumer: {busy}"
