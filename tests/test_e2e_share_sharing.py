"""Several real ShareConsumers (one per thread) in one share group: together they receive every
record exactly once, whether they outnumber the partitions or all share a single one, and
random acknowledgements from several of them keep the delivery rules."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer

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


DELIVERY_LIMIT = 5  # group.share.delivery.count.limit default


class RandomAcker(ConsumerThread):
    """An explicit-mode consumer that accepts, releases or rejects each record at random
    (seeded) and commits after every poll, logging (partition, offset) -> deliveries."""

    def __init__(self, config: dict, topic: str, seed: int, log: dict, lock: threading.Lock) -> None:
        super().__init__(config, topic)
        self.rnd, self.log, self.lock = random.Random(seed), log, lock

    def handle(self, consumer: ShareConsumer, messages: list) -> None:
        for m in messages:
            if m.error() is not None:
                self.errors.append(m.error())
                continue
            r = self.rnd.random()
            kind = AcknowledgeType.ACCEPT if r < 0.6 else AcknowledgeType.RELEASE if r < 0.9 else AcknowledgeType.REJECT
            with self.lock:
                self.log.setdefault((m.partition(), m.offset()), []).append((m.delivery_count(), kind))
            consumer.acknowledge(m, kind)
        if messages:
            failed = {tp: e for tp, e in consumer.commit_sync(TIMEOUT).items() if e is not None}
            if failed:
                self.errors.append(failed)


def test_random_acknowledgements_from_three_consumers_follow_the_delivery_rules(broker, topic_name):
    """Three consumers accept (60%), release (30%) or reject (10%) each record at random. Every
    record ends accepted or rejected once, or archived at the delivery limit; a released record
    comes back with its delivery count one higher; nothing is delivered after it was finished."""
    create_topic(broker.bootstrap, topic_name)
    n = 2000
    produce(broker.bootstrap, topic_name, [str(i).encode() for i in range(n)], one_per_batch=False)
    group = earliest_group(broker.bootstrap)
    log: dict[tuple[int, int], list] = {}
    lock = threading.Lock()
    threads = [
        RandomAcker(consumer_config(broker.bootstrap, group, explicit=True,
                                    extra={"max.poll.records": size, "fetch.wait.max.ms": 100}),
                    topic_name, seed, log, lock)
        for seed, size in ((1, 7), (2, 50), (3, 500))
    ]

    def finished(deliveries: list) -> bool:
        count, kind = deliveries[-1]
        return kind != AcknowledgeType.RELEASE or count >= DELIVERY_LIMIT

    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 3 * TIMEOUT
        while True:
            with lock:
                done = sum(1 for d in log.values() if finished(d))
            if done == n:
                break
            assert not any(t.errors for t in threads), [t.errors for t in threads]
            assert time.monotonic() < deadline, f"{done} of {n} records finished"
            time.sleep(0.05)  # waiting on the consumer threads' progress (checked against a deadline)
        # A record still (or wrongly) available below this marker is acquired no later than it.
        produce(broker.bootstrap, topic_name, [b"marker"])
        while (0, n) not in log:
            assert not any(t.errors for t in threads), [t.errors for t in threads]
            assert time.monotonic() < deadline, "the marker did not arrive"
            time.sleep(0.05)
    finally:
        for t in threads:
            t.stop.set()
        for t in threads:
            t.join(TIMEOUT)
    assert not any(t.errors for t in threads), [t.errors for t in threads]
    del log[(0, n)]
    assert sorted(log) == [(0, o) for o in range(n)]
    wrong = {k: d for k, d in log.items()
             if [c for c, _ in d] != list(range(1, len(d) + 1))
             or any(kind != AcknowledgeType.RELEASE for _, kind in d[:-1])
             or not finished(d) or len(d) > DELIVERY_LIMIT}
    assert not wrong, sorted(wrong.items())[:10]
    assert sum(len(d) for d in log.values()) > n * 1.3  # releases were redelivered
