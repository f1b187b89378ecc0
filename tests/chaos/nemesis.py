"""The nemesis: faults on a seeded schedule, one at a time, each held for a while and then
healed, every start and end recorded in the history.

Faults: kill -9 and restart (any node, the active controller, a partition leader, two
nodes at once); SIGSTOP/SIGCONT pauses longer than the session and fetch timeouts;
partitions (random halves, the active controller isolated, one-way cuts, a bridge where
one node sees both sides); a broker's disk full; a rolling restart of the brokers; a
broker's power loss (its unflushed segment tails are lost: each active segment is cut
back to a random byte between its size when the fault began and its size now - a torn
batch as often as not - as Kafka does not fsync partition data; the metadata log,
fsynced before anything depends on it, is kept; a partition directory made during the
fault has its partition.metadata torn one time in two); the whole cluster, every broker (so
every replica of every partition) or every controller stopped at once, cleanly or with
kill -9, and started again; a broker stopped, unregistered (kafka-cluster.sh
unregister) and started again. After a fault that restarts brokers, each must be back in
the ISR of every partition it holds within ISR_REJOIN_S - a broker whose data was wiped,
or whose disk was out, longer while it is still copying (its files grew in the last
ISR_STALL_S), up to ISR_REJOIN_MAX_S - or the partitions still missing it are recorded
("isr-late").
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import socket
import struct
import time
from pathlib import Path
from typing import Any

from tests.chaos.cluster import CONTROLLER_PORT, ChaosCluster, ChaosNode
from tests.chaos.history import History
from tests.chaos.netns import Network, symmetric
from tests.chaos.workload import TOPIC

__all__ = ["FAULTS", "Nemesis", "active_controller"]

FAULTS = (
    "kill",
    "kill-controller",
    "kill-leader",
    "kill-two",
    "pause",
    "partition-halves",
    "isolate-controller",
    "one-way",
    "bridge",
    "disk-full",
    "roll",
    "power-loss",
    "upgrade",
    # whole-cluster changes (issue 23): every replica of every partition, every
    # controller, a retired and re-registered broker
    "restart-all",
    "kill-all",
    "stop-brokers",
    "kill-brokers",
    "restart-controllers",
    "unregister",
    # clusters that change shape (issue 25): a broker's second disk fails and comes back
    # or is replaced by an empty one; a broker replaced by a new machine (empty disks)
    "disk-failure",
    "replace-broker",
    # clusters that change shape (2, issue 27), in the dynamic topology only: a
    # controller added (the quorum grows to 5), one removed (the active one too; not
    # below 3), a voter's disk wiped and the controller swapped in under its new
    # directory id (its old voter removed, the new one added), with Kafka's tool
    "add-controller",
    "remove-controller",
    "replace-controller",
)
MEMBERSHIP = frozenset({"add-controller", "remove-controller", "replace-controller"})
# a voter change refused for sure (nothing changed); any other failure may have applied
_REFUSED = ("DUPLICATE_VOTER", "VOTER_NOT_FOUND", "lagging behind", "without a live majority",
            "commit the latest voter change", "establish HWM", "is not the leader",
            "UNSUPPORTED_VERSION")  # fmt: skip
# what a broker logs when one of its log directories goes offline
_DIR_OFFLINE = "is offline after an I/O error"
# after a fault that restarts brokers: how long they may take to be back in every ISR
ISR_REJOIN_S = 60.0
# ... or longer while a broker that lost its data copies it back (a replaced disk of
# 150 MB took 61 s under load, seed 8003): as long as its files grew within ISR_STALL_S
ISR_STALL_S = 30.0
ISR_REJOIN_MAX_S = 300.0
# the releases the upgrade fault may finalize, in order (FIRST_RELEASE is the start)
RELEASES = ("3.6-IV2", "3.7-IV0", "3.7-IV2", "3.7-IV4", "3.8-IV0", "3.9-IV0", "4.0-IV1",
            "4.0-IV3", "4.1-IV1", "4.2-IV0", "4.2-IV1")  # fmt: skip
# from this release on, the upgrade also turns eligible leader replicas on (KIP-966)
ELR_RELEASE = "4.0-IV1"


def active_controller(cluster: ChaosCluster) -> int:
    """The active controller as the live controllers report it (-1 if none)."""
    for n in cluster.controllers:
        if not n.alive or n.paused:
            continue
        try:
            leader = _describe_quorum_leader(n.addr)
        except OSError:
            continue
        if leader >= 0:
            return leader
    return -1


def _describe_quorum_leader(host: str) -> int:
    from kio.index import load_request_schema

    from keeperless.protocol.build import build
    from keeperless.protocol.framing import decode_response, encode_request

    req = build(
        load_request_schema(55, 1),
        {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]},
    )
    with socket.create_connection((host, CONTROLLER_PORT), timeout=2) as s:
        s.settimeout(2)
        s.sendall(encode_request(55, 1, 1, "chaos", req))
        head = _recv(s, 4)
        (size,) = struct.unpack(">i", head)
        _, resp = decode_response(memoryview(_recv(s, size)), 55, 1)
    p = resp.topics[0].partitions[0]
    return int(p.leader_id) if int(p.error_code) == 0 else -1


def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise OSError("closed")
        buf += chunk
    return buf


def _leaders(cluster: ChaosCluster) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    from tests.chaos.workload import _quiet

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "logger": _quiet})
    try:
        md = admin.list_topics(TOPIC, timeout=5)
    except Exception:
        return {}
    t = md.topics.get(TOPIC)
    return {p: pm.leader for p, pm in (t.partitions.items() if t else ())}


class Nemesis:
    def __init__(
        self,
        cluster: ChaosCluster,
        net: Network,
        history: History,
        rng: random.Random,
        faults: tuple[str, ...] = FAULTS,
    ) -> None:
        self.cluster = cluster
        self.net = net
        self.history = history
        self.rng = random.Random(rng.random())
        # the membership faults need a dynamic quorum (the dynamic topology)
        self.faults = tuple(f for f in faults if cluster.dynamic or f not in MEMBERSHIP)
        self._admin: Any = None
        if cluster.dynamic:
            first = {n.node_id: n.directory_id for n in cluster.first_voters}
            history.info("nemesis", "voters", {"op": "initial", "voters": first})
        # index in RELEASES of the last finalized upgrade (-1: the start is before them)
        self.release = RELEASES.index(cluster.release) if cluster.release in RELEASES else -1
        self.log: list[dict[str, Any]] = []  # (kind, target, start, end) per fault
        # measurements for the checkers: CPU of a cut-off controller
        self.isolated_controllers: list[dict[str, Any]] = []

    # -- schedule -------------------------------------------------------------------------

    def run(self, duration_s: float, stop: Any) -> None:
        end = time.monotonic() + duration_s
        while time.monotonic() < end and not stop.is_set():
            if stop.wait(self.rng.uniform(2.0, 4.0)):
                break
            members = [f for f in self.faults if f in MEMBERSHIP]
            if members and self.rng.random() < 0.5:  # (the dynamic topology's own faults)
                kind = self.rng.choice(members)
            else:
                kind = self.rng.choice([f for f in self.faults if f not in MEMBERSHIP] or members)
            self.inject(kind)
        self.heal_all()

    def inject(self, kind: str) -> None:
        rng = self.rng
        hold = rng.uniform(3.0, 7.0)
        started = self.history.now()
        target: Any = None
        fn = getattr(self, "_" + kind.replace("-", "_"))
        self.history.info("nemesis", "start", {"fault": kind})
        try:
            target = fn(hold)
        finally:
            self.history.info("nemesis", "stop", {"fault": kind, "target": target})
            self.log.append(
                {
                    "fault": kind,
                    "target": target,
                    "start_s": round(started, 2),
                    "end_s": round(self.history.now(), 2),
                }
            )

    def heal_all(self) -> None:
        self.net.heal()
        for n in self.cluster.nodes.values():
            n.free_disk()
            if n.paused:
                n.resume()
            if n.is_broker and n.disk_failed:
                if n.alive:
                    n.stop()
                n.replace_disk(fresh=False)
            if not n.alive:
                n.start()

    # -- faults (each returns its target, for the report) ----------------------------------

    def _pick(self, nodes: list[ChaosNode] | None = None) -> ChaosNode:
        return self.rng.choice(nodes or list(self.cluster.nodes.values()))

    def _restart_after(self, nodes: list[ChaosNode], hold: float) -> None:
        for n in nodes:
            n.kill9()
        time.sleep(hold)
        for n in nodes:
            n.start()
        self._await_isr([n for n in nodes if n.is_broker])

    def _kill(self, hold: float) -> Any:
        n = self._pick()
        self._restart_after([n], hold)
        return n.node_id

    def _kill_controller(self, hold: float) -> Any:
        leader = active_controller(self.cluster)
        n = self.cluster.nodes.get(leader) or self._pick(self.cluster.controllers)
        self._restart_after([n], hold)
        return n.node_id

    def _kill_leader(self, hold: float) -> Any:
        leaders = [b for b in _leaders(self.cluster).values() if b in self.cluster.nodes]
        n = self.cluster.nodes[self.rng.choice(leaders)] if leaders else self._pick()
        self._restart_after([n], hold)
        return n.node_id

    def _kill_two(self, hold: float) -> Any:
        two = self.rng.sample(list(self.cluster.nodes.values()), 2)
        self._restart_after(two, hold)
        return [n.node_id for n in two]

    def _pause(self, hold: float) -> Any:
        n = self._pick()
        n.pause()
        time.sleep(hold + 2.0)  # past the 3 s broker session and 1 s fetch timeouts
        n.resume()
        return n.node_id

    def _cut(self, pairs: set[tuple[int, int]], hold: float) -> None:
        self.net.set_cut(pairs)
        time.sleep(hold)
        self.net.heal()

    def _partition_halves(self, hold: float) -> Any:
        ids = list(self.cluster.nodes)
        self.rng.shuffle(ids)
        k = self.rng.randint(1, len(ids) // 2)
        groups = [set(ids[:k]), set(ids[k:])]
        self._cut(symmetric(groups), hold)
        return [sorted(g) for g in groups]

    def _isolate_controller(self, hold: float) -> Any:
        leader = active_controller(self.cluster)
        was_leader = leader >= 0  # none known (an election on): a controller, maybe an observer
        if leader < 0:
            leader = self._pick(self.cluster.controllers).node_id
        node = self.cluster.nodes[leader]
        others = set(self.cluster.nodes) - {leader}
        self.net.set_cut(symmetric([{leader}, others]))
        t0 = time.monotonic()
        # after the fetch timeout (1 s) and a margin, it must have stopped acting: measure
        # its CPU over the rest of the hold
        time.sleep(2.0)
        cpu0, w0 = node.cpu_seconds(), time.monotonic()
        time.sleep(max(hold, 3.0))
        cpu1, w1 = node.cpu_seconds(), time.monotonic()
        self.net.heal()
        self.isolated_controllers.append(
            {
                "node": leader,
                "cut_at_s": round(self.history.now() - (time.monotonic() - t0), 2),
                "cpu_pct": round(100 * (cpu1 - cpu0) / (w1 - w0), 1),
                "window_s": round(w1 - w0, 1),
                "was_leader": was_leader,
            }
        )
        return leader

    def _one_way(self, hold: float) -> Any:
        ids = list(self.cluster.nodes)
        pairs = {tuple(self.rng.sample(ids, 2)) for _ in range(self.rng.randint(1, 3))}
        self._cut(set(pairs), hold)  # type: ignore[arg-type]
        return sorted(pairs)

    def _bridge(self, hold: float) -> Any:
        ids = list(self.cluster.nodes)
        self.rng.shuffle(ids)
        bridge, rest = ids[0], ids[1:]
        half = len(rest) // 2
        a, b = set(rest[:half]), set(rest[half:])
        self._cut(symmetric([a, b]), hold)  # the bridge node sees both sides
        return {"bridge": bridge, "sides": [sorted(a), sorted(b)]}

    def _disk_full(self, hold: float) -> Any:
        n = self._pick(self.cluster.brokers)
        seen = len(n.logs())
        n.fill_disk()
        time.sleep(hold)
        n.free_disk()
        if n.alive and _DIR_OFFLINE in n.logs()[seen:]:
            # its second log directory went offline (KIP-858) and stays so until a
            # restart, as Kafka's does
            n.stop()
        if not n.alive:  # a broker that cannot write stops, as Kafka's does; it restarts
            n.start()
            self._await_isr([n])
        return n.node_id

    def _disk_failure(self, hold: float) -> Any:
        """One broker's second log directory fails while it runs: only that directory's
        replicas go offline (their leaderships move); then, stopped, the disk comes back
        or an empty one replaces it, and the broker must rejoin every ISR."""
        n = self._pick([b for b in self.cluster.brokers if b.alive])
        n.fail_disk()
        time.sleep(hold)
        fresh = self.rng.random() < 0.5 and self._others_in_sync(n)
        n.stop()
        n.replace_disk(fresh)
        n.start()
        # empty or not, the disk's replicas are behind by everything written while it
        # was out (seed 8122: 151 MB, back in the ISR after 61 s)
        self._await_isr([n], refilling=True)
        return {"node": n.node_id, "replaced": fresh}

    def _replace_broker(self, hold: float) -> Any:
        """A broker-only node replaced by a new machine with the same id: stopped, its
        disks emptied and formatted, started; its replicas are fetched again (a node that
        is also a controller keeps its disks: a voter must not forget its log)."""
        spare = [b for b in self.cluster.brokers if not b.is_controller]
        if not spare:
            return self._disk_failure(hold)
        n = self._pick(spare)
        wiped = self._others_in_sync(n)
        n.stop()
        time.sleep(min(hold, 3.0))
        if wiped:
            n.wipe()
        n.start()
        self._await_isr([n], refilling=wiped)
        return {"node": n.node_id, "wiped": wiped}

    def _others_in_sync(self, n: ChaosNode, timeout_s: float = 30.0) -> bool:
        """Kafka's rule before replacing a broker's disks: no partition it holds has it
        as its only in-sync replica (its data would be the only copy of what was
        committed). Waits for that; False if it does not come in ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                md = self._isr_admin().list_topics(timeout=5)
            except Exception:
                time.sleep(0.5)
                continue
            alone = [
                f"{name}-{p}"
                for name, t in md.topics.items()
                for p, pm in t.partitions.items()
                if n.node_id in pm.replicas and set(pm.isrs) <= {n.node_id}
            ]
            if not alone:
                return True
            time.sleep(0.5)
        return False

    def _roll(self, hold: float) -> Any:
        for n in self.cluster.brokers:
            n.stop()
            n.start()
            deadline = time.monotonic() + 30
            while not n.serving() and time.monotonic() < deadline:
                time.sleep(0.2)
        self._await_isr(self.cluster.brokers)
        return [n.node_id for n in self.cluster.brokers]

    def _upgrade(self, hold: float) -> Any:
        """Finalize a later metadata.version with Kafka's features command (recorded as
        an operation: an acknowledged upgrade must never be lost)."""
        import subprocess
        import sys

        if self.release >= len(RELEASES) - 1:
            return "already at the latest release"
        nxt = self.rng.randrange(self.release + 1, len(RELEASES))
        release = RELEASES[nxt]
        h = self.history
        op = h.invoke("nemesis", "upgrade", {"release": release})
        elr = (["--feature", "eligible.leader.replicas.version=1"]
               if nxt >= RELEASES.index(ELR_RELEASE) else [])  # fmt: skip
        res = subprocess.run(
            [
                sys.executable, "-m", "keeperless", "features", "upgrade",
                "--bootstrap-server", self.cluster.bootstrap, "--metadata", release, *elr,
            ],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        out = (res.stdout + res.stderr).strip()[-300:]
        if res.returncode == 0:
            self.release = nxt
            h.complete(op, "nemesis", "ok", "upgrade", {"release": release, "output": out})
        else:
            h.complete(op, "nemesis", "info", "upgrade", {"release": release, "output": out})
        time.sleep(min(hold, 2.0))
        return {"release": release, "ok": res.returncode == 0}

    def _power_loss(self, hold: float) -> Any:
        n = self._pick(self.cluster.brokers)
        sizes = _active_segments(n.log_dirs)
        time.sleep(hold)
        n.signal(signal.SIGKILL)
        n.kill9()
        lost = 0
        now = _active_segments(n.log_dirs)
        # a partition directory made meanwhile (a reassignment, a new topic) is synced by
        # a worker thread after the fact: its partition.metadata may be torn (as if the
        # power went before that), one time in two; the broker must set it aside
        torn = 0
        before = {seg.parent for seg in sizes}
        for seg in now:
            meta = seg.parent / "partition.metadata"
            if seg.parent not in before and meta.exists() and self.rng.random() < 0.5:
                meta.write_bytes(b"")
                torn += 1
        # a segment rolled meanwhile is fsynced by a worker after its roll, and the
        # snapshot at the next segment's base written only after that: one without
        # that snapshot yet is cut back as an active one is
        begun = {seg.parent: seg for seg in sizes}
        for path, size in _unsealed_segments(n.log_dirs).items():
            first = begun.get(path.parent)
            if first is not None and path.name >= first.name:  # (rolled during the fault)
                now[path] = size
        for path, size in now.items():
            synced = sizes.get(path, 0)
            if size > synced:
                # anywhere in what was written since: inside a batch as often as not
                keep = self.rng.randint(synced, size)
                with open(path, "r+b") as f:
                    f.truncate(keep)
                lost += size - keep
        n.start()
        self._await_isr([n])
        return {"node": n.node_id, "bytes_lost": lost, "torn_partition_metadata": torn}

    # -- whole-cluster faults --------------------------------------------------------------

    def _restart_together(self, nodes: list[ChaosNode], clean: bool, hold: float) -> None:
        """Stop ``nodes`` at once (SIGTERM, or kill -9), then start them all again,
        controllers first."""
        for n in nodes:
            if clean:
                n.terminate()
            else:
                n.kill9()
        for n in nodes:
            n.wait_stopped(60.0)
        time.sleep(min(hold, 2.0))
        for n in sorted(nodes, key=lambda x: not x.is_controller):
            n.start()
        self._await_isr([n for n in nodes if n.is_broker])

    def _restart_all(self, hold: float) -> Any:
        nodes = list(self.cluster.nodes.values())
        self._restart_together(nodes, True, hold)
        return [n.node_id for n in nodes]

    def _kill_all(self, hold: float) -> Any:
        nodes = list(self.cluster.nodes.values())
        self._restart_together(nodes, False, hold)
        return [n.node_id for n in nodes]

    def _stop_brokers(self, hold: float) -> Any:
        self._restart_together(self.cluster.brokers, True, hold)
        return [n.node_id for n in self.cluster.brokers]

    def _kill_brokers(self, hold: float) -> Any:
        self._restart_together(self.cluster.brokers, False, hold)
        return [n.node_id for n in self.cluster.brokers]

    def _restart_controllers(self, hold: float) -> Any:
        clean = self.rng.random() < 0.5
        self._restart_together(self.cluster.controllers, clean, hold)
        return {"nodes": [n.node_id for n in self.cluster.controllers], "clean": clean}

    def _unregister(self, hold: float) -> Any:
        """A broker stopped, unregistered with Kafka's tool, and started again (it
        registers anew): it must take its replicas back and rejoin their ISRs."""
        import subprocess
        import sys

        n = self._pick(self.cluster.brokers)
        n.stop()
        others = ",".join(f"{b.addr}:9092" for b in self.cluster.brokers if b is not n)
        res = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # until the controller has fenced it
            res = subprocess.run(
                [sys.executable, "-m", "keeperless", "cluster", "unregister",
                 "--bootstrap-server", others, "--id", str(n.node_id)],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            if res.returncode == 0:
                break
            time.sleep(0.5)
        time.sleep(min(hold, 3.0))
        n.start()
        self._await_isr([n])
        out = (res.stdout + res.stderr).strip()[-200:] if res is not None else ""
        return {"node": n.node_id, "unregistered": res is not None and res.returncode == 0,
                "output": out}  # fmt: skip

    # -- the controller quorum's voters (KIP-853) ----------------------------------------

    def _quorum(self, *args: str, timeout: float = 90) -> Any:
        import subprocess
        import sys

        ctl = ",".join(f"{n.addr}:{CONTROLLER_PORT}" for n in self.cluster.controllers)
        return subprocess.run(
            [sys.executable, "-m", "keeperless", "metadata-quorum", "--bootstrap-controller",
             ctl, *args],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip

    def voters(self) -> list[dict[str, Any]] | None:
        """The voter set as kafka-metadata-quorum describes it (None if no answer)."""
        import json

        try:
            res = self._quorum("describe", "--status", timeout=45)
        except Exception:
            return None
        for line in res.stdout.splitlines() if res.returncode == 0 else ():
            if line.startswith("CurrentVoters:"):
                return list(json.loads(line.split(":", 1)[1]))
        return None

    def _record(self, op: str, node: int, directory: str, res: Any) -> str:
        out = (res.stdout + res.stderr).strip()
        outcome = (
            "ok" if res.returncode == 0 else "fail" if any(w in out for w in _REFUSED) else "info"
        )
        change = {"op": op, "node": node, "dir": directory, "outcome": outcome}
        self.history.info("nemesis", "voters", {**change, "output": out[-300:]})
        return outcome

    def _add_voter(self, n: ChaosNode) -> str:
        """add-controller, again while the leader says it is still catching up."""
        deadline = time.monotonic() + 30
        while True:
            res = self._quorum("add-controller", "--command-config", str(n.config))
            out = res.stdout + res.stderr
            if res.returncode == 0 or "lagging behind" not in out or time.monotonic() > deadline:
                return self._record("add", n.node_id, n.directory_id, res)
            time.sleep(1.0)

    def _add_controller(self, hold: float) -> Any:
        vs = self.voters()
        if vs is None:
            return {"skipped": "no answer from the quorum"}
        ids = {v["id"] for v in vs}
        spare = [n for n in self.cluster.controllers
                 if n.node_id not in ids and n.alive and not n.paused]  # fmt: skip
        if not spare or len(vs) >= 5:
            return {"skipped": f"{len(vs)} voters"}
        n = self._pick(spare)
        return {"node": n.node_id, "outcome": self._add_voter(n)}

    def _remove_controller(self, hold: float) -> Any:
        vs = self.voters()
        if vs is None or len(vs) <= 3:
            return {"skipped": "no answer" if vs is None else f"{len(vs)} voters"}
        leader = active_controller(self.cluster)
        active = [v for v in vs if v["id"] == leader]
        v = active[0] if active and self.rng.random() < 0.4 else self.rng.choice(vs)
        res = self._quorum("remove-controller", "--controller-id", str(v["id"]),
                           "--controller-directory-id", v["directoryId"])  # fmt: skip
        return {"node": v["id"], "active": v["id"] == leader,
                "outcome": self._record("remove", v["id"], v["directoryId"], res)}  # fmt: skip

    def _replace_controller(self, hold: float) -> Any:
        """A voter's disk dies: the controller comes back formatted to join (a new
        directory id), an observer until its old voter is removed and it is added."""
        vs = self.voters()
        if vs is None or len(vs) < 3:
            return {"skipped": "no answer" if vs is None else f"{len(vs)} voters"}
        up = [v for v in vs if (n := self.cluster.nodes.get(v["id"])) is not None and n.alive]
        if len(up) < len(vs):
            return {"skipped": "a voter is down"}
        v = self.rng.choice(up)
        n = self.cluster.nodes[v["id"]]
        n.stop()
        n.wipe()
        n.start()
        time.sleep(min(hold, 3.0))
        res = self._quorum("remove-controller", "--controller-id", str(v["id"]),
                           "--controller-directory-id", v["directoryId"])  # fmt: skip
        removed = self._record("remove", v["id"], v["directoryId"], res)
        added = self._add_voter(n) if removed == "ok" else "-"
        return {"node": v["id"], "removed": removed, "added": added}

    def _isr_admin(self) -> Any:
        """One admin client for the whole run: librdkafka's destroy of a client made per
        check once blocked for good after a kill-two (the run hung in _await_isr, past
        its deadline, seed 3503)."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            from tests.chaos.workload import _quiet

            self._admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap,
                                       "logger": _quiet})  # fmt: skip
        return self._admin

    def _await_isr(self, nodes: list[ChaosNode], refilling: bool = False) -> None:
        """Wait until each of ``nodes`` is in the ISR of every partition it holds; past
        ISR_REJOIN_S, record the partitions still missing it. ``refilling``: a node whose
        data was wiped, or whose disk was out, gets more time while its files still grow
        (up to ISR_REJOIN_MAX_S)."""
        ids = {n.node_id for n in nodes}
        if not ids:
            return
        start = time.monotonic()
        deadline = start + ISR_REJOIN_S
        # serving first: a restarted broker's old incarnation can still be in the ISR
        # (its session not yet expired), which is not a rejoin
        while time.monotonic() < deadline and not all(n.serving() for n in nodes):
            time.sleep(0.2)
        missing: list[str] = []
        size, sized = _bytes_held(nodes), time.monotonic()
        while time.monotonic() < min(deadline, start + ISR_REJOIN_MAX_S):
            missing = _missing_from_isr(self._isr_admin(), ids)
            if not missing:
                return
            time.sleep(0.5)
            if refilling and time.monotonic() - sized >= 5.0:  # still copying: more time
                grown, sized = _bytes_held(nodes), time.monotonic()
                if grown > size:
                    deadline = max(deadline, sized + ISR_STALL_S)
                size = grown
        self.history.info("nemesis", "isr-late", {
            "nodes": sorted(ids), "after_s": round(time.monotonic() - start, 1),
            "partitions": missing[:30], "count": len(missing)})  # fmt: skip


def _bytes_held(nodes: list[ChaosNode]) -> int:
    """What the nodes' log directories hold, in bytes (a replaced disk filling up)."""
    total = 0
    for d in (d for n in nodes for d in n.log_dirs):
        for root, _dirs, files in os.walk(d):
            for f in files:
                with contextlib.suppress(OSError):
                    total += os.stat(os.path.join(root, f)).st_size
    return total


def _missing_from_isr(admin: Any, ids: set[int]) -> list[str]:
    """ "topic-partition: [node...]" for every partition whose replicas among ``ids`` are
    not all in its ISR (everything, as unknown, if the metadata cannot be read)."""
    try:
        md = admin.list_topics(timeout=5)
    except Exception:
        return ["(metadata unavailable)"]
    out = []
    for name, t in sorted(md.topics.items()):
        for p, pm in sorted(t.partitions.items()):
            lacking = sorted((set(pm.replicas) & ids) - set(pm.isrs))
            if lacking:
                out.append(f"{name}-{p}: {lacking}")
    return out


def _unsealed_segments(dirs: list[Path]) -> dict[Path, int]:
    """The rolled segments of every partition that have no producer snapshot at the
    next segment's base (written once a rolled segment is durable), and their sizes."""
    out: dict[Path, int] = {}
    for d in (e for data in dirs if data.is_dir() for e in data.iterdir()):
        if not d.is_dir() or d.name.startswith("__cluster_metadata") or d.name.endswith("-delete"):
            continue
        logs = sorted(d.glob("*.log"))
        for seg, nxt in itertools.pairwise(logs):
            if not (d / f"{nxt.stem}.snapshot").exists():
                out[seg] = seg.stat().st_size
    return out


def _active_segments(dirs: list[Path]) -> dict[Path, int]:
    """The newest segment of every partition (not the metadata log's) and its size."""
    out: dict[Path, int] = {}
    for d in (e for data in dirs if data.is_dir() for e in data.iterdir()):
        if not d.is_dir() or d.name.startswith("__cluster_metadata") or d.name.endswith("-delete"):
            continue
        logs = sorted(d.glob("*.log"))
        if logs:
            out[logs[-1]] = logs[-1].stat().st_size
    return out
