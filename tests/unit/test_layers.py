"""The packages' import arrows (the layers of docs/architecture.md): the layer contract
below (a package imports only packages of lower layers; the README's layout is rendered
from it), no cycle between packages or modules, the wire protocol importing no other
part, and the security package only what it stands on."""

from __future__ import annotations

import ast
import collections
from pathlib import Path

PKG = Path(__file__).parents[2] / "src" / "keeperless"
README = Path(__file__).parents[2] / "README.md"

# The layers, top to bottom: a package may import only packages of the layers below it.
LAYERS: tuple[tuple[tuple[str, str], ...], ...] = (
    (("cli", "the `keeperless` command, under its own and Kafka's script names"),),
    (("connect", "the Kafka Connect-compatible worker, its REST API and connectors"),),
    (("tools", "the operator tools (topics, configs, dump-log, metadata shell...)"),
     ("spark", "the PySpark data source and sink")),
    (("server", "configuration, node assembly and lifecycle"),),
    (("txn", "the transaction coordinator: producer ids, transactions, their offsets"),
     ("share", "share groups: share fetch and acknowledge, the share coordinator")),
    (("group", "the group coordinator: classic and consumer groups, committed offsets"),),
    (("broker", "the data plane: partitions, replication, quotas, transaction markers"),
     ("runtime", "asyncio listeners, connections, the metadata-log driver")),
    (("controller", "the quorum controller's rules: records and a response (no I/O)"),
     ("coordinator", "the coordinators' rules (shards): records and a response (no I/O)"),
     ("net", "the one network client for node-to-node requests"),
     ("zk", "a ZooKeeper-mode cluster's metadata, read and written back (dual-write)")),
    (("security", "SASL, TLS, principals, the authorizer and per-API rules"),
     ("storage", "segmented logs, indexes, snapshots, formatting")),
    (("metadata", "record classes (generated from Kafka's JSON schemas), image, delta"),
     ("raft", "the KRaft consensus core (no I/O)")),
    (("protocol", "wire framing, API table, record batches, control records (no I/O)"),
     ("_properties", "Java .properties files")),
)  # fmt: skip
_LAYER = {name: i for i, layer in enumerate(LAYERS) for name, _ in layer}


def _imports(path: Path, root: Path) -> list[tuple[str, tuple[str, ...]]]:
    """What ``path`` (a module under ``root``, the keeperless package) imports, TYPE_CHECKING
    ones too: (module, names) for ``from module import names``, (module, ()) for ``import
    module``; relative imports resolved against the module's package."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    package = parts[:-1]  # (of __init__.py too: its package is the directory)
    out: list[tuple[str, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            out.append((base, tuple(a.name for a in node.names)))
    return out


def _edges(root: Path = PKG) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = collections.defaultdict(set)
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).parts
        src = rel[0] if len(rel) > 1 else "(top)"
        for module, names in _imports(path, root):
            # ``from keeperless import broker`` imports the package broker
            targets = [f"{module}.{n}" for n in names] if module == "keeperless" else [module]
            for m in targets:
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


def _upward(edges: dict[str, set[str]]) -> list[str]:
    """Imports of a package of the same or a higher layer (the top-level ``__main__``
    and ``__init__`` may import anything)."""
    return sorted(
        f"{src} -> {dst}"
        for src, dsts in edges.items()
        if src != "(top)"
        for dst in dsts
        if _LAYER[dst] <= _LAYER[src]
    )


def render_layout() -> str:
    """The README's layout block, from LAYERS: a line per package, layers top to bottom
    between rules."""
    blocks = [
        "\n".join(f"{n + ('.py' if n.startswith('_') else '/'):<15}{d}" for n, d in layer)
        for layer in LAYERS
    ]
    return ("\n" + "-" * 14 + "\n").join(blocks) + "\n"


def test_every_package_has_a_layer_and_imports_point_down() -> None:
    packages = {p.parent.name for p in PKG.glob("*/__init__.py")} | {"_properties"}
    assert packages == set(_LAYER), packages ^ set(_LAYER)
    assert _upward(_edges()) == []


def test_the_layer_check_can_fail() -> None:
    assert _upward({"protocol": {"broker"}, "broker": {"runtime"}}) == [
        "broker -> runtime", "protocol -> broker"]  # fmt: skip


def test_every_form_of_import_is_an_arrow(tmp_path: Path) -> None:
    """Relative imports and ``from keeperless import <package>`` count as much as
    absolute ones (a review found them unseen)."""
    root = tmp_path / "keeperless"
    for pkg in ("protocol", "broker", "raft"):
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "broker" / "x.py").write_text("")
    (root / "protocol" / "a.py").write_text("from keeperless import broker\n")
    (root / "protocol" / "b.py").write_text("from ..broker import x\n")
    (root / "raft" / "c.py").write_text("from . import d\n")
    (root / "raft" / "d.py").write_text("from .c import y\n")
    assert _edges(root) == {"protocol": {"broker"}}
    assert _module_edges(root) == {
        "keeperless.protocol.a": {"keeperless.broker"},
        "keeperless.protocol.b": {"keeperless.broker.x"},
        "keeperless.raft.c": {"keeperless.raft.d"},
        "keeperless.raft.d": {"keeperless.raft.c"},
    }
    assert _cycles(_module_edges(root)) == [["keeperless.raft.c", "keeperless.raft.d"]]


def test_the_readme_layout_is_the_layer_contract() -> None:
    text = README.read_text()
    start = text.index("```\n", text.index("Layout (`src/keeperless/`)")) + 4
    assert text[start : text.index("```", start)] == render_layout(), (
        "README's layout block differs from tests/unit/test_layers.py's LAYERS:\n" + render_layout()
    )


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


def _module_edges(root: Path = PKG) -> dict[str, set[str]]:
    """keeperless module -> the keeperless modules it imports (TYPE_CHECKING ones too)."""
    mods = {}
    for path in root.rglob("*.py"):
        name = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    edges: dict[str, set[str]] = collections.defaultdict(set)
    for name, path in mods.items():
        for module, names in _imports(path, root):
            # ``from x import y``: the module x.y if y is one, else x
            for found in [f"{module}.{n}" if f"{module}.{n}" in mods else module
                          for n in names] or [module]:  # fmt: skip
                if found in mods and found != name:
                    edges[name].add(found)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The modules in import circles: each strongly connected component of more than one
    module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_circle_between_modules() -> None:
    assert _cycles(_module_edges()) == []


def test_the_module_circle_check_can_fail() -> None:
    assert _cycles({"a": {"b"}, "b": {"a", "c"}, "c": set()}) == [["a", "b"]]
