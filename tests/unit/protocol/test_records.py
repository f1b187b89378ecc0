from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keeperless.protocol.records import (
    CorruptBatchError,
    build_batch,
    decode_records,
    iter_batches,
    patch_offsets,
    read_header,
    record_values,
)

records_st = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=20)),
        st.one_of(st.none(), st.binary(max_size=50)),
        st.lists(
            st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=2
        ),
    ),
    min_size=1,
    max_size=10,
)


@given(records_st, st.integers(0, 2**40))
def test_build_decode_roundtrip(records: list, base: int) -> None:
    batch = build_batch(records, base_offset=base, timestamp_ms=1234)
    [(pos, h)] = list(iter_batches(batch))
    assert pos == 0
    assert h.record_count == len(records)
    assert h.last_offset == base + len(records) - 1
    decoded = decode_records(batch)
    assert [(r.key, r.value, list(r.headers)) for r in decoded] == [
        (k, v, list(hs)) for k, v, hs in records
    ]
    assert [r.offset for r in decoded] == list(range(base, base + len(records)))


def test_patching_offsets_keeps_crc_valid() -> None:
    buf = bytearray(build_batch([(b"k", b"v", [])] * 3))
    patch_offsets(buf, 0, 1000, 7)
    [(_, h)] = list(iter_batches(buf))
    assert (h.base_offset, h.partition_leader_epoch, h.last_offset) == (1000, 7, 1002)


def test_corruption_is_detected_with_position() -> None:
    one = build_batch([(None, b"x" * 10, [])])
    buf = bytearray(one + one)
    buf[len(one) + 70] ^= 0xFF
    with pytest.raises(CorruptBatchError, match="CRC") as e:
        list(iter_batches(buf))
    assert e.value.position == len(one)


def test_truncated_batch_is_detected() -> None:
    one = build_batch([(None, b"x" * 10, [])])
    with pytest.raises(CorruptBatchError, match="truncated"):
        list(iter_batches(one[:-3]))
    assert read_header(one).magic == 2


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decode_compressed(codec: int) -> None:
    import struct

    import cramjam
    import crc32c

    plain = build_batch([(b"k%d" % i, b"v" * i, []) for i in range(5)])
    body = plain[61:]
    comp = {
        1: lambda b: bytes(cramjam.gzip.compress(b)),
        2: lambda b: bytes(cramjam.snappy.compress_raw(b)),
        3: lambda b: bytes(cramjam.lz4.compress(b)),
        4: lambda b: bytes(cramjam.zstd.compress(b)),
    }[codec](body)
    hdr = bytearray(plain[:61])
    struct.pack_into(">i", hdr, 8, 49 + len(comp))
    struct.pack_into(">h", hdr, 21, codec)
    out = hdr + comp
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    assert [r.value for r in decode_records(bytes(out))] == [b"v" * i for i in range(5)]


def test_log_append_time_restamps_and_keeps_crc_valid() -> None:
    from keeperless.protocol.records import ATTR_TIMESTAMP_TYPE, set_log_append_time

    buf = bytearray(build_batch([(b"k", b"v", [])] * 2, timestamp_ms=5))
    set_log_append_time(buf, 0, 99_000)
    [(_, h)] = list(iter_batches(buf))
    assert h.max_timestamp == 99_000
    assert h.attributes & ATTR_TIMESTAMP_TYPE


def test_keyless_records_are_laid_out_as_any_other() -> None:
    """Records without key or headers (a metadata log entry's) take a shorter path in
    build_batch: the same bytes as the general one (taken when timestamps differ), for
    offset deltas and value lengths on both sides of each varint's length."""
    import random

    rng = random.Random(7)
    for n in (1, 63, 64, 65, 300, 4100):
        sizes = (0, 1, 40, 57, 58, 63, 64, 100, 3999, 4000, 5000, 9000)  # 1-3 byte varints
        recs: list[tuple[None, bytes | None, tuple[()]]] = [
            (None, rng.randbytes(rng.choice(sizes)), ()) for _ in range(n)
        ]
        recs[n // 2] = (None, None, ())  # (a null value)
        fast = build_batch(recs, base_offset=3, timestamp_ms=5)
        general = build_batch(recs, base_offset=3, timestamp_ms=5, timestamp_deltas=[0] * n)
        assert fast == general
        assert list(record_values(fast)) == [v for _, v, _ in recs]


def test_record_values_skips_keys_at_every_offset_delta() -> None:
    """record_values reads past each record's attributes, deltas and key without
    building it: one-byte offset deltas, two-byte ones (a batch's 64th record on) and
    longer, keys absent, empty and long."""
    import random

    rng = random.Random(11)
    recs = [
        (rng.choice([None, b"", rng.randbytes(rng.choice([1, 60, 70, 200]))]), rng.randbytes(9), ())
        for _ in range(9000)
    ]
    batch = build_batch(recs, timestamp_ms=1)
    assert list(record_values(batch)) == [v for _, v, _ in recs]
    assert [r.value for r in decode_records(batch)] == [v for _, v, _ in recs]
