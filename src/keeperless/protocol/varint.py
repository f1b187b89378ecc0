"""Kafka's variable-length integers: unsigned (flexible-version lengths and tags) and
zig-zag signed (record fields)."""

from __future__ import annotations

__all__ = [
    "VarintError",
    "compact_string",
    "read_uvarint",
    "read_varint",
    "skip_tagged_fields",
    "uvarint",
    "write_uvarint",
    "write_varint",
]


class VarintError(ValueError):
    """A varint is truncated or longer than 64 bits."""


def write_uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def uvarint(n: int) -> bytes:
    out = bytearray()
    write_uvarint(out, n)
    return bytes(out)


def compact_string(s: str | None) -> bytes:
    """A flexible version's (nullable) string: its length + 1 as a uvarint, 0 for null."""
    if s is None:
        return b"\x00"
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """(value, position after it)."""
    shift = v = 0
    while True:
        if pos >= len(buf):
            raise VarintError("truncated varint")
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v, pos
        shift += 7
        if shift > 63:
            raise VarintError("varint longer than 64 bits")


def write_varint(out: bytearray, n: int) -> None:
    write_uvarint(out, ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    v, pos = read_uvarint(buf, pos)
    return (v >> 1) ^ -(v & 1), pos


def skip_tagged_fields(buf: bytes | bytearray | memoryview, pos: int) -> int:
    """The position after a flexible version's tagged fields (count, then tag, size and
    data of each) starting at ``pos``."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    return pos
