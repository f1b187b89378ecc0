"""Record versions follow metadata.version, as Kafka's MetadataVersion gates them: at
3.3-IV3 (level 7) PartitionRecord v0 (no directories) and RegisterBrokerRecord v1; from
3.7-IV2 (level 17) PartitionRecord v1 and RegisterBrokerRecord v3."""

from __future__ import annotations

from collections import Counter

from keeperless.metadata import _records_gen as r
from keeperless.metadata.codec import decode_record
from keeperless.metadata.features import record_version
from keeperless.metadata.snapshot import SnapshotWriter
from keeperless.protocol.records import iter_batches, record_values
from tests.unit.controller_log import active_cluster


def _versions(snapshot: bytes) -> Counter[tuple[str, int]]:
    out: Counter[tuple[str, int]] = Counter()
    view = memoryview(snapshot)
    for pos, h in iter_batches(snapshot):
        if h.is_control:
            continue
        for value in record_values(view[pos : pos + h.size]):
            assert value is not None
            rec, version = decode_record(value)
            out[(type(rec).__name__, version)] += 1
            if isinstance(rec, r.PartitionRecord) and version == 0:
                assert rec.directories == ()
    return out


def test_versions_by_level() -> None:
    part = r.PartitionRecord()
    assert [record_version(part, lv) for lv in (7, 16, 17, 21)] == [0, 0, 1, 1]
    assert record_version(part, None) == r.PartitionRecord.HIGHEST_VERSION
    reg = r.RegisterBrokerRecord()
    assert [record_version(reg, lv) for lv in (7, 8, 16, 17)] == [1, 2, 2, 3]
    change = r.PartitionChangeRecord()
    assert [record_version(change, lv) for lv in (14, 17)] == [0, 1]
    assert record_version(r.BrokerRegistrationChangeRecord(fenced=1), 21) == 0
    assert record_version(r.BrokerRegistrationChangeRecord(in_controlled_shutdown=1), 21) == 1
    assert record_version(r.TopicRecord(), 7) == 0


def test_snapshots_are_written_at_the_finalized_level_and_follow_an_upgrade() -> None:
    c, log = active_cluster(level=7)
    writer = SnapshotWriter()
    old = _versions(writer.write(c.image, 1))
    assert old[("PartitionRecord", 0)] == 8
    assert old[("RegisterBrokerRecord", 1)] == 3
    log.append([r.FeatureLevelRecord(name="metadata.version", feature_level=17)])
    new = _versions(writer.write(c.image, 2))  # nothing cached at the old versions is reused
    assert new[("PartitionRecord", 1)] == 8
    assert new[("RegisterBrokerRecord", 3)] == 3
