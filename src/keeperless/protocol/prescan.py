"""A walk over a request body that checks every length and count against the bytes
that remain, before kio's compiled decoder reads it. That decoder reserves room for an
array from its declared count: a request claiming ten billion elements made it ask for
hundreds of gigabytes and abort the whole process (found by probing a node with a
hand-made Metadata request). Here a count larger than the bytes left is a
ProtocolError, so the offending connection is closed and nothing is reserved.

The walk is planned once per request class from kio's field metadata; it reads only
lengths, counts and tags, skipping fixed-size fields."""

from __future__ import annotations

import dataclasses
import struct
import typing
from functools import cache
from typing import Any

from keeperless.protocol.varint import read_uvarint

__all__ = ["check_lengths"]

_FIXED = {
    "int8": 1, "bool": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
    "float64": 8, "int64": 8, "uuid": 16, "timedelta_i32": 4, "timedelta_i64": 8,
    "datetime_i64": 8, "error_code": 2,
}  # fmt: skip
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class LengthError(ValueError):
    pass


# a plan: per field, (kind, detail): ("fixed", size), ("string"|"bytes", None),
# ("array", element plan or fixed size or "string"/"bytes"), ("entity", plan)
Plan = tuple[tuple[str, Any], ...]


def _element(t: Any, kafka_type: str | None) -> Any:
    args = [a for a in typing.get_args(t) if a is not type(None)]
    inner = args[0] if args else t
    if dataclasses.is_dataclass(inner):
        return _plan(inner)  # type: ignore[arg-type]
    return kafka_type or "string"


@cache
def _plan(cls: type) -> tuple[bool, Plan]:
    flexible = bool(getattr(cls, "__flexible__", False))
    hints = typing.get_type_hints(cls)
    steps: list[tuple[str, Any]] = []
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:
            continue  # tagged fields travel in the tag buffer
        kt = f.metadata.get("kafka_type")
        t = hints[f.name]
        origin = typing.get_origin(t)
        is_tuple = origin is tuple or any(typing.get_origin(a) is tuple for a in typing.get_args(t))
        if is_tuple:
            arr = next((a for a in (t, *typing.get_args(t)) if typing.get_origin(a) is tuple), t)
            elem = typing.get_args(arr)[0] if typing.get_args(arr) else None
            steps.append(("array", _element(elem, kt)))
        elif kt in _FIXED:
            steps.append(("fixed", _FIXED[kt]))
        elif kt in ("string", "bytes", "records"):
            steps.append((kt if kt != "records" else "bytes", None))
        elif kt is None:
            nested = next(
                (a for a in (t, *typing.get_args(t)) if dataclasses.is_dataclass(a)), None
            )
            if nested is None:
                raise TypeError(f"{cls.__name__}.{f.name}: no plan for {t}")
            # a nullable struct is preceded by a presence byte (-1: null)
            optional = type(None) in typing.get_args(t)
            kind = "nullable" if optional else "entity"
            steps.append((kind, _plan(nested)))  # type: ignore[arg-type]
        else:
            steps.append(("varint", None) if "var" in kt else ("fixed", _FIXED.get(kt, 0)))
    return flexible, tuple(steps)


def _length(buf: memoryview, pos: int, flexible: bool, wide: bool) -> tuple[int, int]:
    """(length or -1 for null, position after the prefix)."""
    if flexible:
        n, pos = read_uvarint(buf, pos)
        return n - 1, pos
    if wide:
        if pos + 4 > len(buf):
            raise LengthError("a truncated length")
        return _I32.unpack_from(buf, pos)[0], pos + 4
    if pos + 2 > len(buf):
        raise LengthError("a truncated length")
    return _I16.unpack_from(buf, pos)[0], pos + 2


def _walk(buf: memoryview, pos: int, plan: tuple[bool, Plan]) -> int:
    flexible, steps = plan
    end = len(buf)
    for kind, detail in steps:
        if kind == "fixed":
            pos += detail
        elif kind == "varint":
            _, pos = read_uvarint(buf, pos)
        elif kind in ("string", "bytes"):
            n, pos = _length(buf, pos, flexible, wide=kind == "bytes")
            if n > end - pos:
                raise LengthError(f"a {kind} of {n} bytes in {end - pos} left")
            pos += max(n, 0)
        elif kind == "entity":
            pos = _walk(buf, pos, detail)
        elif kind == "nullable":
            if pos >= end:
                raise LengthError("a truncated struct")
            present = buf[pos] != 0xFF
            pos += 1
            if present:
                pos = _walk(buf, pos, detail)
        else:  # array
            n, pos = _length(buf, pos, flexible, wide=True)
            if n > end - pos:
                raise LengthError(f"an array of {n} elements in {end - pos} bytes")
            for _ in range(max(n, 0)):
                if isinstance(detail, tuple):
                    pos = _walk(buf, pos, detail)
                elif detail in _FIXED:
                    pos += _FIXED[detail]
                elif detail in ("string", "bytes", "records"):
                    m, pos = _length(buf, pos, flexible, wide=detail != "string")
                    if m > end - pos:
                        raise LengthError(f"a {detail} of {m} bytes in {end - pos} left")
                    pos += max(m, 0)
                else:
                    _, pos = read_uvarint(buf, pos)
        if pos > end:
            raise LengthError("the request ends inside a field")
    if flexible:
        count, pos = read_uvarint(buf, pos)
        if count > end - pos:
            raise LengthError(f"{count} tagged fields in {end - pos} bytes")
        for _ in range(count):
            _, pos = read_uvarint(buf, pos)
            size, pos = read_uvarint(buf, pos)
            if size > end - pos:
                raise LengthError(f"a tagged field of {size} bytes in {end - pos} left")
            pos += size
    return pos


def check_lengths(cls: type, buf: memoryview, pos: int) -> None:
    """Raise ValueError if a length or count in the body of ``cls`` at ``pos`` claims
    more than the bytes left."""
    _walk(buf, pos, _plan(cls))
