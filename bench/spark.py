"""Spark read and write throughput through format("keeperless"), against a plain
confluent-kafka consumer reading the same data in the same run.

    python bench/spark.py [--messages N] [--partitions P]

Reads: count() over N 100-byte messages in P partitions with Spark local[2] (best of
two runs after a warm-up on a small topic, so JVM start and Python worker start are not
counted), and the same messages read by one confluent-kafka consumer in one Python
process. Write: N rows (100-byte values) from a Spark DataFrame into a topic.
Prints a table and writes bench/results/spark-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.integration.cluster import Node  # noqa: E402

from bench.throughput import consume, produce  # noqa: E402

SIZE = 100


def spark_session():  # type: ignore[no-untyped-def]
    from keeperless.spark import local_session

    os.environ["PYSPARK_PYTHON"] = sys.executable
    return local_session("keeperless-bench", **{"spark.driver.memory": "2g"})


def spark_count(spark, bootstrap: str, topic: str) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    n = (
        spark.read.format("keeperless")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
        .count()
    )
    return n, time.perf_counter() - t0


def spark_write(spark, bootstrap: str, topic: str, n: int) -> float:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    df = spark.range(n, numPartitions=2).select(
        F.col("id").cast("string").alias("key"),
        F.lpad(F.col("id").cast("string"), SIZE, "x").alias("value"),
    )
    df.cache().count()  # generate the rows before timing
    t0 = time.perf_counter()
    df.write.format("keeperless").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", topic
    ).mode("append").save()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args()
    n, parts = args.messages, args.partitions
    with tempfile.TemporaryDirectory() as tmp:
        node = Node(Path(tmp) / "node")
        node.format()
        node.start()
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        try:
            for topic, p in (("warmup", 2), ("bench-read", parts), ("bench-write", parts)):
                admin.create_topics([NewTopic(topic, p, 1)])[topic].result(30)
            produce(node.bootstrap, "warmup", 10_000, SIZE)
            produce(node.bootstrap, "bench-read", n, SIZE)
            spark = spark_session()
            spark_count(spark, node.bootstrap, "warmup")
            runs = [spark_count(spark, node.bootstrap, "bench-read") for _ in range(2)]
            assert all(c == n for c, _ in runs), runs
            spark_s = min(dt for _, dt in runs)
            plain_rate = consume(node.bootstrap, "bench-read", parts, n)
            write_s = spark_write(spark, node.bootstrap, "bench-write", n)
            spark.stop()
        finally:
            node.stop()
    row = {
        "messages": n,
        "message_bytes": SIZE,
        "partitions": parts,
        "spark_read_rows_per_s": round(n / spark_s),
        "spark_read_mb_per_s": round(n * SIZE / spark_s / 1e6, 1),
        "plain_consumer_rows_per_s": round(plain_rate),
        "plain_consumer_mb_per_s": round(plain_rate * SIZE / 1e6, 1),
        "spark_vs_plain": round((n / spark_s) / plain_rate, 2),
        "spark_write_rows_per_s": round(n / write_s),
        "spark_write_mb_per_s": round(n * SIZE / write_s / 1e6, 1),
        "spark_executors": "local[2]",
    }
    print(
        f"{'rows':>9} {'parts':>5} {'spark read rows/s':>18} {'MB/s':>6} "
        f"{'plain consumer rows/s':>22} {'MB/s':>6} {'ratio':>6} {'spark write rows/s':>19}"
    )
    print(
        f"{n:>9,} {parts:>5} {row['spark_read_rows_per_s']:>18,} {row['spark_read_mb_per_s']:>6} "
        f"{row['plain_consumer_rows_per_s']:>22,} {row['plain_consumer_mb_per_s']:>6} "
        f"{row['spark_vs_plain']:>6} {row['spark_write_rows_per_s']:>19,}"
    )
    out = ROOT / "bench" / "results" / f"spark-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(json.dumps(row, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
