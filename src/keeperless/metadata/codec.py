"""Binary and JSON codecs for metadata records, driven by the generated FieldSpecs.

A metadata log record's value is: frame version (uvarint, 1), record type (uvarint),
record version (uvarint), then the record in Kafka's flexible encoding. JSON follows
Kafka's MetadataJsonConverters: {"type": "TOPIC_RECORD", "version": 0, "data": {...}}.
"""

from __future__ import annotations

import base64
import struct
from typing import Any
from uuid import UUID

from keeperless.metadata._records_gen import RECORD_TYPES
from keeperless.metadata.fieldspec import FieldSpec
from keeperless.protocol.varint import VarintError, read_uvarint, write_uvarint

__all__ = ["MetadataRecordError", "decode_record", "encode_record", "record_to_json"]

_FRAME_VERSION = 1
_FIXED = {
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"),
    "uint16": struct.Struct(">H"),
    "float64": struct.Struct(">d"),
}


class MetadataRecordError(ValueError):
    """A metadata record could not be decoded."""


def _active(spec: FieldSpec, version: int) -> bool:
    return spec.lo <= version <= spec.hi


def _write_value(out: bytearray, t: str, v: Any, spec: FieldSpec, version: int) -> None:
    if t.startswith("[]"):
        if v is None:
            out.append(0)
            return
        write_uvarint(out, len(v) + 1)
        inner = t[2:]
        for item in v:
            if spec.nested is not None:
                _write_struct(out, item, version)
            else:
                _write_value(out, inner, item, spec, version)
        return
    if t == "bool":
        out.append(1 if v else 0)
    elif t in _FIXED:
        out += _FIXED[t].pack(v)
    elif t == "string" or t == "bytes":
        if v is None:
            out.append(0)
            return
        data = v.encode() if t == "string" else v
        write_uvarint(out, len(data) + 1)
        out += data
    elif t == "uuid":
        out += v.bytes
    else:
        raise MetadataRecordError(f"unknown field type {t}")


def _write_struct(out: bytearray, obj: Any, version: int) -> None:
    tagged: list[tuple[int, bytes]] = []
    for spec in obj.FIELDS:
        if not _active(spec, version):
            continue
        v = getattr(obj, spec.attr)
        if v is None and version < spec.nullable_lo:
            raise MetadataRecordError(f"{spec.name} is not nullable in version {version}")
        if spec.tag is not None and version >= spec.tagged_lo:
            if v == _default_of(obj, spec):
                continue
            buf = bytearray()
            _write_value(buf, spec.type, v, spec, version)
            tagged.append((spec.tag, bytes(buf)))
        else:
            _write_value(out, spec.type, v, spec, version)
    write_uvarint(out, len(tagged))
    for tag, data in sorted(tagged):
        write_uvarint(out, tag)
        write_uvarint(out, len(data))
        out += data


def _default_of(obj: Any, spec: FieldSpec) -> Any:
    return type(obj).__dataclass_fields__[spec.attr].default


def encode_record(record: Any, version: int | None = None) -> bytes:
    """Frame and encode a generated record instance at ``version`` (default: highest)."""
    v = record.HIGHEST_VERSION if version is None else version
    out = bytearray()
    write_uvarint(out, _FRAME_VERSION)
    write_uvarint(out, record.API_KEY)
    write_uvarint(out, v)
    _write_struct(out, record, v)
    return bytes(out)


def _read_value(
    buf: memoryview, pos: int, t: str, spec: FieldSpec, version: int
) -> tuple[Any, int]:
    if t.startswith("[]"):
        n, pos = read_uvarint(buf, pos)
        if n == 0:
            return None, pos
        items = []
        inner = t[2:]
        for _ in range(n - 1):
            if spec.nested is not None:
                item, pos = _read_struct(buf, pos, spec.nested, version)
            else:
                item, pos = _read_value(buf, pos, inner, spec, version)
            items.append(item)
        return tuple(items), pos
    if t == "bool":
        return buf[pos] != 0, pos + 1
    if t in _FIXED:
        s = _FIXED[t]
        return s.unpack_from(buf, pos)[0], pos + s.size
    if t in ("string", "bytes"):
        n, pos = read_uvarint(buf, pos)
        if n == 0:
            return None, pos
        raw = bytes(buf[pos : pos + n - 1])
        if len(raw) != n - 1:
            raise MetadataRecordError("truncated string or bytes")
        return (raw.decode() if t == "string" else raw), pos + n - 1
    if t == "uuid":
        return UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16
    raise MetadataRecordError(f"unknown field type {t}")


def _read_struct(buf: memoryview, pos: int, cls: Any, version: int) -> tuple[Any, int]:
    values: dict[str, Any] = {}
    by_tag: dict[int, FieldSpec] = {}
    for spec in cls.FIELDS:
        if not _active(spec, version):
            continue
        if spec.tag is not None and version >= spec.tagged_lo:
            by_tag[spec.tag] = spec
            continue
        values[spec.attr], pos = _read_value(buf, pos, spec.type, spec, version)
    n_tags, pos = read_uvarint(buf, pos)
    for _ in range(n_tags):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        spec_t = by_tag.get(tag)
        if spec_t is not None:
            values[spec_t.attr], _ = _read_value(buf, pos, spec_t.type, spec_t, version)
        pos += size
    return cls(**values), pos


def decode_record(value: bytes | memoryview) -> tuple[Any, int]:
    """Decode a framed metadata record; returns (record instance, version)."""
    buf = memoryview(value)
    try:
        frame, pos = read_uvarint(buf, 0)
        if frame != _FRAME_VERSION:
            raise MetadataRecordError(f"unknown metadata frame version {frame}")
        api_key, pos = read_uvarint(buf, pos)
        version, pos = read_uvarint(buf, pos)
        cls = RECORD_TYPES.get(api_key)
        if cls is None:
            raise MetadataRecordError(f"unknown metadata record type {api_key}")
        if not cls.LOWEST_VERSION <= version <= cls.HIGHEST_VERSION:  # type: ignore[attr-defined]
            raise MetadataRecordError(f"unsupported version {version} of {cls.__name__}")
        record, end = _read_struct(buf, pos, cls, version)
    except (IndexError, struct.error, VarintError) as e:
        raise MetadataRecordError(f"truncated metadata record: {e}") from None
    if end != len(buf):
        raise MetadataRecordError(f"{len(buf) - end} trailing bytes after {cls.__name__}")
    return record, version


def _json_value(v: Any, spec: FieldSpec, version: int) -> Any:
    if v is None:
        return None
    if isinstance(v, tuple):
        return [_json_value(x, spec, version) for x in v]
    if spec.nested is not None and hasattr(v, "FIELDS"):
        return _json_struct(v, version)
    if isinstance(v, UUID):
        return base64.urlsafe_b64encode(v.bytes).decode().rstrip("=")
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    return v


def _json_struct(obj: Any, version: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for spec in obj.FIELDS:
        if not _active(spec, version):
            continue
        v = getattr(obj, spec.attr)
        if spec.tag is not None and version >= spec.tagged_lo and v == _default_of(obj, spec):
            continue
        out[spec.name[0].lower() + spec.name[1:]] = _json_value(v, spec, version)
    return out


def record_to_json(record: Any, version: int) -> dict[str, Any]:
    return {"type": record.TYPE_NAME, "version": version, "data": _json_struct(record, version)}
