"""The quorum controller at scale: a real 3-controller quorum on this machine with three
simulated brokers (registered and heartbeating over the controller listener, as brokers
do), then

1. create TOPICS x PARTITIONS partitions (replication factor 3) through CreateTopics,
   several requests in flight: partitions/s and metadata records/s committed;
2. the active controller's resident memory, the newest snapshot's size, and the time a
   real broker takes from start to unfenced (it loads that snapshot and the log tail);
3. controlled shutdown of a simulated broker that leads a third of the partitions
   (heartbeats asking to shut down, until the controller answers that it may: its
   leaderships moved, committed, and applied by the other active broker);
4. an uncontrolled broker failure (heartbeats stop): from session expiry to its
   partitions led elsewhere;
5. a restart of the real broker: it loads its newest snapshot, of the whole image by then
   (the one it loaded at its first start was written while the topics were created);
6. failover of the active controller (kill -9) until a new one answers CreateTopics.

    python bench/controller_scale.py [--topics 10000] [--partitions 100] [--fetch-timeout-ms 2000]

(Kafka's default 2 s fetch timeout; on a 2-core machine the four node processes share
two cores while a million changes replicate. Elections are counted from the quorum's
epoch.)

Prints a table beside Kafka's published KRaft figures for 2,000,000 partitions and
writes bench/results/controller-scale-<time>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import socket
import struct
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kio.index import load_request_schema  # noqa: E402
from tests.integration.cluster import Cluster, Node, describe_quorum, wait_until  # noqa: E402

from keeperless.metadata.features import SUPPORTED_FEATURES  # noqa: E402
from keeperless.protocol.build import build  # noqa: E402
from keeperless.protocol.framing import decode_response, encode_request  # noqa: E402

BROKERS = (101, 102, 103)
SESSION_MS = 6000


class Rpc:
    """One connection to a controller listener."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=600)
        self.corr = 0

    def call(self, key: int, version: int, body: dict[str, Any]) -> Any:
        self.corr += 1
        req = build(load_request_schema(key, version), body)
        self.sock.sendall(encode_request(key, version, self.corr, "bench", req))
        size = struct.unpack(">i", self._recv(4))[0]
        _, resp = decode_response(memoryview(self._recv(size)), key, version)
        return resp

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise OSError("connection closed")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class SimBrokers:
    """Brokers that exist only as registrations and heartbeats. They report the metadata
    offset a broker keeping up would have applied: the quorum's high watermark as the
    leader last described it (not a far-future offset, which would let a controlled
    shutdown skip waiting for them)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.epochs: dict[int, int] = {}
        self.alive = set(BROKERS)
        self.stop = threading.Event()
        # one heartbeat thread per broker, as real brokers are independent: a heartbeat
        # answered only after a long operation must not delay the others' heartbeats
        self.threads = [
            threading.Thread(target=self._beat, args=(b,), daemon=True) for b in BROKERS
        ]

    def rpc(self) -> Rpc:
        return Rpc(self.cluster.controllers[self.cluster.leader()].port)

    def register(self) -> None:
        # as a real broker registers: the cluster's id, and every feature it supports
        # (a broker that does not support a finalized level is refused)
        features = [
            {"name": name, "min_supported_version": lo, "max_supported_version": hi}
            for name, (lo, hi) in SUPPORTED_FEATURES.items()
        ]
        for b in BROKERS:
            body = {
                "broker_id": b,
                "cluster_id": _cluster_id(self.cluster),
                "incarnation_id": uuid.uuid4(),
                "listeners": [
                    {"name": "PLAINTEXT", "host": "127.0.0.1", "port": 1, "security_protocol": 0}
                ],
                "features": features,
                "rack": None,
                "log_dirs": [],
                "previous_broker_epoch": -1,
            }
            resp = self._retry(62, 3, body)
            assert int(resp.error_code) == 0, resp
            self.epochs[b] = resp.broker_epoch
        for t in self.threads:
            t.start()
        wait_until(
            lambda: all(not self.heartbeat(b).is_fenced for b in BROKERS), 30, what="unfenced"
        )

    def _retry(self, key: int, version: int, body: dict[str, Any]) -> Any:
        deadline = time.monotonic() + 60
        while True:
            try:
                rpc = self.rpc()
                try:
                    resp = rpc.call(key, version, body)
                finally:
                    rpc.close()
                if int(resp.error_code) != 41:  # NOT_CONTROLLER
                    return resp
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"no answer to API {key}")
            time.sleep(0.1)

    def applied_offset(self) -> int:
        for i in (self.cluster.leader(), *self.cluster.controllers):
            with contextlib.suppress(OSError, TimeoutError):
                hw = describe_quorum(self.cluster.controllers[i].port)["high_watermark"]
                if hw > 0:
                    return int(hw) - 1
        return -1

    def heartbeat(self, b: int, shut_down: bool = False) -> Any:
        return self._retry(
            63,
            1,
            {
                "broker_id": b,
                "broker_epoch": self.epochs[b],
                "current_metadata_offset": self.applied_offset(),
                "want_fence": False,
                "want_shut_down": shut_down,
                "offline_log_dirs": [],
            },
        )

    def controlled_shutdown(self, b: int) -> None:
        """Heartbeats asking to shut down until the controller says so, as a broker does."""
        while not self.heartbeat(b, shut_down=True).should_shut_down:
            time.sleep(0.1)

    def _beat(self, b: int) -> None:
        while not self.stop.wait(1.0):
            if b in self.alive:
                with contextlib.suppress(OSError, TimeoutError):
                    self.heartbeat(b)


def create_topics(port: int, names: list[str], partitions: int) -> None:
    rpc = Rpc(port)
    try:
        resp = rpc.call(
            19,
            7,
            {
                "topics": [
                    {
                        "name": n,
                        "num_partitions": partitions,
                        "replication_factor": 3,
                        "assignments": [],
                        "configs": [],
                    }
                    for n in names
                ],
                "timeout": 600_000,
                "validate_only": False,
            },
        )
    finally:
        rpc.close()
    bad = [t for t in resp.topics if int(t.error_code) not in (0, 36)]  # 36: already exists
    assert not bad, bad[0]


def metadata_counts(node: Node, topics: list[str] | None = None) -> tuple[int, dict[int, int]]:
    """Partitions, and partitions led per broker, as a real broker's Metadata shows (for
    every topic, or for ``topics``: a full answer at a million partitions takes the broker
    tens of seconds to encode, so progress is polled on a sample)."""
    from keeperless.tools.client import call

    md = call(
        [("127.0.0.1", node.port)],
        3,
        12,
        {
            "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
        timeout_s=300,
    )
    led: dict[int, int] = {}
    n = 0
    for t in md.topics:
        for p in t.partitions:
            n += 1
            led[p.leader_id] = led.get(p.leader_id, 0) + 1
    return n, led


def led_by(node: Node, broker_id: int) -> int:
    return metadata_counts(node)[1].get(broker_id, 0)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    out = run(args)
    _report(out, args.topics * args.partitions)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--per-request", type=int, default=20, help="topics per CreateTopics")
    ap.add_argument("--in-flight", type=int, default=4)
    ap.add_argument(
        "--fetch-timeout-ms",
        type=int,
        default=2000,
        help="controller.quorum.fetch.timeout.ms (Kafka's default 2000); at 1M partitions "
        "on 2 cores the four node processes starve each other past it",
    )
    return ap.parse_args(argv)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole benchmark; its figures."""
    total = args.topics * args.partitions
    out: dict[str, Any] = {
        "topics": args.topics,
        "partitions_per_topic": args.partitions,
        "fetch_timeout_ms": args.fetch_timeout_ms,
        "cpus": os.cpu_count(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(
            Path(tmp),
            controllers=3,
            brokers=0,
            extra={
                "broker.session.timeout.ms": str(SESSION_MS),
                # Kafka's defaults (the test harness uses shorter ones)
                "controller.quorum.fetch.timeout.ms": str(args.fetch_timeout_ms),
                "controller.quorum.election.timeout.ms": "1000",
                "controller.quorum.request.timeout.ms": "2000",
            },
        )
        cluster.start()
        first_epoch = describe_quorum(cluster.controllers[cluster.leader()].port)["leader_epoch"]
        sims = SimBrokers(cluster)
        broker: Node | None = None
        try:
            sims.register()
            names = [f"t{i:05d}" for i in range(args.topics)]
            batches = [
                names[i : i + args.per_request] for i in range(0, len(names), args.per_request)
            ]
            t0 = time.perf_counter()

            def create(batch: list[str]) -> None:
                # across a change of active controller: ask the new one (topics that made
                # it before the change answer TOPIC_ALREADY_EXISTS)
                deadline = time.monotonic() + 600
                while True:
                    try:
                        create_topics(
                            cluster.controllers[cluster.leader()].port, batch, args.partitions
                        )
                        return
                    except (OSError, AssertionError):
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.2)

            with ThreadPoolExecutor(args.in_flight) as pool:
                list(pool.map(create, batches))
            dt = time.perf_counter() - t0
            out["create_seconds"] = round(dt, 1)
            out["partitions_per_s"] = round(total / dt)
            out["records_per_s"] = round((total + args.topics) / dt)
            leader = cluster.leader()
            active = cluster.controllers[leader]
            assert active.proc is not None
            out["active_controller_rss_mb"] = round(rss_mb(active.proc.pid))
            print(f"created {total:,} partitions in {dt:.1f} s", flush=True)

            # a real broker joins: snapshot + log tail, until unfenced
            meta = active.data / "__cluster_metadata-0"
            # a snapshot every 20 MB of log (Kafka's default); the bootstrap one is tiny
            snaps = sorted(meta.glob("0*.checkpoint"))  # not bootstrap.checkpoint
            out["snapshot_mb"] = round(snaps[-1].stat().st_size / 1e6, 1) if snaps else 0.0
            out["metadata_log_mb"] = round(
                sum(f.stat().st_size for f in meta.glob("*.log")) / 1e6, 1
            )
            broker = _real_broker(cluster, Path(tmp))
            t0 = time.perf_counter()
            broker.start_background()
            try:
                wait_until(
                    lambda: (
                        "Broker is now unfenced" in (text := broker.logs())
                        and "Broker listeners accepting requests" in text
                    ),
                    float(os.environ.get("LOAD_TIMEOUT", "600")),
                    0.1,
                    "unfenced",
                )
            except TimeoutError:
                print(broker.logs()[-3000:], file=sys.stderr)
                raise
            out["broker_load_to_unfenced_s"] = round(time.perf_counter() - t0, 1)
            m = re.search(
                r"Loaded metadata snapshot \S+ \((\d+) bytes, \d+ topics\) in (\d+) ms",
                broker.logs(),
            )
            if m:
                out["broker_snapshot_mb"] = round(int(m.group(1)) / 1e6, 1)
                out["broker_snapshot_load_s"] = round(int(m.group(2)) / 1000, 1)
            n, led = metadata_counts(broker)
            assert n == total, (n, total)
            print(f"broker loaded the metadata in {out['broker_load_to_unfenced_s']} s", flush=True)

            # controlled shutdown of the broker leading a third of the partitions
            victim = max(BROKERS, key=lambda b: led.get(b, 0))
            out["controlled_shutdown_leaderships"] = led.get(victim, 0)
            sims.alive.discard(victim)
            t0 = time.perf_counter()
            sims.controlled_shutdown(victim)
            out["controlled_shutdown_s"] = round(time.perf_counter() - t0, 1)
            print(f"controlled shutdown: {out['controlled_shutdown_s']} s", flush=True)
            # The real broker may lag behind the controller (it may even have been fenced
            # meanwhile, if applying a million changes kept it from heartbeating): poll
            # every partition until it shows the moves too.
            wait_until(lambda: led_by(broker, victim) == 0, 900, 2.0, "moves seen by the broker")
            out["controlled_shutdown_seen_by_broker_s"] = round(time.perf_counter() - t0, 1)

            # uncontrolled failure: a broker stops heartbeating; the controller logs the
            # fence once the moves have committed
            n, led = metadata_counts(broker)
            dead = max((b for b in BROKERS if b != victim), key=lambda b: led.get(b, 0))
            out["uncontrolled_leaderships"] = led.get(dead, 0)
            sims.alive.discard(dead)
            t0 = time.perf_counter()
            fenced_line = f"Fenced broker {dead}: no heartbeat"
            wait_until(
                lambda: any(fenced_line in c.logs() for c in cluster.controllers.values()),
                900,
                0.5,
                "session expiry fencing committed",
            )
            out["uncontrolled_recovery_s"] = round(time.perf_counter() - t0, 1)
            out["uncontrolled_recovery_after_session_s"] = round(
                out["uncontrolled_recovery_s"] - SESSION_MS / 1000, 1
            )
            wait_until(lambda: led_by(broker, dead) == 0, 900, 2.0, "failover seen by the broker")
            out["uncontrolled_seen_by_broker_s"] = round(time.perf_counter() - t0, 1)
            print(f"uncontrolled: {out['uncontrolled_recovery_s']} s", flush=True)

            # a restart of the real broker loads its newest snapshot: of the whole image
            # now (two million changes since the creation, a snapshot every 20 MB)
            broker.stop()
            seen = len(broker.logs())
            broker.start_background()
            wait_until(
                lambda: "Broker is now unfenced" in broker.logs()[seen:],
                600,
                0.2,
                "the broker unfenced after its restart",
            )
            m = re.search(
                r"Loaded metadata snapshot \S+ \((\d+) bytes, (\d+) topics\) in (\d+) ms",
                broker.logs()[seen:],
            )  # (none in a short run: a snapshot is written every 20 MB of log)
            out["restart_snapshot_mb"] = round(int(m.group(1)) / 1e6, 1) if m else 0.0
            out["restart_snapshot_topics"] = int(m.group(2)) if m else 0
            out["restart_snapshot_load_s"] = round(int(m.group(3)) / 1000, 1) if m else None
            print(
                f"broker restart: {out['restart_snapshot_mb']} MB snapshot "
                f"({out['restart_snapshot_topics']:,} topics) loaded in "
                f"{out['restart_snapshot_load_s']} s",
                flush=True,
            )

            # elections during the run: every one starts a new epoch (counted from the
            # quorum's epochs, not log lines; the failover below is not one of them)
            leader = cluster.leader()
            out["elections"] = (
                describe_quorum(cluster.controllers[leader].port)["leader_epoch"] - first_epoch
            )
            # controller failover: kill -9 whichever controller is active now
            cluster.controllers[leader].kill9()
            t0 = time.perf_counter()

            def serving() -> bool:
                for i, c in cluster.controllers.items():
                    if i == leader:
                        continue
                    try:
                        create_topics(c.port, [f"after-failover-{i}-{time.monotonic_ns()}"], 1)
                        return True
                    except (OSError, AssertionError):
                        continue
                return False

            wait_until(serving, 900, 0.5, "a new active controller")
            out["controller_failover_s"] = round(time.perf_counter() - t0, 1)
            print(f"controller failover: {out['controller_failover_s']} s", flush=True)
            logs = "".join(n.logs() for n in cluster.controllers.values())
            out["leader_resignations"] = logs.count("resigning leadership")
            if os.environ.get("BENCH_VERBOSE"):
                for line in logs.splitlines():
                    if "WARN" in line or "active controller" in line or "Fenc" in line:
                        print(line[:200], file=sys.stderr)
        except BaseException:
            for n in cluster.controllers.values():
                print(f"--- {n.log_path}", file=sys.stderr)
                print(n.logs()[-4000:], file=sys.stderr)
            raise
        finally:
            sims.stop.set()
            if broker is not None:
                broker.stop()
            cluster.stop()
    return out


def _real_broker(cluster: Cluster, tmp: Path) -> Node:
    node = Node(tmp / "broker-200", 200)
    voters = ",".join(f"{i}@127.0.0.1:{c.port}" for i, c in cluster.controllers.items())
    props = {
        "process.roles": "broker",
        "node.id": "200",
        "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
        "log.dirs": str(node.data),
        "broker.session.timeout.ms": str(SESSION_MS),
    }
    node.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    node.format(_cluster_id(cluster))
    return node


def _cluster_id(cluster: Cluster) -> str:
    meta = (cluster.controllers[1].data / "meta.properties").read_text()
    return meta.split("cluster.id=")[1].split()[0]


def _report(out: dict[str, Any], total: int) -> None:
    kafka = {"controlled_shutdown_s": 32, "uncontrolled_recovery_s": 37}
    rows = [
        ("partitions created", f"{total:,}", "2,000,000"),
        ("create: partitions/s", f"{out['partitions_per_s']:,}", "-"),
        ("create: metadata records/s committed", f"{out['records_per_s']:,}", "-"),
        ("active controller RSS (MB)", str(out["active_controller_rss_mb"]), "-"),
        ("newest snapshot (MB)", str(out["snapshot_mb"]), "-"),
        ("metadata log on disk (MB)", str(out["metadata_log_mb"]), "-"),
        ("broker start to unfenced (s)", str(out["broker_load_to_unfenced_s"]), "-"),
        (
            f"controlled shutdown, {out['controlled_shutdown_leaderships']:,} leaders (s)",
            str(out["controlled_shutdown_s"]),
            str(kafka["controlled_shutdown_s"]),
        ),
        (
            "  ... until the real broker shows it (s)",
            str(out["controlled_shutdown_seen_by_broker_s"]),
            "-",
        ),
        (
            f"uncontrolled failure, {out['uncontrolled_leaderships']:,} leaders (s)",
            f"{out['uncontrolled_recovery_s']} ({SESSION_MS / 1000:.0f} s session)",
            str(kafka["uncontrolled_recovery_s"]),
        ),
        (
            "  ... until the real broker shows it (s)",
            str(out["uncontrolled_seen_by_broker_s"]),
            "-",
        ),
        (
            "broker snapshot load (s, from its log)",
            str(out.get("broker_snapshot_load_s", "-")),
            "-",
        ),
        (
            f"broker restart: {out['restart_snapshot_mb']} MB snapshot load (s, its log)",
            str(out["restart_snapshot_load_s"]),
            "-",
        ),
        ("controller.quorum.fetch.timeout.ms", str(out["fetch_timeout_ms"]), "2000"),
        ("active controller failover (s)", str(out["controller_failover_s"]), "-"),
        ("elections (new epochs) during the run, excl. failover", str(out["elections"]), "-"),
    ]
    w = max(len(r[0]) for r in rows)
    print(f"{'':<{w}}  {'keeperless':>22}  {'Kafka (2M partitions)':>22}")
    for name, ours, theirs in rows:
        print(f"{name:<{w}}  {ours:>22}  {theirs:>22}")
    path = ROOT / "bench" / "results" / f"controller-scale-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
