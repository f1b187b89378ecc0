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


_DAYS_PER_MONTH = 365.25 / 12  # Debezium's MicroDuration average month
_INTERVAL_UNITS = {"year": 12 * _DAYS_PER_MONTH * 86_400e6, "mon": _DAYS_PER_MONTH * 86_400e6,
                   "day": 86_400e6}  # fmt: skip


def _interval_us(s: str) -> int:
    """PostgreSQL's interval output ("1 year 2 mons -3 days 04:05:06.5") in microseconds,
    as Debezium's io.debezium.time.MicroDuration counts them."""
    total = 0.0
    parts = s.split()
    i = 0
    while i < len(parts):
        token = parts[i]
        if ":" in token:
            sign = -1 if token.startswith("-") else 1
            h, m, sec = token.lstrip("+-").split(":")
            total += sign * ((int(h) * 60 + int(m)) * 60 + float(sec)) * 1e6
            i += 1
            continue
        unit = parts[i + 1].rstrip("s") if i + 1 < len(parts) else ""
        total += float(token) * _INTERVAL_UNITS.get(unit, 0)
        i += 2
    return round(total)


def _money(mode: str) -> ColumnType:
    def parse(s: str) -> decimal.Decimal:
        negative = s.startswith("-") or s.startswith("(")
        digits = "".join(ch for ch in s if ch.isdigit() or ch == ".")
        d = decimal.Decimal(digits)
        return -d if negative else d

    if mode == "double":
        return ColumnType({"type": "double"}, lambda s: float(parse(s)))
    if mode == "string":
        return ColumnType({"type": "string"}, lambda s: str(parse(s)))
    schema = {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
              "parameters": {"scale": "2"}}  # fmt: skip
    return ColumnType(schema, lambda s: _unscaled(parse(s), 2))


def _array_items(text: str) -> list[str | None]:
    """A one-dimensional PostgreSQL array literal ('{1,NULL,"a b"}') split into its
    elements' text (None for NULL)."""
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError(f"not an array literal: {text!r}")
    body = text[1:-1]
    out: list[str | None] = []
    i = 0
    while i < len(body):
        if body[i] == '"':
            j, buf = i + 1, []
            while body[j] != '"':
                if body[j] == "\\":
                    j += 1
                buf.append(body[j])
                j += 1
            out.append("".join(buf))
            i = j + 2  # the closing quote and the comma
        else:
            j = body.find(",", i)
            j = len(body) if j < 0 else j
            item = body[i:j]
            out.append(None if item == "NULL" else item)
            i = j + 1
    return out


# array type -> element type (the common ones); others are strings, as before
_ARRAYS = {1000: 16, 1005: 21, 1007: 23, 1016: 20, 1021: 700, 1022: 701, 1009: 25, 1015: 1043,
           1014: 1042, 2951: 2950, 1231: 1700, 1182: 1082, 1115: 1114, 1185: 1184}  # fmt: skip


def _array(element: ColumnType) -> ColumnType:
    def convert(s: str) -> list[Any]:
        return [None if v is None else element.convert(v) for v in _array_items(s)]

    return ColumnType({"type": "array", "items": dict(element.schema, optional=True)}, convert)


def column_type(type_oid: int, typmod: int, decimal_mode: str = "precise") -> ColumnType:
    if type_oid in _ARRAYS:
        return _array(column_type(_ARRAYS[type_oid], -1, decimal_mode))
    if type_oid == 1186:
        return _named("int64", "io.debezium.time.MicroDuration", _interval_us)
    if type_oid == 790:
        return _money(decimal_mode)
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
