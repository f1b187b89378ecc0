"""examples/inventory_pipeline.py on the real pipeline: PostgreSQL's changes through the
worker's CDC connector into keeperless, then Spark keeping the table current in Parquet;
the driver killed -9 mid-stream and the broker restarted, and the final table still equals
the database's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from examples import inventory_pipeline as pipeline

from tests.connect.postgres import Postgres
from tests.connect.worker import Worker
from tests.integration.cluster import Node, wait_until

ROOT = Path(__file__).parents[2]


@pytest.fixture
def pg() -> Iterator[Postgres]:
    p = Postgres()
    p.start()
    p.sql("CREATE SCHEMA inventory")
    p.sql(
        "CREATE TABLE inventory.customers (id int PRIMARY KEY, first_name text NOT NULL, email text)"  # noqa: E501
    )
    p.sql(
        "INSERT INTO inventory.customers SELECT g, 'name' || g, 'e' || g || '@x' FROM generate_series(1, 300) g"  # noqa: E501
    )
    try:
        yield p
    finally:
        p.stop()


def table_in_db(pg: Postgres) -> list[dict[str, Any]]:
    rows = pg.sql("SELECT id, first_name, email FROM inventory.customers ORDER BY id")
    return [{"id": i, "first_name": f, "email": e} for i, f, e in rows]


def by_id(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: r["id"])


def driver(bootstrap: str, out: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as f:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / "inventory_pipeline.py"), "--bootstrap-server",
             bootstrap, "--out", str(out), "--follow"],
            stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip


def test_cdc_to_parquet_equals_the_database(
    spark: Any, kafka: Node, pg: Postgres, tmp_path: Path
) -> None:
    w = Worker(tmp_path / "worker", kafka.bootstrap, group="pipeline")
    w.start()
    out = tmp_path / "out"
    try:
        cfg = pg.connector_config(**{"table.include.list": "inventory.*"})
        r = w.call("POST", "/connectors", {"name": "inventory-connector", "config": cfg})
        assert r.status_code == 201, r.text
        w.wait_state("inventory-connector", "RUNNING", tasks=1)

        # the snapshot, applied by a job run to the end of what there is
        wait_until(lambda: pipeline.StateStore(out).current() >= 0 or _run_once(spark, kafka, out), 120,  # noqa: E501
                   what="the snapshot applied")  # fmt: skip
        wait_until(lambda: by_id(_current(spark, kafka, out)) == table_in_db(pg), 120,
                   what="the snapshot in Parquet")  # fmt: skip

        # a long-running driver, killed -9 while changes stream in; the broker restarted
        proc = driver(kafka.bootstrap, out, tmp_path / "driver.log")
        try:
            for n in range(30):
                pg.sql("UPDATE inventory.customers SET email = %s WHERE id %% 30 = %s", f"u{n}", n)
                pg.sql("DELETE FROM inventory.customers WHERE id = %s", 300 - n)
                pg.sql("INSERT INTO inventory.customers VALUES (%s, %s, NULL)", 1000 + n, f"new{n}")
                if n == 10:
                    time.sleep(3)
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    proc = driver(kafka.bootstrap, out, tmp_path / "driver.log")
                if n == 20:
                    kafka.stop()
                    kafka.start()
            time.sleep(3)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        wait_until(lambda: by_id(_current(spark, kafka, out)) == table_in_db(pg), 180,
                   what="the Parquet table equal to the database's")  # fmt: skip
    finally:
        w.stop()


def _run_once(spark: Any, kafka: Node, out: Path) -> bool:
    q = pipeline.start_job(spark, kafka.bootstrap, out, "dbserver1")
    q.awaitTermination(120)
    assert q.exception() is None
    return pipeline.StateStore(out).current() >= 0


def _current(spark: Any, kafka: Node, out: Path) -> list[dict[str, Any]]:
    _run_once(spark, kafka, out)
    return pipeline.current_rows(spark, out, "customers")
