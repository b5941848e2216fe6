"""Helpers for the Spark job tests (nothing here is collected).

``spark`` is one local[2] SparkSession for the whole test process (the JVM takes seconds to
start): two shuffle partitions, no UI. Under docker-compose's e2e run (KSHARE_BOOTSTRAP set,
``-m e2e``) the Spark tests are deselected and the image has no pyspark, so importing this
module skips them there instead of failing collection; everywhere else pyspark is required.
"""

from __future__ import annotations

import functools
import os

import pytest

if os.environ.get("KSHARE_BOOTSTRAP"):
    pytest.importorskip("pyspark")

from protocol import coordinator_serde  # noqa: E402
from protocol.records import build_batch  # noqa: E402
from tests.raw_client import RawClient  # noqa: E402
from tests.test_produce_support import produce  # noqa: E402
from tests.test_share_state_support import create_topic, unique  # noqa: E402, F401 (re-exported)



@functools.cache
def _session():
    from spark_jobs.session import spark_session

    return spark_session("local[2]", app_name="kshare-tests", shuffle_partitions=2,
                         conf={"spark.default.parallelism": "2", "spark.driver.memory": "1g"})


@pytest.fixture(scope="session")
def spark():
    return _session()


def produce_state_records(client: RawClient, topic: str, partition: int, records, *, compression: int = 0,
                          timestamp_ms: int | None = None) -> tuple[int, int]:
    """Produce coordinator records ``[(key object, value object or None)]`` as one batch, the
    way the share coordinator writes them; returns (first, last) offset."""
    encoded = [(coordinator_serde.encode_key(k), coordinator_serde.encode_value(v), None) for k, v in records]
    p = produce(client, topic, build_batch(encoded, compression=compression, timestamp_ms=timestamp_ms),
                partition=partition)
    assert p.error_code == 0, p.error_code
    return p.base_offset, p.base_offset + len(encoded) - 1
