"""Spark's built-in Kafka source and sink as the expected behaviour, item by item, as a
data engineer trying format("keeperless") in place of format("kafka") ran into them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.spark.conftest import consume_all, create_topic, produce, wait_for
from tests.spark.test_source import _error_of, reader, stream


def _fill(kafka: Any, topic: str, partitions: int, per_partition: int) -> None:
    create_topic(kafka.bootstrap, topic, partitions)
    produce(
        kafka.bootstrap,
        topic,
        [(None, b"v%d" % i, None, p) for p in range(partitions) for i in range(per_partition)],
    )


def test_default_save_mode_is_accepted_and_overwrite_refused_consistently(
    spark, kafka, topic_name
) -> None:
    topic = topic_name()
    df = spark.createDataFrame([("a", "1"), ("b", "2")], "key string, value string")
    # Spark's Kafka sink accepts its default save mode (ErrorIfExists) and Append
    df.write.format("keeperless").option("kafka.bootstrap.servers", kafka.bootstrap).option(
        "topic", topic
    ).save()
    df.write.format("keeperless").option("kafka.bootstrap.servers", kafka.bootstrap).option(
        "topic", topic
    ).mode("errorifexists").save()
    assert len(consume_all(kafka.bootstrap, topic, 4)) == 4
    msg = _error_of(
        lambda: (
            df.write.format("keeperless")
            .option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("topic", topic)
            .mode("overwrite")
            .save()
        )
    )
    assert "Save mode Overwrite is not allowed for Kafka" in msg
    assert "Allowed save modes are Append and ErrorIfExists (default)" in msg
    # other formats keep Spark's own behaviour
    out = Path(spark.conf.get("spark.sql.warehouse.dir")) / topic
    df.write.parquet(str(out))
    assert "already exists" in _error_of(lambda: df.write.parquet(str(out))).lower()


def test_headers_of_literal_structs_are_accepted(spark, kafka, topic_name) -> None:
    from pyspark.sql import functions as F

    topic = topic_name()
    df = spark.createDataFrame([("v",)], "value string").withColumn(
        "headers", F.array(F.struct(F.lit("h").alias("key"), F.lit(b"x").alias("value")))
    )  # non-nullable fields: Spark's Kafka sink compares the type ignoring nullability
    df.write.format("keeperless").option("kafka.bootstrap.servers", kafka.bootstrap).option(
        "topic", topic
    ).mode("append").save()
    [m] = consume_all(kafka.bootstrap, topic, 1)
    assert m.headers() == [("h", b"x")]
    bad = spark.createDataFrame([("v",)], "value string").withColumn(
        "headers", F.array(F.struct(F.lit("h").alias("key"), F.lit(1).alias("value")))
    )
    msg = _error_of(
        lambda: (
            bad.write.format("keeperless")
            .option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("topic", topic)
            .mode("append")
            .save()
        )
    )
    assert "headers attribute type must be" in msg
    assert "value:int" in msg


def test_min_partitions_and_max_records_per_partition_split_offset_ranges(
    spark, kafka, topic_name
) -> None:
    topic = topic_name()
    _fill(kafka, topic, 2, 100)
    plain = reader(spark, kafka.bootstrap, subscribe=topic).load()
    assert plain.rdd.getNumPartitions() == 2
    split = reader(spark, kafka.bootstrap, subscribe=topic, minPartitions="8").load()
    assert split.rdd.getNumPartitions() == 8
    assert sorted(r.offset for r in split.collect()) == sorted(list(range(100)) * 2)
    capped = reader(spark, kafka.bootstrap, subscribe=topic, maxRecordsPerPartition="30").load()
    assert capped.rdd.getNumPartitions() == 8  # ceil(100 / 30) = 4 per topic partition
    assert capped.count() == 200
    sizes = capped.groupBy(capped["partition"]).count().collect()
    assert {r["count"] for r in sizes} == {100}
    msg = _error_of(
        lambda: reader(spark, kafka.bootstrap, subscribe=topic, minPartitions="0").load().collect()
    )
    assert "minPartitions" in msg


def test_min_offsets_per_trigger_waits_for_enough_records(
    spark, kafka, topic_name, tmp_path
) -> None:
    topic = topic_name()
    _fill(kafka, topic, 1, 10)
    seen: list[int] = []
    df = stream(
        spark,
        kafka.bootstrap,
        subscribe=topic,
        startingOffsets="earliest",
        minOffsetsPerTrigger="50",
        maxTriggerDelay="60s",
    )
    q = (
        df.writeStream.foreachBatch(lambda b, _i: seen.append(b.count()))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        time.sleep(3)
        assert seen == [] or all(n == 0 for n in seen), f"a batch of {seen} before 50 records"
        produce(kafka.bootstrap, topic, [(None, b"x", None, 0)] * 45)
        wait_for(lambda: sum(seen) == 55, 60, "one batch once 55 >= 50 records are there")
        assert [n for n in seen if n] == [55]
    finally:
        q.stop()


def test_starting_offsets_past_the_end_is_a_clear_error(spark, kafka, topic_name, tmp_path) -> None:
    topic = topic_name()
    _fill(kafka, topic, 1, 5)
    msg = _error_of(
        lambda: (
            reader(
                spark, kafka.bootstrap, subscribe=topic, startingOffsets=f'{{"{topic}":{{"0":50}}}}'
            )
            .load()
            .collect()
        )
    )
    assert "AssertionError" not in msg
    assert f"Offset 50 given for {topic}-0 in startingOffsets is after the latest offset 5" in msg
    q = (
        stream(spark, kafka.bootstrap, subscribe=topic, startingOffsets=f'{{"{topic}":{{"0":50}}}}')
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        err = _error_of(lambda: q.awaitTermination(60))
    finally:
        q.stop()
    assert "AssertionError" not in err
    assert f"Offset 50 given for {topic}-0 in startingOffsets is after the latest offset 5" in err
