"""The shape of a generated record field, shared by the generator's output and the codec."""

from __future__ import annotations

from typing import Any, NamedTuple
from uuid import UUID

ZERO_UUID = UUID(int=0)


class FieldSpec(NamedTuple):
    attr: str  # python attribute (snake_case)
    name: str  # Kafka field name (CamelCase)
    type: str  # Kafka type: int32, string, []int32, []Struct...
    lo: int  # first version with this field
    hi: int  # last version with this field
    nullable_lo: int  # first version where null is allowed (99 = never)
    tag: int | None  # tag, if a tagged field
    tagged_lo: int  # first version where it is tagged
    nested: Any  # the generated class of a struct element, or None
