"""Build version-specific kio messages from one version-independent description.

Handlers describe a response once, as nested dicts holding the union of the fields of
every version they support; ``build(cls, data)`` keeps what ``cls`` (one version's
class) has, recursing into nested entities, and fills the rest from defaults.
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
from functools import cache
from typing import Any

__all__ = ["build", "build_filled", "fields_of"]

_NO_DEFAULT = object()


@cache
def fields_of(cls: type) -> tuple[tuple[str, Any, Any, bool], ...]:
    """(name, nested entity class or None, default, is_timedelta) per field."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        nested = None
        for candidate in (t, *typing.get_args(t)):
            if dataclasses.is_dataclass(candidate):
                nested = candidate
                break
            for inner in typing.get_args(candidate):
                if dataclasses.is_dataclass(inner):
                    nested = inner
        if f.default is not dataclasses.MISSING:
            default: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = _NO_DEFAULT
        is_td = f.metadata.get("kafka_type", "").startswith("timedelta")
        out.append((f.name, nested, default, is_td))
    return tuple(out)


def build(cls: type, data: dict[str, Any]) -> Any:
    kwargs: dict[str, Any] = {}
    for name, nested, default, is_td in fields_of(cls):
        if name in data:
            v = data[name]
            if nested is not None and v is not None:
                if isinstance(v, dict):
                    v = build(nested, v)
                elif isinstance(v, list | tuple):
                    v = tuple(build(nested, x) if isinstance(x, dict) else x for x in v)
            elif is_td and isinstance(v, int):
                v = datetime.timedelta(milliseconds=v)
            kwargs[name] = v
        elif default is _NO_DEFAULT:
            if is_td:
                kwargs[name] = datetime.timedelta(0)
            else:
                raise KeyError(
                    f"{cls.__qualname__} v{getattr(cls, '__version__', '?')} needs field {name!r}"
                )
    return cls(**kwargs)


def _zero(t: Any) -> Any:
    args = typing.get_args(t)
    if typing.get_origin(t) is typing.Union or type(None) in args:
        return None
    if typing.get_origin(t) is tuple or t is tuple:
        return ()
    if dataclasses.is_dataclass(t) and isinstance(t, type):  # a required nested entity
        return build_filled(t, {})
    if isinstance(t, type):
        for base, value in ((bool, False), (int, 0), (str, ""), (bytes, b"")):
            if issubclass(t, base):
                return value
        if t.__name__ == "UUID":
            import uuid

            return uuid.UUID(int=0)
    sup = getattr(t, "__supertype__", None)
    return _zero(sup) if sup is not None else None


def build_filled(cls: type, data: dict[str, Any]) -> Any:
    """``build``, with every required field ``data`` lacks set to its type's zero (0,
    "", empty, None): a whole-request error answer, or a request for tests to mutate."""
    hints = typing.get_type_hints(cls)
    filled = dict(data)
    for name, _nested, default, is_td in fields_of(cls):
        if name not in filled and default is _NO_DEFAULT and not is_td:
            filled[name] = _zero(hints[name])
    return build(cls, filled)
