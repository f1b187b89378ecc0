"""kafka-server-stop.sh stops every node of the machine, as Kafka's does; a test suite
scopes it to its own directory (KEEPERLESS_STOP_ONLY_UNDER) so that it never stops a
developer's `make run` node or a fault-harness batch running beside it (chaos seed 16006
was stopped by a test suite's kafka-server-stop.sh)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from keeperless.tools.server_stop import ONLY_UNDER_ENV, running_nodes


def test_server_stop_sees_only_the_nodes_under_its_scope(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    procs = []
    for name in ("mine", "theirs"):
        d = tmp_path / name
        d.mkdir()
        # looks like `keeperless server start server.properties` to running_nodes
        procs.append(subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)", "keeperless", "server",
             "start", "server.properties"], cwd=d))  # fmt: skip
    try:
        pids = {p.pid for p in procs}
        deadline = time.monotonic() + 10
        # until both have exec'd (before, /proc shows the forking parent's command line)
        while not pids <= {pid for pid, _ in running_nodes()}:
            assert time.monotonic() < deadline, "the fake nodes never showed up"
            time.sleep(0.02)
        monkeypatch.setenv(ONLY_UNDER_ENV, str(tmp_path / "mine"))
        found = [(pid, cfg) for pid, cfg in running_nodes() if pid in pids]
        assert found == [(procs[0].pid, tmp_path / "mine" / "server.properties")]
    finally:
        for p in procs:
            p.kill()
            p.wait()
