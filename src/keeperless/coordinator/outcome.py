"""What a shard's operation returns: the records to append and the answer to give once
they are committed (Kafka's ``CoordinatorResult``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Outcome", "Record"]

T = TypeVar("T")
Record = tuple[bytes, bytes | None]  # key, value (None: a tombstone)


@dataclass(frozen=True, slots=True)
class Outcome(Generic[T]):
    """Records to append, and the answer once they are committed. ``producer``: the
    (producer id, epoch) whose transaction the records are written in (Kafka's
    transactional writes: a group's offsets committed in a transaction), None for
    plain records."""

    records: list[Record]
    response: T
    producer: tuple[int, int] | None = None
