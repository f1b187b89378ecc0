"""examples/inventory_pipeline.py end to end, checked against plain Python."""

from __future__ import annotations

import json
from pathlib import Path

from examples import inventory_pipeline as pipeline

from tests.spark.conftest import consume_all


def test_inventory_pipeline_matches_an_independent_computation(spark, kafka, tmp_path: Path):
    events = pipeline.generate(4000, seed=3)
    pipeline.produce(kafka.bootstrap, events)
    expected = pipeline.expected_windows(events)
    assert len(expected) > 50  # enough windows to mean something

    query = pipeline.start_job(spark, kafka.bootstrap, tmp_path)
    assert query.awaitTermination(300)
    assert query.exception() is None

    rows = spark.read.parquet(str(tmp_path / "parquet")).collect()
    from_parquet = {
        (int(r.window_start.timestamp() * 1000), r.product_id): (
            r.stock_change,
            r.orders,
            r.restocks,
        )
        for r in rows
    }
    assert len(rows) == len(from_parquet)  # each finished window written once
    assert from_parquet == expected

    messages = consume_all(kafka.bootstrap, pipeline.OUTPUT_TOPIC, len(expected))
    from_topic = {}
    for m in messages:
        w = json.loads(m.value())
        assert m.key() == w["product_id"].encode()
        start = w["window_start"]
        from_topic[(start, w["product_id"])] = (w["stock_change"], w["orders"], w["restocks"])
    assert len(messages) == len(expected)
    expected_by_iso = {(_iso(start), product): v for (start, product), v in expected.items()}
    assert from_topic == expected_by_iso


def _iso(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
