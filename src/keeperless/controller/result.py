"""What every controller operation returns: records to append and a response
(Kafka's ControllerResult), and the key of a partition in the controller's indexes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from uuid import UUID

__all__ = ["PartitionKey", "Result"]

T = TypeVar("T")
PartitionKey = tuple[UUID, int]


@dataclass(frozen=True, slots=True)
class Result(Generic[T]):
    records: list[Any]
    response: T
    # Atomic results go into one batch: all of them commit or none (a topic and its
    # partitions). Others are independent changes (leader moves of a fenced broker) that
    # may be appended in several batches, as Kafka does for big non-atomic operations.
    atomic: bool = True
    # Further records of a non-atomic result, generated as the earlier ones are appended
    # (from the image as it was when the operation ran): a broker of a million partitions
    # is fenced without computing a million changes in one block of the event loop.
    more: Iterable[Any] = ()

    def all_records(self) -> list[Any]:
        """``records`` and then ``more``, which this consumes."""
        return [*self.records, *self.more]
