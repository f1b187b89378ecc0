"""A share group's records in __consumer_offsets (coordinator/share_group_records.py): laid
out as Kafka's ShareGroupMetadata (type 11) and ShareGroupStatePartitionMetadata (15),
and read back."""

from __future__ import annotations

import struct
import uuid

from keeperless.coordinator.share_group_records import (
    SHARE_METADATA,
    SHARE_STATE_PARTITIONS,
    StoredShareGroup,
    decode,
    group_of,
    share_group_records,
)

TOPIC = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def test_records_are_laid_out_as_kafkas_and_read_back() -> None:
    stored = StoredShareGroup(7, {"orders": (TOPIC, (0, 1, 2))}, {"old": TOPIC})
    records = share_group_records("g", stored)
    meta_key = struct.pack(">hh", SHARE_METADATA, 1) + b"g"
    parts_key = struct.pack(">hh", SHARE_STATE_PARTITIONS, 1) + b"g"
    assert set(records) == {meta_key, parts_key}
    assert records[meta_key] == struct.pack(">hi", 0, 7) + b"\x00"  # v0, epoch, no tags
    value = records[parts_key]
    assert value[:2] == b"\x00\x00"  # version 0
    # one initialized topic: compact array length 2, topic id, compact name, partitions
    assert value[2] == 2
    assert value[3:19] == TOPIC.bytes
    assert value[19:26] == b"\x07orders"
    back = StoredShareGroup()
    for k, v in records.items():
        assert group_of(k) == "g"
        decode(k, v, back)
    assert back == stored
