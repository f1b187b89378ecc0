"""Kafka record batches (magic v2), treated as bytes on the hot path.

The produce path only reads batch headers, checks the CRC-32C and patches the base
offset (and leader epoch), which the CRC does not cover. Records are decoded only by
the features that need them (group coordinator loading, metadata log, tools).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import crc32c

from keeperless.protocol.varint import read_uvarint, read_varint, write_varint

__all__ = [
    "BATCH_HEADER_SIZE",
    "BatchHeader",
    "CorruptBatchError",
    "Record",
    "build_batch",
    "complete_batches",
    "crc_problem",
    "decode_records",
    "header_problem",
    "iter_batches",
    "patch_offsets",
    "raw_records",
    "read_header",
    "rebuild_batch",
    "record_slices",
    "set_log_append_time",
]

BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength, not counted in batchLength
_HEADER = struct.Struct(">qiibIhiqqqhii")


def _zigzag_varint(n: int) -> bytes:
    out = bytearray()
    write_varint(out, n)
    return bytes(out)


# the zig-zag varints of 0..4095 (offset deltas and lengths in a batch being built)
_SMALL_VARINTS = tuple(_zigzag_varint(n) for n in range(4096))
_OFFSET_LEN = struct.Struct(">qi")

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

NO_PRODUCER_ID = -1


class CorruptBatchError(ValueError):
    """A batch failed validation; ``position`` is its byte offset in the buffer.
    ``incomplete``: the batch is cut short by the end of the buffer (the rest may follow
    in the next read, or was never written), not invalid in itself."""

    def __init__(self, message: str, position: int, incomplete: bool = False) -> None:
        super().__init__(f"{message} at byte {position}")
        self.reason = message
        self.position = position
        self.incomplete = incomplete


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes on disk/wire, including baseOffset and batchLength."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


MAX_BATCH_BYTES = 1 << 30  # no batch is larger (Kafka's message.max.bytes tops out below)


def header_problem(h: BatchHeader) -> str | None:
    """Why a batch header cannot be a valid v2 batch's, or None."""
    if h.magic != 2:
        return f"unsupported record batch magic {h.magic}"
    if not BATCH_HEADER_SIZE - LOG_OVERHEAD <= h.batch_length <= MAX_BATCH_BYTES:
        return f"invalid batch length {h.batch_length}"
    if h.record_count < 0 or h.last_offset_delta < 0:
        return "invalid record count"
    return None


def crc_problem(batch: bytes | bytearray | memoryview, h: BatchHeader) -> str | None:
    """Whether a whole batch's CRC-32C (over attributes onwards) matches its header."""
    computed = crc32c.crc32c(memoryview(batch)[21 : h.size])
    if computed != h.crc:
        return f"CRC mismatch (stored {h.crc}, computed {computed})"
    return None


def iter_batches(
    buf: bytes | bytearray | memoryview, verify_crc: bool = True
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each complete, valid batch; raise CorruptBatchError
    at the first invalid or incomplete one."""
    pos = 0
    end = len(buf)
    while pos < end:
        if end - pos < BATCH_HEADER_SIZE:
            raise CorruptBatchError("truncated batch header", pos, incomplete=True)
        h = read_header(buf, pos)
        problem = header_problem(h)
        if problem is not None:
            raise CorruptBatchError(problem, pos)
        if pos + h.size > end:
            raise CorruptBatchError("truncated batch", pos, incomplete=True)
        if verify_crc:
            # a view only for the CRC: a view kept in this frame would pin ``buf`` (an
            # exception's traceback keeps the frame; a bytearray could not be resized)
            with memoryview(buf) as mv:
                problem = crc_problem(mv[pos : pos + h.size], h)
            if problem is not None:
                raise CorruptBatchError(problem, pos)
        yield pos, h
        pos += h.size


def complete_batches(
    buf: bytes | bytearray | memoryview, verify_crc: bool = True
) -> list[tuple[int, BatchHeader]]:
    """The whole batches of a read that may end inside a batch (a fetch or a log read
    of a byte limit): the cut batch at the end is left out; an invalid batch raises."""
    out: list[tuple[int, BatchHeader]] = []
    try:
        for item in iter_batches(buf, verify_crc):
            out.append(item)
    except CorruptBatchError as e:
        if not e.incomplete:
            raise
    return out


def patch_offsets(buf: bytearray, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Assign offsets and leader epoch in place; neither is covered by the CRC."""
    struct.pack_into(">q", buf, pos, base_offset)
    struct.pack_into(">i", buf, pos + 12, leader_epoch)


def set_log_append_time(buf: bytearray, pos: int, now_ms: int) -> None:
    """Stamp a batch with the broker's time (topic message.timestamp.type=LogAppendTime):
    timestamp type bit and max timestamp, then the CRC, which covers both."""
    (attributes,) = struct.unpack_from(">h", buf, pos + 21)
    struct.pack_into(">h", buf, pos + 21, attributes | ATTR_TIMESTAMP_TYPE)
    struct.pack_into(">q", buf, pos + 35, now_ms)
    (length,) = struct.unpack_from(">i", buf, pos + 8)
    end = pos + LOG_OVERHEAD + length
    struct.pack_into(">I", buf, pos + 17, crc32c.crc32c(memoryview(buf)[pos + 21 : end]))


# --- records -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def _write_bytes(out: bytearray, b: bytes | None) -> None:
    if b is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(b))
        out += b


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]],
    *,
    base_offset: int = 0,
    timestamp_ms: int = 0,
    leader_epoch: int = -1,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    control: bool = False,
    transactional: bool = False,
    timestamp_deltas: Sequence[int] = (),
) -> bytes:
    """Encode an uncompressed v2 batch of (key, value, headers) records.

    Records share ``timestamp_ms`` unless ``timestamp_deltas`` gives each its offset from it.
    """
    body = bytearray()
    small = _SMALL_VARINTS
    for delta, (key, value, headers) in enumerate(records):
        if key is None and value is not None and not headers and not timestamp_deltas:
            n = len(value)
            if delta < 4096 and n < 4000:  # (a metadata log entry's records: ~3x faster)
                # attributes 0, timestamp delta 0, offset delta, key -1 (null), value
                head = b"\x00\x00" + small[delta] + b"\x01" + small[n]
                body += small[len(head) + n + 1]  # (+ the headers' count)
                body += head
                body += value
                body += b"\x00"  # no headers
                continue
        rec = bytearray(b"\x00")  # attributes
        write_varint(rec, timestamp_deltas[delta] if timestamp_deltas else 0)
        write_varint(rec, delta)
        _write_bytes(rec, key)
        _write_bytes(rec, value)
        write_varint(rec, len(headers))
        for hk, hv in headers:
            _write_bytes(rec, hk.encode())
            _write_bytes(rec, hv)
        write_varint(body, len(rec))
        body += rec
    attributes = (ATTR_CONTROL if control else 0) | (ATTR_TRANSACTIONAL if transactional else 0)
    count = len(records)
    header = _HEADER.pack(
        base_offset,
        BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body),
        leader_epoch,
        2,
        0,
        attributes,
        max(count - 1, 0),
        timestamp_ms,
        timestamp_ms + max(timestamp_deltas, default=0),
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    out = bytearray(header) + body
    struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[21:]))
    return bytes(out)


def _decompress(codec: int, data: bytes) -> bytes:
    import cramjam

    if codec == 1:
        return bytes(cramjam.gzip.decompress(data))
    if codec == 2:
        if data[:8] == b"\x82SNAPPY\x00":  # xerial framing used by the Java client
            out = bytearray()
            pos = 16
            while pos < len(data):
                (n,) = struct.unpack_from(">i", data, pos)
                out += bytes(cramjam.snappy.decompress_raw(data[pos + 4 : pos + 4 + n]))
                pos += 4 + n
            return bytes(out)
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == 3:
        return bytes(cramjam.lz4.decompress(data))
    if codec == 4:
        return bytes(cramjam.zstd.decompress(data))
    raise ValueError(f"unknown compression codec {codec}")


def decode_records(batch: bytes | memoryview) -> list[Record]:
    """Decode every record of one batch (decompressing if needed)."""
    h = read_header(batch, 0)
    data: bytes | memoryview = memoryview(batch)[BATCH_HEADER_SIZE : h.size]
    if h.compression:
        data = _decompress(h.compression, bytes(data))
    out: list[Record] = []
    pos = 0
    for _ in range(h.record_count):
        length, pos = read_varint(data, pos)
        end = pos + length
        pos += 1  # attributes
        ts_delta, pos = read_varint(data, pos)
        off_delta, pos = read_varint(data, pos)
        key, pos = _read_bytes(data, pos)
        value, pos = _read_bytes(data, pos)
        n_headers, pos = read_varint(data, pos)
        headers = []
        for _ in range(n_headers):
            hk, pos = _read_bytes(data, pos)
            hv, pos = _read_bytes(data, pos)
            headers.append(((hk or b"").decode(), hv))
        if pos != end:
            raise ValueError("record length mismatch")
        out.append(
            Record(
                h.base_offset + off_delta, h.base_timestamp + ts_delta, key, value, tuple(headers)
            )
        )
    return out


def record_values(batch: bytes | memoryview) -> Iterator[bytes | None]:
    """The values of an uncompressed batch's records, without building Record objects
    (metadata snapshots and log entries: a million records load in seconds, not tens)."""
    h = read_header(batch, 0)
    if h.compression:
        for rec in decode_records(batch):
            yield rec.value
        return
    data = bytes(memoryview(batch)[BATCH_HEADER_SIZE : h.size])
    pos = 0
    for _ in range(h.record_count):
        length = data[pos]  # (a one- or two-byte varint: a record under 8 KiB, zig-zag)
        if length < 128:
            pos += 1
        elif data[pos + 1] < 128:
            length = (length & 0x7F) | (data[pos + 1] << 7)
            pos += 2
        else:
            length, pos = read_uvarint(data, pos)
        length = (length >> 1) ^ -(length & 1)
        end = pos + length
        # attributes, then timestamp delta, offset delta and key length as one-byte
        # varints (zig-zag 0 = 0, -1 = 1) in the common case
        b1, b2, b3 = data[pos + 1], data[pos + 2], data[pos + 3]
        if b1 < 128 and b2 < 128 and b3 < 128:
            pos += 4
            if b3 > 1:
                pos += b3 >> 1
        elif b1 < 128 and b2 >= 128 and data[pos + 3] < 128 and data[pos + 4] < 128:
            # an offset delta of 64-8191 (two bytes: the most of a big batch's records)
            b3 = data[pos + 4]
            pos += 5
            if b3 > 1:
                pos += b3 >> 1
        else:
            pos += 1
            _, pos = read_varint(data, pos)  # timestamp delta
            _, pos = read_varint(data, pos)  # offset delta
            n, pos = read_varint(data, pos)  # key
            if n > 0:
                pos += n
        n = data[pos]  # the value's length, as the record's
        if n < 128:
            pos += 1
        elif data[pos + 1] < 128:
            n = (n & 0x7F) | (data[pos + 1] << 7)
            pos += 2
        else:
            n, pos = read_uvarint(data, pos)
        n = (n >> 1) ^ -(n & 1)
        if n < 0:
            yield None
        else:
            if pos + n > end:
                raise ValueError("record length mismatch")
            yield data[pos : pos + n]
        pos = end
    if pos != len(data):
        raise ValueError("record length mismatch")


def _read_bytes(data: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_varint(data, pos)
    if n < 0:
        return None, pos
    return bytes(data[pos : pos + n]), pos + n


def raw_records(batch: bytes | memoryview) -> Iterator[tuple[int, bytes | None, bool, bytes]]:
    """(offset, key, value is null, the record's bytes with its length prefix) for each
    record of one batch, decompressed if need be: what the log cleaner decides on and
    copies unchanged (attributes, deltas, headers)."""
    h = read_header(batch, 0)
    data: bytes | memoryview = memoryview(batch)[BATCH_HEADER_SIZE : h.size]
    if h.compression:
        data = _decompress(h.compression, bytes(data))
    pos = 0
    for _ in range(h.record_count):
        start = pos
        length, pos = read_varint(data, pos)
        end = pos + length
        pos += 1  # attributes
        _, pos = read_varint(data, pos)  # timestamp delta
        off_delta, pos = read_varint(data, pos)
        key, pos = _read_bytes(data, pos)
        n, pos = read_varint(data, pos)
        yield h.base_offset + off_delta, key, n < 0, bytes(data[start:end])
        pos = end
    if pos != len(data):
        raise ValueError("record length mismatch")


def record_slices(batch: bytes | memoryview) -> list[bytes]:
    """The bytes of each record of one batch with its length prefix, decompressed if
    need be (only the lengths are read: a cleaner that already knows which records it
    keeps cuts them out this way)."""
    h = read_header(batch, 0)
    data: bytes | memoryview = memoryview(batch)[BATCH_HEADER_SIZE : h.size]
    if h.compression:
        data = _decompress(h.compression, bytes(data))
    out = []
    pos = 0
    for _ in range(h.record_count):
        b = data[pos]
        if b < 0x80:  # a record under 64 bytes: one byte of zigzag varint
            length, body = (b >> 1) ^ -(b & 1), pos + 1
        else:
            length, body = read_varint(data, pos)
        end = body + length
        out.append(bytes(data[pos:end]))
        pos = end
    if pos != len(data):
        raise ValueError("record length mismatch")
    return out


def rebuild_batch(h: BatchHeader, records: Sequence[bytes]) -> bytes:
    """The batch ``h`` with only ``records`` (raw, as raw_records gives them), written
    uncompressed: base offset, last offset delta, timestamps, producer fields and leader
    epoch stay (a compacted log keeps offsets; a producer's sequences stay known)."""
    body = b"".join(records)
    header = _HEADER.pack(
        h.base_offset,
        BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body),
        h.partition_leader_epoch,
        2,
        0,
        h.attributes & ~ATTR_COMPRESSION_MASK,
        h.last_offset_delta,
        h.base_timestamp,
        h.max_timestamp,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        len(records),
    )
    out = bytearray(header) + body
    struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[21:]))
    return bytes(out)
