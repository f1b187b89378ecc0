"""The PostgreSQL change-data-capture source connector, under Debezium's class name
``io.debezium.connector.postgresql.PostgresConnector`` and with its main settings.

One task. At start it makes sure the publication exists (``publication.autocreate.mode``),
creates the replication slot if there is none (exporting its snapshot), takes the
initial consistent snapshot in a REPEATABLE READ transaction set to that snapshot
(``op: r``), then streams the slot's changes from where the snapshot ended (psycopg2's
logical replication connection, ``pgoutput``). The stored offset is the position of the
last record written: after a restart, changes at or before it are skipped. PostgreSQL is
told it may discard WAL (the slot's flush position) only in ``commit()``, once the
worker has stored the offsets of records Kafka acknowledged.
"""

from __future__ import annotations

import contextlib
import logging
import re
import select
import time
from collections.abc import Mapping
from typing import Any

import psycopg2
import psycopg2.extensions
import psycopg2.extras

from keeperless.connect.api import ConfigDef, ConfigKey, Connector, SourceTask, TaskContext
from keeperless.connect.connectors.postgres import pgoutput as pg
from keeperless.connect.connectors.postgres.events import (
    PG_EPOCH_US,
    Table,
    TableColumn,
    TableEvents,
    Transaction,
    heartbeat_record,
)
from keeperless.connect.data import SourceRecord

__all__ = ["PostgresConnector"]

log = logging.getLogger(__name__)

SNAPSHOT_MODES = ("initial", "always", "initial_only", "no_data", "never", "when_needed")


def _regexes(value: str) -> str | None:
    for part in value.split(","):
        try:
            re.compile(part.strip())
        except re.error as e:
            return f"'{part.strip()}' is not a valid regular expression: {e}"
    return None


def _snapshot_mode(value: str) -> str | None:
    if value.strip().lower() not in SNAPSHOT_MODES:
        return ("The 'snapshot.mode' value '" + value + "' is invalid: Value must be one of "
                "always, initial, initial_only, no_data, when_needed")  # fmt: skip
    return None


def _plugin(value: str) -> str | None:
    if value.strip().lower() != "pgoutput":
        return "only the pgoutput logical decoding plugin is supported (plugin.name=pgoutput)"
    return None


CONFIG = ConfigDef((
    ConfigKey("database.hostname", required=True, importance="HIGH", group="Connection"),
    ConfigKey("database.port", "INT", "5432", importance="HIGH", group="Connection"),
    ConfigKey("database.user", required=True, importance="HIGH", group="Connection"),
    ConfigKey("database.password", "PASSWORD", None, importance="HIGH", group="Connection"),
    ConfigKey("database.dbname", required=True, importance="HIGH", group="Connection"),
    ConfigKey("topic.prefix", required=True, importance="HIGH", group="Connector",
              documentation="Topic prefix that identifies this database server: every "
                            "topic is <topic.prefix>.<schema>.<table>"),
    ConfigKey("table.include.list", "LIST", None, importance="HIGH", group="Filters",
              check=_regexes),
    ConfigKey("table.exclude.list", "LIST", None, importance="MEDIUM", group="Filters",
              check=_regexes),
    # Debezium's default is decoderbufs, a server extension; only pgoutput (built into
    # PostgreSQL, what the designing document configures) is spoken here, so it is the default
    ConfigKey("plugin.name", "STRING", "pgoutput", importance="MEDIUM", group="Connection",
              check=_plugin),
    ConfigKey("slot.name", "STRING", "debezium", importance="MEDIUM", group="Connection"),
    ConfigKey("slot.drop.on.stop", "BOOLEAN", "false", importance="MEDIUM", group="Connection"),
    ConfigKey("publication.name", "STRING", "dbz_publication", importance="LOW",
              group="Connection"),
    ConfigKey("publication.autocreate.mode", "STRING", "all_tables", importance="LOW",
              group="Connection", choices=("all_tables", "disabled", "filtered")),
    ConfigKey("snapshot.mode", "STRING", "initial", importance="LOW", group="Connector",
              check=_snapshot_mode),
    ConfigKey("snapshot.fetch.size", "INT", "10240", importance="MEDIUM", group="Connector"),
    ConfigKey("max.batch.size", "INT", "2048", importance="MEDIUM", group="Connector"),
    ConfigKey("poll.interval.ms", "INT", "500", importance="MEDIUM", group="Connector"),
    ConfigKey("tombstones.on.delete", "BOOLEAN", "true", importance="MEDIUM", group="Events"),
    ConfigKey("skipped.operations", "LIST", "t", importance="LOW", group="Events"),
    ConfigKey("decimal.handling.mode", "STRING", "precise", importance="MEDIUM", group="Events",
              choices=("precise", "double", "string")),
    ConfigKey("provide.transaction.metadata", "BOOLEAN", "false", importance="LOW",
              group="Events"),
    ConfigKey("heartbeat.interval.ms", "INT", "0", importance="MEDIUM", group="Advanced"),
    ConfigKey("heartbeat.topics.prefix", "STRING", "__debezium-heartbeat", importance="LOW",
              group="Advanced"),
    ConfigKey("heartbeat.action.query", "STRING", None, importance="MEDIUM", group="Advanced"),
))  # fmt: skip


def _connect(cfg: Mapping[str, Any], **more: Any) -> Any:
    return psycopg2.connect(
        host=cfg["database.hostname"], port=int(cfg["database.port"]),
        user=cfg["database.user"], password=cfg.get("database.password") or None,
        dbname=cfg["database.dbname"], connect_timeout=10,
        options="-c timezone=UTC", application_name="keeperless-cdc", **more,
    )  # fmt: skip


class PostgresConnector(Connector):
    kind = "source"
    class_name = "io.debezium.connector.postgresql.PostgresConnector"
    version = "0.1.0-keeperless"

    @classmethod
    def config_def(cls) -> ConfigDef:
        return CONFIG

    @classmethod
    def validate(cls, config: Mapping[str, str]) -> list[dict[str, Any]]:
        """Debezium's validation: the settings, then a connection to the database (its
        error reported on database.hostname) and wal_level=logical."""
        results = CONFIG.validate(config)
        if any(r["value"]["errors"] for r in results):
            return results
        host = next(r for r in results if r["value"]["name"] == "database.hostname")
        cfg = CONFIG.parse(config)
        try:
            conn = _connect(cfg)
            try:
                with conn.cursor() as cur:
                    cur.execute("SHOW wal_level")
                    (level,) = cur.fetchone()
                if level != "logical":
                    host["value"]["errors"].append(
                        f"Postgres server wal_level property must be 'logical' but is: '{level}'"
                    )
            finally:
                conn.close()
        except psycopg2.Error as e:
            host["value"]["errors"].append(
                "Error while validating connector config: " + " ".join(str(e).split())
            )
        return results

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.props)]  # one replication slot, one task (as Debezium's)


class PostgresTask(SourceTask):
    def start(self, props: Mapping[str, str], context: TaskContext) -> None:
        cfg = CONFIG.parse(props)
        self.cfg = cfg
        self.prefix = str(cfg["topic.prefix"])
        self.db = str(cfg["database.dbname"])
        self.partition = {"server": self.prefix}
        self.slot = str(cfg["slot.name"])
        self.publication = str(cfg["publication.name"])
        self.batch = int(cfg["max.batch.size"] or 2048)
        self.poll_s = int(cfg["poll.interval.ms"] or 500) / 1000
        self.tombstones = cfg["tombstones.on.delete"] == "true"
        self.skipped = {s.strip() for s in (cfg["skipped.operations"] or "").split(",")}
        self.decimal = str(cfg["decimal.handling.mode"])
        self.include = [
            re.compile(p.strip()) for p in (cfg["table.include.list"] or "").split(",") if p.strip()
        ]
        self.exclude = [
            re.compile(p.strip()) for p in (cfg["table.exclude.list"] or "").split(",") if p.strip()
        ]
        self.heartbeat_s = int(cfg["heartbeat.interval.ms"] or 0) / 1000
        self.heartbeat_topic = f"{cfg['heartbeat.topics.prefix']}.{self.prefix}"
        self.next_heartbeat = time.monotonic() + self.heartbeat_s
        self.stored = context.offset(self.partition)
        self.tables: dict[int, TableEvents] = {}
        self.by_name: dict[tuple[str, str], TableEvents] = {}
        self.in_txn: pg.Begin | None = None
        self.provide_txn = cfg["provide.transaction.metadata"] == "true"
        self.txn_meta: Transaction | None = None  # once the transaction has a change event
        self.safe_lsn = 0  # every change before it is stored: PostgreSQL may discard it
        self.flushed = 0
        # a change's position: its transaction's commit LSN, its own LSN, and its number in
        # the transaction (the rows of one COPY share one LSN); what is at or before the
        # last position returned or stored is skipped when PostgreSQL sends it again
        st = self.stored if self.stored and not self.stored.get("snapshot") else {}
        self.last_pos = (int(st.get("lsn_commit", 0)), int(st.get("lsn_proc", 0)),
                         int(st.get("event_serial_no", 0)))  # fmt: skip
        self.txn_seq = 0
        self.done = False
        self.streaming = False
        self.broken: psycopg2.Error | None = None  # the connection failed: reconnect
        self.retry_s = 0.5
        self.conn = _connect(cfg)
        self.conn.autocommit = True
        self._publication()
        self.repl = _connect(cfg, connection_factory=psycopg2.extras.LogicalReplicationConnection)
        self.cur = self.repl.cursor()
        self.snapshot: _Snapshot | None = None
        self._plan()

    # --- start: publication, slot, snapshot plan ---------------------------------------

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cur:
            cur.execute(sql, args or None)  # None: a '%' in the text is not a placeholder
            return list(cur.fetchall()) if cur.description else []

    def _captured(self, schema: str, table: str) -> bool:
        name = f"{schema}.{table}"
        if self.include and not any(p.fullmatch(name) for p in self.include):
            return False
        return not any(p.fullmatch(name) for p in self.exclude)

    def _tables(self) -> list[tuple[str, str]]:
        rows = self._query(
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "  # noqa: E501
            "WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') "  # noqa: E501
            "AND n.nspname NOT LIKE 'pg_toast%' ORDER BY 1, 2"
        )
        return [(s, t) for s, t in rows if self._captured(s, t)]

    def _publication(self) -> None:
        mode = str(self.cfg["publication.autocreate.mode"])
        if self._query("SELECT 1 FROM pg_publication WHERE pubname = %s", (self.publication,)):
            return
        if mode == "disabled":
            raise RuntimeError(
                f"Publication '{self.publication}' does not exist and "
                "'publication.autocreate.mode' is set to 'disabled', either set "
                f"'publication.autocreate.mode' to another mode or create the publication "
                "manually in the database"
            )
        q = psycopg2.extensions.quote_ident
        if mode == "all_tables":
            self._query(f"CREATE PUBLICATION {q(self.publication, self.conn)} FOR ALL TABLES")
        else:
            names = ", ".join(f"{q(s, self.conn)}.{q(t, self.conn)}" for s, t in self._tables())
            if not names:
                raise RuntimeError("No table matches table.include.list: nothing to publish")
            self._query(f"CREATE PUBLICATION {q(self.publication, self.conn)} FOR TABLE {names}")
        log.info("created publication %s (%s)", self.publication, mode)

    def _plan(self) -> None:
        mode = str(self.cfg["snapshot.mode"]).lower()
        mode = "no_data" if mode == "never" else mode
        slot = self._query(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s",
            (self.slot,),
        )
        stored = self.stored
        incomplete = bool(
            stored and stored.get("snapshot") and not stored.get("last_snapshot_record")
        )
        if (
            not slot
            and stored
            and not stored.get("snapshot")
            and mode != "when_needed"
            and mode != "always"
        ):
            raise RuntimeError(
                f"Replication slot '{self.slot}' is missing, but the connector has stored offsets "
                f"(LSN {_lsn(int(stored.get('lsn', 0)))}): the changes since then are no longer "
                "available. Set snapshot.mode=when_needed to take a new snapshot, or reset the "
                "connector's offsets (DELETE /connectors/<name>/offsets while it is stopped)"
            )
        take = (
            mode == "always"
            or (mode in ("initial", "initial_only", "when_needed") and (stored is None or incomplete))  # noqa: E501
            or (mode == "when_needed" and not slot)
        )  # fmt: skip
        if mode == "initial_only" and stored is not None and not incomplete:
            self.done = True
            return
        exported = None
        if slot and take:
            # a snapshot is exact only from the point its slot starts: nothing was stored
            # since this slot was made (or a new snapshot is asked for), so it is made anew
            # with the snapshot exported, and streaming continues exactly where it ends
            self._query("SELECT pg_drop_replication_slot(%s)", (self.slot,))
            log.info("dropped replication slot %s to take a snapshot consistent with it", self.slot)
            slot = []
        if not slot:
            self.cur.execute(
                f"CREATE_REPLICATION_SLOT {psycopg2.extensions.quote_ident(self.slot, self.conn)} "
                f"LOGICAL pgoutput {'EXPORT_SNAPSHOT' if take else 'NOEXPORT_SNAPSHOT'}"
            )
            _name, consistent, exported, _plugin = self.cur.fetchone()
            log.info("created replication slot %s at %s", self.slot, consistent)
            start_lsn = _parse_lsn(consistent)
        else:
            start_lsn = _parse_lsn(slot[0][0]) if slot[0][0] else 0
        if take:
            self.snapshot = _Snapshot(self, exported, start_lsn)
            self.stream_after_snapshot = mode != "initial_only"

    # --- polling ------------------------------------------------------------------------

    def poll(self) -> list[SourceRecord] | None:
        if self.snapshot is not None:
            records, finished = self.snapshot.next(self.batch)
            if finished:
                self.snapshot = None
                self.done = not self.stream_after_snapshot
            return records
        if self.done:
            time.sleep(self.poll_s)
            return None
        if self.broken is not None and not self._reconnect():
            return None
        out: list[SourceRecord] = []
        try:
            self._stream(out)
        except psycopg2.Error as e:
            # the database restarted or the connection dropped: the records decoded so far
            # go out; PostgreSQL resends from the slot's flush position, and what was
            # already returned is skipped (Debezium retries such errors without limit)
            log.warning(
                "connection to PostgreSQL lost (%s); reconnecting", " ".join(str(e).split())
            )
            self.broken = e
            self.in_txn = self.txn_meta = None
            self.streaming = False
        if self.heartbeat_s and self.broken is None and time.monotonic() >= self.next_heartbeat \
                and self.in_txn is None:  # fmt: skip
            self.next_heartbeat = time.monotonic() + self.heartbeat_s
            if self.cfg["heartbeat.action.query"]:
                self._query(str(self.cfg["heartbeat.action.query"]))
            offset = {"lsn_proc": self.safe_lsn, "lsn_commit": self.safe_lsn, "lsn": self.safe_lsn,
                      "txId": None, "ts_usec": int(time.time() * 1e6)}  # fmt: skip
            out.append(heartbeat_record(self.heartbeat_topic, self.prefix, self.partition, offset))
        return out

    def _reconnect(self) -> bool:
        """One attempt (the worker's loop keeps calling poll, so a stop is seen)."""
        for conn in (self.repl, self.conn):
            with contextlib.suppress(psycopg2.Error):
                conn.close()
        try:
            self.conn = _connect(self.cfg)
            self.conn.autocommit = True
            self.repl = _connect(
                self.cfg, connection_factory=psycopg2.extras.LogicalReplicationConnection
            )
            self.cur = self.repl.cursor()
        except psycopg2.Error:
            time.sleep(min(self.retry_s, 10.0))
            self.retry_s = min(self.retry_s * 2, 10.0)
            return False
        log.info("connection to PostgreSQL restored; streaming from the slot again")
        self.broken = None
        self.retry_s = 0.5
        return True

    def _stream(self, out: list[SourceRecord]) -> None:
        if not self.streaming:
            self.cur.start_replication(
                slot_name=self.slot, decode=False, status_interval=10,
                options={"proto_version": "1", "publication_names": self.publication},
            )  # fmt: skip
            self.streaming = True
        deadline = time.monotonic() + self.poll_s
        while len(out) < self.batch:
            msg = self.cur.read_message()
            if msg is None:
                if self.in_txn is None:
                    self.safe_lsn = max(self.safe_lsn, self.cur.wal_end)
                left = deadline - time.monotonic()
                if left <= 0 or (out and self.in_txn is None):
                    break
                select.select([self.cur], [], [], min(left, 0.1))
                continue
            self._message(msg.payload, msg.data_start, out)

    def columns(self, relation: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """A table's columns from the catalog, in order: (name, type oid, typmod, not
        null, in the primary key); ``relation`` is the SQL naming its oid."""
        return self._query(
            "SELECT a.attname, a.atttypid, a.atttypmod, a.attnotnull, COALESCE((SELECT true "
            "FROM pg_index i WHERE i.indrelid = a.attrelid AND i.indisprimary AND "
            f"a.attnum = ANY(i.indkey)), false) FROM pg_attribute a WHERE a.attrelid = {relation} "
            "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum", args,
        )  # fmt: skip

    def _table(self, rel: pg.Relation) -> TableEvents:
        rows = self.columns("%s", (rel.relid,))
        info = {name: (notnull, pk) for name, _oid, _mod, notnull, pk in rows}
        cols = tuple(TableColumn(c.name, c.type_oid, c.typmod, not info.get(c.name, (False, False))[0])  # noqa: E501
                     for c in rel.columns)  # fmt: skip
        key = tuple(c.name for c in rel.columns if info.get(c.name, (False, False))[1])
        return TableEvents(
            self.prefix, self.db, Table(rel.schema, rel.table, cols, key), self.decimal
        )

    def _message(self, payload: bytes, lsn: int, out: list[SourceRecord]) -> None:
        m = pg.decode(payload)
        if isinstance(m, pg.Begin):
            self.in_txn = m
            self.txn_seq = 0
            return
        if isinstance(m, pg.Commit):
            txn, meta = self.in_txn, self.txn_meta
            self.in_txn = self.txn_meta = None
            self.safe_lsn = max(self.safe_lsn, m.end_lsn)
            if meta is not None and txn is not None:
                out.append(meta.end(self.partition, self._offset(txn, lsn, self.txn_seq + 1)))
            return
        if isinstance(m, pg.Relation):
            if self._captured(m.schema, m.table):
                self.tables[m.relid] = self._table(m)
            else:
                self.tables.pop(m.relid, None)
            return
        txn = self.in_txn
        if m is None or txn is None:
            return
        self.txn_seq += 1
        pos = (txn.final_lsn, lsn, self.txn_seq)
        if pos <= self.last_pos:
            return  # returned (or stored before a restart) already
        self.last_pos = pos
        ts_us = txn.commit_ts_us + PG_EPOCH_US
        offset = self._offset(txn, lsn, self.txn_seq)
        seq = [str(txn.final_lsn), str(lsn)]
        if isinstance(m, pg.Truncate):
            if "t" in self.skipped:
                return
            for relid in m.relids:
                te = self.tables.get(relid)
                if te is not None:
                    src = te.source(
                        ts_us=ts_us, snapshot="false", tx_id=txn.xid, lsn=lsn, sequence=seq
                    )
                    out.append(te.truncate(src, self.partition, offset))
            return
        te = self.tables.get(m.relid)
        if te is None:
            return
        src = te.source(ts_us=ts_us, snapshot="false", tx_id=txn.xid, lsn=lsn, sequence=seq)
        op = {pg.Insert: "c", pg.Update: "u", pg.Delete: "d"}.get(type(m))
        if op is None or op in self.skipped:
            return
        block = None
        if self.provide_txn:
            if self.txn_meta is None:
                self.txn_meta = Transaction(
                    self.prefix, f"{txn.xid}:{txn.final_lsn}", ts_us // 1000
                )
                out.append(self.txn_meta.begin(self.partition, offset))
            block = self.txn_meta.block(f"{te.table.schema}.{te.table.name}")
        if isinstance(m, pg.Insert):
            out += te.records(
                "c", None, te.row(m.new), src, self.partition, offset, self.tombstones, block
            )
        elif isinstance(m, pg.Update):
            # the old key only (REPLICA IDENTITY DEFAULT, key changed: the other columns
            # are null), the whole old row (FULL), or nothing (key unchanged)
            before = te.row(m.old) if m.old is not None else None
            after = te.row(m.new)
            assert after is not None
            if before is not None and te.table.key and te.key_of(before) != te.key_of(after):
                second = None
                if self.txn_meta is not None:
                    second = self.txn_meta.block(f"{te.table.schema}.{te.table.name}")
                out += te.key_change(before, after, src, self.partition, offset,
                                     self.tombstones, (block, second))  # fmt: skip
            else:
                out += te.records(
                    "u", before, after, src, self.partition, offset, self.tombstones, block
                )
        elif isinstance(m, pg.Delete):
            out += te.records(
                "d", te.row(m.old), None, src, self.partition, offset, self.tombstones, block
            )

    def _offset(self, txn: pg.Begin, lsn: int, seq: int) -> dict[str, Any]:
        """Debezium's offset keys (the change's LSN, its transaction's commit LSN and id),
        and the change's number in its transaction."""
        return {"lsn_proc": lsn, "lsn_commit": txn.final_lsn, "lsn": lsn, "txId": txn.xid,
                "ts_usec": txn.commit_ts_us + PG_EPOCH_US, "event_serial_no": seq}  # fmt: skip

    def commit(self) -> None:
        """Every record returned so far is in Kafka and its offset stored: PostgreSQL may
        discard the WAL before the last complete transaction (the slot advances)."""
        if self.streaming and self.safe_lsn > self.flushed:
            # now, not at the next status interval: a task stopping after its last
            # commit closes the connection before that
            self.cur.send_feedback(flush_lsn=self.safe_lsn, write_lsn=self.safe_lsn, force=True)
            self.flushed = self.safe_lsn

    def stop(self) -> None:
        for conn in (getattr(self, "repl", None), getattr(self, "conn", None)):
            try:
                if conn is not None:
                    conn.close()
            except psycopg2.Error:
                pass
        if getattr(self, "snapshot", None) is not None:
            self.snapshot.close()  # type: ignore[union-attr]
        if getattr(self, "cfg", None) and self.cfg["slot.drop.on.stop"] == "true":
            try:
                conn = _connect(self.cfg)
                conn.autocommit = True
                with conn.cursor() as cur:
                    cur.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
                conn.close()
            except psycopg2.Error as e:
                log.warning("could not drop replication slot %s: %s", self.slot, e)


class _Snapshot:
    """The initial snapshot: every captured table read in one REPEATABLE READ transaction
    set to the slot's exported snapshot, so streaming starts exactly where it ends."""

    def __init__(self, task: PostgresTask, exported: str | None, lsn: int) -> None:
        self.task = task
        self.lsn = lsn
        self.conn = _connect(task.cfg)
        self.conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        with self.conn.cursor() as cur:
            if exported:
                cur.execute("SET TRANSACTION SNAPSHOT %s", (exported,))
            cur.execute(
                "SELECT txid_current_if_assigned(), (extract(epoch from now()) * 1000000)::bigint"
            )
            _, self.ts_us = cur.fetchone()
        self.pending = task._tables()
        self.ts_us = int(self.ts_us)
        self.cursor: Any = None
        self.events: TableEvents | None = None
        self.held: SourceRecord | None = None  # the last record, marked "last" at the end
        self.count = 0
        log.info("snapshot of %d tables at %s", len(self.pending), _lsn(lsn))

    def _open_next(self) -> bool:
        if not self.pending:
            return False
        schema, table = self.pending.pop(0)
        t = self.task
        rows = t.columns("(quote_ident(%s) || '.' || quote_ident(%s))::regclass", (schema, table))
        cols = tuple(TableColumn(n, oid, mod, not notnull) for n, oid, mod, notnull, _ in rows)
        key = tuple(n for n, _, _, _, pk in rows if pk)
        self.events = TableEvents(t.prefix, t.db, Table(schema, table, cols, key), t.decimal)
        q = psycopg2.extensions.quote_ident
        select_list = ", ".join(f"{q(c.name, self.conn)}::text" for c in cols)
        self.cursor = self.conn.cursor(name=f"snap_{self.count}")
        self.cursor.itersize = int(t.cfg["snapshot.fetch.size"] or 10240)
        self.cursor.execute(
            f"SELECT {select_list} FROM {q(schema, self.conn)}.{q(table, self.conn)}"
        )
        self.count += 1
        return True

    def next(self, limit: int) -> tuple[list[SourceRecord], bool]:
        out: list[SourceRecord] = []
        t = self.task
        while len(out) < limit:
            if self.cursor is None and not self._open_next():
                if self.held is not None:  # the very last snapshot record
                    self.held.value["source"]["snapshot"] = "last"
                    self.held.source_offset = dict(
                        self.held.source_offset, last_snapshot_record=True
                    )
                    out.append(self.held)
                    self.held = None
                self.close()
                log.info("snapshot completed")
                return out, True
            rows = self.cursor.fetchmany(limit - len(out))
            if not rows:
                self.cursor.close()
                self.cursor = None
                continue
            assert self.events is not None
            te = self.events
            for row in rows:
                src = te.source(ts_us=self.ts_us, snapshot="true", tx_id=None, lsn=self.lsn,
                                sequence=[None, str(self.lsn)])  # fmt: skip
                offset = {"lsn": self.lsn, "snapshot": True, "last_snapshot_record": False,
                          "ts_usec": self.ts_us}  # fmt: skip
                (rec,) = te.records("r", None, te.row(row), src, t.partition, offset, False)
                if self.held is not None:
                    out.append(self.held)
                self.held = rec
        return out, False

    def close(self) -> None:
        try:
            self.conn.rollback()
            self.conn.close()
        except psycopg2.Error:
            pass


def _parse_lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) + int(lo, 16)


def _lsn(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


PostgresConnector.task_class = PostgresTask
