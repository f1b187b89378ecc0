"""Fetch responses (v4-v12) encoded by hand so that record data is never copied.

The encoder returns the response frame as parts: ``bytes`` for the protocol fields and,
for each partition's records, the caller's own object (e.g. a file slice) standing for
``length`` bytes, which the connection writes with sendfile. A unit test checks the
bytes against kio's encoding of the same response for every version.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from keeperless.protocol.varint import write_uvarint

__all__ = ["FetchPartition", "RecordsSource", "encode_fetch_response"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART = struct.Struct(">ihqqq")  # index, error, high watermark, last stable, log start
_EPOCH_END = struct.Struct(">iqB")  # epoch, end offset, no tagged fields


class RecordsSource(Protocol):
    @property
    def length(self) -> int: ...


@dataclass(frozen=True, slots=True)
class FetchPartition:
    index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes | RecordsSource | None
    # (epoch, end offset) where a follower's log diverged from the leader's (v12+)
    diverging_epoch: tuple[int, int] | None = None


def _uvarint(n: int) -> bytes:
    out = bytearray()
    write_uvarint(out, n)
    return bytes(out)


def encode_fetch_response(
    version: int,
    correlation_id: int,
    topics: Sequence[tuple[str, Sequence[FetchPartition]]],
    error_code: int = 0,
    session_id: int = 0,
    throttle_ms: int = 0,
) -> list[bytes | RecordsSource]:
    """The whole response frame (size prefix included) as a list of parts."""
    if not 4 <= version <= 12:
        raise ValueError(f"Fetch v{version} is not encoded here")
    flexible = version >= 12
    parts: list[bytes | RecordsSource] = []
    buf = bytearray(_I32.pack(correlation_id))
    if flexible:
        buf.append(0)  # response header tagged fields
    buf += _I32.pack(throttle_ms)
    if version >= 7:
        buf += _I16.pack(error_code) + _I32.pack(session_id)

    def array_len(n: int) -> bytes:
        return _uvarint(n + 1) if flexible else _I32.pack(n)

    buf += array_len(len(topics))
    total = 0
    for name, partitions in topics:
        raw = name.encode()
        buf += (_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw
        buf += array_len(len(partitions))
        for p in partitions:
            buf += _PART.pack(
                p.index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset
            )[: 22 if version < 5 else 30]
            buf += array_len(0)  # aborted transactions: none (no transactions yet)
            if version >= 11:
                buf += _I32.pack(-1)  # preferred read replica
            rec = p.records
            if rec is None:
                buf += b"\x00" if flexible else _I32.pack(-1)
            else:
                n = len(rec) if isinstance(rec, bytes) else rec.length
                buf += _uvarint(n + 1) if flexible else _I32.pack(n)
                if n:
                    parts.append(bytes(buf))
                    total += len(buf)
                    buf = bytearray()
                    parts.append(rec)
                    total += n
            if flexible:
                if p.diverging_epoch is not None:
                    # one tagged field: tag 0 (DivergingEpoch), 13 bytes
                    buf += b"\x01\x00\x0d" + _EPOCH_END.pack(*p.diverging_epoch, 0)
                else:
                    buf.append(0)  # partition tagged fields
        if flexible:
            buf.append(0)  # topic tagged fields
    if flexible:
        buf.append(0)  # response tagged fields
    parts.append(bytes(buf))
    total += len(buf)
    parts.insert(0, _I32.pack(total))
    return parts
