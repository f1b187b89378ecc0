"""The bootstrap checkpoint that `storage format` writes: the initial feature levels,
as a snapshot (header control record, records, footer control record)."""

from __future__ import annotations

from typing import Any

from keeperless.metadata._records_gen import FeatureLevelRecord
from keeperless.metadata.features import METADATA_VERSION_FEATURE
from keeperless.metadata.snapshot import snapshot_of_records

__all__ = ["BOOTSTRAP_CHECKPOINT", "bootstrap_records", "build_snapshot"]

BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"


def bootstrap_records(metadata_version: int) -> list[Any]:
    return [FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=metadata_version)]


def build_snapshot(records: list[Any], timestamp_ms: int) -> bytes:
    """The bootstrap checkpoint's bytes: a snapshot holding ``records``."""
    return snapshot_of_records(records, timestamp_ms)
