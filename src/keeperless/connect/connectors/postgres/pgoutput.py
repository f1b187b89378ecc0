"""PostgreSQL's ``pgoutput`` logical replication messages (protocol version 1, as the
PostgreSQL manual's "Logical Replication Message Formats" lists them), decoded from the
bytes of each XLogData message. Pure: bytes in, messages out.

Column values arrive as their text output (``t``), NULL (``n``) or an unchanged TOASTed
value that was not sent (``u``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "UNCHANGED_TOAST",
    "Begin",
    "Column",
    "Commit",
    "Delete",
    "Insert",
    "Relation",
    "Truncate",
    "Update",
    "decode",
]


class _Unchanged:
    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST = _Unchanged()
Tuple = tuple[str | _Unchanged | None, ...]


@dataclass(frozen=True, slots=True)
class Begin:
    final_lsn: int
    commit_ts_us: int  # microseconds since 2000-01-01
    xid: int


@dataclass(frozen=True, slots=True)
class Commit:
    commit_lsn: int
    end_lsn: int
    commit_ts_us: int


@dataclass(frozen=True, slots=True)
class Column:
    key: bool  # part of the replica identity
    name: str
    type_oid: int
    typmod: int


@dataclass(frozen=True, slots=True)
class Relation:
    relid: int
    schema: str
    table: str
    replica_identity: str  # d(efault), n(othing), f(ull), i(ndex)
    columns: tuple[Column, ...]


@dataclass(frozen=True, slots=True)
class Insert:
    relid: int
    new: Tuple


@dataclass(frozen=True, slots=True)
class Update:
    relid: int
    old: Tuple | None  # the old key ('K') or whole old row ('O'), when sent
    old_is_key: bool
    new: Tuple


@dataclass(frozen=True, slots=True)
class Delete:
    relid: int
    old: Tuple
    old_is_key: bool


@dataclass(frozen=True, slots=True)
class Truncate:
    relids: tuple[int, ...]
    cascade: bool
    restart_identity: bool


Message = Begin | Commit | Relation | Insert | Update | Delete | Truncate | None


class DecodeError(ValueError):
    """Bytes that are not a pgoutput message of protocol version 1."""


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 1

    def int(self, fmt: str) -> int:
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(v)

    def byte(self) -> str:
        b = chr(self.data[self.pos])
        self.pos += 1
        return b

    def cstring(self) -> str:
        end = self.data.index(b"\x00", self.pos)
        s = self.data[self.pos : end].decode()
        self.pos = end + 1
        return s

    def tuple(self) -> Tuple:
        n = self.int(">h")
        out: list[str | _Unchanged | None] = []
        for _ in range(n):
            kind = self.byte()
            if kind == "n":
                out.append(None)
            elif kind == "u":
                out.append(UNCHANGED_TOAST)
            elif kind in ("t", "b"):
                size = self.int(">i")
                out.append(self.data[self.pos : self.pos + size].decode())
                self.pos += size
            else:
                raise DecodeError(f"unknown tuple column kind {kind!r}")
        return tuple(out)


def decode(data: bytes) -> Message:
    """One message; None for those a CDC connector does not need (Origin, Type,
    Message)."""
    if not data:
        raise DecodeError("an empty message")
    r = _Reader(data)
    tag = chr(data[0])
    try:
        if tag == "B":
            return Begin(r.int(">Q"), r.int(">q"), r.int(">I"))
        if tag == "C":
            r.int(">b")
            return Commit(r.int(">Q"), r.int(">Q"), r.int(">q"))
        if tag == "R":
            relid = r.int(">I")
            schema, table = r.cstring(), r.cstring()
            identity = r.byte()
            cols = []
            for _ in range(r.int(">h")):
                flags = r.int(">b")
                cols.append(Column(bool(flags & 1), r.cstring(), r.int(">I"), r.int(">i")))
            return Relation(relid, schema, table, identity, tuple(cols))
        if tag == "I":
            relid = r.int(">I")
            if r.byte() != "N":
                raise DecodeError("an Insert without its new tuple")
            return Insert(relid, r.tuple())
        if tag == "U":
            relid = r.int(">I")
            kind = r.byte()
            old = None
            old_is_key = False
            if kind in ("K", "O"):
                old_is_key = kind == "K"
                old = r.tuple()
                kind = r.byte()
            if kind != "N":
                raise DecodeError("an Update without its new tuple")
            return Update(relid, old, old_is_key, r.tuple())
        if tag == "D":
            relid = r.int(">I")
            kind = r.byte()
            if kind not in ("K", "O"):
                raise DecodeError("a Delete without its old key or row")
            return Delete(relid, r.tuple(), kind == "K")
        if tag == "T":
            n = r.int(">I")
            options = r.int(">b")
            return Truncate(tuple(r.int(">I") for _ in range(n)), bool(options & 1),
                            bool(options & 2))  # fmt: skip
        if tag in ("O", "Y", "M"):
            return None
    except (struct.error, IndexError, ValueError) as e:
        if isinstance(e, DecodeError):
            raise
        raise DecodeError(f"a truncated {tag!r} message: {e}") from None
    raise DecodeError(f"unknown pgoutput message {tag!r}")
