"""Hosts for the fault harness: one network namespace per node on a bridge the harness
creates (iproute2 only; root). Each node gets its own address, 10.<a>.<b>.<node id>, and
the clients run in the root namespace, which reaches every node through the bridge at
.254. Partitions drop packets silently, as a cut cable does: a node's packets to a peer
go to a neighbour entry with a bogus MAC (a one-way partition; both ways for a
symmetric one). Nothing else on the machine is touched, and ``close`` removes it all.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from collections.abc import Iterable
from pathlib import Path

__all__ = ["Network", "NetworkUnavailableError", "remove_stale"]

_BOGUS_MAC = "02:00:00:00:00:01"
# one file per live run, naming the harness process that owns its namespaces and mounts
_OWNERS = Path("/tmp/keeperless-chaos-owners")


class NetworkUnavailableError(RuntimeError):
    """This machine does not let the harness create namespaces (root and iproute2)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> None:
    """Remove what a harness that died left behind: its namespaces (and the processes in
    them), bridges, veths and tmpfs mounts, recognised by the names only this harness
    uses; a run whose harness process is alive is left alone."""
    live_ids, live_dirs = set(), []
    for f in _OWNERS.glob("*.json") if _OWNERS.exists() else ():
        owner = json.loads(f.read_text())
        if _alive(owner["pid"]):
            live_ids.add(owner["run_id"])
            live_dirs.append(owner["workdir"])
        else:
            f.unlink(missing_ok=True)
    listed = _ip("netns", "list", check=False).stdout.split()
    for name in listed:
        if name.startswith("klc") and name[3:7] not in live_ids:
            pids = subprocess.run(
                ["ip", "netns", "pids", name], capture_output=True, text=True, check=False
            ).stdout.split()
            for pid in pids:
                subprocess.run(["kill", "-9", pid], capture_output=True, check=False)
            _ip("netns", "del", name, check=False)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(("klb", "klv")) and name[3:7] not in live_ids:
            _ip("link", "del", name, check=False)
    with open("/proc/mounts") as f:
        mounts = [line.split()[1] for line in f if "/chaos-" in line and line.startswith("tmpfs")]
    for m in mounts:
        if not any(m.startswith(d) for d in live_dirs):
            subprocess.run(["umount", "-l", m], capture_output=True, check=False)


class Network:
    def __init__(self, node_ids: Iterable[int], workdir: Path) -> None:
        # names and addresses are random, not drawn from the run's seed: two runs (even
        # of one seed) on one machine never collide
        rng = random.SystemRandom()
        self.run_id = f"{rng.randrange(16**4):04x}"
        self.prefix = f"10.{rng.randrange(100, 200)}.{rng.randrange(1, 250)}"
        self.workdir = workdir
        self.bridge = f"klb{self.run_id}"
        self.node_ids = sorted(node_ids)
        self.cut: set[tuple[int, int]] = set()  # (from, to) pairs whose packets drop
        self._created: list[str] = []

    def ns(self, node: int) -> str:
        return f"klc{self.run_id}-{node}"

    def addr(self, node: int) -> str:
        return f"{self.prefix}.{node}"

    def exec_prefix(self, node: int) -> list[str]:
        """Prefix of a command line that runs inside ``node``'s namespace."""
        return ["ip", "netns", "exec", self.ns(node)]

    def open(self) -> None:
        _OWNERS.mkdir(exist_ok=True)
        owner = {"pid": os.getpid(), "run_id": self.run_id, "workdir": str(self.workdir)}
        (_OWNERS / f"{self.run_id}.json").write_text(json.dumps(owner))
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            detail = getattr(e, "stderr", "") or str(e)
            raise NetworkUnavailableError(
                f"cannot create a bridge for the fault harness ({detail.strip()}): it needs "
                "root and iproute2 (network namespaces)"
            ) from None
        self._created.append(f"link:{self.bridge}")
        _ip("addr", "add", f"{self.prefix}.254/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for n in self.node_ids:
            ns, veth = self.ns(n), f"klv{self.run_id}{n}"
            _ip("netns", "add", ns)
            self._created.append(f"netns:{ns}")
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", f"{self.addr(n)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def close(self) -> None:
        for item in reversed(self._created):
            kind, name = item.split(":", 1)
            if kind == "netns":
                _ip("netns", "del", name, check=False)
            else:
                _ip("link", "del", name, check=False)
        self._created.clear()
        (_OWNERS / f"{self.run_id}.json").unlink(missing_ok=True)

    # -- partitions ---------------------------------------------------------------------

    def set_cut(self, pairs: Iterable[tuple[int, int]]) -> None:
        """Make exactly ``pairs`` (from, to) drop their packets (the rest flow)."""
        want = {(a, b) for a, b in pairs if a != b}
        for a, b in self.cut - want:
            _ip("-n", self.ns(a), "neigh", "del", self.addr(b), "dev", "eth0", check=False)
        for a, b in want - self.cut:
            _ip(
                "-n",
                self.ns(a),
                "neigh",
                "replace",
                self.addr(b),
                "lladdr",
                _BOGUS_MAC,
                "nud",
                "permanent",
                "dev",
                "eth0",
            )
        self.cut = want

    def heal(self) -> None:
        self.set_cut(())


def symmetric(groups: list[set[int]]) -> set[tuple[int, int]]:
    """Pairs cut between every two groups, both ways."""
    out = set()
    for i, g in enumerate(groups):
        for h in groups[i + 1 :]:
            for a in g:
                for b in h:
                    out |= {(a, b), (b, a)}
    return out
