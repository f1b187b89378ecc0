"""The bootstrap checkpoint that `storage format` writes: the initial feature levels,
as a snapshot (header control record, records, footer control record)."""

from __future__ import annotations

from typing import Any

from keeperless.metadata._records_gen import FeatureLevelRecord
from keeperless.metadata.codec import encode_record
from keeperless.metadata.features import METADATA_VERSION_FEATURE
from keeperless.protocol.control import control_batch, snapshot_footer, snapshot_header
from keeperless.protocol.records import build_batch

__all__ = ["BOOTSTRAP_CHECKPOINT", "bootstrap_records", "build_snapshot"]

BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"


def bootstrap_records(metadata_version: int) -> list[Any]:
    return [FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=metadata_version)]


def build_snapshot(records: list[Any], timestamp_ms: int) -> bytes:
    """A snapshot file's bytes: header batch, one data batch, footer batch."""
    out = bytearray(control_batch(snapshot_header(timestamp_ms), timestamp_ms=timestamp_ms))
    data = [(None, encode_record(r), ()) for r in records]
    out += build_batch(data, base_offset=1, timestamp_ms=timestamp_ms)
    out += control_batch(snapshot_footer(), base_offset=1 + len(records), timestamp_ms=timestamp_ms)
    return bytes(out)
