"""``kshare-broker`` / ``python -m broker``: run a broker until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import resource
import signal
import sys

import uvloop

from .config import BrokerConfig, ConfigError, read_properties

log = logging.getLogger("kshare.broker")

# The cyclic collector's young-generation threshold (CPython's default is 700). A request
# allocates containers that live until it is answered (hundreds of run tuples for one
# acknowledgement); at 700 the collector runs every ~1,500 records of a redelivery workload
# and walks whatever is young at the time, such as those and the per-offset lists of ranges
# that just split: ~5% of the broker's CPU. Garbage cycles wait a little longer, that is all.
GC_THRESHOLDS = (10_000, 10, 10)


class StartupError(Exception):
    """The broker could not start for a reason other than its configuration (e.g. a port in use)."""


class ShutdownError(Exception):
    """A step of the graceful stop failed (e.g. a full disk); the others still ran."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="kshare-broker", description="Run a kshare broker (Kafka protocol, share groups).")
    ap.add_argument("--host", help="interface to listen on (default 127.0.0.1; sets listeners)")
    ap.add_argument("--port", type=int, help="port to listen on (default 9092; 0 picks a free port)")
    ap.add_argument("--data-dir", help="data directory (sets log.dirs; default ./data)")
    ap.add_argument("--config", help="a server.properties-style file with Kafka broker properties")
    ap.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE",
        help="set a Kafka broker property; repeatable; wins over --config",
    )
    ap.add_argument(
        "--metrics-port", type=int, metavar="PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics (HOST: --host, default 127.0.0.1; "
             "0 picks a free port); off by default",
    )
    ap.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return ap.parse_args(argv)


def metrics_address(args: argparse.Namespace) -> tuple[str, int] | None:
    """Where to serve metrics: None unless --metrics-port; on --host's interface, else loopback."""
    if args.metrics_port is None:
        return None
    if not 0 <= args.metrics_port <= 65535:
        raise ConfigError(f"--metrics-port must be between 0 and 65535, got {args.metrics_port}")
    return (args.host if args.host is not None else "127.0.0.1", args.metrics_port)


def build_config(args: argparse.Namespace) -> BrokerConfig:
    props: dict[str, str] = {}
    if args.config:
        try:
            props.update(read_properties(args.config))
        except OSError as e:
            raise ConfigError(f"cannot read --config {args.config}: {e.strerror}") from None
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override expects KEY=VALUE, got {item!r}")
        props[key.strip()] = value.strip()
    if args.host is not None or args.port is not None or "listeners" not in props:
        host = args.host if args.host is not None else "127.0.0.1"
        port = args.port if args.port is not None else 9092
        props["listeners"] = f"PLAINTEXT://{host}:{port}"
    if args.data_dir is not None:
        props["log.dirs"] = args.data_dir
    elif "log.dirs" not in props and "log.dir" not in props:
        props["log.dirs"] = "./data"
    config = BrokerConfig(props)
    from coordinator.group.runtime import check_broker_config

    check_broker_config(config)  # before the data directory is opened, as Kafka checks its whole config first
    return config


async def serve(config: BrokerConfig, metrics: tuple[str, int] | None = None) -> None:
    from .broker import Broker
    from .log import KafkaStorageError

    # Handlers first: once "listening" is printed, SIGTERM must mean a graceful stop.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # the JVM stops Kafka gracefully on each
        loop.add_signal_handler(sig, stop.set)
    try:
        broker = Broker(config, metrics_address=metrics)
    except (OSError, KafkaStorageError) as e:  # a data directory that is a file, not writable, unreadable, ...
        raise StartupError(f"cannot open the data directory {config.data_dir}: {e}") from None
    try:
        host, port = await broker.start()
    except KafkaStorageError as e:  # e.g. the internal topics cannot be created on a full disk
        await broker.stop()
        raise StartupError(f"cannot write to the data directory {config.data_dir}: {e}") from None
    except OSError as e:
        await broker.stop()
        where = config.served_listener()
        if metrics is not None and broker.metrics_bound is None:
            where = f"metrics port {metrics[0]}:{metrics[1]}"
        raise StartupError(f"cannot listen on {where}: {e.strerror or e}") from None
    if broker.metrics_bound is not None:
        print(f"kshare metrics on {broker.metrics_bound[0]}:{broker.metrics_bound[1]}", flush=True)
    print(f"kshare listening on {host}:{port}", flush=True)
    await stop.wait()
    if not await broker.stop():
        raise ShutdownError("the broker stopped with errors (logged above); the next start recovers its logs")


def raise_open_files_limit() -> None:
    """Take the hard limit on open files, as the JVM under Kafka does (MaxFDLimit): a log holds a
    descriptor per segment and each client a socket, so a 1024 soft limit (systemd's default)
    runs out with a few hundred partitions, and a flush that cannot open its files fails."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("raised the open files limit from %d to %d", soft, target)
        except (ValueError, OSError) as e:
            log.warning("could not raise the open files limit from %d: %s", soft, e)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = build_config(args)
        gc.set_threshold(*GC_THRESHOLDS)
        raise_open_files_limit()
        uvloop.run(serve(config, metrics_address(args)))
    except ConfigError as e:
        print(f"kshare-broker: {e}", file=sys.stderr)
        return 2
    except (StartupError, ShutdownError) as e:
        print(f"kshare-broker: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
