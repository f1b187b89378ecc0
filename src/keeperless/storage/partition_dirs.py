"""Partition directories as Kafka keeps them: `<topic>-<partition>` in a log directory,
bound to one incarnation of the topic by the topic id in its `partition.metadata`.

A directory whose topic id is not the one the metadata names for that partition belongs
to a deleted incarnation of the topic: it is never opened for the new one. A deleted
partition is first renamed to `<topic>-<partition>.<unique id>-delete`, so that a topic
re-created under the same name never meets the old files, then removed; a restart
removes what a crash left behind.
"""

from __future__ import annotations

import re
import shutil
import uuid
from pathlib import Path

from keeperless.storage.durable import fsync_dir, write_atomically
from keeperless.storage.meta_properties import uuid_from_kafka, uuid_to_kafka

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "DELETE_SUFFIX",
    "FUTURE_SUFFIX",
    "PARTITION_METADATA",
    "STRAY_SUFFIX",
    "discard",
    "partition_dirs",
    "read_topic_id",
    "remove_discarded",
    "set_aside",
    "write_topic_id",
]

PARTITION_METADATA = "partition.metadata"
# in a log directory: its last stop was clean (written at a clean stop, removed at start)
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_SUFFIX = "-delete"
# a replica being moved to another log directory: `<topic>-<partition>.<id>-future`
FUTURE_SUFFIX = "-future"
# a replica this broker must not serve, kept for the operator (Kafka 3.7+ renames such
# logs rather than deleting them): `<topic>-<partition>.<id>-stray`
STRAY_SUFFIX = "-stray"
_NAME = re.compile(r"^(?P<topic>.+)-(?P<index>\d+)$")


def write_topic_id(directory: Path, topic_id: uuid.UUID, sync: bool = True) -> None:
    """Without ``sync``, as Kafka's since KAFKA-13092 (flushed apart from the metadata
    update that created the log, and before the log is flushed or closed): the log's
    ``sync_dir`` makes it durable."""
    write_atomically(
        directory / PARTITION_METADATA,
        f"version: 0\ntopic_id: {uuid_to_kafka(topic_id)}\n".encode(),
        sync=sync,
    )


def read_topic_id(directory: Path) -> uuid.UUID | None:
    """The topic id a partition directory belongs to (None if it has no
    `partition.metadata`, as directories written before it existed)."""
    path = directory / PARTITION_METADATA
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line and line.strip())
    try:
        return uuid_from_kafka(fields["topic_id"].strip())
    except (KeyError, ValueError):
        raise ValueError(
            f"{path} is damaged ({text[:80]!r}): it should name the partition's topic id"
        ) from None


def partition_dirs(log_dir: Path) -> dict[tuple[str, int], Path]:
    """The partition directories in ``log_dir`` by (topic, partition), leaving out the
    metadata log's (which may share the directory) and discarded ones."""
    out: dict[tuple[str, int], Path] = {}
    if not log_dir.is_dir():
        return out
    for d in log_dir.iterdir():
        m = _NAME.match(d.name)
        if m and d.is_dir() and m["topic"] != "__cluster_metadata":
            out[(m["topic"], int(m["index"]))] = d
    return out


def _renamed(name: str, suffix: str) -> str:
    """``<topic>-<partition>.<unique id><suffix>``, the topic cut short so that the name
    stays within 255 bytes (Kafka's logDirNameWithSuffixCappedLength: a topic name may
    be 249 characters, and the suffix would push it past the file system's limit)."""
    m = _NAME.match(name)
    topic, index = (m["topic"], m["index"]) if m else (name, "")
    tail = f"-{index}.{uuid.uuid4().hex}{suffix}" if m else f".{uuid.uuid4().hex}{suffix}"
    room = 255 - len(tail.encode())
    cut = topic.encode()[:room].decode(errors="ignore")
    return cut + tail


def discard(directory: Path) -> Path:
    """Rename a partition directory out of the way (`<name>.<id>-delete`, durably);
    returns where it went, for the caller to remove (off the event loop: it may be big).
    What is not removed by a crash is removed at the next start."""
    target = directory.with_name(_renamed(directory.name, DELETE_SUFFIX))
    directory.rename(target)
    fsync_dir(directory.parent)
    return target


def set_aside(directory: Path) -> Path:
    """Rename a stray partition directory `<name>.<id>-stray` (durably) and leave it:
    never served nor deleted, for the operator to look at and remove."""
    target = directory.with_name(_renamed(directory.name, STRAY_SUFFIX))
    directory.rename(target)
    fsync_dir(directory.parent)
    return target


def remove_discarded(log_dir: Path) -> int:
    """Remove what a crash left of discarded partitions; returns how many."""
    n = 0
    if log_dir.is_dir():
        for d in log_dir.glob(f"*{DELETE_SUFFIX}"):
            if d.is_dir():
                shutil.rmtree(d, ignore_errors=True)
                n += 1
    return n
