from __future__ import annotations

from pathlib import Path

import pytest

from keeperless.metadata.codec import decode_record
from keeperless.protocol.control import SNAPSHOT_FOOTER, SNAPSHOT_HEADER, decode_control
from keeperless.protocol.records import decode_records, iter_batches
from keeperless.storage.format import check_storage, format_storage
from keeperless.storage.meta_properties import StorageError, random_kafka_uuid, uuid_from_kafka

CID = "MkU3OEVBNTcwNTJENDM2Qg"


def test_random_uuid_is_kafka_shaped() -> None:
    for _ in range(50):
        s = random_kafka_uuid()
        assert len(s) == 22
        assert not s.startswith("-")
        uuid_from_kafka(s)


def test_format_then_check(tmp_path: Path) -> None:
    cid = random_kafka_uuid()
    dirs = (tmp_path / "a", tmp_path / "b")
    res = format_storage(dirs, dirs[0], 3, cid, "3.7", False, 1000)
    assert res.metadata_version == 19
    text = (dirs[0] / "meta.properties").read_text()
    assert f"cluster.id={cid}" in text
    assert "node.id=3" in text
    assert "directory.id=" in text
    assert check_storage(dirs, 3, "x.properties") == cid
    data = (dirs[0] / "bootstrap.checkpoint").read_bytes()
    batches = [data[p : p + h.size] for p, h in iter_batches(data)]
    assert decode_control(decode_records(batches[0])[0])[0] == SNAPSHOT_HEADER
    assert decode_control(decode_records(batches[-1])[0])[0] == SNAPSHOT_FOOTER
    rec, _ = decode_record(decode_records(batches[1])[0].value or b"")
    assert (rec.name, rec.feature_level) == ("metadata.version", 19)


def test_refusals(tmp_path: Path) -> None:
    d = (tmp_path / "a",)
    with pytest.raises(StorageError, match="not formatted.*storage format"):
        check_storage(d, 1, "c.properties")
    format_storage(d, d[0], 1, random_kafka_uuid(), None, False, 0)
    with pytest.raises(StorageError, match="already formatted"):
        format_storage(d, d[0], 1, random_kafka_uuid(), None, False, 0)
    format_storage(d, d[0], 1, random_kafka_uuid(), None, True, 0)
    with pytest.raises(StorageError, match="node.id=1.*node.id=2"):
        check_storage(d, 2, "c.properties")
    other = tmp_path / "b"
    format_storage((other,), other, 1, random_kafka_uuid(), None, False, 0)
    with pytest.raises(StorageError, match="different clusters"):
        check_storage((d[0], other), 1, "c.properties")
    with pytest.raises(ValueError, match="Unknown release"):
        format_storage((tmp_path / "c",), tmp_path / "c", 1, random_kafka_uuid(), "1.0", False, 0)


def _bootstrap_levels(d: Path) -> dict[str, int]:
    data = (d / "bootstrap.checkpoint").read_bytes()
    records = [
        decode_record(r.value or b"")[0]
        for p, h in iter_batches(data)
        for r in decode_records(data[p : p + h.size])
        if r.key is None and r.value  # not the snapshot's control records
    ]
    return {x.name: x.feature_level for x in records if hasattr(x, "feature_level")}


def test_format_with_a_feature_level(tmp_path: Path) -> None:
    """kafka-storage.sh format --feature (KIP-1022): eligible leader replicas from the
    start, refused below the metadata.version they need, unknown features named."""
    d = (tmp_path / "a",)
    format_storage(d, d[0], 1, random_kafka_uuid(), "4.0-IV1", False, 0, (),
                   ("eligible.leader.replicas.version=1",))  # fmt: skip
    levels = _bootstrap_levels(d[0])
    assert levels == {
        "metadata.version": 23,
        "eligible.leader.replicas.version": 1,
        "group.version": 1,  # bootstrapped from 4.0-IV0 on
    }
    for release, spec, words in (
        ("3.9", "eligible.leader.replicas.version=1", "depends on metadata.version level 23"),
        ("4.2", "streams.version=1", "only supports levels 0-0"),  # streams groups: not yet
        ("4.0", "group.version=2", "only supports levels 0-1"),
        ("4.0", "no.such.feature=1", "Unsupported feature: no.such.feature"),
        ("4.0", "eligible.leader.replicas.version=7", "only supports levels 0-1"),
        ("4.0", "eligible.leader.replicas.version", "expected NAME=LEVEL"),
    ):
        e = tmp_path / release.replace(".", "_") / spec.replace("=", "_")
        with pytest.raises(StorageError, match=words):
            format_storage((e,), e, 1, random_kafka_uuid(), release, False, 0, (), (spec,))


def test_a_log_directory_inside_another_is_formatted_with_it(tmp_path: Path) -> None:
    from keeperless.storage.format import format_storage
    from keeperless.storage.meta_properties import random_kafka_uuid, read_meta_properties

    outer = tmp_path / "data"
    inner = outer / "disk-b"
    inner.mkdir(parents=True)
    format_storage((outer, inner), outer, 4, random_kafka_uuid(), None, False, 0)
    a, b = read_meta_properties(outer), read_meta_properties(inner)
    assert a is not None
    assert b is not None
    assert a.directory_id != b.directory_id


def test_a_log_directory_that_cannot_be_read_starts_offline(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    cid = random_kafka_uuid()
    format_storage((a, b), a, 4, cid, None, False, 0)
    b.rename(tmp_path / "b.failed")
    b.write_text("a failed disk\n")  # a file where the directory was
    assert check_storage((a, b), 4, "c.properties", a) == cid
    # the metadata log's directory, or the last readable one, cannot be left offline
    with pytest.raises(StorageError, match="cannot be read"):
        check_storage((b, a), 4, "c.properties", b)
    with pytest.raises(StorageError, match="cannot be read"):
        check_storage((b,), 4, "c.properties", a)


def test_new_clusters_get_kafka_4_2_with_share_groups(tmp_path: Path) -> None:
    """As Kafka 4.2's format, short of streams groups: metadata.version 4.2-IV0, share
    groups on (bootstrapped from 4.2-IV0), ELR on (from 4.1-IV0), transaction.version 2
    (from 4.0-IV2), unless --release-version names an older release or --feature turns
    one off."""
    elr, gv, tv = "eligible.leader.replicas.version", "group.version", "transaction.version"
    sv = "share.version"
    cases = {
        "default": (None, (), {"metadata.version": 28, elr: 1, gv: 1, tv: 2, sv: 1}),
        "4.1": ("4.1", (), {"metadata.version": 27, elr: 1, gv: 1, tv: 2}),
        "4.1-IV0": ("4.1-IV0", (), {"metadata.version": 26, elr: 1, gv: 1, tv: 2}),
        "4.0": ("4.0", (), {"metadata.version": 25, gv: 1, tv: 2}),
        "3.9": ("3.9", (), {"metadata.version": 21}),
        "3.9 consumer protocol": ("3.9", (f"{gv}=1",), {"metadata.version": 21, gv: 1}),
        # share groups from 4.2-IV0 (KIP-932)
        "4.2": ("4.2", (), {"metadata.version": 29, elr: 1, gv: 1, tv: 2, "share.version": 1}),
        "off": (None, (f"{elr}=0", f"{gv}=0", f"{tv}=0", f"{sv}=0"), {"metadata.version": 28}),
        "tv1": (None, (f"{tv}=1",), {"metadata.version": 28, elr: 1, gv: 1, tv: 1, sv: 1}),
    }
    for name, (release, features, want) in cases.items():
        d = tmp_path / name
        format_storage((d,), d, 1, random_kafka_uuid(), release, False, 0, (), features)
        assert _bootstrap_levels(d) == want, name


def test_a_dynamic_quorum_needs_metadata_version_3_9(tmp_path: Path) -> None:
    """kraft.version 1 (a dynamic quorum, KIP-853) depends on metadata.version 3.9-IV0:
    --standalone at an older release is refused, naming the dependency."""
    from keeperless.storage.format import parse_dynamic_voters

    voters = parse_dynamic_voters("1@127.0.0.1:9093:" + random_kafka_uuid(), "CONTROLLER")
    old, new = tmp_path / "old", tmp_path / "new"
    with pytest.raises(StorageError, match=r"kraft.version could not be set to 1 because it "
                       r"depends on metadata.version level 21 \(3.9-IV0\)"):  # fmt: skip
        format_storage((old,), old, 1, random_kafka_uuid(), "3.8", False, 0,
                       initial_controllers=voters)  # fmt: skip
    assert not old.exists()
    format_storage((new,), new, 1, random_kafka_uuid(), "3.9", False, 0,
                   initial_controllers=voters)  # fmt: skip


def test_a_zookeeper_mode_brokers_directory_is_adopted(tmp_path: Path) -> None:
    """meta.properties version 0 (broker.id, cluster.id; what a ZooKeeper-mode Kafka
    broker writes): the same broker's KRaft start rewrites it as version 1 with a
    directory id; another broker's or another cluster's is refused as any."""
    from keeperless.storage.meta_properties import read_meta_properties

    zk_dir = tmp_path / "zk"
    zk_dir.mkdir()
    (zk_dir / "meta.properties").write_text("#\nversion=0\nbroker.id=2\ncluster.id=" + CID + "\n")
    with pytest.raises(StorageError, match="formatted for node.id=2"):
        check_storage((zk_dir,), 3, "c.properties")
    assert check_storage((zk_dir,), 2, "c.properties") == CID
    meta = read_meta_properties(zk_dir)
    assert meta is not None
    assert (meta.version, meta.node_id, meta.cluster_id) == (1, 2, CID)
    assert len(meta.directory_id) == 22
    other = tmp_path / "other"
    other.mkdir()
    (other / "meta.properties").write_text(
        "version=0\nbroker.id=2\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\n"
    )
    with pytest.raises(StorageError, match="different clusters"):
        check_storage((zk_dir, other), 2, "c.properties")
    assert "version=0" in (other / "meta.properties").read_text()  # nothing adopted


def test_metadata_that_cannot_be_encoded_formats_nothing(tmp_path: Path) -> None:
    """The bootstrap is encoded before anything is written (a migrated cluster's record out
    of range left a directory formatted with no metadata, which started an empty cluster)."""
    from keeperless.metadata._records_gen import ProducerIdsRecord

    d = tmp_path / "meta"
    bad = ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=2**70)
    with pytest.raises(StorageError, match="cannot encode the bootstrap metadata"):
        format_storage((d,), d, 1, CID, None, False, 0, records=(bad,))
    assert not (d / "meta.properties").exists()
