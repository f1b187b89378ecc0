"""`dump-log`: print the batches (and records) of log segments, metadata segments and
snapshot files, in the shape of Kafka's DumpLogSegments. A corrupt file is reported at
the offending position."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from keeperless.broker.txn_state import marker_epoch
from keeperless.metadata.codec import MetadataRecordError, decode_record, record_to_json
from keeperless.protocol.control import ABORT, COMMIT, CONTROL_NAMES, control_type, decode_control
from keeperless.protocol.records import (
    ATTR_TIMESTAMP_TYPE,
    BATCH_HEADER_SIZE,
    CorruptBatchError,
    decode_records,
    read_header,
)
from keeperless.storage.batch_scan import BatchScan
from keeperless.tools.offsets_decoder import (
    decode_offsets_record,
    decode_share_state_record,
    decode_transaction_record,
)

__all__ = ["dump_file"]

_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def _batches(
    path: Path, max_bytes: int | None = None
) -> Iterator[tuple[int, memoryview, str | None]]:
    """(position, batch bytes, why it is invalid or None) for each batch (those within
    the first ``max_bytes`` bytes). A batch failing its CRC is given too, and the next
    ones after it, as Kafka's tool does (``isvalid: false``); a batch the file ends
    inside or a header no batch has ends the dump: CorruptBatchError at its position."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        end = size if max_bytes is None else min(size, max_bytes)
        pos = 0
        while True:
            scan = BatchScan(f.fileno(), pos, end, verify_crc=True)
            for at, _, data in scan:
                yield at, data, None
            stop = scan.stop
            assert stop is not None
            if stop.clean or (stop.incomplete and end < size):
                return
            if not stop.reason.startswith("CRC mismatch"):
                raise CorruptBatchError(stop.reason, stop.position)
            h = read_header(os.pread(f.fileno(), BATCH_HEADER_SIZE, stop.position))
            yield (
                stop.position,
                memoryview(os.pread(f.fileno(), h.size, stop.position)),
                stop.reason,
            )
            pos = stop.position + h.size


def dump_file(
    path: Path,
    out: TextIO,
    decoder: bool,
    print_data: bool,
    deep: bool,
    skip_record_metadata: bool = False,
    offsets_decoder: bool = False,
    max_bytes: int | None = None,
    transaction_decoder: bool = False,
    share_state_decoder: bool = False,
) -> bool:
    """Print one file; returns False if it was found corrupt (after printing the rest).
    ``skip_record_metadata`` prints only each record's contents (Kafka's
    --skip-record-metadata); ``offsets_decoder`` decodes __consumer_offsets records,
    ``transaction_decoder`` __transaction_state ones, ``share_state_decoder``
    __share_group_state ones; transaction markers are printed
    as Kafka's (endTxnMarker, coordinatorEpoch);
    ``max_bytes`` reads only the batches within the file's first bytes."""
    if path.suffix in (".index", ".timeindex"):
        return dump_index(path, out)
    if path.suffix in (".snapshot", ".txnindex"):
        return dump_producer_file(path, out)
    metadata = (
        decoder
        or path.name.endswith(".checkpoint")
        or "__cluster_metadata" in str(path.parent.name)
    )
    print(f"Dumping {path}", file=out)
    if path.name.endswith(".log") or path.name.endswith(".checkpoint"):
        start = path.name.split("-")[0].split(".")[0]
        if start.isdigit():
            print(f"Log starting offset: {int(start)}", file=out)
    records_wanted = (
        deep or print_data or decoder or offsets_decoder or transaction_decoder
        or share_state_decoder
    )  # fmt: skip
    invalid = 0
    try:
        for pos, data, problem in _batches(path, max_bytes):
            h = read_header(data)
            ts_type = "LogAppendTime" if h.attributes & ATTR_TIMESTAMP_TYPE else "CreateTime"
            print(
                f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: "
                f"{h.record_count} baseSequence: {h.base_sequence} lastSequence: "
                f"{h.last_sequence} producerId: {h.producer_id} producerEpoch: "
                f"{h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
                f"isTransactional: {str(h.is_transactional).lower()} isControl: "
                f"{str(h.is_control).lower()} position: {pos} {ts_type}: {h.max_timestamp} "
                f"size: {h.size} magic: {h.magic} compresscodec: "
                f"{_CODECS.get(h.compression, h.compression)} crc: {h.crc} isvalid: "
                f"{str(problem is None).lower()}",
                file=out,
            )
            if problem is not None:
                invalid += 1
                print(f"| records not read: {problem}", file=out)
                continue
            if not records_wanted:
                continue
            for rec in decode_records(data):
                line = (
                    ""
                    if skip_record_metadata
                    else f"| offset: {rec.offset} {ts_type}: {rec.timestamp} keySize: "
                    f"{-1 if rec.key is None else len(rec.key)} valueSize: "
                    f"{-1 if rec.value is None else len(rec.value)} headerKeys: "
                    f"[{','.join(k for k, _ in rec.headers)}]"
                )
                if h.is_control and control_type(rec) in (ABORT, COMMIT):
                    name = CONTROL_NAMES[control_type(rec)]
                    line += f" endTxnMarker: {name} coordinatorEpoch: {marker_epoch(rec.value)}"
                elif h.is_control:
                    kind, msg = decode_control(rec)
                    name = CONTROL_NAMES.get(kind, f"UNKNOWN({kind})")
                    line += f" {name}: {_control_json(msg)}"
                elif transaction_decoder:
                    line += decode_transaction_record(rec.key, rec.value)
                elif share_state_decoder:
                    line += decode_share_state_record(rec.key, rec.value)
                elif offsets_decoder:
                    line += decode_offsets_record(rec.key, rec.value)
                elif metadata and rec.value is not None:
                    try:
                        decoded, version = decode_record(rec.value)
                        line += " payload: " + json.dumps(
                            record_to_json(decoded, version), separators=(",", ":")
                        )
                    except MetadataRecordError as e:
                        line += f" payload: <undecodable metadata record: {e}>"
                elif print_data:
                    line += f" key: {_text(rec.key)} payload: {_text(rec.value)}"
                print(line, file=out)
    except CorruptBatchError as e:
        print(
            f"Found a corrupt or truncated batch in {path} at position {e.position}: "
            f"{str(e).rsplit(' at byte', 1)[0]}",
            file=out,
        )
        return False
    if invalid:
        print(f"Found {invalid} batch(es) failing their CRC in {path}", file=out)
    return not invalid


def dump_producer_file(path: Path, out: TextIO) -> bool:
    """A producer snapshot (one line per entry: each batch of a producer's deduplication
    window) or a transaction index (one line per aborted transaction), in the words of
    Kafka's tool."""
    from keeperless.storage.producer_files import (
        CorruptSnapshotError,
        decode_snapshot,
        decode_txn_index,
    )

    print(f"Dumping {path}", file=out)
    data = path.read_bytes()
    if path.suffix == ".txnindex":
        for a in decode_txn_index(data):
            print(
                f"version: 0 producerId: {a.producer_id} firstOffset: {a.first_offset} "
                f"lastOffset: {a.last_offset} lastStableOffset: {a.last_stable_offset}",
                file=out,
            )
        if len(data) % 34:
            print(f"Found a truncated transaction index entry in {path}", file=out)
            return False
        return True
    try:
        entries = decode_snapshot(data)
    except CorruptSnapshotError as err:
        print(f"Found a corrupt producer snapshot {path}: {err}", file=out)
        return False
    for e in entries:
        txn = "None" if e.current_txn_first_offset < 0 else e.current_txn_first_offset
        first_seq = e.last_sequence - e.offset_delta
        print(
            f"producerId: {e.producer_id} producerEpoch: {e.epoch} coordinatorEpoch: "
            f"{e.coordinator_epoch} currentTxnFirstOffset: {txn} lastTimestamp: "
            f"{e.timestamp} firstSequence: {first_seq} lastSequence: {e.last_sequence} "
            f"lastOffset: {e.last_offset} offsetDelta: {e.offset_delta} timestamp: "
            f"{e.timestamp}",
            file=out,
        )
    return True


def dump_index(path: Path, out: TextIO) -> bool:
    """An offset index (offset: N position: P) or time index (timestamp: T offset: N), as
    Kafka's tool prints them; offsets are absolute (the segment's base plus the entry's)."""
    import struct

    start = path.name.split(".")[0]
    base = int(start) if start.isdigit() else 0
    data = path.read_bytes()
    time_index = path.suffix == ".timeindex"
    size = 12 if time_index else 8
    print(f"Dumping {path}", file=out)
    for pos in range(0, len(data) - len(data) % size, size):
        if time_index:
            ts, rel = struct.unpack_from(">qi", data, pos)
            if pos and ts == 0 and rel == 0:
                break  # the unused, zero-filled end of a preallocated index
            print(f"timestamp: {ts} offset: {base + rel}", file=out)
        else:
            rel, position = struct.unpack_from(">ii", data, pos)
            if pos and rel == 0 and position == 0:
                break
            print(f"offset: {base + rel} position: {position}", file=out)
    if len(data) % size:
        print(
            f"Found a truncated index entry in {path} at position "
            f"{len(data) - len(data) % size}: {len(data) % size} of {size} bytes",
            file=out,
        )
        return False
    return True


def _text(b: bytes | None) -> str:
    if b is None:
        return "null"
    return b.decode("utf-8", "backslashreplace")


def _control_json(msg: object) -> str:
    """A control record's message as Kafka prints it (camelCase fields)."""
    import dataclasses

    def camel(name: str) -> str:
        head, *rest = name.split("_")
        return head + "".join(p.title() for p in rest)

    def conv(v: object) -> object:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {camel(f.name): conv(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, tuple | list):
            return [conv(x) for x in v]
        return v

    if msg is None:
        return "{}"
    return json.dumps(conv(msg), default=str, separators=(",", ":"))
