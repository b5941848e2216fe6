"""Producer ids for InitProducerId: unique for the life of the data directory.

Kafka's controller hands brokers blocks of 1000 producer ids and records each block in the
metadata log before any id from it is used. kshare does the same with one small file,
``kshare-producer-ids.json`` in the data directory: the end of the current block is written
and fsynced before the block's first id is handed out, so a crash at any point can only skip
ids, never hand one out twice.
"""

from __future__ import annotations

import json
import logging
import os

from .config import ConfigError, why_unparsable
from .log.checkpoint import fsync_dir, write_atomically

log = logging.getLogger("kshare.producer_ids")

PRODUCER_IDS_FILE = "kshare-producer-ids.json"
BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
MAX_PRODUCER_ID = (1 << 63) - 1


class ProducerIdsExhausted(Exception):
    pass


class ProducerIdAllocator:
    def __init__(self, data_dir: str, block_size: int = BLOCK_SIZE) -> None:
        self.path = os.path.join(data_dir, PRODUCER_IDS_FILE)
        self.data_dir = data_dir
        self.block_size = block_size
        self._next = self._block_end = self._load()

    def _load(self) -> int:
        try:
            with open(self.path) as f:
                data = json.load(f)
            return int(data["next_block_start"])
        except FileNotFoundError:
            return 0
        except (ValueError, KeyError, TypeError) as e:
            # Never guess low: a lost value could hand out ids already in use. A ConfigError, as
            # for the topic registry: the broker refuses to start with this one line.
            raise ConfigError(f"{self.path} is damaged ({why_unparsable(e)}); restore it from a backup rather "
                              "than reuse producer ids") from None

    def next_id(self) -> int:
        """A producer id never returned before by this data directory."""
        if self._next >= self._block_end:
            self._claim_block()
        pid = self._next
        self._next += 1
        return pid

    def _claim_block(self) -> None:
        start = self._block_end
        end = start + self.block_size
        if end > MAX_PRODUCER_ID:
            raise ProducerIdsExhausted("producer ids exhausted")
        body = json.dumps({"version": 1, "next_block_start": end}).encode()
        write_atomically(self.path, body, fsync=True)
        fsync_dir(self.data_dir)
        self._next, self._block_end = start, end
        log.debug("claimed producer id block [%d, %d)", start, end)
