"""A request that fails in its handler is logged with its traceback once per 10 s per
kind of failure, with a count of the others (a client retrying such a request made a
broker log 15,393 tracebacks in 27 minutes)."""

from __future__ import annotations

import pytest

from keeperless.runtime import connection
from keeperless.runtime.connection import RequestRouter, _failure_key


def test_failures_of_one_kind_are_logged_once_per_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr(connection.time, "monotonic", lambda: now[0])
    router = RequestRouter(1, {}, {}, lambda e: {})

    def failure(n: int) -> str:
        try:
            if n:
                raise AttributeError("x")
            raise KeyError("y")
        except Exception as e:
            return _failure_key(e)

    a, b = failure(1), failure(0)
    assert a != b
    assert router.error_allowed(a) == (True, 0)
    assert [router.error_allowed(a) for _ in range(3)] == [(False, 0)] * 3
    assert router.error_allowed(b) == (True, 0)  # another kind is not held back
    now[0] += 10
    assert router.error_allowed(a) == (True, 3)  # and says how many it did not show
