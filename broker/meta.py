"""``meta.properties``: the node id and cluster id a data directory belongs to.

Written once in Kafka's KRaft format and checked on every start, so an id never changes under
a data directory and a directory is never opened by a broker it does not belong to.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from dataclasses import dataclass

from protocol.uuids import random_uuid, uuid_from_str, uuid_to_str

from .config import ConfigError, read_properties
from .log.checkpoint import write_atomically
from .topics import REGISTRY_FILE  # written at every start (the internal topics)

META_FILE = "meta.properties"
LOCK_FILE = ".lock"


def lock_data_dir(data_dir: str) -> int:
    """Take the directory's ``.lock`` as Kafka's LogManager does, so two brokers never write the
    same logs. A POSIX lock (as Java's FileChannel.tryLock): held until the process exits or the
    returned descriptor is closed."""
    path = os.path.join(data_dir, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EACCES, errno.EAGAIN):
            raise OSError(e.errno, f"another process (a broker?) is using it: {path} is locked") from None
        raise
    return fd


@dataclass(frozen=True)
class MetaProperties:
    node_id: int
    cluster_id: str
    directory_id: str


def load_or_create(data_dir: str, node_id: int) -> MetaProperties:
    path = os.path.join(data_dir, META_FILE)
    if os.path.exists(path):
        props = read_properties(path)
        try:
            stored = int(props["node.id"])
            cluster_id = props["cluster.id"]
            uuid_from_str(cluster_id)
        except (KeyError, ValueError) as e:
            raise ConfigError(f"{path} is damaged ({e}); refusing to guess the broker's identity") from None
        if stored != node_id:
            raise ConfigError(
                f"Stored node id {stored} doesn't match previous node id {node_id} in {path}. "
                "If you moved your data, make sure your configured node id matches. If you intend to create a new "
                "node, you should remove all data in your data directories."
            )
        return MetaProperties(stored, cluster_id, props.get("directory.id", ""))
    if os.path.exists(os.path.join(data_dir, REGISTRY_FILE)):  # not a first start: the identity was lost
        raise ConfigError(f"{path} is missing but {data_dir} holds a broker's data; restore it from a backup "
                          "rather than give that data a new cluster id")
    os.makedirs(data_dir, exist_ok=True)
    meta = MetaProperties(node_id, uuid_to_str(random_uuid()), uuid_to_str(random_uuid()))
    text = (
        "#\n"
        f"#{time.strftime('%a %b %d %H:%M:%S %Z %Y')}\n"
        f"cluster.id={meta.cluster_id}\n"
        f"directory.id={meta.directory_id}\n"
        f"node.id={meta.node_id}\n"
        "version=1\n"
    )
    write_atomically(path, text.encode(), fsync=True)
    return meta
