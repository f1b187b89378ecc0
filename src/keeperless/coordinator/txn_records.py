"""`__transaction_state` records (Kafka's TransactionLogKey and TransactionLogValue):
key version 0 (transactional id); value version 0, or version 1 (flexible, written once
``transaction.version`` >= 1 is finalized, KIP-890) with its tagged fields: the previous
and next producer ids (tags 0, 1) and the transaction version the client used (tag 2),
which decides whether the transaction ends with an epoch bump (TV2).

States (Kafka's numbers): Empty 0, Ongoing 1, PrepareCommit 2, PrepareAbort 3,
CompleteCommit 4, CompleteAbort 5, Dead 6, PrepareEpochFence 7."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum

from keeperless.protocol.varint import compact_string, read_uvarint, skip_tagged_fields, uvarint

__all__ = [
    "VALID_PREVIOUS",
    "TxnMetadata",
    "TxnStatus",
    "parse_txn_record",
    "txn_key",
    "txn_value",
    "valid_transition",
    "value_version",
]

_S16 = struct.Struct(">h")
_VALUE_HEAD = struct.Struct(">hqhib")
_I64 = struct.Struct(">q")


class TxnStatus(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


# Kafka's TransactionState.validPreviousStates: a transition from any other state is a
# bug, refused (IllegalStateException in Kafka). PrepareAbort from the idle states is a
# TV2 abort with nothing open, which bumps the epoch (Kafka 4.x).
VALID_PREVIOUS: dict[TxnStatus, frozenset[TxnStatus]] = {
    TxnStatus.EMPTY: frozenset(
        {TxnStatus.EMPTY, TxnStatus.COMPLETE_COMMIT, TxnStatus.COMPLETE_ABORT}
    ),
    TxnStatus.ONGOING: frozenset(
        {TxnStatus.ONGOING, TxnStatus.EMPTY, TxnStatus.COMPLETE_COMMIT, TxnStatus.COMPLETE_ABORT}
    ),
    TxnStatus.PREPARE_COMMIT: frozenset({TxnStatus.ONGOING}),
    TxnStatus.PREPARE_ABORT: frozenset(
        {
            TxnStatus.ONGOING,
            TxnStatus.PREPARE_EPOCH_FENCE,
            TxnStatus.EMPTY,
            TxnStatus.COMPLETE_COMMIT,
            TxnStatus.COMPLETE_ABORT,
        }
    ),
    TxnStatus.COMPLETE_COMMIT: frozenset({TxnStatus.PREPARE_COMMIT}),
    TxnStatus.COMPLETE_ABORT: frozenset({TxnStatus.PREPARE_ABORT}),
    TxnStatus.DEAD: frozenset(
        {TxnStatus.EMPTY, TxnStatus.COMPLETE_COMMIT, TxnStatus.COMPLETE_ABORT}
    ),
    TxnStatus.PREPARE_EPOCH_FENCE: frozenset({TxnStatus.ONGOING}),
}


def valid_transition(old: TxnStatus, new: TxnStatus) -> bool:
    return old in VALID_PREVIOUS[new]


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnStatus
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    update_ms: int = -1
    # the epoch before the coordinator bumped it (in memory only: Kafka's lastProducerEpoch)
    prev_epoch: int = -1
    # KIP-890 part 2 (value v1's tagged fields)
    client_tv: int = 0  # the transaction version of the client's last request
    prev_producer_id: int = -1  # the id before an exhausted epoch gave a new one
    next_producer_id: int = -1  # the id the producer gets once this transaction ends


def _str(s: str) -> bytes:
    b = s.encode()
    return _S16.pack(len(b)) + b


def _read_str(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = _S16.unpack_from(buf, pos)
    return buf[pos + 2 : pos + 2 + max(n, 0)].decode(), pos + 2 + max(n, 0)


def txn_key(transactional_id: str) -> bytes:
    return _S16.pack(0) + _str(transactional_id)


def txn_value(md: TxnMetadata, version: int = 0) -> bytes:
    """The value record of ``md``: version 0, or the flexible version 1."""
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(md.partitions):
        by_topic.setdefault(topic, []).append(index)
    out = bytearray(
        _VALUE_HEAD.pack(version, md.producer_id, md.producer_epoch, md.timeout_ms, md.state)
    )
    if version == 0:
        out += struct.pack(">i", len(by_topic))
        for topic, indexes in by_topic.items():
            out += _str(topic) + struct.pack(f">i{len(indexes)}i", len(indexes), *indexes)
        out += struct.pack(">qq", md.update_ms, md.start_ms)
        return bytes(out)
    out += uvarint(len(by_topic) + 1)
    for topic, indexes in by_topic.items():
        out += compact_string(topic) + uvarint(len(indexes) + 1)
        out += struct.pack(f">{len(indexes)}i", *indexes) + b"\x00"
    out += struct.pack(">qq", md.update_ms, md.start_ms)
    tags = []
    if md.prev_producer_id != -1:
        tags.append((0, _I64.pack(md.prev_producer_id)))
    if md.next_producer_id != -1:
        tags.append((1, _I64.pack(md.next_producer_id)))
    if md.client_tv != 0:
        tags.append((2, _S16.pack(md.client_tv)))
    out += uvarint(len(tags))
    for tag, data in tags:
        out += uvarint(tag) + uvarint(len(data)) + data
    return bytes(out)


def _parse_v1(value: bytes, md: TxnMetadata) -> None:
    pos = _VALUE_HEAD.size
    n, pos = read_uvarint(value, pos)
    for _ in range(max(n - 1, 0)):
        size, pos = read_uvarint(value, pos)
        topic = value[pos : pos + size - 1].decode()
        pos += size - 1
        m, pos = read_uvarint(value, pos)
        md.partitions.update((topic, i) for i in struct.unpack_from(f">{m - 1}i", value, pos))
        pos += 4 * (m - 1)
        pos = skip_tagged_fields(value, pos)
    md.update_ms, md.start_ms = struct.unpack_from(">qq", value, pos)
    pos += 16
    count, pos = read_uvarint(value, pos)
    for _ in range(count):
        tag, pos = read_uvarint(value, pos)
        size, pos = read_uvarint(value, pos)
        if tag == 0:
            (md.prev_producer_id,) = _I64.unpack_from(value, pos)
        elif tag == 1:
            (md.next_producer_id,) = _I64.unpack_from(value, pos)
        elif tag == 2:
            (md.client_tv,) = _S16.unpack_from(value, pos)
        pos += size


def parse_txn_record(key: bytes, value: bytes | None) -> tuple[str, TxnMetadata | None] | None:
    """(transactional id, its state; None for a tombstone), or None if not a txn record.
    ValueError (or struct.error) for a value of an unknown version or cut short."""
    (version,) = _S16.unpack_from(key, 0)
    if version != 0:
        return None
    tid, _ = _read_str(key, 2)
    if value is None:
        return tid, None
    vv, pid, epoch, timeout, state = _VALUE_HEAD.unpack_from(value, 0)
    md = TxnMetadata(tid, pid, epoch, timeout, TxnStatus(state))
    if vv == 1:
        _parse_v1(value, md)
        return tid, md
    if vv != 0:
        raise ValueError(f"unknown TransactionLogValue version {vv}")
    pos = _VALUE_HEAD.size
    (n,) = struct.unpack_from(">i", value, pos)
    pos += 4
    for _ in range(max(n, 0)):
        topic, pos = _read_str(value, pos)
        (m,) = struct.unpack_from(">i", value, pos)
        md.partitions.update((topic, i) for i in struct.unpack_from(f">{m}i", value, pos + 4))
        pos += 4 + 4 * m
    md.update_ms, md.start_ms = struct.unpack_from(">qq", value, pos)
    return tid, md


def value_version(md: TxnMetadata, finalized_tv: int) -> int:
    """Kafka's TransactionVersion.transactionLogValueVersion: 1 from TV1 on."""
    return 1 if finalized_tv >= 1 or md.client_tv >= 1 else 0
