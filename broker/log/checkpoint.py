"""Small text files Kafka keeps beside the logs, in Kafka's own formats.

- ``recovery-point-offset-checkpoint`` / ``log-start-offset-checkpoint`` (one per data dir):
  ``0\\n<count>\\n<topic> <partition> <offset>\\n...``
- ``partition.metadata`` (one per partition dir): ``version: 0\\ntopic_id: <Uuid.toString>``
  where Kafka's ``Uuid.toString`` is the 16 bytes in URL-safe base64 without padding.
- ``.kafka_cleanshutdown`` (one per data dir): ``{"version":"0","broker_epoch":"<epoch>"}``.

Every file is written to ``<name>.tmp``, fsynced if asked, then renamed over the old one, so a
crash leaves either the old or the new content.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from typing import Mapping

from protocol.uuids import uuid_from_str, uuid_to_str

CHECKPOINT_VERSION = 0
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
PARTITION_METADATA = "partition.metadata"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"


class CheckpointError(ValueError):
    """A checkpoint or metadata file exists but cannot be parsed."""


topic_id_to_str = uuid_to_str


def topic_id_from_str(text: str) -> uuid.UUID:
    try:
        return uuid_from_str(text)
    except ValueError as e:
        raise CheckpointError(str(e)) from None


def write_atomically(path: str, content: bytes, *, fsync: bool = True) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(path: str, content: bytes) -> None:
    """``write_atomically`` with fsync, then fsync the directory. A failed write raises OSError
    and changes nothing; a failed directory fsync is only logged: the file is renamed already,
    so the change stands (a crash may undo it)."""
    write_atomically(path, content, fsync=True)
    try:
        fsync_dir(os.path.dirname(path) or ".")
    except OSError as e:
        logging.getLogger("kshare.checkpoint").error("cannot fsync the directory of %s: %s", path, e)


def format_offsets_checkpoint(offsets: Mapping[tuple[str, int], int]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in offsets.items()]
    return ("\n".join(lines) + "\n").encode()


def parse_offsets_checkpoint(text: str) -> dict[tuple[str, int], int]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    try:
        version = int(lines[0])
        count = int(lines[1])
    except (IndexError, ValueError):
        raise CheckpointError("malformed checkpoint header") from None
    if version != CHECKPOINT_VERSION:
        raise CheckpointError(f"unsupported checkpoint version {version}")
    entries = lines[2:]
    if len(entries) != count:
        raise CheckpointError(f"expected {count} entries, found {len(entries)}")
    out = {}
    for line in entries:
        parts = line.split(" ")
        if len(parts) != 3:
            raise CheckpointError(f"malformed checkpoint entry {line!r}")
        try:
            out[(parts[0], int(parts[1]))] = int(parts[2])
        except ValueError:
            raise CheckpointError(f"malformed checkpoint entry {line!r}") from None
    return out


def read_offsets_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """Entries of a checkpoint file; empty if it does not exist; CheckpointError if garbled."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    return parse_offsets_checkpoint(text)


def write_offsets_checkpoint(
    path: str, offsets: Mapping[tuple[str, int], int], *, fsync: bool = True
) -> None:
    write_atomically(path, format_offsets_checkpoint(offsets), fsync=fsync)


def format_partition_metadata(topic_id: uuid.UUID) -> bytes:
    return f"version: 0\ntopic_id: {topic_id_to_str(topic_id)}".encode()


def parse_partition_metadata(text: str) -> uuid.UUID:
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            fields[key.strip()] = value.strip()
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise CheckpointError(f"malformed partition.metadata {text!r}")
    return topic_id_from_str(fields["topic_id"])


def read_partition_metadata(directory: str) -> uuid.UUID | None:
    try:
        with open(os.path.join(directory, PARTITION_METADATA), encoding="utf-8") as f:
            return parse_partition_metadata(f.read())
    except FileNotFoundError:
        return None


def write_partition_metadata(directory: str, topic_id: uuid.UUID) -> None:
    write_atomically(os.path.join(directory, PARTITION_METADATA), format_partition_metadata(topic_id))


def write_clean_shutdown_marker(data_dir: str, broker_epoch: int = -1) -> None:
    content = json.dumps({"version": "0", "broker_epoch": str(broker_epoch)})
    write_atomically(os.path.join(data_dir, CLEAN_SHUTDOWN_MARKER), content.encode())
    fsync_dir(data_dir)
