"""Stock per product from inventory and order change events, on Spark Structured Streaming.

A CDC tool (Debezium, say) turns two tables into change-event topics: ``cdc.inventory``
(restocks) and ``cdc.orders`` (order lines).  This job reads both with
``format("keeperless")``, aggregates the stock change per product over one-minute
event-time windows with a two-minute watermark, and writes each finished window both to
the ``stock-by-minute`` topic (JSON) and to Parquet files.

With ``make run`` going in another shell::

    .venv/bin/python examples/inventory_pipeline.py

generates a day's worth of seeded change events (``--events``), runs the job until it
has processed everything there is (``Trigger.AvailableNow``; ``--follow`` keeps it
running), and prints the windows it wrote.  Run it again and it resumes from its
checkpoint in ``--out`` (new events only).
"""

from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOPICS = ("cdc.inventory", "cdc.orders")
OUTPUT_TOPIC = "stock-by-minute"
WINDOW_MS = 60_000
WATERMARK_MS = 120_000
PRODUCTS = [f"sku-{i:03d}" for i in range(12)]


@dataclass(frozen=True)
class ChangeEvent:
    topic: str
    product_id: str
    quantity: int
    event_time_ms: int

    def envelope(self, seq: int) -> bytes:
        """The event as a Debezium-style change record."""
        table = self.topic.split(".", 1)[1]
        after: dict[str, Any] = {"product_id": self.product_id, "quantity": self.quantity}
        after["order_id" if table == "orders" else "restock_id"] = seq
        return json.dumps(
            {
                "op": "c",
                "ts_ms": self.event_time_ms,
                "source": {"connector": "postgresql", "table": table},
                "before": None,
                "after": after,
            }
        ).encode()

    @property
    def delta(self) -> int:
        return self.quantity if self.topic == "cdc.inventory" else -self.quantity


def generate(count: int, seed: int = 7, start_ms: int = 1_767_225_600_000) -> list[ChangeEvent]:
    """Seeded events over ~count/10 seconds, slightly out of order (less than the watermark)."""
    rng = random.Random(seed)
    events = []
    t = start_ms + 137  # never on a window boundary
    for _ in range(count):
        t += rng.randint(0, 200)
        jitter = rng.randint(-30_000, 0)  # late by up to 30 s, well inside the watermark
        product = rng.choice(PRODUCTS)
        if rng.random() < 0.3:
            events.append(ChangeEvent("cdc.inventory", product, rng.randint(5, 50), t + jitter))
        else:
            events.append(ChangeEvent("cdc.orders", product, rng.randint(1, 4), t + jitter))
    return events


def expected_windows(events: Iterable[ChangeEvent]) -> dict[tuple[int, str], tuple[int, int, int]]:
    """The same aggregation in plain Python: the windows an append-mode query has finished.

    (window start ms, product) -> (stock change, orders, restocks), for windows whose end
    is at or before the final watermark (max event time minus the watermark delay).
    """
    events = list(events)
    watermark = max(e.event_time_ms for e in events) - WATERMARK_MS
    out: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for e in events:
        start = e.event_time_ms // WINDOW_MS * WINDOW_MS
        if start + WINDOW_MS > watermark:
            continue
        acc = out[(start, e.product_id)]
        acc[0] += e.delta
        acc[1 if e.topic == "cdc.orders" else 2] += 1
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def produce(bootstrap: str, events: list[ChangeEvent]) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=10).topics
    wanted = [t for t in (*TOPICS, OUTPUT_TOPIC) if t not in existing]
    if wanted:
        for fut in admin.create_topics(
            [NewTopic(t, num_partitions=3, replication_factor=1) for t in wanted]
        ).values():
            fut.result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "acks": "all"})
    for seq, e in enumerate(events):
        while True:
            try:
                producer.produce(
                    e.topic,
                    key=e.product_id.encode(),
                    value=e.envelope(seq),
                    timestamp=e.event_time_ms,
                )
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(60):
        raise SystemExit("some change events were not acknowledged")


def start_job(spark: Any, bootstrap: str, out: Path, *, follow: bool = False) -> Any:
    """The streaming query: change events in, finished windows to a topic and Parquet."""
    from pyspark.sql import functions as F

    after = "struct<product_id:string,quantity:int>"
    changes = (
        spark.readStream.format("keeperless")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribePattern", r"cdc\..*")
        .option("startingOffsets", "earliest")
        .load()
        .select(
            F.col("topic"),
            F.from_json(F.col("value").cast("string"), f"struct<after:{after}>").alias("e"),
            F.col("timestamp").alias("event_time"),
        )
        .select(
            "event_time",
            F.col("e.after.product_id").alias("product_id"),
            F.when(F.col("topic") == "cdc.inventory", F.col("e.after.quantity"))
            .otherwise(-F.col("e.after.quantity"))
            .alias("delta"),
            (F.col("topic") == "cdc.orders").cast("int").alias("is_order"),
        )
    )
    windows = (
        changes.withWatermark("event_time", f"{WATERMARK_MS // 1000} seconds")
        .groupBy(F.window("event_time", f"{WINDOW_MS // 1000} seconds"), "product_id")
        .agg(
            F.sum("delta").alias("stock_change"),
            F.sum("is_order").alias("orders"),
            F.sum(1 - F.col("is_order")).alias("restocks"),
        )
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "product_id",
            F.col("stock_change").cast("long").alias("stock_change"),
            F.col("orders").cast("long").alias("orders"),
            F.col("restocks").cast("long").alias("restocks"),
        )
    )
    parquet_dir = str(out / "parquet")

    def write_both(batch: Any, _batch_id: int) -> None:
        batch.persist()
        batch.write.mode("append").parquet(parquet_dir)
        batch.select(
            F.col("product_id").alias("key"),
            F.to_json(F.struct(*batch.columns)).alias("value"),
        ).write.format("keeperless").option("kafka.bootstrap.servers", bootstrap).option(
            "topic", OUTPUT_TOPIC
        ).mode("append").save()
        batch.unpersist()

    writer = (
        windows.writeStream.outputMode("append")
        .foreachBatch(write_both)
        .option("checkpointLocation", str(out / "checkpoint"))
    )
    writer = (
        writer.trigger(processingTime="5 seconds") if follow else writer.trigger(availableNow=True)
    )
    return writer.start()


def spark_session() -> Any:
    from keeperless.spark import local_session

    return local_session("inventory-pipeline")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    ap.add_argument("--out", type=Path, default=Path("pipeline-out"))
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--no-generate", action="store_true", help="only run the job")
    ap.add_argument("--follow", action="store_true", help="keep the job running")
    args = ap.parse_args(argv)
    if not args.no_generate:
        events = generate(args.events, args.seed)
        produce(args.bootstrap_server, events)
        print(f"produced {len(events)} change events to {', '.join(TOPICS)}")
    spark = spark_session()
    query = start_job(spark, args.bootstrap_server, args.out, follow=args.follow)
    query.awaitTermination()
    result = spark.read.parquet(str(args.out / "parquet")).orderBy("window_start", "product_id")
    print(f"{result.count()} finished windows in {args.out / 'parquet'} and topic {OUTPUT_TOPIC}")
    result.show(20, truncate=False)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
