"""The image written back to ZooKeeper in Kafka's layout (dual-write during a live
migration): ZooKeeper's metadata migrated into records, replayed into an image, written
as znodes and read back by the layout reader is the same metadata; the changes from
one image to the next touch only what changed."""

from __future__ import annotations

import uuid
from dataclasses import replace

from keeperless.metadata import _records_gen as r
from keeperless.metadata.image import MetadataDelta, MetadataImage
from keeperless.zk.layout import parse_layout
from keeperless.zk.records import migration_records
from keeperless.zk.znodes import MANAGED_ROOTS, changes, image_znodes, sanitize
from tests.zookeeper import kafka_layout


def _image(records: list[object]) -> MetadataImage:
    d = MetadataDelta(MetadataImage())
    for i, rec in enumerate(records):
        d.replay(rec, i)
    return d.apply()


def _unmanaged(tree: dict[str, bytes | None]) -> dict[str, bytes | None]:
    return {
        p: v for p, v in tree.items()
        if not any(p.startswith(root + "/") for root in MANAGED_ROOTS)
        and p != "/latest_producer_id_block"
    }  # fmt: skip


def test_the_image_written_as_znodes_reads_back_as_the_same_metadata() -> None:
    tree = kafka_layout()
    before = parse_layout(tree)
    records, skipped = migration_records(before)
    assert not skipped
    image = _image(records)
    written = {**_unmanaged(tree), **image_znodes(image, 8, 3000)}
    after = parse_layout(written)
    assert after.topics == before.topics
    assert after.broker_configs == before.broker_configs
    assert after.quotas == before.quotas
    assert sorted(after.scram, key=str) == sorted(before.scram, key=str)
    assert sorted(after.acls, key=str) == sorted(before.acls, key=str)
    assert after.producer_id_block_end == before.producer_id_block_end
    # what Kafka wrote is what dual-write would write, but for the controller epoch of
    # each partition's state (now the quorum's claim on ZooKeeper)
    ops = changes(tree, image_znodes(image, 7, 2))
    assert {(o.kind, o.path.rsplit("/", 1)[-1]) for o in ops} <= {("set", "state")}, ops


def test_changes_touch_only_what_changed_parents_first_children_last() -> None:
    tid = uuid.uuid4()
    base = _image([
        r.TopicRecord(name="a", topic_id=tid),
        r.PartitionRecord(partition_id=0, topic_id=tid, replicas=(1, 2), isr=(1, 2), leader=1,
                          leader_epoch=0, partition_epoch=0),
        r.ConfigRecord(resource_type=2, resource_name="a", name="retention.ms", value="1000"),
    ])  # fmt: skip
    first = image_znodes(base, 1, 1)
    assert changes(first, first) == []
    new_tid = uuid.uuid4()
    d = MetadataDelta(base)
    d.replay(r.TopicRecord(name="b", topic_id=new_tid))
    d.replay(r.PartitionRecord(partition_id=0, topic_id=new_tid, replicas=(2,), isr=(2,),
                               leader=2, leader_epoch=0, partition_epoch=0))  # fmt: skip
    d.replay(r.PartitionChangeRecord(partition_id=0, topic_id=tid, isr=(1,), leader=-2))
    d.replay(r.RemoveTopicRecord(topic_id=tid))
    second = image_znodes(d.apply(), 1, 1)
    ops = changes(first, second)
    creates = [o.path for o in ops if o.kind == "create"]
    deletes = [o.path for o in ops if o.kind == "delete"]
    assert creates == sorted(creates, key=lambda p: p.count("/"))  # parents first
    assert "/brokers/topics/b/partitions/0/state" in creates
    assert deletes[0] == "/brokers/topics/a/partitions/0/state"  # children first
    assert deletes[-1] in ("/brokers/topics/a", "/config/topics/a")
    assert {o.path for o in ops if o.kind == "set"} == set()  # a is gone, not changed


def test_names_are_sanitized_as_kafkas_sanitizer() -> None:
    assert sanitize("bob@example.com") == "bob%40example.com"
    assert sanitize("a b*c~") == "a%20b%2Ac%7E"
    assert sanitize(None) == "<default>"
    assert sanitize("app-1.x_y") == "app-1.x_y"


def test_a_migration_state_record_is_kept_by_the_image() -> None:
    image = _image([r.ZkMigrationStateRecord(zk_migration_state=2)])
    assert image.zk_migration_state == 2
    d = MetadataDelta(replace(image))
    d.replay(r.TopicRecord(name="x", topic_id=uuid.uuid4()))
    assert d.apply().zk_migration_state == 2  # unchanged by other records


_ENCRYPTED = (
    "encryptedValue=abc,keyLength=128,cipherAlgorithm=AES/CBC/PKCS5Padding,"
    "initializationVector=xyz,keyFactoryAlgorithm=PBKDF2WithHmacSHA512,iterations=4096"
)


def test_dual_write_keeps_zookeepers_encrypted_passwords_and_never_writes_one() -> None:
    """Found by review: the first dual-write replaced /config/brokers/2 with what the
    quorum holds, erasing the encrypted dynamic password a rollback's ZooKeeper-mode
    broker needs (it is not migrated: ZooKeeper holds it encrypted); and a password set
    again in the quorum would have been written in plaintext, which such a broker cannot
    decode."""
    import json

    from keeperless.zk.znodes import with_unmigrated

    tree = kafka_layout()
    tree["/config/brokers/2"] = json.dumps({"version": 1, "config": {
        "log.cleaner.threads": "2",
        "listener.name.internal.ssl.keystore.password": _ENCRYPTED,
    }}).encode()  # fmt: skip
    tree["/config/brokers/3"] = json.dumps({"version": 1, "config": {
        "ssl.key.password": _ENCRYPTED}}).encode()  # fmt: skip
    records, _ = migration_records(parse_layout(tree))
    records.append(r.ConfigRecord(resource_type=4, resource_name="2", name="ssl.key.password",
                                  value="plaintext-set-again"))  # fmt: skip
    wanted = with_unmigrated(tree, image_znodes(_image(records), 7, 2))
    ops = {o.path: o for o in changes(tree, wanted)}
    assert "/config/brokers/3" not in ops  # (only a password: kept, not deleted)
    if "/config/brokers/2" in ops:
        config = json.loads(ops["/config/brokers/2"].data or b"{}")["config"]
        assert config["listener.name.internal.ssl.keystore.password"] == _ENCRYPTED
        assert "ssl.key.password" not in config
    b2 = json.loads(wanted["/config/brokers/2"] or b"{}")["config"]
    assert b2 == {"log.cleaner.threads": "2",
                  "listener.name.internal.ssl.keystore.password": _ENCRYPTED}  # fmt: skip


def test_a_user_with_only_user_and_client_quotas_is_read() -> None:
    """Kafka creates /config/users/<user> without data for a user-and-client quota alone
    (createRecursive); found by review: the reader refused it as empty."""
    import json

    tree = kafka_layout()
    tree["/config/users/carol"] = None
    tree["/config/users/carol/clients"] = None
    tree["/config/users/carol/clients/app-2"] = json.dumps(
        {"version": 1, "config": {"producer_byte_rate": "4096"}}).encode()  # fmt: skip
    md = parse_layout(tree)
    assert md.quotas[(("user", "carol"), ("client-id", "app-2"))] == {"producer_byte_rate": 4096.0}
