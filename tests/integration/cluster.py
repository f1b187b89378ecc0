"""Start real keeperless node processes on loopback ports chosen at run time."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).parents[2]


def free_port() -> int:
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
            "group.initial.rebalance.delay.ms": "0",
        }
        props.update(extra or {})
        self.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "node.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def format(self, cluster_id: str | None = None) -> None:
        cid = cluster_id or keeperless("storage", "random-uuid", check=True).stdout.strip()
        keeperless("storage", "format", "-t", cid, "-c", str(self.config), check=True)

    def start(self, timeout: float = 30.0) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "keeperless", "server", "start", str(self.config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        log.close()

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
