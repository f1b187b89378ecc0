"""Real keeperless processes for the fault harness, each in its own network namespace
with its data on its own small tmpfs (so that a full disk is a real ENOSPC).

Topologies: "split" (controllers 1-3, brokers 4-6), "combined" (nodes 1-3, each both
broker and controller) and "dynamic" (split, with a dynamic controller quorum, KIP-853:
controllers 1-3 formatted with --initial-controllers, controllers 7 and 8 formatted to
join, every node finding the quorum by controller.quorum.bootstrap.servers). Timeouts
are short so that faults resolve within a run.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.chaos.netns import Network
from tests.chaos.secure_workload import NODE_CONFIG as SECURE_NODE_CONFIG
from tests.chaos.secure_workload import SECURE_PORT, scram_users

__all__ = ["ChaosCluster", "ChaosNode"]

BROKER_PORT = 9092
CONTROLLER_PORT = 9093
# room for the bulk workload's few hundred MB per replica, and a disk-full fault fills it
TMPFS_BYTES = 1536 * 1024 * 1024
# formatted at an older metadata.version, which the nemesis upgrades during the run
# (record versions change mid-stream, as when a rolling upgrade is finalized)
FIRST_RELEASE = "3.5-IV2"
# odd seeds start with eligible leader replicas on (KIP-966): formatted at this release
ELR_RELEASE = "4.0-IV1"
ELR_FORMAT = ("--feature", "eligible.leader.replicas.version=1")
# a dynamic quorum (kraft.version 1, KIP-853) needs metadata.version 3.9-IV0 or later
DYNAMIC_RELEASE = "3.9-IV0"
# the workload's consumers use the consumer group protocol (KIP-848), which group.version
# 1 turns on; releases before 4.0 do not bootstrap it
GROUP_FORMAT = ("--feature", "group.version=1")
# ... and transaction version 2 (KIP-890), for the Jepsen workload's TV2 producer (Kafka
# bootstraps it from 4.0-IV2; it has no dependency)
TXN_FORMAT = ("--feature", "transaction.version=2")
# seeds that are 3 modulo 4 start at Kafka 4.2 with share groups on (KIP-932): the share
# workload runs (share.version 1 needs metadata.version 4.2-IV0)
SHARE_RELEASE = "4.2-IV0"
SHARE_FORMAT = ("--feature", "share.version=1")
RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"

# Timeouts of a cluster under attack: faults must resolve within seconds.
TIMEOUTS = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.election.backoff.max.ms": "300",
    "controller.quorum.request.timeout.ms": "1000",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.backoff.ms": "200",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "log.cleaner.backoff.ms": "1000",
    # a failed log directory is found within a second by the checkpoint written there
    "replica.high.watermark.checkpoint.interval.ms": "1000",
    # share groups: the workload's group locks records for 5 s and archives a record at
    # its third delivery; the share coordinator snapshots and prunes often
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.delivery.count.limit": "3",
    "share.coordinator.snapshot.update.records.per.snapshot": "3",
    "share.coordinator.state.topic.prune.interval.ms": "1000",
    "share.coordinator.cold.partition.snapshot.interval.ms": "1000",
}


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it if the harness dies (PR_SET_PDEATHSIG)."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=True)


class ChaosNode:
    def __init__(self, cluster: ChaosCluster, node_id: int, roles: list[str]) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.roles = roles
        self.dir = cluster.workdir / f"node-{node_id}"
        self.data = self.dir / "data"
        self.config = self.dir / "server.properties"
        self.log_path = self.dir / "node.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.mounted = False
        # a broker's second log directory (JBOD, KIP-858): on the same tmpfs, failed and
        # replaced by the disk-failure fault; the metadata log stays in the first
        self.disk_b = self.data / "disk-b"

    @property
    def log_dirs(self) -> list[Path]:
        return [self.data, self.disk_b] if self.is_broker else [self.data]

    def fail_disk(self) -> None:
        """The second disk fails: its directory is gone and a file stands in its place
        (every write there fails from now on, as Kafka's own tests fail a directory)."""
        self.disk_b.rename(self.disk_b.with_name("disk-b.failed"))
        self.disk_b.write_text("a failed disk\n")

    @property
    def disk_failed(self) -> bool:
        return self.disk_b.is_file()

    def replace_disk(self, fresh: bool) -> None:
        """With the node stopped: the failed disk back as it was, or (``fresh``) a new,
        empty one formatted (a new directory id: its replicas are fetched again)."""
        failed = self.disk_b.with_name("disk-b.failed")
        self.disk_b.unlink()
        if fresh:
            shutil.rmtree(failed, ignore_errors=True)
            self.disk_b.mkdir()
            _run(sys.executable, "-m", "keeperless", "storage", "format", "--ignore-formatted",
                 "-t", self.cluster.cluster_id, "-c", str(self.config))  # fmt: skip
        else:
            failed.rename(self.disk_b)

    def wipe(self) -> None:
        """A new machine in the node's place (stopped): its disks empty, formatted with
        the same node id (a dynamic quorum's controller formatted to join it)."""
        for entry in self.data.iterdir():
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink()
        if self.is_broker:
            self.disk_b.mkdir()
        join = ("--no-initial-controllers",) if self.cluster.dynamic else ()
        _run(sys.executable, "-m", "keeperless", "storage", "format", "-t",
             self.cluster.cluster_id, "-c", str(self.config), "--release-version",
             self.cluster.release, *self.cluster.format_flags, *join)  # fmt: skip

    @property
    def directory_id(self) -> str:
        """The directory id of its metadata directory (a voter is id + directory id)."""
        for line in (self.data / "meta.properties").read_text().splitlines():
            if line.startswith("directory.id="):
                return line.split("=", 1)[1]
        return ""

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def addr(self) -> str:
        return self.cluster.net.addr(self.node_id)

    def prepare(self, voters: str, bootstrap: str = "") -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.data.mkdir(exist_ok=True)
        _run("mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(self.data))
        self.mounted = True
        if self.is_broker:
            self.disk_b.mkdir(exist_ok=True)
        listeners, advertised = [], []
        if self.is_broker:
            listeners.append(f"PLAINTEXT://{self.addr}:{BROKER_PORT}")
            advertised.append(f"PLAINTEXT://{self.addr}:{BROKER_PORT}")
            # SASL (SCRAM) with ACLs: the security workload's listener
            listeners.append(f"SECURE://{self.addr}:{SECURE_PORT}")
            advertised.append(f"SECURE://{self.addr}:{SECURE_PORT}")
        if self.is_controller:
            listeners.append(f"CONTROLLER://{self.addr}:{CONTROLLER_PORT}")
        props = {
            "process.roles": ",".join(self.roles),
            "node.id": str(self.node_id),
            **(
                {"controller.quorum.voters": voters}
                if voters
                else {"controller.quorum.bootstrap.servers": bootstrap}
            ),
            "listeners": ",".join(listeners),
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": (
                "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SECURE:SASL_PLAINTEXT"
            ),
            "log.dirs": ",".join(str(d) for d in self.log_dirs),
            "metadata.log.dir": str(self.data),
            "default.replication.factor": "3",
            "min.insync.replicas": "2",
            "offsets.topic.replication.factor": "3",
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.num.partitions": "3",
            "share.coordinator.state.topic.num.partitions": "3",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
            "auto.create.topics.enable": "false",
            **TIMEOUTS,
            **SECURE_NODE_CONFIG,
        }
        if advertised:
            props["advertised.listeners"] = ",".join(advertised)
            # a rack each: consumers with a client.rack read from followers (KIP-392)
            props["broker.rack"] = f"rack-{self.node_id}"
            props["replica.selector.class"] = RACK_AWARE
        self.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None
        out = open(self.log_path, "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            [
                *self.cluster.net.exec_prefix(self.node_id),
                sys.executable,
                "-m",
                "keeperless",
                "server",
                "start",
                str(self.config),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=self.dir,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "KEEPERLESS_TRACE": "acks"},
            preexec_fn=_die_with_parent,
        )
        out.close()
        self.paused = False

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(sig)

    def kill9(self) -> None:
        if self.alive:
            assert self.proc is not None
            if self.paused:
                self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(30)
        self.paused = False

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a controlled shutdown), SIGKILL if it does not end in time."""
        self.terminate()
        self.wait_stopped(timeout)

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM), without waiting: several nodes stop at once."""
        if not self.alive:
            return
        if self.paused:
            self.resume()
        self.signal(signal.SIGTERM)

    def wait_stopped(self, timeout: float = 30.0) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def serving(self) -> bool:
        if not self.is_broker or not self.alive or self.paused:
            return False
        try:
            with socket.create_connection((self.addr, BROKER_PORT), timeout=1):
                return True
        except OSError:
            return False

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def cpu_seconds(self) -> float:
        if not self.alive:
            return 0.0
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    # -- disk -----------------------------------------------------------------------

    def fill_disk(self) -> int:
        """Take every free byte of the node's tmpfs; returns how many."""
        st = os.statvfs(self.data)
        free = st.f_bavail * st.f_frsize
        # unbuffered: a buffered file kept the part of a chunk that did not fit and raised
        # ENOSPC again when closed, outside the loop (a harness error in make test's run)
        with open(self.data / "ballast", "wb", buffering=0) as f:
            chunk = b"\0" * (1 << 20)
            try:
                while True:
                    if not f.write(chunk):
                        break
            except OSError:
                pass
        return free

    def free_disk(self) -> None:
        (self.data / "ballast").unlink(missing_ok=True)

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.data)], capture_output=True, check=False)
            self.mounted = False


class ChaosCluster:
    def __init__(
        self, workdir: Path, topology: str, net: Network, elr: bool = False, share: bool = False
    ) -> None:
        self.workdir = workdir
        self.topology = topology
        self.dynamic = topology == "dynamic"
        self.share = share
        # the release formatted with (and eligible leader replicas from the start)
        first = DYNAMIC_RELEASE if self.dynamic else FIRST_RELEASE
        self.release = SHARE_RELEASE if share else ELR_RELEASE if elr else first
        self.format_flags: tuple[str, ...] = (
            GROUP_FORMAT + TXN_FORMAT + (ELR_FORMAT if elr or share else ())
            + (SHARE_FORMAT if share else ())
        )  # fmt: skip
        self.net = net
        self.cluster_id = ""
        if topology in ("split", "dynamic"):
            layout = {1: ["controller"], 2: ["controller"], 3: ["controller"]}
            layout |= {4: ["broker"], 5: ["broker"], 6: ["broker"]}
            if self.dynamic:  # two controllers formatted to join the quorum later
                layout |= {7: ["controller"], 8: ["controller"]}
        elif topology == "combined":
            layout = {i: ["broker", "controller"] for i in (1, 2, 3)}
        else:
            raise ValueError(f"unknown topology {topology!r} (split, combined or dynamic)")
        self.nodes = {i: ChaosNode(self, i, roles) for i, roles in layout.items()}

    @property
    def brokers(self) -> list[ChaosNode]:
        return [n for n in self.nodes.values() if n.is_broker]

    @property
    def controllers(self) -> list[ChaosNode]:
        return [n for n in self.nodes.values() if n.is_controller]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{n.addr}:{BROKER_PORT}" for n in self.brokers)

    @property
    def secure_bootstrap(self) -> str:
        return ",".join(f"{n.addr}:{SECURE_PORT}" for n in self.brokers)

    @property
    def first_voters(self) -> list[ChaosNode]:
        return [n for n in self.controllers if n.node_id <= 3]

    def start(self, timeout_s: float = 60.0) -> None:
        def uuid() -> str:
            return _run(sys.executable, "-m", "keeperless", "storage", "random-uuid").stdout.strip()

        voters = ",".join(f"{n.node_id}@{n.addr}:{CONTROLLER_PORT}" for n in self.controllers)
        bootstrap = ",".join(f"{n.addr}:{CONTROLLER_PORT}" for n in self.first_voters)
        for n in self.nodes.values():
            n.prepare("" if self.dynamic else voters, bootstrap)
        cid = uuid()
        self.cluster_id = cid
        initial = ",".join(
            f"{n.node_id}@{n.addr}:{CONTROLLER_PORT}:{uuid()}" for n in self.first_voters
        )
        for n in self.nodes.values():
            quorum: tuple[str, ...] = ()
            if self.dynamic and n.is_controller:
                quorum = (
                    ("--initial-controllers", initial)
                    if n in self.first_voters
                    else ("--no-initial-controllers",)
                )
            _run(
                sys.executable, "-m", "keeperless", "storage", "format", "-t", cid,
                "-c", str(n.config), "--release-version", self.release, *self.format_flags,
                *scram_users(), *quorum,
            )  # fmt: skip
        for n in self.nodes.values():
            n.start()
        self.wait_serving(timeout_s)

    def wait_serving(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            down = [n for n in self.brokers if not n.serving()]
            if not down:
                return
            for n in down:
                if n.proc is not None and n.proc.poll() is not None:
                    raise RuntimeError(
                        f"node {n.node_id} exited ({n.proc.returncode}):\n{n.logs()[-3000:]}"
                    )
            time.sleep(0.2)
        raise TimeoutError(f"brokers not serving after {timeout_s} s")

    def close(self) -> None:
        for n in self.nodes.values():
            n.kill9()
        for n in self.nodes.values():
            n.unmount()

    def copy_data(self, dest: Path) -> None:
        """Keep every node's data and log (for the offline checks and a failing run)."""
        for n in self.nodes.values():
            shutil.copytree(n.data, dest / f"node-{n.node_id}", dirs_exist_ok=True)
            if n.log_path.exists():
                shutil.copy(n.log_path, dest / f"node-{n.node_id}.log")
