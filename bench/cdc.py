"""Change events per second from PostgreSQL to a keeperless topic, beside the baselines.

One bulk UPDATE of N rows (default 100,000), in one transaction, read three ways from
replication slots created just before it, in the same run:

- ``pg_recvlogical`` (PostgreSQL's own client, C) streaming the slot's pgoutput messages
  to /dev/null: what reading the changes costs at all;
- psycopg2's logical replication connection and keeperless's pgoutput decoder, no Kafka:
  what the connector's reading and decoding cost;
- the whole pipeline: the PostgreSQL connector on a Connect worker writing Debezium change
  events (JSON with schemas) to a keeperless topic, until the last is acknowledged.

    .venv/bin/python bench/cdc.py [--rows 100000]

prints a table and writes bench/results/cdc-<time>.json (its short form runs in make
test).
"""

from __future__ import annotations

import argparse
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.connect.postgres import Postgres, pg_bin  # noqa: E402
from tests.connect.worker import Worker  # noqa: E402
from tests.integration.cluster import Node, wait_until  # noqa: E402

from bench._report import write_result  # noqa: E402

PUB = "dbz_publication"


def _lsn(pg: Postgres) -> str:
    return str(pg.sql("SELECT pg_current_wal_lsn()::text")[0][0])


def _recvlogical(pg: Postgres, slot: str, end: str) -> float:
    cmd = [pg_bin("pg_recvlogical"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", pg.user,
           "-d", "postgres", "-S", slot, "--start", "-E", end, "-f", "/dev/null",
           "-o", "proto_version=1", "-o", f"publication_names={PUB}", "--no-loop"]  # fmt: skip
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    return time.perf_counter() - t0


def _python_decode(pg: Postgres, slot: str, end: str, rows: int) -> float:
    import psycopg2
    import psycopg2.extras

    from keeperless.connect.connectors.postgres import pgoutput

    conn = psycopg2.connect(host="127.0.0.1", port=pg.port, user=pg.user, dbname="postgres",
                            connection_factory=psycopg2.extras.LogicalReplicationConnection)  # fmt: skip  # noqa: E501
    cur = conn.cursor()
    hi, lo = end.split("/")
    end_lsn = (int(hi, 16) << 32) + int(lo, 16)
    t0 = time.perf_counter()
    cur.start_replication(slot_name=slot, decode=False,
                          options={"proto_version": "1", "publication_names": PUB})  # fmt: skip
    changes = 0
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # bounded: a stream that never ends fails below
        msg = cur.read_message()
        if msg is None:
            select.select([cur], [], [], 1)
            continue
        m = pgoutput.decode(msg.payload)
        if isinstance(m, pgoutput.Update):
            changes += 1
        if isinstance(m, pgoutput.Commit) and m.end_lsn >= end_lsn:
            break
    elapsed = time.perf_counter() - t0
    conn.close()
    assert changes == rows, changes
    return elapsed


def _events_in(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench"})
    try:
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None:
            return 0
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in md.partitions)  # fmt: skip
    finally:
        c.close()


def measure(rows: int, work: Path) -> dict[str, Any]:
    """The three ways of reading one UPDATE of ``rows`` rows, PostgreSQL and a node and a
    Connect worker started under ``work``."""
    pg = Postgres()
    pg.start()
    node = Node(work / "node")
    worker = Worker(work / "worker", node.bootstrap, group="bench",
                    extra={"offset.flush.interval.ms": "1000"})  # fmt: skip
    results: list[dict[str, Any]] = []
    try:
        pg.sql("CREATE TABLE public.items (id int PRIMARY KEY, v int NOT NULL, name text)")
        pg.sql(
            f"INSERT INTO public.items SELECT g, 0, 'item-' || g FROM generate_series(1, {rows}) g"
        )
        pg.sql(f"CREATE PUBLICATION {PUB} FOR ALL TABLES")
        node.format()
        node.start()
        worker.start()
        cfg = pg.connector_config(
            **{"table.include.list": "public.items", "snapshot.mode": "no_data"}
        )
        assert (
            worker.call("POST", "/connectors", {"name": "bench", "config": cfg}).status_code == 201
        )
        worker.wait_state("bench", "RUNNING", tasks=1)
        wait_until(lambda: pg.sql("SELECT count(*) FROM pg_replication_slots WHERE active")[0][0] == 1,  # noqa: E501
                   60, what="the connector streaming")  # fmt: skip
        for slot in ("bench_recvlogical", "bench_python"):
            pg.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", slot)
        topic = "dbserver1.public.items"
        t0 = time.perf_counter()
        pg.sql("UPDATE public.items SET v = v + 1")
        end = _lsn(pg)
        wait_until(lambda: _events_in(node.bootstrap, topic) >= rows, 900, interval=0.2,
                   what=f"{rows} change events in {topic}")  # fmt: skip
        pipeline_s = time.perf_counter() - t0
        events = _events_in(node.bootstrap, topic)
        recv_s = _recvlogical(pg, "bench_recvlogical", end)
        py_s = _python_decode(pg, "bench_python", end, rows)
        for case, secs in (
            ("pg_recvlogical to /dev/null (baseline)", recv_s),
            ("psycopg2 replication + pgoutput decoder, no Kafka", py_s),
            ("PostgreSQL connector -> keeperless topic (acks=all)", pipeline_s),
        ):
            results.append({"case": case, "seconds": secs, "events_per_s": rows / secs,
                            "x_baseline": recv_s / secs})  # fmt: skip
    finally:
        worker.stop()
        node.stop()
        pg.stop()
    return {"rows": rows, "events_in_topic": events, "results": results}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    args = ap.parse_args(argv)
    rows = args.rows
    out = measure(rows, Path(tempfile.mkdtemp(prefix="bench-cdc-")))
    print(f"one UPDATE of {rows} rows, change events read from PostgreSQL 15")
    print(f"{'case':<56}{'seconds':>10}{'events/s':>12}{'x base':>9}")
    for r in out["results"]:
        print(
            f"{r['case']:<56}{r['seconds']:>10.2f}{r['events_per_s']:>12.0f}{r['x_baseline']:>9.3f}"
        )
    write_result("cdc", out)


if __name__ == "__main__":
    main()
