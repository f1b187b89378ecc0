"""The packages' import arrows (DESIGN.md's layers): no cycle between packages, the wire
protocol importing no other part, and the security package only what it stands on."""

from __future__ import annotations

import ast
import collections
from pathlib import Path

PKG = Path(__file__).parents[2] / "src" / "keeperless"


def _edges(root: Path = PKG) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = collections.defaultdict(set)
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).parts
        src = rel[0] if len(rel) > 1 else "(top)"
        for node in ast.walk(ast.parse(path.read_text())):  # TYPE_CHECKING ones too
            mods: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                mods = [node.module]
            elif isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            for m in mods:
                if m.startswith("keeperless.") and m.split(".")[1] != src:
                    edges[src].add(m.split(".")[1])
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m) :], m]
            if m not in state and (found := visit(m)) is not None:
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(edges):
        if n not in state and (found := visit(n)) is not None:
            return found
    return None


def test_no_import_cycle_between_packages() -> None:
    assert _cycle(_edges()) is None


def test_the_cycle_check_can_fail() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_protocol_and_security_import_only_what_they_stand_on() -> None:
    edges = _edges()
    assert edges.get("protocol", set()) == set()  # nothing above it, metadata/ included
    assert edges["security"] <= {"metadata", "protocol"}


def test_the_network_client_stands_on_the_protocol_and_security_only() -> None:
    assert _edges()["net"] <= {"protocol", "security"}


def test_only_the_network_client_opens_connections_to_other_nodes() -> None:
    """Every outgoing node-to-node connection goes through net/client.py (framing,
    correlation ids, timeouts, backoff, TLS and SASL once); the command-line tools
    (tools/client.py) are blocking clients of their own process."""
    allowed = {"net/client.py", "tools/client.py"}
    offenders = [
        rel
        for path in PKG.rglob("*.py")
        if (rel := path.relative_to(PKG).as_posix()) not in allowed
        and any(s in path.read_text() for s in ("open_connection(", "readexactly("))
    ]
    assert offenders == []
