"""Migrating a ZooKeeper-mode cluster's metadata (issue 31): a real ZooKeeper (Debian's
package) holding N topics x P partitions in Kafka's layout; the time ``keeperless
migrate-zk``'s steps take to read the znodes, parse them and make the KRaft records, and
to write them as a controller's bootstrap - beside reading the same znodes with the
ZooKeeper client alone (kazoo, one get per znode, pipelined by level) in the same run.

    python bench/zk_migration.py [--topics N] [--partitions P]

Prints a table and writes bench/results/zk-migration-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.cluster import free_port  # noqa: E402
from tests.zookeeper import CLUSTER_ID, ZooKeeper  # noqa: E402

from bench._report import write_result  # noqa: E402
from keeperless.storage.format import format_storage  # noqa: E402
from keeperless.zk.layout import parse_layout  # noqa: E402
from keeperless.zk.reader import ROOTS, read_tree  # noqa: E402
from keeperless.zk.records import migration_records  # noqa: E402


def _j(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def populate(zk: Any, topics: int, partitions: int) -> int:
    """Kafka's layout for ``topics`` x ``partitions`` (3 replicas each), in transactions
    of a few hundred creates; the znodes written."""
    import base64
    import uuid

    nodes: list[tuple[str, bytes]] = [
        ("/cluster", b""), ("/cluster/id", _j({"version": "1", "id": CLUSTER_ID})),
        ("/controller_epoch", b"1"), ("/brokers", b""), ("/brokers/ids", b""),
        ("/brokers/topics", b""), ("/config", b""), ("/config/topics", b""),
    ]  # fmt: skip
    for b in (1, 2, 3):
        nodes.append((f"/brokers/ids/{b}", _j({"endpoints": [f"PLAINTEXT://b{b}:9092"]})))
    for t in range(topics):
        name = f"topic-{t}"
        tid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        parts = {str(p): [(p + i) % 3 + 1 for i in range(3)] for p in range(partitions)}
        nodes.append((f"/brokers/topics/{name}", _j({"version": 3, "topic_id": tid,
                                                    "partitions": parts})))  # fmt: skip
        nodes.append((f"/brokers/topics/{name}/partitions", b""))
        for p, reps in parts.items():
            base = f"/brokers/topics/{name}/partitions/{p}"
            nodes.append((base, b""))
            nodes.append((f"{base}/state", _j({"controller_epoch": 1, "leader": reps[0],
                                               "version": 1, "leader_epoch": 0,
                                               "isr": reps})))  # fmt: skip
        nodes.append((f"/config/topics/{name}", _j({"version": 1, "config": {
            "retention.ms": "86400000"}})))  # fmt: skip
    for i in range(0, len(nodes), 500):
        tx = zk.transaction()
        for path, data in nodes[i : i + 500]:
            tx.create(path, data)
        tx.commit()
    return len(nodes)


def client_alone(zk: Any) -> int:
    """Every znode under the migration's roots read with kazoo alone: the baseline."""
    level, n = list(ROOTS), 0
    while level:
        batch, level = level[:250], level[250:]
        asked = [(p, zk.get_async(p), zk.get_children_async(p)) for p in batch]
        for path, d, c in asked:
            try:
                d.get(timeout=30)
                kids = c.get(timeout=30)
            except Exception:
                continue
            n += 1
            level += [f"{path}/{k}" for k in kids]
    return n


def run(topics: int, partitions: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        zk = ZooKeeper(Path(tmp), free_port())
        zk.start()
        try:
            client = zk.client()
            written = populate(client, topics, partitions)
            client.stop()
            client.close()
            read_tree(zk.connect, timeout_s=60)  # warm ZooKeeper up: both then read it warm
            client = zk.client()  # a fresh connection, as migrate-zk's
            t0 = time.perf_counter()
            read = client_alone(client)
            alone_s = time.perf_counter() - t0
            client.stop()
            client.close()
            t0 = time.perf_counter()
            tree = read_tree(zk.connect, timeout_s=60)
            read_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            md = parse_layout(tree)
            records, _ = migration_records(md)
            parse_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            d = Path(tmp) / "controller"
            format_storage((d,), d, 1, md.cluster_id, None, False, 0, records=tuple(records))
            write_s = time.perf_counter() - t0
        finally:
            zk.stop()
    return {
        "topics": topics,
        "partitions": topics * partitions,
        "znodes_written": written,
        "znodes_read_by_client_alone": read,
        "client_alone_s": round(alone_s, 3),
        "read_tree_s": round(read_s, 3),
        "parse_and_records_s": round(parse_s, 3),
        "format_bootstrap_s": round(write_s, 3),
        "records": len(records),
        "migration_s": round(read_s + parse_s + write_s, 3),
        "migration_vs_client_alone": round((read_s + parse_s + write_s) / alone_s, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=10)
    args = ap.parse_args()
    out = run(args.topics, args.partitions)
    for k, v in out.items():
        print(f"{k:32} {v}")
    write_result("zk-migration", out)


if __name__ == "__main__":
    main()
