"""Run the fault harness: ``make chaos RUNS=N SEED=S`` (or ``python -m tests.chaos.run``).

A run: a cluster of real processes in network namespaces (topology "split": 3
controllers + 3 brokers, or "combined": 3 nodes), the workloads recording a history,
the nemesis injecting faults on a schedule drawn from the seed, then healing, settling,
reading everything back, a clean stop, and the checkers. It prints the seed, the faults,
the operations and every anomaly (with the latency the faults cost), keeps the history
and logs under ``chaos-results/``, and exits 1 on any anomaly. The same seed replays the
same schedule of faults and operations (the timing of real processes varies).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.chaos import checkers
from tests.chaos.bulk_workload import (
    BULK_PARTITIONS,
    BULK_TOPIC,
    check_bulk_contents,
    read_bulk,
)
from tests.chaos.cluster import ChaosCluster
from tests.chaos.history import History
from tests.chaos.jepsen_workload import JEPSEN_TOPIC
from tests.chaos.nemesis import FAULTS, Nemesis
from tests.chaos.netns import Network, remove_stale
from tests.chaos.txn_workload import check_exactly_once
from tests.chaos.txn_workload import final_state as txn_final_state
from tests.chaos.workload import (
    KV_PARTITIONS,
    KV_TOPIC,
    TOPIC,
    Workload,
    committed_reader,
    read_committed,
    read_partition,
)

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "chaos-results"


def _settle(cluster: ChaosCluster, partitions: int, timeout_s: float = 90.0) -> list[str]:
    """After healing: every broker serves, and every partition of every topic has a
    leader and all its replicas in sync. Returns what is not so at the deadline (the
    partitions named), nothing if all settled."""
    from confluent_kafka.admin import AdminClient

    from tests.chaos.workload import _quiet

    cluster.wait_serving(timeout_s)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "logger": _quiet})
    deadline = time.monotonic() + timeout_s
    unsettled = ["(no metadata)"]
    while time.monotonic() < deadline:
        try:
            topics = admin.list_topics(timeout=5).topics
            unsettled = [
                f"{name}-{p}: leader {pm.leader}, replicas {pm.replicas}, isr {pm.isrs}"
                for name, t in sorted(topics.items())
                for p, pm in sorted(t.partitions.items())
                if pm.leader < 0 or set(pm.isrs) != set(pm.replicas)
            ]
            if len(topics[TOPIC].partitions) != partitions:
                unsettled.append(f"{TOPIC}: {len(topics[TOPIC].partitions)} partitions")
            if not unsettled:
                return []
        except Exception as e:
            unsettled = [f"(metadata: {e})"]
        time.sleep(0.5)
    return unsettled


def _final_committed(bootstrap: str, partitions: int) -> dict[int, int]:
    reader = committed_reader(bootstrap)
    try:
        return read_committed(reader, partitions)
    finally:
        reader.close()


def _metadata(bootstrap: str) -> dict[str, Any]:
    """name -> (topic id, {partition: replicas}) for every topic the cluster has."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    from keeperless.storage.meta_properties import uuid_from_kafka
    from tests.chaos.workload import _quiet

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _quiet})
    names = list(admin.list_topics(timeout=10).topics)
    out = {}
    for name, fut in admin.describe_topics(TopicCollection(names)).items():
        d = fut.result(10)
        replicas = {p.id: [r.id for r in p.replicas] for p in d.partitions}
        out[name] = (uuid_from_kafka(str(d.topic_id)), replicas)
    return out


def _finalized_release(bootstrap: str) -> str | None:
    import re
    import subprocess

    res = subprocess.run(
        [sys.executable, "-m", "keeperless", "features", "describe",
         "--bootstrap-server", bootstrap],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    m = re.search(r"Feature: metadata.version\t.*FinalizedVersionLevel: (\S+)", res.stdout)
    return m.group(1) if m else None


def _latency(history: History, faults: list[dict[str, Any]]) -> dict[str, Any]:
    """Acknowledgement latency of produces, outside and during faults."""
    invokes = {e.op: e.time_s for e in history.of("producer-", "send") if e.type == "invoke"}
    quiet, faulty = [], []
    spans = [(f["start_s"], f["end_s"] + 5.0) for f in faults]
    for e in history.of("producer-", "send"):
        if e.type != "ok" or e.op not in invokes:
            continue
        t0 = invokes[e.op]
        ms = (e.time_s - t0) * 1000
        (faulty if any(a <= t0 <= b for a, b in spans) else quiet).append(ms)

    def pct(v: list[float], q: float) -> float | None:
        return round(sorted(v)[min(int(q * len(v)), len(v) - 1)], 1) if v else None

    return {
        "quiet_p50_ms": pct(quiet, 0.5),
        "quiet_p99_ms": pct(quiet, 0.99),
        "during_faults_p50_ms": pct(faulty, 0.5),
        "during_faults_p99_ms": pct(faulty, 0.99),
    }


def run_once(
    seed: int,
    topology: str,
    duration_s: float,
    faults: tuple[str, ...] = FAULTS,
    keep: Path | None = None,
    volume_mb: int = 0,
) -> dict[str, Any]:
    """One run; ``volume_mb`` of large values are written and checked (the bulk
    workload), on top of the other workloads."""
    volume_bytes = volume_mb * 1024 * 1024
    rng = random.Random(seed)
    remove_stale()
    ids = {"split": range(1, 7), "dynamic": range(1, 9)}.get(topology, range(1, 4))
    workdir = Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-{topology}-"))
    net = Network(ids, workdir)
    # odd seeds: eligible leader replicas on from the start (even ones may upgrade to it)
    # seeds 3 modulo 4 start with share groups on (and their workload)
    cluster = ChaosCluster(workdir, topology, net, elr=seed % 2 == 1, share=seed % 4 == 3)
    history = History()
    report: dict[str, Any] = {"seed": seed, "topology": topology, "duration_s": duration_s,
                              "first_release": cluster.release}  # fmt: skip
    anomalies: list[dict[str, Any]] = []
    t_start = time.monotonic()
    net.open()
    try:
        cluster.start()
        racks = [f"rack-{n.node_id}" for n in cluster.brokers]
        workload = Workload(
            cluster.bootstrap, history, rng, racks=racks,
            secure_bootstrap=cluster.secure_bootstrap, bulk_bytes=volume_bytes,
            share=cluster.share,
        )  # fmt: skip
        workload.setup()
        workload.start()
        time.sleep(3.0)  # some quiet traffic first: the baseline latency
        nemesis = Nemesis(cluster, net, history, rng, faults)
        nemesis.run(duration_s, threading.Event())
        history.info("nemesis", "healed")
        if volume_bytes and not workload.bulk.wait(300):
            anomalies.append({"kind": "volume-not-written", "acked_bytes":
                              workload.bulk.acked_bytes, "target_bytes": volume_bytes})  # fmt: skip
        workload.moves_stop.set()  # the last reassignments complete while settling
        unsettled = _settle(cluster, workload.partitions)
        time.sleep(3.0)  # quiet traffic after healing
        workload.finish()
        if unsettled:
            anomalies.append({"kind": "did-not-settle", "after_s": 90,
                              "partitions": unsettled[:30], "count": len(unsettled)})  # fmt: skip
        anomalies += [{"kind": "isr-rejoin-late", **e.value}
                      for e in history.of("nemesis", "isr-late")]  # fmt: skip
        # a client's fatal error (an idempotent producer's sequence gone from a broker)
        anomalies += [{"kind": "producer-fatal", "producer": e.process, **e.value}
                      for e in history.of("", "fatal")]  # fmt: skip
        final = {p: read_partition(cluster.bootstrap, TOPIC, p) for p in range(workload.partitions)}
        committed = _final_committed(cluster.bootstrap, workload.partitions)
        history.complete(history.invoke("monitor", "committed"), "monitor", "ok", "committed",
                         committed)  # fmt: skip
        topics = _metadata(cluster.bootstrap)
        write_anomalies, write_stats = checkers.check_writes(history, final, topic=TOPIC)
        anomalies += write_anomalies
        bulk_stats: dict[str, Any] = {}
        if volume_bytes:
            read = {p: read_bulk(cluster.bootstrap, p) for p in range(BULK_PARTITIONS)}
            bulk_final = {p: r[0] for p, r in read.items()}
            bulk_anomalies, bulk_stats = checkers.check_writes(
                history, bulk_final, "bulk-", topic=BULK_TOPIC
            )
            anomalies += bulk_anomalies
            content, content_stats = check_bulk_contents(
                history, {p: r[1] for p, r in read.items()}
            )
            anomalies += content
            bulk_stats.update(content_stats)
        anomalies += checkers.check_reads(history, final)
        anomalies += checkers.check_deletions(history, final)
        kv = {p: read_partition(cluster.bootstrap, KV_TOPIC, p) for p in range(KV_PARTITIONS)}
        kv_anomalies, kv_stats = checkers.check_compaction(history, kv)
        anomalies += kv_anomalies
        anomalies += checkers.check_commits(history, final)
        txn_in, txn_out, txn_committed = txn_final_state(cluster.bootstrap)
        anomalies += check_exactly_once(txn_in, txn_out, txn_committed)
        secure_anomalies, secure_stats = workload.secure.check()
        anomalies += secure_anomalies
        workload.jepsen.final_poll()
        workload.share.drain()
        share_anomalies, share_stats = workload.share.check()
        anomalies += share_anomalies
        admin_anomalies, admin_stats = checkers.check_admin(history)
        anomalies += admin_anomalies
        if cluster.dynamic:  # the voter set is what the acknowledged changes made
            anomalies += checkers.check_voters(history, nemesis.voters())
        final_release = _finalized_release(cluster.bootstrap)
        anomalies += checkers.check_upgrades(history, cluster.release, final_release)
        # a clean stop, then the nodes' files
        for n in cluster.brokers:
            n.stop()
        for n in cluster.controllers:
            n.stop()
        logs = {i: n.logs() for i, n in cluster.nodes.items()}
        data = {i: n.data for i, n in cluster.nodes.items()}
        anomalies += checkers.check_controllers(logs, nemesis.isolated_controllers)
        disk_full = [f["target"] for f in nemesis.log if f["fault"] == "disk-full"]
        failed_disks = [f["target"]["node"] for f in nemesis.log
                        if f["fault"] in ("disk-failure", "replace-broker")
                        and isinstance(f["target"], dict)]  # fmt: skip
        anomalies += checkers.check_logs(logs, disk_full, failed_disks)
        anomalies += checkers.check_metadata_agreement(data)
        log_dirs = {i: n.log_dirs for i, n in cluster.nodes.items()}
        anomalies += checkers.check_replicas(log_dirs, topics, frozenset({KV_TOPIC}))
        # the mover moves the workload's and the Jepsen topic between 2 and 3 replicas
        for moved in (TOPIC, JEPSEN_TOPIC):
            anomalies += checkers.check_replica_counts(topics, moved, frozenset({2, 3}))
        client_duplicates: list[checkers.Anomaly] = []
        for written in (TOPIC, BULK_TOPIC):
            anomalies, explained = checkers.explain_duplicates(anomalies, log_dirs, written)
            client_duplicates += explained
        jepsen_anomalies, jepsen_stats = workload.jepsen.check(
            checkers.batch_writers(log_dirs, JEPSEN_TOPIC)
        )
        anomalies += jepsen_anomalies
        report.update(
            faults=nemesis.log,
            writes=write_stats,
            volume=bulk_stats,
            compaction={
                **kv_stats,
                "cleanings": sum(log.count(f"Cleaned {KV_TOPIC}-") for log in logs.values()),
            },
            transactions={
                "commits": workload.txn.commits,
                "aborts": workload.txn.aborts,
                "copier_sessions": workload.txn.sessions,
                "input": sum(len(v) for v in txn_in.values()),
                "copied": sum(len(v) for v in txn_out.values()),
                # deliveries below the copier's own position within one session
                "rewinds": [e.value for e in history.of("txn-copier", "rewind")][:10],
            },
            security=secure_stats,
            jepsen=jepsen_stats,
            share=share_stats,
            delete_records=sum(1 for e in history.of("admin", "delete-records") if e.type == "ok"),
            reassignments={
                kind: sum(1 for e in history.of("mover", "reassign") if e.type == kind)
                for kind in ("ok", "fail", "info")
            },
            throttles=sum(1 for e in history.of("mover", "throttle") if e.type == "ok"),
            # copies of a value written under two epochs of its producer: librdkafka
            # re-sent it after bumping its epoch (a message timed out), as against Kafka
            client_duplicates=client_duplicates,
            admin=admin_stats,
            commits=sum(1 for e in history.of("consumer-", "commit") if e.type == "ok"),
            reads=sum(len(e.value) for e in history.of("consumer-", "read")),
            # assignments after each consumer's first: the group's rebalances, which a
            # coordinator failover should no longer cause (its membership is restored)
            rebalances=_rebalances(history),
            # ... and per fault (a coordinator killed, paused or cut off among them)
            rebalances_by_fault=_rebalances_by_fault(history, nemesis.log),
            isolated_controllers=nemesis.isolated_controllers,
            voter_changes=[e.value for e in history.of("nemesis", "voters")],
            metadata_version=final_release,
            latency=_latency(history, nemesis.log),
        )
    except Exception as e:
        # recorded (with where it happened) and the next run goes on: one cluster that
        # does not settle must not end a batch of fifty
        import traceback

        anomalies.append(
            {
                "kind": "harness-error",
                "error": f"{type(e).__name__}: {e}",
                "where": traceback.format_exc().splitlines()[-3:],
            }
        )
    finally:
        report["anomalies"] = anomalies
        report["seconds"] = round(time.monotonic() - t_start, 1)
        out = (keep or RESULTS) / f"{seed}-{topology}"
        out.mkdir(parents=True, exist_ok=True)
        history.dump(out / "history.jsonl")
        for n in cluster.nodes.values():
            if n.log_path.exists():
                shutil.copy(n.log_path, out / f"node-{n.node_id}.log")
        if anomalies:
            cluster.copy_data(out / "data")
        (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
        report["output"] = str(out)
        cluster.close()
        net.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return report


def _rebalance_times(history: Any) -> list[float]:
    """When a consumer of the workload's group was assigned again (not its first time)."""
    firsts: set[str] = set()
    times = []
    for e in history.of("consumer-", "assigned"):
        if e.process in firsts:
            times.append(e.time_s)
        firsts.add(e.process)
    return times


def _rebalances(history: Any) -> int:
    return len(_rebalance_times(history))


def _rebalances_by_fault(history: Any, faults: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rebalances within each fault and the 10 s after it."""
    times = _rebalance_times(history)
    return [
        {"fault": f["fault"], "target": f["target"], "start_s": f["start_s"],
         "rebalances": sum(1 for t in times if f["start_s"] <= t <= f["end_s"] + 10.0)}
        for f in faults
    ]  # fmt: skip


def print_report(r: dict[str, Any]) -> None:
    w = r.get("writes", {})
    print(
        f"seed {r['seed']} {r['topology']}: {len(r.get('faults', []))} faults in "
        f"{r['seconds']} s; produced {w.get('sent', 0)} (acked {w.get('acked', 0)}, "
        f"unknown {w.get('unknown_outcome', 0)}), consumed {r.get('reads', 0)}, "
        f"{r.get('commits', 0)} commits, {r.get('rebalances', 0)} rebalances, "
        f"{r.get('admin', {}).get('ops', 0)} admin ops, "
        f"{r.get('delete_records', 0)} record deletions, "
        f"{r.get('transactions', {}).get('commits', 0)} transactions "
        f"({r.get('transactions', {}).get('copied', 0)} records copied exactly once), "
        f"{r.get('security', {}).get('acked', 0)} authorized writes read back by an "
        f"authorized reader, {r.get('security', {}).get('intruder_refusals', 0)} intruder "
        f"writes refused; anomalies: {len(r['anomalies'])}"
    )
    by_fault = {f["start_s"]: f["rebalances"] for f in r.get("rebalances_by_fault", [])}
    for f in r.get("faults", []):
        n = by_fault.get(f["start_s"])
        after = f" ({n} rebalances)" if n else ""
        print(f"    {f['start_s']:>7.1f}-{f['end_s']:<7.1f} {f['fault']:<20} {f['target']}{after}")
    if r.get("volume"):
        v = r["volume"]
        print(f"    volume: {v.get('acked_bytes', 0) / 2**20:.0f} MB acknowledged, "
              f"{v.get('read_bytes', 0) / 2**20:.0f} MB read back and checked")  # fmt: skip
    if r.get("jepsen"):
        j = r["jepsen"]
        print(f"    jepsen: {j.get('ops', 0)} ops ({j.get('txns', 0)} transactions committed, "
              f"{j.get('aborted', 0)} aborted), {j.get('values-acked', 0)} values acked, "
              f"{j.get('values-read', 0)} read, {j.get('g0-cycles', 0)} G0 cycles; "
              f"TV2: {j.get('tv2-txns', 0)} transactions, "
              f"{j.get('late-markers-sent', 0)} late marker copies "
              f"({j.get('late-markers-refused', 0)} refused)")  # fmt: skip
    if r.get("share"):
        s = r["share"]
        print(f"    share group: {s.get('written', 0)} written, {s.get('deliveries', 0)} "
              f"deliveries ({s.get('redeliveries', 0)} again), {s.get('accepted', 0)} accepted, "
              f"{s.get('rejected', 0)} rejected, {s.get('released', 0)} released, "
              f"{s.get('archived_at_limit', 0)} archived at the limit, "
              f"{s.get('unknown_acks', 0)} unknown acknowledgements, "
              f"{s.get('crashes', 0)} consumers killed -9")  # fmt: skip
    if r.get("latency"):
        print(f"    produce ack latency: {r['latency']}")
    for c in r.get("isolated_controllers", []):
        print(f"    cut-off controller {c['node']}: {c['cpu_pct']}% CPU over {c['window_s']} s")
    if r.get("compaction"):
        c = r["compaction"]
        print(f"    compacted topic: {c['sent']} keyed writes, {c['in_log']} records left, "
              f"{c['cleanings']} cleanings")  # fmt: skip
    if r.get("client_duplicates"):
        print(f"    explained by a client epoch bump: {len(r['client_duplicates'])}")
    for a in r["anomalies"]:
        print(f"  ANOMALY {json.dumps(a, default=str)[:600]}")
    print(f"    history and logs: {r.get('output')}")


def _isolated(seed: int, topology: str, args: Any, faults: tuple[str, ...]) -> dict[str, Any]:
    """One run in a process of its own. In one process a campaign's runs piled up: after
    49 runs the harness held 86 librdkafka clients (543 threads, 3 GB, a core of CPU), the
    nodes starved and produce latency grew from 0.9 s to 8 s - seed 8648's late ISR rejoin
    was the harness's own load."""
    import subprocess

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "tests.chaos.run", "--seed", str(seed), "--topology",
               topology, "--duration", str(args.duration), "--faults", ",".join(faults),
               "--volume-mb", str(args.volume_mb), "--report-to", str(out)]  # fmt: skip
        res = subprocess.run(cmd, cwd=ROOT, check=False)
        if out.exists():
            return dict(json.loads(out.read_text()))
        return {
            "seed": seed,
            "topology": topology,
            "seconds": 0,
            "anomalies": [
                {"kind": "harness-error", "error": f"the run's process exited {res.returncode}"}
            ],
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=None, help="first seed (random if not given)")
    ap.add_argument("--topology", choices=["split", "combined", "dynamic", "both", "all"],
                    default="all", help="all: split, combined and dynamic in turn")  # fmt: skip
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of faults per run")
    ap.add_argument("--faults", default=",".join(FAULTS), help="comma-separated subset")
    ap.add_argument("--volume-mb", type=int, default=300,
                    help="MB of large values each run writes and checks (0: none)")  # fmt: skip
    # one run in this process, its report written to the file named (what each run of a
    # batch is: a fresh process, so nothing of one run lives on into the next)
    ap.add_argument("--report-to", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(10**6)
    faults = tuple(f for f in args.faults.split(",") if f)
    unknown = set(faults) - set(FAULTS)
    if unknown:
        ap.error(f"unknown faults: {', '.join(sorted(unknown))} (known: {', '.join(FAULTS)})")
    topologies = {"both": ["split", "combined"], "all": ["split", "combined", "dynamic"]}.get(
        args.topology, [args.topology]
    )
    if args.report_to:
        r = run_once(seed, topologies[0], args.duration, faults, volume_mb=args.volume_mb)
        Path(args.report_to).write_text(json.dumps(r, default=str))
        return 0
    bad = 0
    summary = []
    for i in range(args.runs):
        topo = topologies[i % len(topologies)]
        r = _isolated(seed + i, topo, args, faults)
        print_report(r)
        summary.append({k: r.get(k) for k in ("seed", "topology", "seconds", "anomalies")})
        bad += bool(r["anomalies"])
    print(f"{args.runs} run(s) from seed {seed}: {bad} with anomalies")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"summary-{seed}.json").write_text(json.dumps(summary, indent=2, default=str))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
