"""``kshare-lag-report``: share-group lag (KIP-1226) from ``__share_group_state``, with Spark.

    kshare-lag-report --bootstrap-server 127.0.0.1:9092 --out lag-report [--group G] [--master local[*]]

Writes DIR/lag.csv, DIR/lag.parquet, DIR/report.html (and totals, history and delivery CSVs);
DIR/state-export/ keeps the exported state so the next run reads only new records.
Works against kshare and Apache Kafka 4.2 alike (it speaks only the Kafka protocol).
"""

from __future__ import annotations

import argparse
import sys

from .report import DEFAULT_DELIVERY_COUNT_LIMIT, DEFAULT_HISTORY_POINTS


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="kshare-lag-report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap-server", required=True, help="host:port[,host:port...]")
    ap.add_argument("--out", required=True, help="output directory (created if missing)")
    ap.add_argument("--group", action="append", help="only this share group (repeatable); default: all")
    ap.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    ap.add_argument("--state-topic", default="__share_group_state",
                    help="topic holding the share state (default __share_group_state; a copy works too)")
    ap.add_argument("--history-points", type=int, default=DEFAULT_HISTORY_POINTS,
                    help=f"time buckets of the lag history (default {DEFAULT_HISTORY_POINTS})")
    ap.add_argument("--delivery-count-limit", type=int, default=DEFAULT_DELIVERY_COUNT_LIMIT,
                    help="group.share.delivery.count.limit, to tell rejected records from records archived "
                         f"at the limit (default {DEFAULT_DELIVERY_COUNT_LIMIT})")
    ap.add_argument("--shuffle-partitions", type=int, default=None, help="spark.sql.shuffle.partitions")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from .progress import Progress
    from .report import build_report
    from .session import spark_session

    from pyspark.sql import SparkSession

    ours = SparkSession.getActiveSession() is None  # an embedding program's session is left running
    spark = spark_session(args.master, app_name="kshare-lag-report", shuffle_partitions=args.shuffle_partitions)
    try:
        with Progress(spark) as progress:
            result = build_report(spark, args.bootstrap_server, args.out, groups=args.group,
                                  state_topic=args.state_topic, history_points_max=args.history_points,
                                  delivery_count_limit=args.delivery_count_limit, progress=progress)
            progress.step(f"done: {len(result.lag)} share-partitions, {result.exported} new state records")
    finally:
        if ours:
            spark.stop()
    print(result.files["report.html"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
