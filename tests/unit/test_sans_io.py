"""The cores (raft, controller, metadata, protocol) and the coordinators' pure rules must
not do I/O themselves."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).parents[2] / "src" / "keeperless"
FORBIDDEN = {"asyncio", "socket", "time", "selectors", "threading", "os", "subprocess"}


# the cores, and the rules of the coordinators written as pure modules so far
# (coordinator/: the share and transaction coordinators' shards, the classic, consumer
# and share groups' membership and their records), and a share-partition's acquisitions
CORES = ["raft", "controller", "coordinator", "metadata", "protocol",
         "broker/share_partition.py"]  # fmt: skip


# the coordinator runtime (Kafka's CoordinatorRuntime) is where the shards' writes wait
EXEMPT = {"coordinator/runtime.py"}


@pytest.mark.parametrize("core", CORES)
def test_core_imports_no_io(core: str) -> None:
    offenders = []
    root = PKG / core
    for path in [root] if root.is_file() else root.rglob("*.py"):
        if str(path.relative_to(PKG)) in EXEMPT:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for n in names:
                if n.split(".")[0] in FORBIDDEN or n.startswith("keeperless.runtime"):
                    offenders.append(f"{path.relative_to(PKG)}:{node.lineno} imports {n}")
    assert offenders == []


def test_cli_entry_point_does_not_load_kio() -> None:
    """The CLI must be able to block kio's Hypothesis hooks (seconds of start-up) before
    kio is first imported; importing the entry point must not pull kio in."""
    import subprocess
    import sys

    code = "import sys, keeperless.cli.main; print('kio' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "False"


def test_the_broker_does_not_need_the_controllers_types() -> None:
    """Roles meet through the metadata log and RPCs: the broker package imports nothing
    from the controller's (the values both use live in keeperless.metadata.admin)."""
    offenders = []
    for path in (PKG / "broker").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "keeperless.controller"
            ):
                offenders.append(f"{path.relative_to(PKG)}:{node.lineno} imports {node.module}")
    assert offenders == []
