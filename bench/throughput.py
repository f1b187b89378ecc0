"""Produce/consume throughput of a single keeperless node with confluent-kafka, against
baselines measured in the same run: writing the same bytes to a file, and pushing them
through a loopback socket. Also: cold start to first acknowledged produce, and the
node's event-loop lag under the load (its Prometheus histogram, sampled every 10 ms, and
round trips from a client process of its own), with the time its loop waited for a core.
The load's clients run at nice 10 (``--clients-nice``): on a 2-core machine they would
otherwise take the node's cores, as clients on their own machines do not.

    python bench/throughput.py [--messages-100 N] [--messages-1k N] [--clients-nice N]

Prints a table and writes bench/results/throughput-<time>.json.
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.integration.cluster import Node, free_port, wait_until  # noqa: E402

from bench._report import write_result  # noqa: E402


def loop_lag_buckets(node: Node) -> dict[float, float]:
    """Cumulative counts of the node's event-loop lag histogram, by upper bound (ms)."""
    out = {}
    for line in node.scrape().splitlines():
        if line.startswith("keeperless_event_loop_lag_ms_bucket{"):
            le = line.split('le="')[1].split('"')[0]
            out[float("inf") if le == "+Inf" else float(le)] = float(line.rsplit(" ", 1)[1])
    return out


def lag_p99(before: dict[float, float], after: dict[float, float]) -> tuple[float, int]:
    """(upper bound of the bucket holding the 99th percentile, samples) between scrapes."""
    delta = {le: after[le] - before.get(le, 0.0) for le in sorted(after)}
    total = delta.get(float("inf"), 0.0)
    for le, count in delta.items():
        if total and count / total >= 0.99:
            return le, int(total)
    return float("inf"), int(total)


class RttProbe:
    """ApiVersions round trips to the node from a client process of its own (not a
    thread of this one, whose producer loop holds the GIL), every 10 ms while the load
    runs: what a client waits for an answer while the node is busy - the event loop's
    stalls as a client sees them."""

    def __init__(self, port: int) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        self.stop = ctx.Event()
        self.queue: Any = ctx.Queue()
        self.proc = ctx.Process(target=_probe, args=(port, self.stop, self.queue), daemon=True)
        self.samples_ms: list[float] = []

    def __enter__(self) -> RttProbe:
        self.proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        try:
            self.samples_ms = self.queue.get(timeout=30)
        except Exception:  # the probe died: no samples
            self.samples_ms = []
        self.proc.join(10)

    def percentiles(self) -> dict[str, float]:
        v = sorted(self.samples_ms)
        if not v:
            return {}

        def at(q: float) -> float:
            return round(v[min(int(q * len(v)), len(v) - 1)], 2)

        return {"samples": len(v), "p50_ms": at(0.5), "p99_ms": at(0.99), "p999_ms": at(0.999),
                "max_ms": round(v[-1], 2)}  # fmt: skip


def _probe(port: int, stop: Any, queue: Any) -> None:
    from kio.index import load_request_schema

    from keeperless.protocol.apis import ApiKey
    from keeperless.protocol.build import build
    from keeperless.protocol.framing import encode_request
    from keeperless.tools.client import recv_exact

    req = build(load_request_schema(ApiKey.API_VERSIONS, 0), {})
    frame = encode_request(ApiKey.API_VERSIONS, 0, 1, "rtt-probe", req)
    samples: list[float] = []
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            while not stop.wait(0.01):
                t0 = time.perf_counter()
                s.sendall(frame)
                (size,) = struct.unpack(">i", recv_exact(s, 4))
                recv_exact(s, size)
                samples.append((time.perf_counter() - t0) * 1000)
    finally:
        queue.put(samples)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_delay_s(pid: int) -> float:
    """Seconds the process's main thread (its event loop) has waited, runnable, for a
    core (Linux schedstat)."""
    return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[1]) / 1e9


def timed(pid: int, fn, *args):  # type: ignore[no-untyped-def]
    """Run fn; return (its result, the node's CPU use in % of one core meanwhile)."""
    c0, t0 = cpu_seconds(pid), time.perf_counter()
    out = fn(*args)
    c1, t1 = cpu_seconds(pid), time.perf_counter()
    return out, 100 * (c1 - c0) / (t1 - t0)


def file_baseline(total_bytes: int, chunk: int, directory: Path) -> float:
    data = os.urandom(chunk)
    path = directory / "baseline.bin"
    t0 = time.perf_counter()
    with open(path, "wb", buffering=0) as f:
        written = 0
        while written < total_bytes:
            written += f.write(data)
        os.fsync(f.fileno())
    dt = time.perf_counter() - t0
    path.unlink()
    return total_bytes / dt


def socket_baseline(total_bytes: int, chunk: int) -> float:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    received = [0]

    def sink() -> None:
        conn, _ = server.accept()
        with conn:
            while received[0] < total_bytes:
                n = len(conn.recv(1 << 20))
                if n == 0:
                    break
                received[0] += n

    t = threading.Thread(target=sink)
    t.start()
    data = os.urandom(chunk)
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as c:
        sent = 0
        while sent < total_bytes:
            c.sendall(data)
            sent += len(data)
    t.join()
    dt = time.perf_counter() - t0
    server.close()
    return total_bytes / dt


def produce(bootstrap: str, topic: str, n: int, size: int) -> float:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "acks": "all",
        }
    )
    value = b"x" * size
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=value, key=b"%d" % (i % 64))
                break
            except BufferError:
                p.poll(0.001)
    left = p.flush(120)
    dt = time.perf_counter() - t0
    assert left == 0, f"{left} messages not delivered"
    return n / dt


def consume(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
            "max.partition.fetch.bytes": 10485760,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    deadline = time.monotonic() + 300
    t0 = time.perf_counter()
    while got < n and time.monotonic() < deadline:
        for m in c.consume(10000, 1.0):
            if not m.error():
                got += 1
    dt = time.perf_counter() - t0
    c.close()
    assert got >= n, f"consumed {got} of {n}"
    return n / dt


def cold_start(workdir: Path) -> float:
    node = Node(workdir)
    node.format()
    t0 = time.perf_counter()
    node.start()
    p = Producer({"bootstrap.servers": node.bootstrap, "acks": "all"})
    done: list[float] = []

    def attempt() -> bool:
        p.produce(
            "coldstart",
            value=b"x",
            on_delivery=lambda e, m: e is None and done.append(time.perf_counter()),
        )
        p.flush(5)
        return bool(done)

    wait_until(attempt, 30, interval=0.01, what="first acknowledged produce")
    node.stop()
    return (done[0] - t0) * 1000


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages-100", type=int, default=300_000)
    ap.add_argument("--messages-1k", type=int, default=100_000)
    ap.add_argument("--idle-s", type=float, default=3.0, help="seconds of idle round trips")
    ap.add_argument(
        "--clients-nice",
        type=int,
        default=10,
        help="niceness of the load's clients (this process), so that on a small machine "
        "they do not take the node's cores, as clients on machines of their own would "
        "not; 0 to share the cores equally (the OS's wait then shows as loop lag)",
    )
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        start_ms = cold_start(tmpdir / "cold")
        metrics_port = free_port()
        node = Node(tmpdir / "node", extra={"metrics.http.listener": f"127.0.0.1:{metrics_port}"})
        node.metrics_port = metrics_port
        node.format()
        node.start()
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        idle = RttProbe(node.port)
        with idle:  # the baseline: round trips to the idle node
            time.sleep(args.idle_s)
        lag_before = loop_lag_buckets(node)  # the lag under the load only (not the start)
        rtt = RttProbe(node.port)
        try:
            rtt.__enter__()  # (the probe keeps this process's niceness: the node's)
            os.nice(args.clients_nice)
            assert node.proc is not None
            wait0, load0 = run_delay_s(node.proc.pid), time.perf_counter()
            for size, n in ((100, args.messages_100), (1024, args.messages_1k)):
                total = size * n
                file_bps = file_baseline(total, 64 * 1024, tmpdir)
                sock_bps = socket_baseline(total, 64 * 1024)
                for parts in (1, 6):
                    topic = f"bench-{size}-{parts}"
                    admin.create_topics([NewTopic(topic, parts, 1)])[topic].result(30)
                    assert node.proc is not None
                    pid = node.proc.pid
                    p_rate, p_cpu = timed(pid, produce, node.bootstrap, topic, n, size)
                    c_rate, c_cpu = timed(pid, consume, node.bootstrap, topic, parts, n)
                    rows.append(
                        {
                            "message_bytes": size,
                            "partitions": parts,
                            "messages": n,
                            "produce_msgs_per_s": round(p_rate),
                            "produce_mb_per_s": round(p_rate * size / 1e6, 1),
                            "consume_msgs_per_s": round(c_rate),
                            "consume_mb_per_s": round(c_rate * size / 1e6, 1),
                            "file_write_mb_per_s": round(file_bps / 1e6, 1),
                            "loopback_socket_mb_per_s": round(sock_bps / 1e6, 1),
                            "produce_vs_file": round(p_rate * size / file_bps, 3),
                            "produce_vs_socket": round(p_rate * size / sock_bps, 3),
                            "consume_vs_socket": round(c_rate * size / sock_bps, 3),
                            "node_cpu_pct_during_produce": round(p_cpu),
                            "node_cpu_pct_during_consume": round(c_cpu),
                        }
                    )
            lag_le, lag_samples = lag_p99(lag_before, loop_lag_buckets(node))
            waited = run_delay_s(node.proc.pid) - wait0
            waited_pct = 100 * waited / (time.perf_counter() - load0)
        finally:
            rtt.__exit__()
            node.stop()
    hdr = (
        f"{'size':>5} {'parts':>5} {'produce msg/s':>14} {'MB/s':>7} {'consume msg/s':>14} "
        f"{'MB/s':>7} {'file MB/s':>10} {'sock MB/s':>10} {'prod/file':>9} {'cons/sock':>9} "
        f"{'cpu% p/c':>9}"
    )
    print(hdr)
    for r in rows:
        print(
            f"{r['message_bytes']:>5} {r['partitions']:>5} {r['produce_msgs_per_s']:>14,} "
            f"{r['produce_mb_per_s']:>7} {r['consume_msgs_per_s']:>14,} "
            f"{r['consume_mb_per_s']:>7} {r['file_write_mb_per_s']:>10} "
            f"{r['loopback_socket_mb_per_s']:>10} {r['produce_vs_file']:>9} "
            f"{r['consume_vs_socket']:>9} "
            f"{r['node_cpu_pct_during_produce']:>4}/{r['node_cpu_pct_during_consume']:<4}"
        )
    print(f"cold start to first acknowledged produce: {start_ms:.0f} ms")
    print(
        f"node event-loop lag during the runs: p99 <= {lag_le:g} ms "
        f"({lag_samples} samples of a 10 ms timer; the design's target is < 10 ms)"
    )
    print(
        f"the node's event loop waited for a core {waited:.2f} s ({waited_pct:.1f} % of the "
        f"load) with the load's clients at nice {args.clients_nice}"
    )
    print(f"ApiVersions round trips from another client, idle node: {idle.percentiles()}")
    print(f"ApiVersions round trips from another client, under the load: {rtt.percentiles()}")
    print("cpu% p/c: the node's CPU use (% of one core) while producing / consuming; below")
    print("100 means the single-process Python client, not the node, set the pace.")
    return write_result(
        "throughput",
        {
            "rows": rows,
            "cold_start_to_first_produce_ms": round(start_ms),
            "event_loop_lag_p99_ms_upper_bound": lag_le,
            "event_loop_lag_samples": lag_samples,
            "event_loop_waited_for_a_core_s": round(waited, 3),
            "event_loop_waited_for_a_core_pct": round(waited_pct, 2),
            "clients_nice": args.clients_nice,
            "api_versions_rtt_idle": idle.percentiles(),
            "api_versions_rtt_under_load": rtt.percentiles(),
        },
    )


if __name__ == "__main__":
    main()
