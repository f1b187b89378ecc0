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
    """Records to append, and the answer once they are committed."""

    records: list[Record]
    response: T
