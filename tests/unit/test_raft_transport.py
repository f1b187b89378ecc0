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
