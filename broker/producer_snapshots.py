"""Producer-state snapshot files in a partition directory, named like Kafka's: ``%020d.snapshot``.

A snapshot at offset N holds the producer state of every batch below N (format in
``broker.producer_state``). Files are written to ``.tmp`` and renamed, without fsync: a snapshot
lost or torn by a power failure fails its CRC or points past the recovered log end, and is
simply skipped (start-up then replays more batch headers). Only the newest ``KEEP`` are kept.
"""

from __future__ import annotations

import logging
import os
import re

log = logging.getLogger("kshare.producer_snapshots")

SUFFIX = ".snapshot"
KEEP = 3
_NAME = re.compile(r"(\d{20})\.snapshot")


class SnapshotFiles:
    def __init__(self, directory: str) -> None:
        self.directory = directory

    def path(self, offset: int) -> str:
        return os.path.join(self.directory, f"{offset:020d}{SUFFIX}")

    def offsets(self) -> list[int]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for n in names if (m := _NAME.fullmatch(n)))

    def read(self, offset: int) -> bytes:
        with open(self.path(offset), "rb") as f:
            return f.read()

    def write(self, offset: int, data: bytes) -> None:
        path = self.path(offset)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        for old in self.offsets()[:-KEEP]:
            self.delete(old)

    def delete(self, offset: int) -> None:
        try:
            os.unlink(self.path(offset))
        except FileNotFoundError:
            pass
