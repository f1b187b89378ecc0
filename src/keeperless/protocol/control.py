"""Control records of the Raft log and snapshots (KIP-595, KIP-630), encoded with kio."""

from __future__ import annotations

import io
import struct
from typing import Any

from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.leader_change_message.v0.data import LeaderChangeMessage, Voter
from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
from kio.schema.voters_record.v0.data import VotersRecord
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i64

from keeperless.protocol.records import Record, build_batch

__all__ = [
    "ABORT",
    "COMMIT",
    "KRAFT_VERSION",
    "KRAFT_VOTERS",
    "LEADER_CHANGE",
    "SNAPSHOT_FOOTER",
    "SNAPSHOT_HEADER",
    "control_batch",
    "control_key",
    "control_type",
    "decode_control",
    "encode_control",
    "leader_change",
    "snapshot_footer",
    "snapshot_header",
]

ABORT, COMMIT, LEADER_CHANGE, SNAPSHOT_HEADER, SNAPSHOT_FOOTER = 0, 1, 2, 3, 4
KRAFT_VERSION, KRAFT_VOTERS = 5, 6  # KIP-853
CONTROL_NAMES = {
    ABORT: "ABORT",
    COMMIT: "COMMIT",
    LEADER_CHANGE: "LEADER_CHANGE",
    SNAPSHOT_HEADER: "SNAPSHOT_HEADER",
    SNAPSHOT_FOOTER: "SNAPSHOT_FOOTER",
    KRAFT_VERSION: "KRAFT_VERSION",
    KRAFT_VOTERS: "KRAFT_VOTERS",
}
_KEY = struct.Struct(">hh")


def encode_control(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def leader_change(leader_id: int, voters: list[int], granting: list[int]) -> tuple[int, bytes]:
    msg = LeaderChangeMessage(
        version=i16(0),
        leader_id=i32(leader_id),  # type: ignore[arg-type]
        voters=tuple(Voter(voter_id=i32(v)) for v in voters),
        granting_voters=tuple(Voter(voter_id=i32(v)) for v in granting),
    )
    return LEADER_CHANGE, encode_control(msg)


def snapshot_header(last_contained_log_timestamp_ms: int) -> tuple[int, bytes]:
    msg = SnapshotHeaderRecord(
        version=i16(0), last_contained_log_timestamp=i64(last_contained_log_timestamp_ms)
    )
    return SNAPSHOT_HEADER, encode_control(msg)


def snapshot_footer() -> tuple[int, bytes]:
    return SNAPSHOT_FOOTER, encode_control(SnapshotFooterRecord(version=i16(0)))


def control_key(kind: int) -> bytes:
    """The key of a control record of type ``kind`` (version 0)."""
    return _KEY.pack(0, kind)


def control_batch(
    kind_value: tuple[int, bytes],
    *,
    base_offset: int = 0,
    timestamp_ms: int = 0,
    leader_epoch: int = -1,
) -> bytes:
    kind, value = kind_value
    return build_batch(
        [(_KEY.pack(0, kind), value, ())],
        base_offset=base_offset,
        timestamp_ms=timestamp_ms,
        leader_epoch=leader_epoch,
        control=True,
    )


def control_type(record: Record) -> int:
    if record.key is None or len(record.key) < 4:
        raise ValueError("control record without a valid key")
    return int(_KEY.unpack_from(record.key)[1])


_READERS = {
    LEADER_CHANGE: LeaderChangeMessage,
    SNAPSHOT_HEADER: SnapshotHeaderRecord,
    SNAPSHOT_FOOTER: SnapshotFooterRecord,
    KRAFT_VERSION: KRaftVersionRecord,
    KRAFT_VOTERS: VotersRecord,
}


def decode_control(record: Record) -> tuple[int, Any]:
    """(control type, decoded kio message or None) of a control record."""
    kind = control_type(record)
    cls = _READERS.get(kind)
    if cls is None or record.value is None:
        return kind, None
    value: Any
    value, _ = entity_reader(cls)(record.value, 0)
    return kind, value
