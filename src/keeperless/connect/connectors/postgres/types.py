"""PostgreSQL column types as Debezium's PostgreSQL connector maps them to Connect
schemas (its defaults: ``decimal.handling.mode=precise``, ``time.precision.mode=adaptive``,
``binary.handling.mode=bytes``), and values converted from their text output (what
pgoutput sends, and what the snapshot selects with ``::text``)."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ColumnType", "column_type"]

_EPOCH = dt.date(1970, 1, 1)
_EPOCH_TS = dt.datetime(1970, 1, 1)
Schema = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ColumnType:
    schema: Schema  # without "optional"
    convert: Callable[[str], Any]


def _bool(s: str) -> bool:
    return s in ("t", "true")


def _bytea(s: str) -> bytes:
    if s.startswith("\\x"):
        return bytes.fromhex(s[2:])
    return s.encode()


def _date(s: str) -> int:
    return (dt.date.fromisoformat(s) - _EPOCH).days


def _timestamp_us(s: str) -> int:
    t = dt.datetime.fromisoformat(s)
    delta = t - _EPOCH_TS
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _zoned(s: str) -> str:
    t = dt.datetime.fromisoformat(s).astimezone(dt.UTC)
    return t.isoformat().replace("+00:00", "Z")


def _time_us(s: str) -> int:
    t = dt.time.fromisoformat(s.split("+")[0].split("-")[0])
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond


def _unscaled(value: decimal.Decimal, scale: int) -> bytes:
    n = int(value.scaleb(scale).to_integral_value())
    size = max(1, (n.bit_length() + 8) // 8)
    return n.to_bytes(size, "big", signed=True)


def _numeric(typmod: int, mode: str) -> ColumnType:
    if mode == "double":
        return ColumnType({"type": "double"}, lambda s: None if s == "NaN" else float(s))
    if mode == "string":
        return ColumnType({"type": "string"}, str)
    if typmod >= 4:
        precision, scale = ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0xFFFF
        schema = {
            "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
            "parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)},
        }  # fmt: skip
        return ColumnType(
            schema, lambda s: None if s == "NaN" else _unscaled(decimal.Decimal(s), scale)
        )

    def variable(s: str) -> Any:
        if s == "NaN":
            return None
        d = decimal.Decimal(s)
        scale = max(0, -int(d.as_tuple().exponent))
        return {"scale": scale, "value": _unscaled(d, scale)}

    schema = {
        "type": "struct", "name": "io.debezium.data.VariableScaleDecimal", "version": 1,
        "doc": "Variable scaled decimal",
        "fields": [{"field": "scale", "type": "int32", "optional": False},
                   {"field": "value", "type": "bytes", "optional": False}],
    }  # fmt: skip
    return ColumnType(schema, variable)


def _named(kind: str, name: str, convert: Callable[[str], Any]) -> ColumnType:
    return ColumnType({"type": kind, "name": name, "version": 1}, convert)


def _precision(typmod: int) -> int:
    return 6 if typmod < 0 else typmod


_SIMPLE: dict[int, ColumnType] = {
    16: ColumnType({"type": "boolean"}, _bool),
    21: ColumnType({"type": "int16"}, int),
    23: ColumnType({"type": "int32"}, int),
    20: ColumnType({"type": "int64"}, int),
    26: ColumnType({"type": "int64"}, int),
    700: ColumnType({"type": "float"}, float),
    701: ColumnType({"type": "double"}, float),
    17: ColumnType({"type": "bytes"}, _bytea),
    2950: _named("string", "io.debezium.data.Uuid", str),
    114: _named("string", "io.debezium.data.Json", str),
    3802: _named("string", "io.debezium.data.Json", str),
    1082: _named("int32", "io.debezium.time.Date", _date),
    1184: _named("string", "io.debezium.time.ZonedTimestamp", _zoned),
}
_STRING = ColumnType({"type": "string"}, str)


def column_type(type_oid: int, typmod: int, decimal_mode: str = "precise") -> ColumnType:
    if type_oid == 1700:
        return _numeric(typmod, decimal_mode)
    if type_oid == 1114:  # timestamp without time zone
        if _precision(typmod) <= 3:
            return _named("int64", "io.debezium.time.Timestamp", lambda s: _timestamp_us(s) // 1000)
        return _named("int64", "io.debezium.time.MicroTimestamp", _timestamp_us)
    if type_oid == 1083:  # time without time zone
        if _precision(typmod) <= 3:
            return _named("int32", "io.debezium.time.Time", lambda s: _time_us(s) // 1000)
        return _named("int64", "io.debezium.time.MicroTime", _time_us)
    return _SIMPLE.get(type_oid, _STRING)
