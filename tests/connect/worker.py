"""A Connect worker process for the tests: its properties file, start, stop, kill -9, and
its REST API through ``requests`` (a second HTTP client besides the worker's own)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import requests

from tests.integration.cluster import free_port, wait_until


class Worker:
    def __init__(
        self,
        workdir: Path,
        bootstrap: str,
        group: str = "connect-cluster",
        extra: dict[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = workdir / "connect-distributed.properties"
        props = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "offset.storage.topic": f"{group}-offsets",
            "config.storage.topic": f"{group}-configs",
            "status.storage.topic": f"{group}-status",
            "offset.storage.replication.factor": "-1",
            "config.storage.replication.factor": "-1",
            "status.storage.replication.factor": "-1",
            "offset.storage.partitions": "5",
            "status.storage.partitions": "2",
            "offset.flush.interval.ms": "500",
            "listeners": f"http://127.0.0.1:{self.port}",
            "heartbeat.interval.ms": "500",
            "session.timeout.ms": "6000",
        }
        props.update(extra or {})
        self.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.log_path = workdir / "worker.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "keeperless", "connect-distributed", str(self.config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        log.close()
        wait_until(
            self.ready, timeout, what=f"worker {self.url} in its group\n{self.logs()[-3000:]}"
        )

    def ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"worker exited {self.proc.returncode}:\n{self.logs()[-3000:]}")
        try:
            return requests.get(self.url + "/", timeout=2).ok and "generation" in self.logs()
        except requests.RequestException:
            return False

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def call(self, method: str, path: str, body: Any = None, **params: str) -> requests.Response:
        return requests.request(
            method, self.url + path, json=body, params=params or None, timeout=60
        )

    def status(self, name: str) -> dict[str, Any]:
        r = self.call("GET", f"/connectors/{name}/status")
        return r.json() if r.ok else {}

    def wait_state(
        self, name: str, state: str, tasks: int | None = None, timeout: float = 60.0
    ) -> dict[str, Any]:
        def ok() -> bool:
            s = self.status(name)
            if s.get("connector", {}).get("state") != state:
                return False
            ts = s.get("tasks", [])
            if tasks is not None and len(ts) != tasks:
                return False
            return all(t["state"] == state for t in ts)

        try:
            wait_until(ok, timeout, what=f"{name} {state}: {self.status(name)}")
        except TimeoutError as e:  # the worker's own account of why, in the report
            raise TimeoutError(f"{e}\nthe worker's log ends:\n{self.logs()[-4000:]}") from None
        return self.status(name)
