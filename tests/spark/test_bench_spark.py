"""The Spark benchmark's short form (bench/spark.py), on the Spark tests' session and
node: every read counts every row, the JSON sums agree, the write lands every row."""

from __future__ import annotations

from typing import Any

from bench import spark as bench_spark

from tests.integration.cluster import Node


def test_the_spark_bench_reads_parses_and_writes_every_row(spark: Any, kafka: Node) -> None:
    out = bench_spark.measure(spark, kafka.bootstrap, 2_000, 2, prefix="short-", best_of=1)
    # (measure asserts each of Spark's counts and sums against the plain consumer's)
    assert out["spark_written_rows"] == 2_000
    assert out["json_sum"] > 0
    for key in ("spark_read_rows_per_s", "plain_consumer_rows_per_s",
                "json_spark_parse_sum_rows_per_s", "spark_write_rows_per_s"):  # fmt: skip
        assert out[key] > 0, key
