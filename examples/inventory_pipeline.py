"""A database's tables kept current in Parquet, from their change events, exactly once.

The PostgreSQL connector (``io.debezium.connector.postgresql.PostgresConnector`` on
``keeperless connect-distributed``) writes every change of the ``inventory`` schema's
tables to ``<prefix>.inventory.<table>`` in Debezium's format. This Spark Structured
Streaming job reads those topics with ``format("keeperless")`` and keeps each table's
current rows in Parquet: a create, update or snapshot read upserts the row by its key, a
delete (or its tombstone) removes it, a truncate empties the table.

Each micro-batch's result is a new version of the state, written under its batch id and
then made current by renaming one small file: a batch Spark runs again after a failure
(same id, same records, from its checkpoint) rewrites the same version, so each change is
applied exactly once, whatever was killed when.

With a keeperless cluster, a worker and the connector running (see the README's
"Change data capture" walk-through)::

    .venv/bin/python examples/inventory_pipeline.py --topic-prefix dbserver1 --out inventory-out

processes every change there is (``--follow`` keeps it running) and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import Any

KEEP_VERSIONS = 2


class StateStore:
    """The versions of every table's current state under ``out/state``, and the pointer
    to the current one (``out/state/CURRENT``, replaced by an atomic rename)."""

    def __init__(self, out: Path) -> None:
        self.root = out / "state"
        self.root.mkdir(parents=True, exist_ok=True)
        self.pointer = self.root / "CURRENT"

    def current(self) -> int:
        try:
            return int(self.pointer.read_text())
        except (FileNotFoundError, ValueError):
            return -1

    def path(self, version: int, table: str) -> Path:
        return self.root / f"v{version}" / table

    def tables(self, version: int) -> list[str]:
        d = self.root / f"v{version}"
        return sorted(p.name for p in d.iterdir() if p.is_dir()) if d.exists() else []

    def commit(self, version: int) -> None:
        tmp = self.root / f".CURRENT.{os.getpid()}"
        tmp.write_text(str(version))
        os.replace(tmp, self.pointer)
        for old in self.root.glob("v*"):
            if old.name[1:].isdigit() and int(old.name[1:]) <= version - KEEP_VERSIONS:
                shutil.rmtree(old, ignore_errors=True)


def apply_batch(spark: Any, store: StateStore, batch: Any, batch_id: int, prefix: str) -> None:
    """One micro-batch of change events onto the current state: a new version."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    current = store.current()
    if batch_id <= current:
        return  # applied before a failure; Spark runs the batch again, the state does not
    events = batch.select(
        F.expr(f"substring(topic, {len(prefix) + 2})").alias("qualified"),
        "partition", "offset",
        F.get_json_object(F.col("key").cast("string"), "$.payload").alias("k"),
        F.get_json_object(F.col("value").cast("string"), "$.payload.op").alias("op"),
        F.get_json_object(F.col("value").cast("string"), "$.payload.after").alias("row"),
    ).withColumn("table", F.regexp_replace("qualified", r"^[^.]*\.", ""))  # fmt: skip
    events.persist()
    try:
        tables = sorted({r.table for r in events.select("table").distinct().collect()})
        tables = sorted(set(tables) | set(store.tables(current)))
        for table in tables:
            mine = events.where(F.col("table") == table)
            truncated = mine.where(F.col("op") == "t").agg(F.max("offset")).first()[0]
            if truncated is not None:
                mine = mine.where(F.col("offset") > truncated)
            keyed = mine.where(F.col("k").isNotNull())
            latest = (
                keyed.withColumn("n", F.row_number().over(
                    Window.partitionBy("k").orderBy(F.desc("partition"), F.desc("offset"))))
                .where("n = 1")
            )  # fmt: skip
            upserts = latest.where(F.col("op").isin("c", "u", "r")).select("k", "row")
            before = store.path(current, table)
            if current >= 0 and before.exists() and truncated is None:
                old = spark.read.parquet(str(before))
                kept = old.join(latest.select("k"), on="k", how="left_anti")
                state = kept.unionByName(upserts)
            else:
                state = upserts
            state.write.mode("overwrite").parquet(str(store.path(batch_id, table)))
    finally:
        events.unpersist()
    store.commit(batch_id)


def start_job(spark: Any, bootstrap: str, out: Path, prefix: str, *, follow: bool = False) -> Any:
    store = StateStore(out)
    changes = (
        spark.readStream.format("keeperless")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribePattern", rf"{prefix.replace('.', '[.]')}[.]inventory[.].*")
        .option("startingOffsets", "earliest")
        .load()
    )
    writer = (
        changes.writeStream.foreachBatch(
            lambda batch, batch_id: apply_batch(spark, store, batch, batch_id, prefix)
        )
        .option("checkpointLocation", str(out / "checkpoint"))
    )  # fmt: skip
    writer = (
        writer.trigger(processingTime="2 seconds") if follow else writer.trigger(availableNow=True)
    )
    return writer.start()


def current_rows(spark: Any, out: Path, table: str) -> list[dict[str, Any]]:
    """A table's current rows (Debezium's ``after`` values), as dicts."""
    store = StateStore(out)
    path = store.path(store.current(), table)
    if store.current() < 0 or not path.exists():
        return []
    return [json.loads(r.row) for r in spark.read.parquet(str(path)).collect()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    ap.add_argument("--topic-prefix", default="dbserver1", help="the connector's topic.prefix")
    ap.add_argument("--out", type=Path, default=Path("inventory-out"))
    ap.add_argument("--follow", action="store_true", help="keep the job running")
    args = ap.parse_args(argv)
    from keeperless.spark import local_session

    spark = local_session("inventory-pipeline")
    query = start_job(spark, args.bootstrap_server, args.out, args.topic_prefix, follow=args.follow)
    query.awaitTermination()
    store = StateStore(args.out)
    for table in store.tables(store.current()):
        rows = current_rows(spark, args.out, table)
        print(f"{table}: {len(rows)} rows (version {store.current()} in {args.out / 'state'})")
        for row in rows[:20]:
            print("  ", row)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
