"""What a pure rule uses to answer later and to act at a time, without waiting itself.

- ``Deferred``: an answer given later (a JoinGroup that waits for the other members, a
  SyncGroup that waits for the leader's assignment). The rule keeps it and completes it
  when its state allows; the I/O side waits for it (``coordinator.runtime.wait``).
- ``Timer``: Kafka's ``CoordinatorTimer``: a rule asks for a callback after a delay (a
  rebalance's deadline) under a key; a later ``schedule`` of the same key replaces it,
  ``cancel`` drops it. The runtime's timer runs it on the event loop; tests fire it by
  hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

__all__ = ["Deferred", "Timer"]

T = TypeVar("T")

_UNSET: object = object()


class Deferred(Generic[T]):
    __slots__ = ("_callbacks", "_value")

    def __init__(self) -> None:
        self._value: object = _UNSET
        self._callbacks: list[Callable[[T], None]] = []

    def done(self) -> bool:
        return self._value is not _UNSET

    def set_result(self, value: T) -> None:
        """Complete it (once: a second answer is a bug in the rule)."""
        if self._value is not _UNSET:
            raise RuntimeError("a deferred answer was completed twice")
        self._value = value
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(value)

    def result(self) -> T:
        if self._value is _UNSET:
            raise RuntimeError("the deferred answer is not known yet")
        return self._value  # type: ignore[return-value]

    def add_done_callback(self, fn: Callable[[T], None]) -> None:
        """``fn(value)`` when completed (at once if it is)."""
        if self._value is _UNSET:
            self._callbacks.append(fn)
        else:
            fn(self._value)  # type: ignore[arg-type]


class Timer(Protocol):
    def schedule(self, key: str, delay_s: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` in ``delay_s`` seconds (replacing what ``key`` had)."""
        ...

    def cancel(self, key: str) -> None: ...
