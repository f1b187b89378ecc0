"""The metadata quorum: commit latency and throughput for 1 and 3 voters, controller
failover time, and the CPU a quorum uses after losing its majority.

    python bench/quorum.py [--ops N] [--kills N]

Writes go straight to the active controller's listener (CreateTopics, 1 partition:
2 records each), so the figures are the controller's, not a broker's. Baseline measured
in the same run: the fsync latency of the disk the logs live on (each commit needs one).
Prints a table and writes bench/results/quorum-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.cluster import Cluster, describe_quorum, wait_until  # noqa: E402

from keeperless.broker.controller_channel import RemoteController  # noqa: E402


async def _create(client: RemoteController, name: str) -> int:
    """CreateTopics (one partition, RF 1) sent to the active controller: its error code."""
    from kio.index import load_request_schema

    from keeperless.protocol.build import build

    body = {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                        "assignments": [], "configs": []}],
            "timeout": 30_000, "validate_only": False}  # fmt: skip
    resp = await client.forward(19, 7, build(load_request_schema(19, 7), body))
    return int(resp.topics[0].error_code)


RECORDS_PER_OP = 2  # TopicRecord + PartitionRecord


def fsync_baseline(directory: Path, n: int = 300) -> float:
    path = directory / "fsync.bin"
    lat = []
    with open(path, "wb") as f:
        for _ in range(n):
            f.write(b"x" * 200)
            t0 = time.perf_counter()
            f.flush()
            os.fsync(f.fileno())
            lat.append((time.perf_counter() - t0) * 1000)
    path.unlink()
    return statistics.median(lat)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(int(q * len(s)), len(s) - 1)]


async def writes(
    voters: dict[int, tuple[str, int]], leader: int, ops: int, concurrency: int
) -> tuple[list[float], float]:
    """(latencies of sequential writes in ms, committed records/s with concurrency)."""
    if ops < concurrency:
        raise ValueError(f"{ops} operations cannot keep {concurrency} writers busy")
    clients = [RemoteController(-1, voters, lambda: leader, 30_000) for _ in range(concurrency)]
    lat = []
    for i in range(ops):
        t0 = time.perf_counter()
        code = await _create(clients[0], f"lat-{i}")
        assert code == 0, code
        lat.append((time.perf_counter() - t0) * 1000)

    async def worker(k: int, client: RemoteController) -> int:
        done = 0
        for i in range(ops // concurrency):
            done += await _create(client, f"tp-{k}-{i}") == 0
        return done

    t0 = time.perf_counter()
    counts = await asyncio.gather(*(worker(k, c) for k, c in enumerate(clients)))
    rate = sum(counts) * RECORDS_PER_OP / (time.perf_counter() - t0)
    for c in clients:
        c.close()
    return lat, rate


async def _create_once(voters: dict[int, tuple[str, int]], target: int, name: str) -> int:
    rc = RemoteController(-1, voters, lambda: target, 5000)
    try:
        return await _create(rc, name)
    finally:
        rc.close()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_voter(tmp: Path, ops: int, linger: int) -> dict[str, float]:
    c = Cluster(
        tmp / f"single-{linger}",
        controllers=1,
        brokers=1,
        extra={"controller.quorum.append.linger.ms": str(linger)},
    )
    c.start()
    try:
        voters = {1: ("127.0.0.1", c.controllers[1].port)}
        lat, rate = asyncio.run(writes(voters, c.leader(), ops, 16))
    finally:
        c.stop()
    return {"p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99), "records_per_s": rate}


def three_voters(tmp: Path, ops: int, kills: int, linger: int) -> dict[str, object]:
    c = Cluster(
        tmp / f"three-{linger}",
        brokers=1,
        extra={"controller.quorum.append.linger.ms": str(linger)},
    )
    c.start()
    out: dict[str, object] = {}
    try:
        voters = {i: ("127.0.0.1", n.port) for i, n in c.controllers.items()}
        leader = c.leader()
        if ops:  # the failover run measures failovers only
            lat, rate = asyncio.run(writes(voters, leader, ops, 16))
            out.update({"p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99), "records_per_s": rate})
        if not kills:
            return out
        failovers = []
        for k in range(kills):
            leader = c.leader()
            c.controllers[leader].kill9()
            t0 = time.perf_counter()

            def committed_by_successor(k: int = k, old: int = leader) -> bool:
                live = {i: a for i, a in voters.items() if i != old}
                for i in live:
                    try:
                        info = describe_quorum(voters[i][1])
                    except OSError:
                        continue
                    if info["error_code"] == 0 and info["leader_id"] != old:
                        try:
                            code = asyncio.run(_create_once(voters, i, f"failover-{k}"))
                        except Exception:
                            return False
                        return code == 0
                return False

            wait_until(committed_by_successor, 60, interval=0.02, what="a successor commit")
            failovers.append((time.perf_counter() - t0) * 1000)
            c.controllers[leader].start()
            wait_until(
                lambda old=leader: any(
                    v == old and end > 0
                    for v, end in describe_quorum(voters[c.leader()][1])["voters"]
                ),
                30,
                what="the restarted voter to catch up",
            )
        out["failover_ms_median"] = statistics.median(failovers)
        out["failover_ms_all"] = [round(f) for f in failovers]
        # a quorum without a majority must idle
        leader = c.leader()
        others = [i for i in c.controllers if i != leader]
        c.controllers[leader].kill9()
        c.controllers[others[0]].kill9()
        survivor = c.controllers[others[1]]
        assert survivor.proc is not None
        time.sleep(3)  # let it notice; then measure a quiet interval
        c0, t0 = cpu_seconds(survivor.proc.pid), time.perf_counter()
        time.sleep(5)
        out["no_majority_cpu_pct"] = (
            100 * (cpu_seconds(survivor.proc.pid) - c0) / (time.perf_counter() - t0)
        )
    finally:
        c.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ops", type=int, default=400)
    ap.add_argument("--kills", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        fsync_ms = fsync_baseline(tmp)
        rows = []
        for linger in (0, 25):
            rows.append(("1", linger, one_voter(tmp, args.ops, linger)))
            rows.append(("3", linger, three_voters(tmp, args.ops, 0, linger)))
        three = three_voters(tmp / "failover", 0, args.kills, 25)
    print(f"{'voters':>6} {'linger ms':>9} {'commit p50 ms':>14} {'p99 ms':>8} {'records/s':>10}")
    for name, linger, r in rows:
        print(
            f"{name:>6} {linger:>9} {r['p50_ms']:>14.2f} {r['p99_ms']:>8.2f} "
            f"{r['records_per_s']:>10.0f}"
        )
    print(f"disk fsync baseline (median): {fsync_ms:.3f} ms")
    print(
        f"controller failover, kill -9 to first commit by the successor: median "
        f"{three['failover_ms_median']:.0f} ms over {args.kills} kills "
        f"(election timeout 500 ms, fetch timeout 1000 ms): {three['failover_ms_all']}"
    )
    print(
        f"CPU of the surviving voter after the majority is lost: "
        f"{three['no_majority_cpu_pct']:.1f}% of one core"
    )
    out = ROOT / "bench" / "results" / f"quorum-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(
        json.dumps(
            {
                "fsync_ms_median": fsync_ms,
                "writes": [{"voters": v, "append_linger_ms": lg, **r} for v, lg, r in rows],
                "failover": three,
            },
            indent=2,
        )
    )
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
