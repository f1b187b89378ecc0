"""Change data capture from a real PostgreSQL (Debian's package, started here) through the
worker into keeperless: Debezium's topics, keys and envelope; snapshot then streaming of
inserts, updates, deletes and a truncate; restarts that resume from the stored LSN; a
broker killed -9 mid-stream; exactly-once with a worker killed -9; the slot advanced only
for written changes; heartbeats; bad input answered with the reason."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.connect.postgres import Postgres
from tests.connect.worker import Worker
from tests.integration.cluster import Node, wait_until
from tests.integration.conftest import running

TOPIC = "dbserver1.inventory.customers"


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    p = Postgres()
    p.start()
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture
def db(pg: Postgres, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh database per test, with Debezium's tutorial table."""
    name = "t_" + request.node.name.replace("[", "_").replace("]", "").lower()[:40]
    pg.sql(f"DROP DATABASE IF EXISTS {name}")
    pg.sql(f"CREATE DATABASE {name}")
    pg.sql("CREATE SCHEMA inventory", db=name)
    pg.sql("CREATE TABLE inventory.customers (id serial PRIMARY KEY, first_name text NOT NULL, "
           "email text, balance numeric(10,2))", db=name)  # fmt: skip
    yield name
    for (slot,) in pg.sql("SELECT slot_name FROM pg_replication_slots WHERE database = %s", name):
        pg.sql("SELECT pg_drop_replication_slot(%s)", slot)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    yield from running(Node(tmp_path / "node"))


def events(bootstrap: str, topic: str = TOPIC) -> list[tuple[Any, Any]]:
    """(key payload, value payload) of every record, tombstones as (key, None)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdc-check",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})  # fmt: skip
    try:
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None:
            return []
        end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        c.assign([TopicPartition(topic, 0, 0)])
        out = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for m in c.consume(1000, 0.3):
                if m.error() is None:
                    key = json.loads(m.key())["payload"] if m.key() else None
                    value = json.loads(m.value())["payload"] if m.value() else None
                    out.append((key, value))
            if c.position([TopicPartition(topic, 0)])[0].offset >= end:
                break
        return out
    finally:
        c.close()


def changes(bootstrap: str, topic: str = TOPIC) -> list[tuple[str, int, Any]]:
    """(op, id, after) of every change event (tombstones left out)."""
    return [(v["op"], (k or {}).get("id"), v["after"]) for k, v in events(bootstrap, topic)
            if v is not None]  # fmt: skip


def flushed_lsn(pg: Postgres, db: str) -> int:
    rows = pg.sql(
        "SELECT confirmed_flush_lsn - '0/0' FROM pg_replication_slots WHERE database = %s", db
    )
    return int(rows[0][0]) if rows and rows[0][0] is not None else 0


def start_connector(w: Worker, pg: Postgres, db: str, **more: str) -> None:
    cfg = pg.connector_config(**{"database.dbname": db, "table.include.list": "inventory.*",
                                 **more})  # fmt: skip
    r = w.call("POST", "/connectors", {"name": "inventory-connector", "config": cfg})
    assert r.status_code == 201, r.text
    w.wait_state("inventory-connector", "RUNNING", tasks=1)


def test_snapshot_then_streaming_in_debeziums_format(
    pg: Postgres, db: str, node: Node, tmp_path: Path
) -> None:
    pg.sql("INSERT INTO inventory.customers (first_name, email, balance) VALUES "
           "('Sally', 's@x', 12.50), ('George', 'g@x', NULL)", db=db)  # fmt: skip
    w = Worker(tmp_path / "w", node.bootstrap, group="cdc1")
    w.start()
    try:
        start_connector(w, pg, db, **{"skipped.operations": "none"})
        wait_until(lambda: len(changes(node.bootstrap)) == 2, 60, what="the snapshot")
        pg.sql("INSERT INTO inventory.customers (first_name) VALUES ('Edward')", db=db)
        pg.sql("UPDATE inventory.customers SET email = 'new@x' WHERE id = 1", db=db)
        pg.sql("DELETE FROM inventory.customers WHERE id = 2", db=db)
        pg.sql("TRUNCATE inventory.customers", db=db)
        wait_until(lambda: len(events(node.bootstrap)) == 7, 60,
                   what=f"every change: {events(node.bootstrap)}")  # fmt: skip
        evs = events(node.bootstrap)
        ops = [(v["op"] if v else "tombstone", (k or {}).get("id")) for k, v in evs]
        assert ops == [("r", 1), ("r", 2), ("c", 3), ("u", 1), ("d", 2), ("tombstone", 2),
                       ("t", None)]  # fmt: skip
        snap1, snap2, create, update, delete, _tomb, trunc = (v for _, v in evs)
        assert snap1["after"] == {"id": 1, "first_name": "Sally", "email": "s@x", "balance": "BOI="}
        assert snap1["source"]["snapshot"] == "true"
        assert snap2["source"]["snapshot"] == "last"
        assert create["source"]["snapshot"] == "false"
        assert update["before"] is None  # REPLICA IDENTITY DEFAULT, key unchanged
        assert update["after"]["email"] == "new@x"
        assert delete["before"]["id"] == 2
        assert delete["after"] is None
        assert trunc["before"] is None
        assert trunc["after"] is None
        src = create["source"]
        assert (src["connector"], src["name"], src["db"], src["schema"], src["table"]) == (
            "postgresql", "dbserver1", db, "inventory", "customers")  # fmt: skip
        assert src["lsn"] > 0
        assert src["txId"] > 0
        assert src["ts_ms"] > 0
        assert create["ts_ms"] > 0
        assert update["source"]["lsn"] > create["source"]["lsn"]
        # the schema names a Debezium consumer looks for
        c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "s"})
        c.assign([TopicPartition(TOPIC, 0, 2)])
        m = next(m for m in c.consume(10, 10) if m.error() is None)
        c.close()
        schema = json.loads(m.value())["schema"]
        assert schema["name"] == "dbserver1.inventory.customers.Envelope"
        fields = {f["field"]: f for f in schema["fields"]}
        assert fields["after"]["name"] == "dbserver1.inventory.customers.Value"
        assert fields["source"]["name"] == "io.debezium.connector.postgresql.Source"
        by = {f["field"]: f for f in fields["after"]["fields"]}
        assert by["balance"]["name"] == "org.apache.kafka.connect.data.Decimal"
        assert by["balance"]["parameters"]["scale"] == "2"
        assert by["first_name"]["optional"] is False
        assert json.loads(m.key())["schema"]["name"] == "dbserver1.inventory.customers.Key"
        # the stored offset is the slot's position (Debezium's keys)
        offsets = w.call("GET", "/connectors/inventory-connector/offsets").json()["offsets"]
        assert offsets[0]["partition"] == {"server": "dbserver1"}
        assert offsets[0]["offset"]["lsn"] == trunc["source"]["lsn"]
    finally:
        w.stop()


def test_restart_resumes_from_the_stored_lsn_without_gap_or_duplicate(
    pg: Postgres, db: str, node: Node, tmp_path: Path
) -> None:
    w = Worker(tmp_path / "w", node.bootstrap, group="cdc2")
    w.start()
    try:
        start_connector(w, pg, db)
        for i in range(50):
            pg.sql("INSERT INTO inventory.customers (first_name) VALUES (%s)", f"a{i}", db=db)
        wait_until(lambda: len(changes(node.bootstrap)) == 50, 60, what="50 inserts")
        w.stop()
        # written while no worker runs, by COPY: 50 rows under one LSN, none to be skipped
        pg.copy("inventory.customers", "first_name", [f"b{i}" for i in range(50)], db=db)
        w.start()
        for i in range(50):
            pg.sql("INSERT INTO inventory.customers (first_name) VALUES (%s)", f"c{i}", db=db)
        wait_until(lambda: len(changes(node.bootstrap)) >= 150, 60, what="150 inserts")
        got = changes(node.bootstrap)
        assert [op for op, _, _ in got] == ["c"] * 150
        assert [i for _, i, _ in got] == list(range(1, 151))  # no gap, no duplicate, in order
    finally:
        w.stop()


def test_broker_killed_mid_stream_loses_nothing_and_the_slot_waits(
    pg: Postgres, db: str, node: Node, tmp_path: Path
) -> None:
    w = Worker(tmp_path / "w", node.bootstrap, group="cdc3")
    w.start()
    try:
        start_connector(w, pg, db)
        pg.sql(
            "INSERT INTO inventory.customers (first_name) SELECT 'x' || g FROM generate_series(1, 100) g",  # noqa: E501
            db=db,
        )
        wait_until(lambda: len(changes(node.bootstrap)) == 100, 60, what="100 inserts")
        wait_until(lambda: flushed_lsn(pg, db) > 0, 30, what="the slot acknowledged")
        node.kill9()
        before = flushed_lsn(pg, db)
        pg.sql(
            "INSERT INTO inventory.customers (first_name) SELECT 'y' || g FROM generate_series(1, 100) g",  # noqa: E501
            db=db,
        )
        time.sleep(2)  # let the worker try (and fail) to write: the slot must not move
        assert flushed_lsn(pg, db) == before, (
            "PostgreSQL was told changes Kafka never acknowledged are done"
        )
        node.start()
        wait_until(lambda: len({i for _, i, _ in changes(node.bootstrap)}) == 200, 120,
                   what="all 200 inserts after the broker came back")  # fmt: skip
        ids = [i for _, i, _ in changes(node.bootstrap)]
        assert sorted(set(ids)) == list(range(1, 201))
        wait_until(lambda: flushed_lsn(pg, db) > before, 60, what="the slot advanced again")
    finally:
        w.stop()


def test_exactly_once_worker_killed_mid_stream(
    pg: Postgres, db: str, node: Node, tmp_path: Path
) -> None:
    w = Worker(tmp_path / "w", node.bootstrap, group="cdc4",
               extra={"exactly.once.source.support": "enabled"})  # fmt: skip
    w.start()
    try:
        start_connector(w, pg, db, **{"max.batch.size": "100"})
        for n in range(20):
            # COPY: each batch of 100 rows shares one LSN, and a restart lands inside them
            pg.copy("inventory.customers", "first_name", [f"z{n}-{g}" for g in range(100)], db=db)
            if n == 8:
                w.kill9()
                w.start()
        wait_until(lambda: len(changes(node.bootstrap)) >= 2000, 120, what="2000 inserts")
        ids = [i for _, i, _ in changes(node.bootstrap)]
        assert ids == list(range(1, 2001)), "a change lost, doubled or out of order"
    finally:
        w.stop()


def test_heartbeats_let_a_quiet_table_release_wal(
    pg: Postgres, db: str, node: Node, tmp_path: Path
) -> None:
    pg.sql("CREATE TABLE public.busy (n int)", db=db)
    w = Worker(tmp_path / "w", node.bootstrap, group="cdc5")
    w.start()
    try:
        start_connector(w, pg, db, **{"heartbeat.interval.ms": "300"})
        start = flushed_lsn(pg, db)
        pg.sql("INSERT INTO public.busy SELECT g FROM generate_series(1, 1000) g", db=db)
        (now,) = pg.sql("SELECT pg_current_wal_lsn() - '0/0'", db=db)[0]
        wait_until(
            lambda: flushed_lsn(pg, db) >= int(now),
            60,
            what=f"the slot past the uncaptured table's WAL ({flushed_lsn(pg, db)} < {now}, from {start})",  # noqa: E501
        )
        beats = events(node.bootstrap, "__debezium-heartbeat.dbserver1")
        assert beats
        assert beats[0][0] == {"serverName": "dbserver1"}
        assert changes(node.bootstrap) == []  # nothing of the busy table
    finally:
        w.stop()


def test_bad_input_is_named(pg: Postgres, db: str, node: Node, tmp_path: Path) -> None:
    w = Worker(tmp_path / "w", node.bootstrap, group="cdc6")
    w.start()
    try:

        def create(name: str, **more: str) -> Any:
            cfg = pg.connector_config(**{"database.dbname": db, **more})
            return w.call("POST", "/connectors", {"name": name, "config": cfg})

        r = create("unreachable", **{"database.port": "1"})
        assert r.status_code == 400
        assert "database.hostname: Error while validating connector config" in r.json()["message"]
        r = create("nouser", **{"database.user": "nobody"})
        assert r.status_code == 400
        assert 'role "nobody" does not exist' in r.json()["message"]
        r = create("mode", **{"snapshot.mode": "sometimes"})
        assert r.status_code == 400
        assert "The 'snapshot.mode' value 'sometimes' is invalid" in r.json()["message"]
        r = create("plugin", **{"plugin.name": "decoderbufs"})
        assert r.status_code == 400
        assert "pgoutput" in r.json()["message"]
        r = create("nopub", **{"publication.name": "missing_pub",
                               "publication.autocreate.mode": "disabled", "slot.name": "s_nopub"})  # fmt: skip  # noqa: E501
        assert r.status_code == 201
        wait_until(lambda: w.status("nopub").get("tasks", [{}])[0].get("state") == "FAILED", 60,
                   what=f"the task FAILED: {w.status('nopub')}")  # fmt: skip
        trace = w.status("nopub")["tasks"][0]["trace"]
        assert "Publication 'missing_pub' does not exist" in trace
        # the worker still runs a good connector beside it
        start_connector(w, pg, db)
        pg.sql("INSERT INTO inventory.customers (first_name) VALUES ('ok')", db=db)
        wait_until(
            lambda: len(changes(node.bootstrap)) == 1, 60, what="the good connector's change"
        )
    finally:
        w.stop()


def test_transaction_metadata(pg: Postgres, db: str, node: Node, tmp_path: Path) -> None:
    w = Worker(tmp_path / "w", node.bootstrap, group="cdc7")
    w.start()
    try:
        start_connector(w, pg, db, **{"provide.transaction.metadata": "true"})
        conn = pg.connect(db)
        conn.autocommit = False
        with conn.cursor() as cur:
            cur.execute("INSERT INTO inventory.customers (first_name) VALUES ('a'), ('b')")
            cur.execute("UPDATE inventory.customers SET email = 'x' WHERE first_name = 'a'")
            cur.execute("SELECT txid_current()")
            (xid,) = cur.fetchone()
        conn.commit()
        conn.close()
        wait_until(lambda: len(events(node.bootstrap, "dbserver1.transaction")) == 2, 60,
                   what="BEGIN and END")  # fmt: skip
        (k1, begin), (k2, end) = events(node.bootstrap, "dbserver1.transaction")
        assert begin["status"] == "BEGIN"
        assert end["status"] == "END"
        assert k1 == k2 == {"id": begin["id"]}
        assert begin["id"].startswith(f"{xid}:")
        assert end["event_count"] == 3
        assert end["data_collections"] == [
            {"data_collection": "inventory.customers", "event_count": 3}
        ]
        blocks = [v["transaction"] for _, v in events(node.bootstrap) if v]
        assert [b["total_order"] for b in blocks] == [1, 2, 3]
        assert {b["id"] for b in blocks} == {begin["id"]}
    finally:
        w.stop()


def test_primary_key_update_is_a_delete_and_a_create(
    pg: Postgres, db: str, node: Node, tmp_path: Path
) -> None:
    """As Debezium: the old key is deleted (with its tombstone), the new key created, so
    key-based consumers and compaction drop the old row."""
    pg.sql("INSERT INTO inventory.customers (id, first_name) VALUES (3, 'c')", db=db)
    w = Worker(tmp_path / "w", node.bootstrap, group="cdc8")
    w.start()
    try:
        start_connector(w, pg, db)
        wait_until(lambda: len(events(node.bootstrap)) == 1, 60, what="the snapshot")
        pg.sql("UPDATE inventory.customers SET id = 10 WHERE id = 3", db=db)
        wait_until(lambda: len(events(node.bootstrap)) == 4, 60,
                   what=f"delete, tombstone, create: {events(node.bootstrap)}")  # fmt: skip
        got = [((k or {}).get("id"), v["op"] if v else None) for k, v in events(node.bootstrap)]
        assert got == [(3, "r"), (3, "d"), (3, None), (10, "c")]
        c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "hdr"})
        c.assign([TopicPartition(TOPIC, 0, 1)])
        msgs = [m for m in c.consume(10, 10) if m.error() is None]
        c.close()
        assert dict(msgs[0].headers() or [])["__debezium.newkey"] == b'{"id":10}'
        assert dict(msgs[2].headers() or [])["__debezium.oldkey"] == b'{"id":3}'
    finally:
        w.stop()


def test_database_restart_mid_stream_is_ridden_out(
    pg: Postgres, db: str, node: Node, tmp_path: Path
) -> None:
    w = Worker(tmp_path / "w", node.bootstrap, group="cdc9")
    w.start()
    try:
        start_connector(w, pg, db)
        pg.sql(
            "INSERT INTO inventory.customers (first_name) "
            "SELECT 'p' || g FROM generate_series(1, 50) g",
            db=db,
        )
        wait_until(lambda: len(changes(node.bootstrap)) == 50, 60, what="50 inserts")
        pg.restart()
        pg.sql(
            "INSERT INTO inventory.customers (first_name) "
            "SELECT 'q' || g FROM generate_series(1, 50) g",
            db=db,
        )
        wait_until(lambda: len({i for _, i, _ in changes(node.bootstrap)}) == 100, 90,
                   what=f"the later inserts: {w.status('inventory-connector')}")  # fmt: skip
        assert w.status("inventory-connector")["tasks"][0]["state"] == "RUNNING"
        ids = [i for _, i, _ in changes(node.bootstrap)]
        assert ids == list(range(1, 101)), "a change lost or doubled across the restart"
    finally:
        w.stop()
