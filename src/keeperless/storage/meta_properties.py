"""`meta.properties`: the identity of a formatted log directory, as Kafka writes it."""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from pathlib import Path

from keeperless._properties import parse_properties
from keeperless.storage.durable import write_atomically

__all__ = [
    "META_PROPERTIES",
    "MetaProperties",
    "StorageError",
    "random_kafka_uuid",
    "read_meta_properties",
    "uuid_from_kafka",
    "uuid_to_kafka",
    "write_meta_properties",
]

META_PROPERTIES = "meta.properties"


class StorageError(RuntimeError):
    """A log directory is missing, unformatted, or belongs to another cluster/node."""


def uuid_to_kafka(u: uuid.UUID) -> str:
    """Kafka's textual Uuid: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def uuid_from_kafka(s: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    except (ValueError, TypeError):
        raise ValueError(f"{s!r} is not a valid Kafka Uuid (22 characters of base64)") from None
    if len(raw) != 16:
        raise ValueError(f"{s!r} is not a valid Kafka Uuid (22 characters of base64)")
    return uuid.UUID(bytes=raw)


def random_kafka_uuid() -> str:
    """A random Uuid as Kafka makes one: never starting with '-', never a reserved id."""
    while True:
        u = uuid.uuid4()
        s = uuid_to_kafka(u)
        if not s.startswith("-") and u.int > 100:
            return s


@dataclass(frozen=True, slots=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    directory_id: str
    version: int = 1


def write_meta_properties(log_dir: Path, meta: MetaProperties) -> None:
    log_dir.mkdir(parents=True, exist_ok=True)
    text = (
        "#\n"
        f"node.id={meta.node_id}\n"
        f"directory.id={meta.directory_id}\n"
        f"version={meta.version}\n"
        f"cluster.id={meta.cluster_id}\n"
    )
    write_atomically(log_dir / META_PROPERTIES, text.encode())


def read_meta_properties(log_dir: Path) -> MetaProperties | None:
    """Return the directory's identity, or None if it has no meta.properties."""
    path = log_dir / META_PROPERTIES
    if not path.exists():
        return None
    props = parse_properties(path.read_text(), str(path))
    if props.get("version") == "0":
        # a ZooKeeper-mode broker's: broker.id and cluster.id, no directory id (adopted
        # by check_storage, which rewrites it as version 1)
        try:
            return MetaProperties(props["cluster.id"], int(props["broker.id"]), "", 0)
        except (KeyError, ValueError) as e:
            raise StorageError(f"{path} is damaged: {e}") from None
    try:
        return MetaProperties(
            cluster_id=props["cluster.id"],
            node_id=int(props["node.id"]),
            directory_id=props.get("directory.id", ""),
            version=int(props["version"]),
        )
    except (KeyError, ValueError) as e:
        raise StorageError(f"{path} is damaged: {e}") from None
