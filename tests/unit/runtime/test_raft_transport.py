"""The Raft transport's operator logging."""

from __future__ import annotations

import logging

import pytest

from keeperless.runtime.raft_transport import RaftTransport


def test_a_foreign_peer_is_reported_in_both_directions(caplog: pytest.LogCaptureFixture) -> None:
    """A voter that was refused by a foreign node must still say, the first time, that it
    refused that node (CI once saw only the first line: both shared one rate limit)."""
    t = RaftTransport(1, "ours", {3: ("127.0.0.1", 1)}, ("127.0.0.1", 2))
    with caplog.at_level(logging.ERROR, logger="keeperless.runtime.raft_transport"):
        t.foreign(3, "refused-us", "node 3 refused our VoteRequest")
        t.foreign(3, "refused-them", "refused VoteRequest from node 3 of cluster theirs")
        t.foreign(3, "refused-them", "refused FetchRequest from node 3 of cluster theirs")
        t.foreign(3, "refused-us", "node 3 refused our FetchRequest")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert any("node 3 refused our VoteRequest" in x for x in lines)
    assert any("of cluster theirs" in x for x in lines)


def test_a_peer_starting_up_is_not_reported_unreachable(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Voters started together failed each other's first connections: a warning named
    them, and 'reached again' followed at once. Only a voter unreachable for a while is
    named, and only a named one is said to be reached again."""
    from keeperless.runtime import raft_transport

    now = [100.0]
    monkeypatch.setattr(raft_transport.time, "monotonic", lambda: now[0])
    t = RaftTransport(1, "ours", {2: ("127.0.0.1", 1), 3: ("127.0.0.1", 3)}, ("127.0.0.1", 2))
    with caplog.at_level(logging.INFO, logger="keeperless.runtime.raft_transport"):
        t.unreachable(3, ("127.0.0.1", 3), "refused")
        now[0] += 0.5
        t.reachable(3)  # up a moment later: nothing to say
        assert caplog.records == []
        t.unreachable(2, ("127.0.0.1", 1), "refused")
        now[0] += raft_transport.UNREACHABLE_GRACE_S
        t.unreachable(2, ("127.0.0.1", 1), "refused")
        t.unreachable(3, ("127.0.0.1", 3), "refused")  # just went down: not named yet
        t.reachable(3)
        t.reachable(2)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "Cannot reach voter(s) 2 (" in lines[0]
    assert "Reached voter 2 again" in lines[1]


def test_a_stopping_node_does_not_serve_raft_requests() -> None:
    """Found by a helper's probe: a Raft request on a connection still open after the
    node closed its metadata log failed with an IndexError and a logged traceback. A
    closed transport refuses it (the connection closes quietly)."""
    import asyncio

    from keeperless.protocol.framing import NodeStopping, RequestHeader

    t = RaftTransport(1, "ours", {3: ("127.0.0.1", 1)}, ("127.0.0.1", 2))

    def step(msg: object) -> None:
        raise AssertionError("a stopping node stepped its Raft core")

    t.step = step
    t.close()
    with pytest.raises(NodeStopping):
        asyncio.run(t.handle(RequestHeader(52, 0, 1, "x"), None))
