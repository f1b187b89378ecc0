"""Start real keeperless node processes on loopback ports chosen at run time."""

from __future__ import annotations

import functools
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[2]


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _port_range() -> tuple[int, int]:
    """10000 up to the ephemeral range; under pytest-xdist (``make test`` runs the
    integration tests two at a time) each worker draws from its own slice, so two
    workers never hand out the same port between a check and a bind."""
    low, top = 10000, _ephemeral_low() - 1
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ...
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if worker.startswith("gw") and worker[2:].isdigit() and count > 1 and top > low:
        size = (top - low) // count
        low += int(worker[2:]) * size
        top = low + size - 1
    return low, top


_ports = random.SystemRandom()
_given: set[int] = set()


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range: a port from that range can be
    taken by any client's outgoing connection between this check and the node's bind
    (a full run once lost a secured node's listener that way: "address already in use").
    Never the same port twice in one test process: a cluster chooses all its ports before
    any node binds one, so a port handed out for one node is still free when the next is
    chosen (the likely cause of a full run's "Cannot serve metrics ...: Address already in
    use", a broker metrics port drawn again)."""
    low, top = _port_range()
    for _ in range(200):
        port = _ports.randint(low, top) if top > low else 0
        if port in _given:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _given.add(port)
            return int(s.getsockname()[1])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(cond, timeout: float = 20.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            v = cond()
            if v:
                return v
        except Exception as e:
            last_exc = e
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}" + (f": {last_exc}" if last_exc else ""))


def api_versions_ok(port: int) -> bool:
    """True when the broker answers an ApiVersions v0 request."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        body = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
        s.sendall(struct.pack(">i", len(body)) + body)
        hdr = s.recv(4)
        return len(hdr) == 4


def keeperless(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "keeperless", *args],
        capture_output=True,
        text=True,
        check=check,
        cwd=ROOT,
        timeout=60,
    )


# keys the harness sets that older revisions do not know (bench/revisions.py runs this
# harness against a baseline, whose config refuses a key it does not define)
_NEWER_DEFAULTS = (
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr",
    "share.coordinator.state.topic.num.partitions",
)


@functools.cache
def _defined(key: str) -> bool:
    """Whether the code under test defines ``key`` (asked once a process: its config
    refuses an unknown key before it reads any value)."""
    from keeperless.server.config import ConfigError, load_config

    try:
        load_config(properties={key: "1"})
    except ConfigError as e:
        return "Unknown configuration key" not in str(e)
    return True


def _defined_defaults(props: dict[str, str]) -> dict[str, str]:
    """``props`` without the harness's newer keys the code under test does not define."""
    return {k: v for k, v in props.items() if k not in _NEWER_DEFAULTS or _defined(k)}


class Node:
    """One combined node (broker + controller) in a temp directory."""

    def __init__(self, workdir: Path, node_id: int = 1, extra: dict[str, str] | None = None):
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.node_id = node_id
        self.port = free_port()
        self.controller_port = free_port()
        self.data = workdir / "data"
        self.config = workdir / "server.properties"
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "controller.quorum.voters": f"{node_id}@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data),
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "5",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "share.coordinator.state.topic.num.partitions": "5",
            "group.initial.rebalance.delay.ms": "0",
        }
        props = _defined_defaults(props)
        props.update(extra or {})
        self.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "node.log"
        self.metrics_port = -1

    def scrape(self) -> str:
        """The node's Prometheus metrics page."""
        import urllib.request

        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as r:
            return str(r.read().decode())

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def format(self, cluster_id: str | None = None, release: str | None = None) -> None:
        """kafka-storage.sh format, at ``release`` (the latest production one if None)."""
        cid = cluster_id or keeperless("storage", "random-uuid", check=True).stdout.strip()
        at = ("--release-version", release) if release else ()
        keeperless("storage", "format", "-t", cid, "-c", str(self.config), *at, check=True)

    def start(self, timeout: float = 30.0) -> None:
        self.start_background()
        self.wait_listening(timeout)

    def start_background(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "keeperless", "server", "start", str(self.config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        log.close()

    def wait_listening(self, timeout: float = 30.0) -> None:
        def up() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"node exited with {self.proc.returncode}:\n{self.logs()}")
            return api_versions_ok(self.port)

        wait_until(up, timeout, what=f"node {self.node_id} to listen on {self.port}")

    def logs(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        rc = self.proc.returncode
        self.proc = None
        return rc

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)

    def restart(self) -> None:
        self.stop()
        self.start()

    def running(self) -> Iterator[Node]:
        """Formatted, started, and stopped after: the body of a node fixture."""
        self.format()
        self.start()
        try:
            yield self
        finally:
            self.stop()


class Cluster:
    """Dedicated controllers (a voter quorum) and broker-only nodes, one cluster id."""

    def __init__(
        self,
        workdir: Path,
        controllers: int = 3,
        brokers: int = 2,
        extra: dict[str, str] | None = None,
        metrics: bool = False,
        release: str | None = None,
    ) -> None:
        self.release = release  # what storage format finalizes (None: its default)
        self.controller_ports = {i: free_port() for i in range(1, controllers + 1)}
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in self.controller_ports.items())
        common = {
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "controller.quorum.election.timeout.ms": "500",
            "controller.quorum.fetch.timeout.ms": "1000",
            "controller.quorum.election.backoff.max.ms": "300",
            "controller.quorum.request.timeout.ms": "1000",
            **(extra or {}),
        }
        self.controllers: dict[int, Node] = {}
        for i, port in self.controller_ports.items():
            n = Node(workdir / f"controller-{i}", i)
            n.port = port
            n.controller_port = port
            props = {
                **common,
                "process.roles": "controller",
                "node.id": str(i),
                "listeners": f"CONTROLLER://127.0.0.1:{port}",
                "log.dirs": str(n.data),
            }
            if metrics:
                n.metrics_port = free_port()
                props["metrics.http.listener"] = f"127.0.0.1:{n.metrics_port}"
            n.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            self.controllers[i] = n
        self.brokers: dict[int, Node] = {}
        for j in range(controllers + 1, controllers + brokers + 1):
            n = Node(workdir / f"broker-{j}", j)
            props = {
                **common,
                "process.roles": "broker",
                "node.id": str(j),
                "listeners": f"PLAINTEXT://127.0.0.1:{n.port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{n.port}",
                "log.dirs": str(n.data),
                "offsets.topic.replication.factor": "1",
                "offsets.topic.num.partitions": "3",
                "transaction.state.log.replication.factor": "1",
                "transaction.state.log.min.isr": "1",
                "transaction.state.log.num.partitions": "3",
                "share.coordinator.state.topic.replication.factor": "1",
                "share.coordinator.state.topic.min.isr": "1",
                "share.coordinator.state.topic.num.partitions": "3",
                "group.initial.rebalance.delay.ms": "0",
            }
            props = _defined_defaults(props)
            props.update({k: v for k, v in (extra or {}).items() if k in props})  # extra wins
            if metrics:
                n.metrics_port = free_port()
                props["metrics.http.listener"] = f"127.0.0.1:{n.metrics_port}"
            n.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            self.brokers[j] = n

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self) -> None:
        cid = keeperless("storage", "random-uuid", check=True).stdout.strip()
        for n in [*self.controllers.values(), *self.brokers.values()]:
            n.format(cid, self.release)
        for n in self.controllers.values():
            n.start_background()
        for n in self.controllers.values():
            n.wait_listening()
        for n in self.brokers.values():
            n.start()

    def stop(self) -> None:
        for n in [*self.brokers.values(), *self.controllers.values()]:
            n.stop()

    def leader(self, timeout: float = 20.0) -> int:
        """The id of the active controller, as the live controllers report it."""

        def ask() -> int | None:
            for n in self.controllers.values():
                if n.proc is None:
                    continue
                try:
                    info = describe_quorum(n.port)
                except OSError:
                    continue
                if info["error_code"] == 0 and info["leader_id"] >= 0:
                    return int(info["leader_id"])
            return None

        return int(wait_until(ask, timeout, interval=0.1, what="an active controller"))


def kafka_request(port: int, api_key: int, version: int, body: dict, timeout: float = 10) -> Any:
    """Send one request, as built by kio from ``body``, and return the decoded response
    (for what no client library lets a test do, such as sending a batch twice)."""
    from kio.index import load_request_schema

    from keeperless.protocol.build import build
    from keeperless.protocol.framing import decode_response, encode_request

    req = build(load_request_schema(api_key, version), body)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(encode_request(api_key, version, 1, "test", req))
        size = struct.unpack(">i", _recv(s, 4))[0]
        _, resp = decode_response(memoryview(_recv(s, size)), api_key, version)
    return resp


def describe_quorum(port: int) -> dict:
    """DescribeQuorum (v1) sent to a controller listener, as a dict."""
    body = {
        "topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]
    }
    p = kafka_request(port, 55, 1, body).topics[0].partitions[0]
    return {
        "error_code": int(p.error_code),
        "leader_id": p.leader_id,
        "leader_epoch": p.leader_epoch,
        "high_watermark": p.high_watermark,
        "voters": [(v.replica_id, v.log_end_offset) for v in p.current_voters],
        "observers": [(o.replica_id, o.log_end_offset) for o in p.observers],
    }


def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return buf
