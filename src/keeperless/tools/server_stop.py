"""`server stop` (Kafka's kafka-server-stop.sh): SIGTERM to the nodes running on this
machine, which then shut down cleanly (a broker hands its leaderships over first)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import TextIO

from keeperless.tools.errors import ToolError

__all__ = ["running_nodes", "stop_servers"]


# Test suites set this to their own directory so that the seeds' kafka-server-stop.sh
# stops their nodes only - not a developer's `make run` node, nor another suite's.
ONLY_UNDER_ENV = "KEEPERLESS_STOP_ONLY_UNDER"


def running_nodes() -> list[tuple[int, Path | None]]:
    """(pid, config file) of every `keeperless server start` process of this user (only
    those running in a directory under $KEEPERLESS_STOP_ONLY_UNDER when it is set)."""
    out = []
    me = os.getpid()
    only_under = os.environ.get(ONLY_UNDER_ENV)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv if a]
        for i, w in enumerate(words):
            config: str | None = None
            if w.endswith("keeperless") and words[i + 1 : i + 3] == ["server", "start"]:
                config = words[i + 3] if i + 3 < len(words) else ""
            elif w.endswith("kafka-server-start.sh") and i > 0:  # the entry point
                config = words[i + 1] if i + 1 < len(words) else ""
            if config is not None:
                if only_under and not cwd.is_relative_to(only_under):
                    break
                out.append((int(entry.name), cwd / config if config else None))
                break
    return out


def stop_servers(node_id: int | None, role: str | None, out: TextIO) -> int:
    from keeperless.server.config import ConfigError, load_config

    chosen = []
    for pid, config in running_nodes():
        if node_id is not None or role is not None:
            try:
                cfg = load_config(config) if config is not None else None
            except ConfigError:
                cfg = None
            if cfg is None:
                continue
            if node_id is not None and cfg.node_id != node_id:
                continue
            if role is not None and role not in cfg.roles:
                continue
        chosen.append(pid)
    if not chosen:
        raise ToolError("No keeperless server to stop")
    for pid in chosen:
        try:
            os.kill(pid, signal.SIGTERM)
            print(f"Stopping keeperless server (pid {pid})", file=out)
        except ProcessLookupError:
            pass
    return 0
