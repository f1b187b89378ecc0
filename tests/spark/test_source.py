"""format("keeperless") with Spark local[2] against a real node: the acceptance of issue 5."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import (
    consume_all,
    create_topic,
    delete_topic,
    produce,
    wait_for,
)


def reader(spark: Any, bootstrap: str, **options: str) -> Any:
    r = spark.read.format("keeperless").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def stream(spark: Any, bootstrap: str, **options: str) -> Any:
    r = spark.readStream.format("keeperless").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_batch_read_all_columns_headers_and_exact_offsets(spark, kafka, topic_name):
    topic = topic_name()
    create_topic(kafka.bootstrap, topic, partitions=2)
    before_ms = int(time.time() * 1000)
    msgs = [
        (f"k{i}".encode(), f"v{i}".encode(), [("h", f"{i}".encode()), ("n", None)], i % 2)
        for i in range(20)
    ]
    msgs.append((None, b"no-key", None, 0))
    produce(kafka.bootstrap, topic, msgs)

    df = reader(spark, kafka.bootstrap, subscribe=topic, includeHeaders="true").load()
    assert [f.name for f in df.schema.fields] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    assert df.schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    rows = df.collect()
    assert len(rows) == 21
    by_pos = {(r.partition, r.offset): r for r in rows}
    # per partition, offsets are 0..n-1 in production order
    for part in (0, 1):
        sent = [m for m in msgs if m[3] == part]
        for off, (key, value, headers, _) in enumerate(sent):
            r = by_pos[(part, off)]
            assert (r.key, r.value, r.topic) == (key, value, topic)
            assert [(h.key, h.value) for h in r.headers] == (headers or [])
            assert r.timestampType == 0
            ts_ms = int(r.timestamp.timestamp() * 1000)
            assert before_ms - 1000 <= ts_ms <= int(time.time() * 1000) + 1000

    # no headers column unless asked for; an exact offset range through assign
    ranged = reader(
        spark,
        kafka.bootstrap,
        assign=json.dumps({topic: [1]}),
        startingOffsets=json.dumps({topic: {"1": 3}}),
        endingOffsets=json.dumps({topic: {"1": 7}}),
    ).load()
    assert "headers" not in ranged.columns
    got = sorted((r.offset, r.value) for r in ranged.collect())
    assert got == [(o, f"v{2 * o + 1}".encode()) for o in range(3, 7)]


def test_streaming_max_offsets_per_trigger_and_restart_from_checkpoint(
    spark, kafka, topic_name, tmp_path: Path
):
    topic = topic_name()
    create_topic(kafka.bootstrap, topic, partitions=2)
    produce(kafka.bootstrap, topic, [(None, f"a{i}".encode(), None, i % 2) for i in range(25)])
    checkpoint = str(tmp_path / "checkpoint")
    seen: list[tuple[int, int, bytes]] = []

    def run() -> list[tuple[int, int]]:
        batches: list[tuple[int, int]] = []

        def each(batch_df: Any, batch_id: int) -> None:
            rows = batch_df.select("partition", "offset", "value").collect()
            batches.append((batch_id, len(rows)))
            seen.extend((r.partition, r.offset, r.value) for r in rows)

        df = stream(
            spark,
            kafka.bootstrap,
            subscribe=topic,
            startingOffsets="earliest",
            maxOffsetsPerTrigger="10",
        )
        q = (
            df.writeStream.foreachBatch(each)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        assert q.awaitTermination(180)
        assert q.exception() is None
        return batches

    first = run()
    # 25 offsets, at most 10 per trigger (spread over the partitions by backlog, as Spark
    # does, rounding down): 3 micro-batches
    sizes = [n for _, n in first]
    assert len(sizes) == 3, sizes
    assert max(sizes) <= 10
    assert sum(sizes) == 25
    produce(kafka.bootstrap, topic, [(None, f"b{i}".encode(), None, i % 2) for i in range(7)])
    second = run()
    assert [n for _, n in second] == [7]
    assert second[0][0] == first[-1][0] + 1  # batch ids continue: same query resumed
    # every message exactly once across the two runs
    assert len(seen) == len(set(seen)) == 32
    values = sorted(v for _, _, v in seen)
    assert values == sorted(
        [f"a{i}".encode() for i in range(25)] + [f"b{i}".encode() for i in range(7)]
    )


def test_batch_write_and_streaming_write_read_back_with_a_plain_consumer(
    spark, kafka, topic_name, tmp_path: Path
):
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructField,
        StructType,
    )

    out = topic_name("-out")
    create_topic(kafka.bootstrap, out, partitions=3)
    schema = StructType(
        [
            StructField("key", StringType()),
            StructField("value", StringType()),
            StructField("partition", IntegerType()),
            StructField(
                "headers",
                ArrayType(
                    StructType(
                        [StructField("key", StringType()), StructField("value", BinaryType())]
                    )
                ),
            ),
        ]
    )
    rows = [(f"k{i}", f"v{i}", i % 3, [("src", b"batch")]) for i in range(30)]
    spark.createDataFrame(rows, schema).write.format("keeperless").option(
        "kafka.bootstrap.servers", kafka.bootstrap
    ).option("topic", out).mode("append").save()
    got = consume_all(kafka.bootstrap, out, 30)
    assert len(got) == 30
    assert sorted((m.key(), m.value(), m.partition()) for m in got) == sorted(
        (f"k{i}".encode(), f"v{i}".encode(), i % 3) for i in range(30)
    )
    assert all(m.headers() == [("src", b"batch")] for m in got)

    # streaming: topic A -> select/transform -> topic B, topic taken from a column
    src = topic_name("-src")
    dst = topic_name("-dst")
    create_topic(kafka.bootstrap, src, partitions=2)
    create_topic(kafka.bootstrap, dst, partitions=1)
    produce(kafka.bootstrap, src, [(b"k", f"{i}".encode(), None, i % 2) for i in range(40)])
    from pyspark.sql import functions as F

    transformed = stream(spark, kafka.bootstrap, subscribe=src, startingOffsets="earliest").select(
        F.col("key"),
        F.concat(F.lit("x"), F.col("value").cast("string")).alias("value"),
        F.lit(dst).alias("topic"),
    )
    q = (
        transformed.writeStream.format("keeperless")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(180)
    assert q.exception() is None
    got = consume_all(kafka.bootstrap, dst, 40)
    assert sorted(m.value() for m in got) == sorted(f"x{i}".encode() for i in range(40))


def test_subscribe_pattern_picks_up_a_topic_created_later(spark, kafka, topic_name, tmp_path):
    prefix = topic_name("-pat")
    first, later = f"{prefix}-a", f"{prefix}-b"
    create_topic(kafka.bootstrap, first)
    produce(kafka.bootstrap, first, [(None, b"one", None, 0)])
    seen: list[tuple[str, bytes]] = []

    def each(batch_df: Any, _batch_id: int) -> None:
        seen.extend((r.topic, r.value) for r in batch_df.select("topic", "value").collect())

    df = stream(
        spark,
        kafka.bootstrap,
        subscribePattern=prefix.replace(".", "\\.") + "-.*",
        startingOffsets="earliest",
    )
    q = (
        df.writeStream.foreachBatch(each)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: (first, b"one") in seen, what="the first topic's message")
        create_topic(kafka.bootstrap, later)
        produce(kafka.bootstrap, later, [(None, b"two", None, 0)])
        wait_for(lambda: (later, b"two") in seen, what="the later topic's message")
    finally:
        q.stop()
    assert sorted(seen) == [(first, b"one"), (later, b"two")]


def _error_of(action: Any) -> str:
    with pytest.raises(Exception) as info:  # noqa: PT011 - Spark wraps the source's error
        action()
    return str(info.value)


def test_unknown_topic_unreachable_cluster_and_bad_options_are_clear_errors(
    spark, kafka, topic_name
):
    from tests.integration.cluster import free_port

    msg = _error_of(
        lambda: reader(spark, kafka.bootstrap, subscribe="no-such-topic").load().collect()
    )
    assert "UNKNOWN_TOPIC_OR_PARTITION" in msg
    assert "no-such-topic" in msg

    dead = f"127.0.0.1:{free_port()}"
    msg = _error_of(
        lambda: (
            reader(spark, dead, subscribe="t", **{"kafka.default.api.timeout.ms": "1500"})
            .load()
            .collect()
        )
    )
    assert "Cannot reach the Kafka cluster" in msg
    assert dead in msg

    msg = _error_of(lambda: reader(spark, kafka.bootstrap).load().collect())
    assert "Exactly one of the options 'subscribe', 'subscribePattern' or 'assign'" in msg
    msg = _error_of(
        lambda: (
            reader(spark, kafka.bootstrap, subscribe="t", startingOffsets="latest").load().collect()
        )
    )
    assert "Starting offset for batch queries can't be latest" in msg
    msg = _error_of(
        lambda: (
            spark.createDataFrame([("k",)], "key string")
            .write.format("keeperless")
            .option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("topic", "t")
            .mode("append")
            .save()
        )
    )
    assert "Required attribute 'value' not found" in msg


def test_offsets_gone_fail_the_query_unless_fail_on_data_loss_is_false(
    spark, kafka, topic_name, tmp_path: Path
):
    topic = topic_name()
    create_topic(kafka.bootstrap, topic)
    produce(kafka.bootstrap, topic, [(None, f"{i}".encode(), None, 0) for i in range(10)])
    checkpoint = str(tmp_path / "ck")

    def run(**extra: str) -> Any:
        seen: list[int] = []
        df = stream(spark, kafka.bootstrap, subscribe=topic, startingOffsets="earliest", **extra)
        q = (
            df.writeStream.foreachBatch(
                lambda b, _i: seen.extend(r.offset for r in b.select("offset").collect())
            )
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        try:
            q.awaitTermination(180)
        except Exception as e:  # the query's failure, re-raised by awaitTermination
            return str(e)
        return seen

    assert run() == list(range(10))
    # the topic is deleted and recreated with fewer records: offsets 5..9 are gone
    delete_topic(kafka.bootstrap, topic)
    wait_for(lambda: _gone(kafka.bootstrap, topic), what="topic deletion")
    create_topic(kafka.bootstrap, topic)
    produce(kafka.bootstrap, topic, [(None, f"n{i}".encode(), None, 0) for i in range(5)])
    failure = run()
    assert isinstance(failure, str)
    assert "offset was changed from 10 to 5" in failure
    assert 'set the source option "failOnDataLoss" to "false"' in failure
    # with failOnDataLoss=false the query goes on with what the recreated partition holds
    produce(kafka.bootstrap, topic, [(None, b"after", None, 0)])
    assert sorted(run(failOnDataLoss="false")) == list(range(6))


def _gone(bootstrap: str, topic: str) -> bool:
    from confluent_kafka.admin import AdminClient

    return topic not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5).topics


def test_starting_offsets_by_timestamp(spark, kafka, topic_name):
    topic = topic_name()
    create_topic(kafka.bootstrap, topic, partitions=2)
    base = 1_700_000_000_000
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(10):
        p.produce(topic, value=f"{i}".encode(), partition=i % 2, timestamp=base + i * 1000)
    assert p.flush(30) == 0
    # partition 0 holds 0,2,4,6,8 and partition 1 holds 1,3,5,7,9 (timestamps base + i s)
    df = reader(
        spark,
        kafka.bootstrap,
        subscribe=topic,
        startingOffsetsByTimestamp=json.dumps({topic: {"0": base + 4000, "1": base + 6500}}),
    ).load()
    got = sorted((r.partition, r.offset, r.value) for r in df.collect())
    assert got == [(0, 2, b"4"), (0, 3, b"6"), (0, 4, b"8"), (1, 3, b"7"), (1, 4, b"9")]
    assert {r.timestamp.timestamp() for r in df.where("value = '4'").collect()} == {
        (base + 4000) / 1000
    }
    # no record at or after the timestamp: an error by default, latest with the strategy
    later = json.dumps({topic: {"0": base + 60_000, "1": base}})
    msg = _error_of(
        lambda: (
            reader(spark, kafka.bootstrap, subscribe=topic, startingOffsetsByTimestamp=later)
            .load()
            .collect()
        )
    )
    assert "No offset matched the timestamp" in msg
    rows = (
        reader(
            spark,
            kafka.bootstrap,
            subscribe=topic,
            startingOffsetsByTimestamp=later,
            startingOffsetsByTimestampStrategy="latest",
        )
        .load()
        .collect()
    )
    assert sorted(r.offset for r in rows if r.partition == 1) == [0, 1, 2, 3, 4]
    assert [r for r in rows if r.partition == 0] == []


def test_the_spark_bench_reads_parses_and_writes_every_row(spark: Any, kafka: Any) -> None:
    """bench/spark.py's short form, on this file's session and node (a file of its own
    started a Spark session of its own: 40 s of CI): every count, the JSON sums and the
    write checked against a plain consumer."""
    from bench import spark as bench_spark

    out = bench_spark.measure(spark, kafka.bootstrap, 2_000, 2, prefix="short-", best_of=1)
    # (measure asserts each of Spark's counts and sums against the plain consumer's)
    assert out["spark_written_rows"] == 2_000
    assert out["json_sum"] > 0
    for key in ("spark_read_rows_per_s", "plain_consumer_rows_per_s",
                "json_spark_parse_sum_rows_per_s", "spark_write_rows_per_s"):  # fmt: skip
        assert out[key] > 0, key
