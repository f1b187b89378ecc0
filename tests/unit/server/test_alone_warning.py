"""A controller whose controller.quorum.bootstrap.servers names only itself, with no voter
in its log (formatted --no-initial-controllers), waits for a quorum nobody will form: it
says so once at start (a new user's try waited silently)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from keeperless.server.config import load_config
from keeperless.server.quorum_apis import alone_warning


def _config(tmp_path: Path, bootstrap: str) -> object:
    f = tmp_path / "c.properties"
    f.write_text(
        "process.roles=controller\nnode.id=1\nlisteners=CONTROLLER://127.0.0.1:9093\n"
        "controller.listener.names=CONTROLLER\n"
        f"controller.quorum.bootstrap.servers={bootstrap}\nlog.dirs={tmp_path / 'd'}\n"
    )
    return load_config(f)


def test_a_controller_bootstrapping_only_from_itself_is_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    alone = _config(tmp_path, "localhost:9093")
    with caplog.at_level(logging.WARNING):
        assert alone_warning(1, alone, ())  # type: ignore[arg-type]
    assert "names only this controller (localhost:9093)" in caplog.text
    assert "--standalone" in caplog.text
    # voters in its log, or another controller to ask: nothing to say
    assert not alone_warning(1, alone, (1,))  # type: ignore[arg-type]
    other = _config(tmp_path, "127.0.0.1:9093,127.0.0.1:9094")
    assert not alone_warning(1, other, ())  # type: ignore[arg-type]
