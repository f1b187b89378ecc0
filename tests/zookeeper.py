"""A real ZooKeeper for the tests (Debian's ``zookeeper`` package, started here on a free
port with its own data directory) and the znodes a ZooKeeper-mode Kafka 3.x cluster
writes into it, in Kafka's formats (``kafka.zk.ZkData``): topics with configs and
several partitions, ACLs literal and prefixed, SCRAM users, client quotas, a producer-id
block, dynamic broker configs."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

__all__ = ["CLUSTER_ID", "TOPIC_IDS", "ZooKeeper", "kafka_layout", "write_layout"]

ZK_JAR = Path("/usr/share/java/zookeeper.jar")
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def _kafka_uuid() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


TOPIC_IDS = {"orders": _kafka_uuid(), "payments": _kafka_uuid()}


def _j(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _scram(iterations: int) -> str:
    def b64() -> str:
        return base64.b64encode(uuid.uuid4().bytes).decode()

    return f"salt={b64()},stored_key={b64()},server_key={b64()},iterations={iterations}"


def kafka_layout() -> dict[str, bytes | None]:
    """path -> data of a 3-broker ZooKeeper-mode cluster (parents without data: None)."""
    t: dict[str, bytes | None] = {
        "/cluster/id": _j({"version": "1", "id": CLUSTER_ID}),
        "/controller": _j(
            {"version": 2, "brokerid": 1, "timestamp": "1700000000000", "kraftControllerEpoch": -1}
        ),
        "/controller_epoch": b"7",
        "/latest_producer_id_block": _j(
            {"version": 1, "broker": 2, "block_start": "1000", "block_end": "1999"}
        ),
        "/feature": _j({"version": 2, "status": 1, "features": {}}),
    }
    for b in (1, 2, 3):
        t[f"/brokers/ids/{b}"] = _j({
            "features": {}, "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
            "endpoints": [f"PLAINTEXT://broker{b}:9092"], "jmx_port": -1, "port": 9092,
            "host": f"broker{b}", "version": 5, "timestamp": "1700000000000",
            "rack": f"rack-{b}",
        })  # fmt: skip
    assignments = {"orders": {"0": [1, 2, 3], "1": [2, 3, 1], "2": [3, 1, 2]},
                   "payments": {"0": [1, 2], "1": [2, 3]}}  # fmt: skip
    for topic, parts in assignments.items():
        t[f"/brokers/topics/{topic}"] = _j({
            "partitions": parts, "topic_id": TOPIC_IDS[topic], "adding_replicas": {},
            "removing_replicas": {}, "version": 3,
        })  # fmt: skip
        for p, replicas in parts.items():
            t[f"/brokers/topics/{topic}/partitions/{p}/state"] = _j({
                "controller_epoch": 7, "leader": replicas[0], "version": 1,
                "leader_epoch": 4 + int(p), "isr": replicas,
            })  # fmt: skip
    t["/config/topics/orders"] = _j({"version": 1, "config": {
        "cleanup.policy": "compact", "min.insync.replicas": "2"}})  # fmt: skip
    t["/config/topics/payments"] = _j({"version": 1, "config": {}})
    t["/config/brokers/<default>"] = _j({"version": 1, "config": {"log.retention.ms": "86400000"}})
    t["/config/brokers/2"] = _j({"version": 1, "config": {"log.cleaner.threads": "2"}})
    t["/config/users/alice"] = _j({"version": 1, "config": {
        "SCRAM-SHA-256": _scram(8192), "producer_byte_rate": "1048576"}})  # fmt: skip
    t["/config/users/bob%40example.com"] = _j({"version": 1, "config": {
        "SCRAM-SHA-512": _scram(4096)}})  # fmt: skip
    t["/config/users/alice/clients/app-1"] = _j({"version": 1, "config": {
        "consumer_byte_rate": "2048"}})  # fmt: skip
    t["/config/clients/<default>"] = _j({"version": 1, "config": {"request_percentage": "50"}})
    t["/config/ips/10.0.0.1"] = _j({"version": 1, "config": {"connection_creation_rate": "10"}})
    acl = {"principal": "User:alice", "permissionType": "Allow", "operation": "Read",
           "host": "*"}  # fmt: skip
    t["/kafka-acl/Topic/orders"] = _j({"version": 1, "acls": [
        acl, {**acl, "operation": "Write"}]})  # fmt: skip
    t["/kafka-acl/Cluster/kafka-cluster"] = _j({"version": 1, "acls": [
        {**acl, "principal": "User:admin", "operation": "Alter"}]})  # fmt: skip
    t["/kafka-acl-extended/prefixed/Group/app-"] = _j({"version": 1, "acls": [
        {**acl, "principal": "User:bob@example.com"}]})  # fmt: skip
    # parents: as in ZooKeeper, every node has a parent
    for path in list(t):
        parts = path.strip("/").split("/")
        for i in range(1, len(parts)):
            t.setdefault("/" + "/".join(parts[:i]), None)
    for empty in ("/admin", "/admin/delete_topics", "/config/changes"):
        t.setdefault(empty, None)
    return t


def write_layout(zk: Any, layout: dict[str, bytes | None]) -> None:
    """Create every znode of ``layout`` with kazoo's client ``zk``, parents first."""
    for path in sorted(layout, key=lambda p: p.count("/")):
        zk.create(path, layout[path] or b"", makepath=True)


class ZooKeeper:
    """ZooKeeper's standalone server (ZooKeeperServerMain) on ``port``."""

    def __init__(self, workdir: Path, port: int) -> None:
        self.workdir = workdir
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> None:
        java = shutil.which("java")
        if java is None or not ZK_JAR.exists():
            raise RuntimeError("ZooKeeper is not installed: `make sysdeps` installs Debian's "
                               "zookeeper package")  # fmt: skip
        data = self.workdir / "zk-data"
        data.mkdir(parents=True, exist_ok=True)
        log = open(self.workdir / "zk.log", "wb")  # noqa: SIM115 - the server's, kept open
        self.proc = subprocess.Popen(
            [java, "-Xmx256m", "-cp", f"/etc/zookeeper/conf:{ZK_JAR}",
             "org.apache.zookeeper.server.ZooKeeperServerMain", str(self.port), str(data)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        from kazoo.client import KazooClient

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited: {(self.workdir / 'zk.log').read_text()}")
            zk = KazooClient(hosts=self.connect, timeout=2)
            try:
                zk.start(timeout=2)
                zk.stop()
                return
            except Exception:
                time.sleep(0.2)
            finally:
                zk.close()
        raise RuntimeError(f"ZooKeeper did not answer on {self.connect} in {timeout_s} s")

    def client(self) -> Any:
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=self.connect, timeout=10)
        zk.start(timeout=10)
        return zk

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None
