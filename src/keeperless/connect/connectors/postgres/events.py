"""Debezium's change events for one table: topic ``<prefix>.<schema>.<table>``, a key
struct of the primary key's columns, and the envelope (``before``, ``after``,
``source``, ``transaction``, ``op``, ``ts_ms``/``ts_us``/``ts_ns``) with Debezium's schema
names, so consumers written for Debezium read them unchanged. Pure."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from keeperless.connect.connectors.postgres.pgoutput import UNCHANGED_TOAST
from keeperless.connect.connectors.postgres.types import ColumnType, column_type
from keeperless.connect.data import Schema, SourceRecord, struct_schema

__all__ = ["Table", "TableEvents", "heartbeat_record", "source_schema"]

VERSION = "0.1.0-keeperless"
PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970
UNAVAILABLE = "__debezium_unavailable_value"
_SNAPSHOT_ENUM = (
    "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"
)


def _opt(kind: str, **more: Any) -> Schema:
    return {"type": kind, "optional": True, **more}


def source_schema() -> Schema:
    return struct_schema("io.debezium.connector.postgresql.Source", [
        ("version", {"type": "string", "optional": False}),
        ("connector", {"type": "string", "optional": False}),
        ("name", {"type": "string", "optional": False}),
        ("ts_ms", {"type": "int64", "optional": False}),
        ("snapshot", _opt("string", name="io.debezium.data.Enum", version=1,
                          parameters={"allowed": _SNAPSHOT_ENUM}, default="false")),
        ("db", {"type": "string", "optional": False}),
        ("sequence", _opt("string")),
        ("ts_us", _opt("int64")),
        ("ts_ns", _opt("int64")),
        ("schema", {"type": "string", "optional": False}),
        ("table", {"type": "string", "optional": False}),
        ("txId", _opt("int64")),
        ("lsn", _opt("int64")),
        ("xmin", _opt("int64")),
    ])  # fmt: skip


_TRANSACTION = struct_schema("event.block", [
    ("id", {"type": "string", "optional": False}),
    ("total_order", {"type": "int64", "optional": False}),
    ("data_collection_order", {"type": "int64", "optional": False}),
], opt=True, version=1)  # fmt: skip


@dataclass(frozen=True, slots=True)
class TableColumn:
    name: str
    type_oid: int
    typmod: int
    optional: bool


@dataclass(slots=True)
class Table:
    """A captured table: its columns in order and its primary key."""

    schema: str
    name: str
    columns: tuple[TableColumn, ...]
    key: tuple[str, ...]


@dataclass(slots=True)
class TableEvents:
    """Builds one table's records."""

    prefix: str
    db: str
    table: Table
    decimal_mode: str = "precise"
    types: list[ColumnType] = field(init=False)
    topic: str = field(init=False)
    value_schema: Schema = field(init=False)
    key_schema: Schema | None = field(init=False)
    envelope: Schema = field(init=False)

    def __post_init__(self) -> None:
        t = self.table
        self.types = [column_type(c.type_oid, c.typmod, self.decimal_mode) for c in t.columns]
        base = f"{self.prefix}.{t.schema}.{t.name}"
        self.topic = base
        fields = [(c.name, dict(ct.schema, optional=c.optional))
                  for c, ct in zip(t.columns, self.types, strict=True)]  # fmt: skip
        self.value_schema = struct_schema(f"{base}.Value", fields, opt=True)
        by_name = dict(fields)
        self.key_schema = (
            struct_schema(f"{base}.Key", [(k, dict(by_name[k], optional=False)) for k in t.key])
            if t.key else None
        )  # fmt: skip
        self.envelope = struct_schema(f"{base}.Envelope", [
            ("before", self.value_schema),
            ("after", self.value_schema),
            ("source", source_schema()),
            ("transaction", _TRANSACTION),
            ("op", {"type": "string", "optional": False}),
            ("ts_ms", _opt("int64")),
            ("ts_us", _opt("int64")),
            ("ts_ns", _opt("int64")),
        ], version=2)  # fmt: skip

    def row(self, values: Sequence[Any] | None) -> dict[str, Any] | None:
        if values is None:
            return None
        out: dict[str, Any] = {}
        for c, ct, v in zip(self.table.columns, self.types, values, strict=False):
            if v is None:
                out[c.name] = None
            elif v is UNCHANGED_TOAST:
                out[c.name] = UNAVAILABLE if ct.schema["type"] == "string" else None
            else:
                out[c.name] = ct.convert(v)
        return out

    def key_of(self, row: dict[str, Any] | None) -> dict[str, Any] | None:
        if row is None or not self.table.key:
            return None
        return {k: row.get(k) for k in self.table.key}

    def source(self, *, ts_us: int, snapshot: str, tx_id: int | None, lsn: int | None,
               sequence: Sequence[str | None] | None) -> dict[str, Any]:  # fmt: skip
        return {
            "version": VERSION, "connector": "postgresql", "name": self.prefix,
            "ts_ms": ts_us // 1000, "snapshot": snapshot, "db": self.db,
            "sequence": json.dumps(list(sequence)) if sequence is not None else None,
            "ts_us": ts_us, "ts_ns": ts_us * 1000, "schema": self.table.schema,
            "table": self.table.name, "txId": tx_id, "lsn": lsn, "xmin": None,
        }  # fmt: skip

    def records(
        self, op: str, before: dict[str, Any] | None, after: dict[str, Any] | None,
        source: dict[str, Any], partition: dict[str, Any], offset: dict[str, Any],
        tombstones: bool, transaction: dict[str, Any] | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
    ) -> list[SourceRecord]:  # fmt: skip
        """The change event (and, after a delete, its tombstone)."""
        now_us = int(time.time() * 1_000_000)
        key = self.key_of(after if after is not None else before)
        value = {"before": before, "after": after, "source": source, "transaction": transaction,
                 "op": op, "ts_ms": now_us // 1000, "ts_us": now_us, "ts_ns": now_us * 1000}  # fmt: skip  # noqa: E501
        hs = list(headers or ())
        out = [SourceRecord(partition, offset, self.topic, self.key_schema, key, self.envelope,
                            value, timestamp=now_us // 1000, headers=hs)]  # fmt: skip
        if op == "d" and tombstones and key is not None:
            out.append(SourceRecord(partition, offset, self.topic, self.key_schema, key, None, None,
                                    timestamp=now_us // 1000, headers=hs))  # fmt: skip
        return out

    def key_change(
        self, before: dict[str, Any], after: dict[str, Any], source: dict[str, Any],
        partition: dict[str, Any], offset: dict[str, Any], tombstones: bool,
        blocks: tuple[dict[str, Any] | None, dict[str, Any] | None],
    ) -> list[SourceRecord]:  # fmt: skip
        """An update that changed the primary key, as Debezium emits it: a delete of the
        old key (and its tombstone) with header ``__debezium.newkey``, then a create of the
        new key with header ``__debezium.oldkey``; a key-based consumer or compaction
        drops the old row."""
        old = json.dumps(self.key_of(before), separators=(",", ":")).encode()
        new = json.dumps(self.key_of(after), separators=(",", ":")).encode()
        return self.records(
            "d", before, None, source, partition, offset, tombstones, blocks[0],
            [("__debezium.newkey", new)],
        ) + self.records(
            "c", None, after, source, partition, offset, tombstones, blocks[1],
            [("__debezium.oldkey", old)],
        )  # fmt: skip

    def truncate(self, source: dict[str, Any], partition: dict[str, Any],
                 offset: dict[str, Any]) -> SourceRecord:  # fmt: skip
        now_us = int(time.time() * 1_000_000)
        value = {"before": None, "after": None, "source": source, "transaction": None,
                 "op": "t", "ts_ms": now_us // 1000, "ts_us": now_us, "ts_ns": now_us * 1000}  # fmt: skip  # noqa: E501
        return SourceRecord(partition, offset, self.topic, None, None, self.envelope, value,
                            timestamp=now_us // 1000)  # fmt: skip


def heartbeat_record(topic: str, prefix: str, partition: dict[str, Any],
                     offset: dict[str, Any]) -> SourceRecord:  # fmt: skip
    key_schema = struct_schema("io.debezium.connector.common.ServerNameKey",
                               [("serverName", {"type": "string", "optional": False})])  # fmt: skip
    value_schema = struct_schema("io.debezium.connector.common.Heartbeat",
                                 [("ts_ms", {"type": "int64", "optional": False})])  # fmt: skip
    return SourceRecord(partition, offset, topic, key_schema, {"serverName": prefix},
                        value_schema, {"ts_ms": int(time.time() * 1000)})  # fmt: skip


_TXN_KEY = struct_schema("io.debezium.connector.common.TransactionMetadataKey",
                         [("id", {"type": "string", "optional": False})])  # fmt: skip
_TXN_VALUE = struct_schema("io.debezium.connector.common.TransactionMetadataValue", [
    ("status", {"type": "string", "optional": False}),
    ("id", {"type": "string", "optional": False}),
    ("event_count", _opt("int64")),
    ("data_collections", _opt("array", items=struct_schema(None, [
        ("data_collection", {"type": "string", "optional": False}),
        ("event_count", {"type": "int64", "optional": False}),
    ]))),
    ("ts_ms", {"type": "int64", "optional": False}),
], version=1)  # fmt: skip


@dataclass(slots=True)
class Transaction:
    """Debezium's transaction metadata (``provide.transaction.metadata``): BEGIN before a
    transaction's first change event, END after its last on ``<prefix>.transaction``, and
    each change event's ``transaction`` block."""

    prefix: str
    id: str
    ts_ms: int
    total: int = 0
    per_collection: dict[str, int] = field(default_factory=dict)

    @property
    def topic(self) -> str:
        return f"{self.prefix}.transaction"

    def _record(self, status: str, partition: dict[str, Any], offset: dict[str, Any],
                **more: Any) -> SourceRecord:  # fmt: skip
        value = {"status": status, "id": self.id, "event_count": None, "data_collections": None,
                 "ts_ms": self.ts_ms, **more}  # fmt: skip
        return SourceRecord(partition, offset, self.topic, _TXN_KEY, {"id": self.id}, _TXN_VALUE,
                            value)  # fmt: skip

    def begin(self, partition: dict[str, Any], offset: dict[str, Any]) -> SourceRecord:
        return self._record("BEGIN", partition, offset)

    def block(self, collection: str) -> dict[str, Any]:
        self.total += 1
        self.per_collection[collection] = self.per_collection.get(collection, 0) + 1
        return {"id": self.id, "total_order": self.total,
                "data_collection_order": self.per_collection[collection]}  # fmt: skip

    def end(self, partition: dict[str, Any], offset: dict[str, Any]) -> SourceRecord:
        collections = [{"data_collection": c, "event_count": n}
                       for c, n in self.per_collection.items()]  # fmt: skip
        return self._record("END", partition, offset, event_count=self.total,
                            data_collections=collections)  # fmt: skip
