"""Fetch responses (v4-v18) encoded by hand so that record data is never copied.

The encoder returns the response frame as parts: ``bytes`` for the protocol fields and,
for each partition's records, the caller's own object (e.g. a file slice) standing for
``length`` bytes, which the connection writes with sendfile. A unit test checks the
bytes against kio's encoding of the same response for every version.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import UUID

from keeperless.protocol.varint import compact_string as _compact_str
from keeperless.protocol.varint import uvarint as _uvarint

__all__ = [
    "FetchPartition",
    "NodeEndpoint",
    "RecordsSource",
    "encode_fetch_response",
    "fetch_replica_id",
]

MAX_VERSION = 18

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART = struct.Struct(">ihqqq")  # index, error, high watermark, last stable, log start
_EPOCH_END = struct.Struct(">iqB")  # epoch, end offset, no tagged fields
_LEADER = struct.Struct(">iiB")  # leader id, leader epoch, no tagged fields
_UNKNOWN = (-1, -1)  # a tagged field's default: not written


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
    # (leader id, leader epoch) of a partition this node does not lead (v12+, KIP-951)
    current_leader: tuple[int, int] | None = None
    # the replica a consumer should read from instead (v11+, KIP-392); -1: this one
    preferred_read_replica: int = -1
    # (producer id, first offset) of aborted transactions in the range (read_committed);
    # None for read_uncommitted readers
    aborted: Sequence[tuple[int, int]] | None = None


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    """A leader named in ``current_leader`` (v16+: the client need not ask Metadata)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


_ABORTED = struct.Struct(">qq")


def encode_fetch_response(
    version: int,
    correlation_id: int,
    topics: Sequence[tuple[str | UUID, Sequence[FetchPartition]]],
    error_code: int = 0,
    session_id: int = 0,
    throttle_ms: int = 0,
    node_endpoints: Sequence[NodeEndpoint] = (),
) -> list[bytes | RecordsSource]:
    """The whole response frame (size prefix included) as a list of parts. Topics are
    named by name up to v12 and by topic id from v13 (KIP-516)."""
    if not 4 <= version <= MAX_VERSION:
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
    for topic, partitions in topics:
        if version >= 13:
            assert isinstance(topic, UUID)
            buf += topic.bytes
        else:
            assert isinstance(topic, str)
            raw = topic.encode()
            buf += (_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw
        buf += array_len(len(partitions))
        for p in partitions:
            buf += _PART.pack(
                p.index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset
            )[: 22 if version < 5 else 30]
            if p.aborted is None:
                buf += _uvarint(0) if flexible else _I32.pack(-1)  # null
            else:
                buf += array_len(len(p.aborted))
                for pid, first in p.aborted:
                    buf += _ABORTED.pack(pid, first)
                    if flexible:
                        buf.append(0)
            if version >= 11:
                buf += _I32.pack(p.preferred_read_replica)
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
                tags = []
                if p.diverging_epoch not in (None, _UNKNOWN):  # tag 0: DivergingEpoch, 13 bytes
                    tags.append(b"\x00\x0d" + _EPOCH_END.pack(*p.diverging_epoch, 0))
                if p.current_leader not in (None, _UNKNOWN):  # tag 1: CurrentLeader, 9 bytes
                    tags.append(b"\x01\x09" + _LEADER.pack(*p.current_leader, 0))
                buf += _uvarint(len(tags)) + b"".join(tags)
        if flexible:
            buf.append(0)  # topic tagged fields
    if flexible:
        if version >= 16 and node_endpoints:  # tag 0: NodeEndpoints
            body = bytearray(_uvarint(len(node_endpoints) + 1))
            for ep in node_endpoints:
                body += _I32.pack(ep.node_id) + _compact_str(ep.host) + _I32.pack(ep.port)
                body += _compact_str(ep.rack) + b"\x00"
            buf += b"\x01\x00" + _uvarint(len(body)) + body
        else:
            buf.append(0)  # response tagged fields
    parts.append(bytes(buf))
    total += len(buf)
    parts.insert(0, _I32.pack(total))
    return parts


def fetch_replica_id(req: Any) -> int:
    """The replica a Fetch comes from (-1: a consumer): replica_id, or from v15 the
    replica_state's (KIP-903)."""
    state = getattr(req, "replica_state", None)
    rid = state.replica_id if state is not None else getattr(req, "replica_id", -1)
    return int(rid)
