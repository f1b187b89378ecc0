"""Binary and JSON codecs for metadata records, driven by the generated FieldSpecs.

A metadata log record's value is: frame version (uvarint, 1), record type (uvarint),
record version (uvarint), then the record in Kafka's flexible encoding. JSON follows
Kafka's MetadataJsonConverters: {"type": "TOPIC_RECORD", "version": 0, "data": {...}}.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from typing import Any
from uuid import UUID

from keeperless.metadata._records_gen import RECORD_TYPES
from keeperless.metadata.compiled import CodecError, decoder, encoder
from keeperless.metadata.fieldspec import FieldSpec
from keeperless.protocol.varint import read_uvarint

__all__ = ["MetadataRecordError", "decode_record", "encode_record", "record_to_json"]

_FRAME_VERSION = 1


class MetadataRecordError(ValueError):
    """A metadata record could not be decoded."""


def _active(spec: FieldSpec, version: int) -> bool:
    return spec.lo <= version <= spec.hi


def _default_of(obj: Any, spec: FieldSpec) -> Any:
    return type(obj).__dataclass_fields__[spec.attr].default


def encode_record(record: Any, version: int | None = None) -> bytes:
    """Frame and encode a generated record instance at ``version`` (default: highest)."""
    v = record.HIGHEST_VERSION if version is None else version
    out = bytearray((_FRAME_VERSION, record.API_KEY, v))  # all three below 128
    try:
        encoder(type(record), v)(record, out)
    except CodecError as e:
        raise MetadataRecordError(str(e)) from None
    except (struct.error, TypeError, AttributeError) as e:
        raise MetadataRecordError(f"cannot encode {type(record).__name__}: {e}") from None
    return bytes(out)


# the (record type, version) pairs seen, by their one-byte frame header: the type and
# version checks of a pair's first decode are not made again for every record
_seen: dict[int, tuple[type, int, Callable[[bytes, int], tuple[Any, int]]]] = {}


def decode_record(value: bytes | memoryview) -> tuple[Any, int]:
    """Decode a framed metadata record; returns (record instance, version)."""
    buf = value if isinstance(value, bytes) else bytes(value)
    key = buf[1] << 8 | buf[2] if len(buf) >= 3 and buf[0] == _FRAME_VERSION else -1
    known = _seen.get(key)
    if known is not None:
        (cls, version, dec), pos = known, 3
    else:
        cls, version, pos = _record_type(buf)
        dec = decoder(cls, version)
        if pos == 3:  # (one-byte type and version)
            _seen[key] = (cls, version, dec)
    try:
        record, end = dec(buf, pos)
    except (IndexError, struct.error, ValueError) as e:
        raise MetadataRecordError(f"truncated or malformed {cls.__name__}: {e}") from None
    if end != len(buf):
        raise MetadataRecordError(f"{len(buf) - end} trailing bytes after {cls.__name__}")
    return record, version


def _record_type(buf: bytes) -> tuple[type, int, int]:
    """(record class, version, where the record begins) of a framed record, checked."""
    try:
        if len(buf) >= 3 and buf[0] < 128 and buf[1] < 128 and buf[2] < 128:
            frame, api_key, version = buf[0], buf[1], buf[2]  # the usual one-byte varints
            pos = 3
        else:
            frame, pos = read_uvarint(buf, 0)
            api_key, pos = read_uvarint(buf, pos)
            version, pos = read_uvarint(buf, pos)
    except (IndexError, ValueError) as e:
        raise MetadataRecordError(f"truncated metadata record: {e}") from None
    if frame != _FRAME_VERSION:
        raise MetadataRecordError(f"unknown metadata frame version {frame}")
    cls = RECORD_TYPES.get(api_key)
    if cls is None:
        raise MetadataRecordError(f"unknown metadata record type {api_key}")
    if not cls.LOWEST_VERSION <= version <= cls.HIGHEST_VERSION:  # type: ignore[attr-defined]
        raise MetadataRecordError(f"unsupported version {version} of {cls.__name__}")
    return cls, version, pos


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
