"""Spark read and write throughput through format("keeperless"), against a plain
confluent-kafka consumer reading the same data in the same run.

    python bench/spark.py [--messages N] [--partitions P]

Reads: count() over N 100-byte messages in P partitions with Spark local[2] (best of
two runs after a warm-up on a small topic, so JVM start and Python worker start are not
counted), and the same messages read by one confluent-kafka consumer in one Python
process. JSON reads, as a data engineer's job does: N JSON events parsed and summed,
by Spark (from_json on the value, then sum of a field) and by the consumer (json.loads
of each value, then the same sum); the time of the read alone beside them says where it
goes. Write: N rows (100-byte values) from a Spark DataFrame into a topic.
Prints a table and writes bench/results/spark-<time>.json (its short form runs in make
test, in tests/spark).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.integration.cluster import Node  # noqa: E402

from bench._report import write_result  # noqa: E402
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


def produce_json(bootstrap: str, topic: str, n: int) -> None:
    """N JSON events of about 100 bytes, as an orders feed would carry."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000})
    for i in range(n):
        doc = {"id": i, "user": f"user-{i % 1000:04d}", "amount": (i % 997) / 10, "kind": "order"}
        while True:
            try:
                p.produce(topic, key=str(i).encode(), value=json.dumps(doc).encode())
                break
            except BufferError:
                p.poll(0.05)
    p.flush(120)


def spark_json_sum(spark, bootstrap: str, topic: str) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    schema = "id LONG, user STRING, amount DOUBLE, kind STRING"
    t0 = time.perf_counter()
    total = (
        spark.read.format("keeperless")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
        .select(F.from_json(F.col("value").cast("string"), schema).alias("e"))
        .agg(F.sum("e.amount"))
        .first()[0]
    )
    return float(total), time.perf_counter() - t0


def consume_json_sum(bootstrap: str, topic: str, partitions: int, n: int) -> tuple[float, float]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-json-{topic}",
                  "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                  "max.partition.fetch.bytes": 10485760})  # fmt: skip
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, total = 0, 0.0
    loads = json.loads
    deadline = time.monotonic() + 300
    t0 = time.perf_counter()
    while got < n and time.monotonic() < deadline:
        for m in c.consume(10000, 1.0):
            if not m.error():
                total += loads(m.value())["amount"]
                got += 1
    dt = time.perf_counter() - t0
    c.close()
    assert got >= n, f"consumed {got} of {n}"
    return total, dt


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


def measure(
    spark, bootstrap: str, n: int, parts: int, prefix: str = "", best_of: int = 2
) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Every measure of the table with ``spark`` against the node at ``bootstrap``, on
    new topics named with ``prefix``, Spark's the best of ``best_of`` runs."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = ("warmup", "bench-read", "bench-write", "bench-json")
    warmup, read, write, events = (prefix + t for t in names)
    for topic in (warmup, read, write, events):
        admin.create_topics([NewTopic(topic, 2 if topic == warmup else parts, 1)])[topic].result(30)
    produce(bootstrap, warmup, min(n, 10_000), SIZE)
    produce(bootstrap, read, n, SIZE)
    produce_json(bootstrap, events, n)
    spark_count(spark, bootstrap, warmup)
    runs = [spark_count(spark, bootstrap, read) for _ in range(best_of)]
    assert all(c == n for c, _ in runs), runs
    spark_s = min(dt for _, dt in runs)
    plain_rate = consume(bootstrap, read, parts, n)
    json_runs = [spark_json_sum(spark, bootstrap, events) for _ in range(best_of)]
    json_spark_s = min(dt for _, dt in json_runs)
    json_read = [spark_count(spark, bootstrap, events) for _ in range(best_of)]
    assert all(c == n for c, _ in json_read), json_read
    json_read_s = min(dt for _, dt in json_read)
    plain_total, json_plain_s = consume_json_sum(bootstrap, events, parts, n)
    plain_read_rate = consume(bootstrap, events, parts, n)
    assert all(abs(t - plain_total) < 1e-3 * max(1.0, plain_total) for t, _ in json_runs)
    write_s = spark_write(spark, bootstrap, write, n)
    written, _ = spark_count(spark, bootstrap, write)
    return {
        "messages": n,
        "message_bytes": SIZE,
        "partitions": parts,
        "spark_read_rows_per_s": round(n / spark_s),
        "spark_read_mb_per_s": round(n * SIZE / spark_s / 1e6, 1),
        "plain_consumer_rows_per_s": round(plain_rate),
        "plain_consumer_mb_per_s": round(plain_rate * SIZE / 1e6, 1),
        "spark_vs_plain": round((n / spark_s) / plain_rate, 2),
        "json_spark_parse_sum_rows_per_s": round(n / json_spark_s),
        "json_spark_read_only_rows_per_s": round(n / json_read_s),
        "json_plain_parse_sum_rows_per_s": round(n / json_plain_s),
        "json_plain_read_only_rows_per_s": round(plain_read_rate),
        "json_spark_vs_plain": round(json_plain_s / json_spark_s, 2),
        "json_sum": plain_total,
        "spark_write_rows_per_s": round(n / write_s),
        "spark_write_mb_per_s": round(n * SIZE / write_s / 1e6, 1),
        "spark_written_rows": written,
        "spark_executors": "local[2]",
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args(argv)
    n, parts = args.messages, args.partitions
    with tempfile.TemporaryDirectory() as tmp:
        node = Node(Path(tmp) / "node")
        node.format()
        node.start()
        try:
            spark = spark_session()
            try:
                row = measure(spark, node.bootstrap, n, parts)
            finally:
                spark.stop()
        finally:
            node.stop()
    print(
        f"{'rows':>9} {'parts':>5} {'spark read rows/s':>18} {'MB/s':>6} "
        f"{'plain consumer rows/s':>22} {'MB/s':>6} {'ratio':>6} {'spark write rows/s':>19}"
    )
    print(
        f"{n:>9,} {parts:>5} {row['spark_read_rows_per_s']:>18,} {row['spark_read_mb_per_s']:>6} "
        f"{row['plain_consumer_rows_per_s']:>22,} {row['plain_consumer_mb_per_s']:>6} "
        f"{row['spark_vs_plain']:>6} {row['spark_write_rows_per_s']:>19,}"
    )
    print(
        f"JSON events parsed and summed: spark {row['json_spark_parse_sum_rows_per_s']:,} rows/s "
        f"(read alone {row['json_spark_read_only_rows_per_s']:,}), consumer + json.loads "
        f"{row['json_plain_parse_sum_rows_per_s']:,} rows/s (read alone "
        f"{row['json_plain_read_only_rows_per_s']:,}); spark/consumer "
        f"{row['json_spark_vs_plain']}"
    )
    write_result("spark", row)


if __name__ == "__main__":
    main()
