"""Connect's data model and converters: records carry a schema (in the JSON converter's
own notation: ``{"type": "struct", "fields": [...], "optional": ..., "name": ...}``) and a
value; a converter turns them into the bytes of a Kafka record and back.

Converters by Kafka's class names: ``org.apache.kafka.connect.json.JsonConverter``
(``schemas.enable``, default true: the ``{"schema", "payload"}`` envelope),
``org.apache.kafka.connect.storage.StringConverter`` and
``org.apache.kafka.connect.converters.ByteArrayConverter``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "Converter",
    "DataException",
    "SinkRecord",
    "SourceRecord",
    "converter",
    "struct_schema",
]

Schema = dict[str, Any]


class DataException(ValueError):
    """Kafka's DataException: bytes a converter cannot turn into data, or the reverse."""


def struct_schema(
    name: str | None,
    fields: list[tuple[str, Schema]],
    *,
    opt: bool = False,
    version: int | None = None,
) -> Schema:
    out: Schema = {
        "type": "struct",
        "fields": [dict(s, field=n) for n, s in fields],
        "optional": opt,
    }
    if name:
        out["name"] = name
    if version is not None:
        out["version"] = version
    return out


@dataclass(slots=True)
class SourceRecord:
    """What a source task returns from ``poll()``: where it came from (its source
    partition and offset, the connector's own words) and what to write."""

    source_partition: dict[str, Any]
    source_offset: dict[str, Any]
    topic: str
    key_schema: Schema | None
    key: Any
    value_schema: Schema | None
    value: Any
    partition: int | None = None
    timestamp: int | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


@dataclass(slots=True)
class SinkRecord:
    topic: str
    partition: int
    offset: int
    key_schema: Schema | None
    key: Any
    value_schema: Schema | None
    value: Any
    timestamp: int | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


class Converter(Protocol):
    def from_connect(self, schema: Schema | None, value: Any) -> bytes | None: ...

    def to_connect(self, data: bytes | None) -> tuple[Schema | None, Any]: ...


def _bytes_as_base64(value: Any) -> str:
    """What the JSON converter writes for bytes (json.dumps's hook for other types)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    raise TypeError(f"{type(value).__name__} is not a Connect value")


def _dumps(value: Any) -> str:
    # the C encoder walks the value; only bytes come back to Python (measured: walking
    # every value in Python first took two thirds of a CDC task's time)
    return json.dumps(value, separators=(",", ":"), default=_bytes_as_base64)


def _from_json(schema: Schema | None, value: Any) -> Any:
    if value is None or schema is None:
        return value
    kind = schema.get("type")
    if kind == "bytes" and isinstance(value, str):
        return base64.b64decode(value)
    if kind == "struct" and isinstance(value, dict):
        fields = {f["field"]: f for f in schema.get("fields", ())}
        return {k: _from_json(fields.get(k), v) for k, v in value.items()}
    if kind == "array" and isinstance(value, list):
        return [_from_json(schema.get("items"), v) for v in value]
    return value


class JsonConverter:
    def __init__(self, config: Mapping[str, str]) -> None:
        raw = config.get("schemas.enable", "true").strip().lower()
        if raw not in ("true", "false"):
            raise DataException(f"Invalid value {raw} for configuration schemas.enable")
        self.schemas = raw == "true"
        # a connector hands the same schema object with every record of a table: its JSON
        # is made once (by identity; the object is held so its id is not reused)
        self._encoded: dict[int, tuple[Schema, str]] = {}

    def _schema_json(self, schema: Schema | None) -> str:
        if schema is None:
            return "null"
        hit = self._encoded.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1]
        text = json.dumps(schema, separators=(",", ":"))
        if len(self._encoded) > 10_000:
            self._encoded.clear()
        self._encoded[id(schema)] = (schema, text)
        return text

    def from_connect(self, schema: Schema | None, value: Any) -> bytes | None:
        if value is None and not self.schemas:
            return None
        if value is None and schema is None:
            return None
        payload = _dumps(value)
        if not self.schemas:
            return payload.encode()
        return f'{{"schema":{self._schema_json(schema)},"payload":{payload}}}'.encode()

    def to_connect(self, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None:
            return None, None
        try:
            doc = json.loads(data)
        except ValueError as e:
            raise DataException(
                f"Converting byte[] to Kafka Connect data failed due to serialization error: {e}"
            ) from None
        if not self.schemas:
            return None, doc
        if not (isinstance(doc, dict) and set(doc) == {"schema", "payload"}):
            raise DataException(
                'JsonConverter with schemas.enable requires "schema" and "payload" fields and '
                "may not contain additional fields. If you are trying to deserialize plain JSON "
                "data, set schemas.enable=false in your converter configuration."
            )
        return doc["schema"], _from_json(doc["schema"], doc["payload"])


class StringConverter:
    def __init__(self, config: Mapping[str, str]) -> None:
        self.encoding = config.get("converter.encoding", config.get("encoding", "UTF-8"))

    def from_connect(self, schema: Schema | None, value: Any) -> bytes | None:
        if value is None:
            return None
        if isinstance(value, Mapping | list):
            value = _dumps(value)
        return str(value).encode(self.encoding)

    def to_connect(self, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None:
            return {"type": "string", "optional": True}, None
        return {"type": "string", "optional": True}, data.decode(self.encoding)


class ByteArrayConverter:
    def __init__(self, config: Mapping[str, str]) -> None:
        pass

    def from_connect(self, schema: Schema | None, value: Any) -> bytes | None:
        if value is None:
            return None
        if isinstance(value, str):
            return value.encode()
        if not isinstance(value, bytes | bytearray | memoryview):
            raise DataException(
                f"ByteArrayConverter is not compatible with objects of type {type(value).__name__}"
            )
        return bytes(value)

    def to_connect(self, data: bytes | None) -> tuple[Schema | None, Any]:
        return {"type": "bytes", "optional": True}, data


CONVERTERS: dict[str, type[JsonConverter] | type[StringConverter] | type[ByteArrayConverter]] = {
    "org.apache.kafka.connect.json.JsonConverter": JsonConverter,
    "org.apache.kafka.connect.storage.StringConverter": StringConverter,
    "org.apache.kafka.connect.converters.ByteArrayConverter": ByteArrayConverter,
}


def converter(class_name: str, config: Mapping[str, str], *, setting: str) -> Converter:
    cls = CONVERTERS.get(class_name.strip())
    if cls is None:
        raise DataException(
            f"Invalid value {class_name} for configuration {setting}: Class {class_name} could "
            f"not be found (known converters: {', '.join(sorted(CONVERTERS))})"
        )
    return cls(config)
