"""The history of a chaos run, as Jepsen records it: every operation's invocation and
completion (ok, fail, or info when the outcome is unknown) with the time it happened,
plus the nemesis's fault events. Checkers read it after the run."""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["Event", "History"]


@dataclass(frozen=True, slots=True)
class Event:
    index: int
    time_s: float  # since the start of the run
    process: str  # "producer-0", "consumer-1", "admin", "monitor", "nemesis"
    type: str  # invoke | ok | fail | info
    f: str  # what: send, commit, committed, create, delete, kill, partition...
    value: Any = None
    op: int = -1  # the invocation a completion belongs to


class History:
    def __init__(self) -> None:
        self.start = time.monotonic()
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self._ops = itertools.count()

    def now(self) -> float:
        return time.monotonic() - self.start

    def _add(self, process: str, type_: str, f: str, value: Any, op: int) -> Event:
        # a SystemError here comes with the lock acquired: confluent-kafka ran a delivery
        # callback with its fatal error still pending, and the first C call of the
        # callback reports it (inside a ``with`` the lock stayed held for good and every
        # workload thread hung)
        with contextlib.suppress(SystemError):
            self._lock.acquire()
        try:
            e = Event(len(self.events), round(self.now(), 4), process, type_, f, value, op)
            self.events.append(e)
            return e
        finally:
            self._lock.release()

    def invoke(self, process: str, f: str, value: Any = None) -> int:
        op = next(self._ops)
        self._add(process, "invoke", f, value, op)
        return op

    def complete(self, op: int, process: str, type_: str, f: str, value: Any = None) -> None:
        assert type_ in ("ok", "fail", "info")
        self._add(process, type_, f, value, op)

    def info(self, process: str, f: str, value: Any = None) -> None:
        self._add(process, "info", f, value, next(self._ops))

    def fatal_errors(self, process: str) -> Any:
        """A librdkafka ``error_cb`` recording a client's fatal error with its reason
        (an idempotent producer's sequence found gone from a broker, say): ``produce``
        then raises only "Local: Fatal error", and the checker reports the reason."""

        def cb(err: Any) -> None:
            if err.fatal():
                self.info(process, "fatal", {"error": err.str()[:400]})

        return cb

    def of(self, process_prefix: str = "", f: str | None = None) -> list[Event]:
        with self._lock:
            return [
                e
                for e in self.events
                if e.process.startswith(process_prefix) and (f is None or e.f == f)
            ]

    def dump(self, path: Path) -> None:
        with open(path, "w") as out:
            for e in self.events:
                out.write(json.dumps(asdict(e), default=str) + "\n")
