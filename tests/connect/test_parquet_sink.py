"""The Parquet sink connector: every record of a topic in Parquet files named by their
offsets, exactly once across a worker killed -9 (records delivered again are skipped)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.connect.worker import Worker
from tests.integration.cluster import Node, wait_until
from tests.integration.conftest import running


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    yield from running(Node(tmp_path_factory.mktemp("parquet-node")))


def offsets_in(root: Path) -> list[int]:
    out: list[int] = []
    for f in sorted(root.glob("pq-t/partition=0/*.parquet")):
        out += pq.read_table(f).column("kafka_offset").to_pylist()
    return out


def test_parquet_sink_exactly_once_across_kill_9(node: Node, tmp_path: Path) -> None:
    total = 6000
    feed = tmp_path / "feed.txt"
    feed.write_text("")
    out = tmp_path / "parquet"
    # offsets committed every 3 s: files written since the last commit are delivered again
    # after the kill, and must not be written twice
    w = Worker(
        tmp_path / "w",
        node.bootstrap,
        group="pq",
        extra={"offset.flush.interval.ms": "3000", "consumer.session.timeout.ms": "6000"},
    )
    w.start()
    stop = threading.Event()

    def write() -> None:
        with feed.open("a") as f:
            for i in range(total):
                if stop.is_set():
                    return
                f.write(f"line-{i}\n")
                if i % 50 == 49:
                    f.flush()
                    time.sleep(0.05)  # about 1,000 lines a second: the kill lands mid-stream

    feeder = threading.Thread(target=write)
    try:
        src = {"connector.class": "FileStreamSource", "file": str(feed), "topic": "pq-t"}
        sink = {"connector.class": "keeperless.connect.parquet.ParquetSinkConnector",
                "topics": "pq-t", "parquet.dir": str(out), "flush.size": "1000",
                "rotate.interval.ms": "300"}  # fmt: skip
        assert w.call("POST", "/connectors", {"name": "src", "config": src}).status_code == 201
        assert w.call("POST", "/connectors", {"name": "pq", "config": sink}).status_code == 201
        w.wait_state("pq", "RUNNING", tasks=1)
        feeder.start()
        wait_until(lambda: len(offsets_in(out)) > 500, 60, what="some files")
        assert feeder.is_alive(), "the feed ended before the kill: nothing tested"
        w.kill9()
        w.start()
        feeder.join(120)
        wait_until(lambda: len(set(offsets_in(out))) >= total, 120, what="every offset in a file")
        time.sleep(2)  # anything written twice would be there by now
        got = offsets_in(out)
        dups = [o for o, n in Counter(got).items() if n > 1]
        assert not dups, f"offsets written twice: {dups[:10]}"
        assert sorted(got) == list(range(len(got)))
        first = pq.read_table(sorted(out.glob("pq-t/partition=0/*.parquet"))[0]).to_pylist()[0]
        assert first["value"] == "line-0"
        assert first["kafka_topic"] == "pq-t"
        assert not list(out.rglob(".*.tmp"))
    finally:
        stop.set()
        w.stop()
