"""The broker's metadata publisher: partitions follow the image, configs reach the logs."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from keeperless.broker.broker import Broker
from keeperless.metadata import _records_gen as r
from keeperless.metadata.image import TOPIC_RESOURCE
from tests.unit.brokers import make_broker


def _broker(tmp_path: Path) -> Broker:
    return make_broker(tmp_path, caught_up=False)


def test_partitions_and_topic_configs_follow_the_image(tmp_path: Path) -> None:
    b = _broker(tmp_path)
    b.catch_up_to(-1)  # caught up from the start
    tid = uuid.uuid4()
    b.on_committed(
        [
            r.TopicRecord(name="t", topic_id=tid),
            *(
                r.PartitionRecord(
                    partition_id=p, topic_id=tid, replicas=(1, 2), isr=(1, 2), leader=1
                )
                for p in range(3)
            ),
        ],
        5,
    )
    assert sorted(b.partitions.partitions) == [("t", 0), ("t", 1), ("t", 2)]
    assert b.changed_partitions == [("t", 0), ("t", 1), ("t", 2)]
    # a dynamic topic config reaches the partitions' logs
    b.on_committed(
        [
            r.ConfigRecord(
                resource_type=TOPIC_RESOURCE, resource_name="t", name="retention.ms", value="1234"
            )
        ],
        6,
    )
    assert all(p.log.config.retention_ms == 1234 for p in b.partitions.partitions.values())
    # one partition moves to other brokers: its local copy goes, the others stay untouched
    b.on_committed(
        [
            r.PartitionChangeRecord(
                partition_id=1, topic_id=tid, replicas=(2, 3), isr=(2,), leader=2
            )
        ],
        7,
    )
    assert sorted(b.partitions.partitions) == [("t", 0), ("t", 2)]
    assert b.changed_partitions == [("t", 1)]
    b.close()


def _topic(name: str, tid: uuid.UUID, partitions: int = 1) -> list[Any]:
    return [
        r.TopicRecord(name=name, topic_id=tid),
        *(
            r.PartitionRecord(partition_id=p, topic_id=tid, replicas=(1,), isr=(1,), leader=1)
            for p in range(partitions)
        ),
    ]


def _write(b: Broker, topic: str, n: int) -> None:
    from keeperless.protocol.records import build_batch

    p = b.partitions.get(topic, 0)
    assert p is not None
    for i in range(n):
        res = p.append(build_batch([(None, b"v%d" % i, ())]), 0, 1 << 20, 0)
        assert res.error == 0


def test_a_recreated_topic_survives_a_restart_that_replays_the_log(tmp_path: Path) -> None:
    """Create t1, delete it, create it again, write to it; restart. Replaying the log
    creates and deletes the first t1 again: that must not touch the second one's
    directory (it did: 50 acknowledged records lost). Partitions appear only once the
    broker has caught up past its registration, and are bound to their topic id."""
    old, new = uuid.uuid4(), uuid.uuid4()
    history: list[tuple[list[Any], int]] = [
        (_topic("t1", old), 1),
        ([r.RemoveTopicRecord(topic_id=old)], 2),
        (_topic("t1", new), 3),
    ]
    first = _broker(tmp_path)
    first.catch_up_to(-1)
    for records, offset in history:
        first.on_committed(records, offset)
    _write(first, "t1", 50)
    first.close()

    again = _broker(tmp_path)
    registration = 7
    for records, offset in history:
        again.on_committed(records, offset)
        assert again.partitions.partitions == {}  # not caught up: nothing touched
    again.catch_up_to(registration)
    assert not again.partitions_live
    again.on_committed([r.NoOpRecord()], registration)
    assert again.partitions_live
    p = again.partitions.get("t1", 0)
    assert p is not None
    assert p.topic_id == new
    assert p.log.log_end_offset == 50
    again.close()


def test_a_partition_directory_of_a_deleted_incarnation_is_never_served(tmp_path: Path) -> None:
    """The broker was down while t1 was deleted and re-created (its snapshot shows only
    the new t1): the old directory is set aside, by topic id, and the new partition
    starts empty instead of serving the old topic's records."""
    old, new = uuid.uuid4(), uuid.uuid4()
    first = _broker(tmp_path)
    first.catch_up_to(-1)
    first.on_committed(_topic("t1", old) + _topic("gone", uuid.uuid4()), 1)
    _write(first, "t1", 5)
    _write(first, "gone", 3)
    first.close()
    (tmp_path / "junk-0.0123abcd-delete").mkdir()  # left by a crash mid-deletion

    again = _broker(tmp_path)
    again.catch_up_to(4)
    again.on_committed(_topic("t1", new), 4)  # as if from a snapshot: no old t1, no "gone"
    p = again.partitions.get("t1", 0)
    assert p is not None
    assert p.topic_id == new
    assert p.log.log_end_offset == 0
    left = sorted(d.name for d in tmp_path.iterdir() if d.is_dir())
    # the crash's leftover removed; the old t1 and "gone" set aside as Kafka 3.7+ does
    # (renamed -stray, never served, never deleted: they may be the only copy)
    assert len(left) == 3, left
    assert left[1] == "t1-0"
    gone, old_t1 = left[0], left[2]
    assert gone.startswith("gone-0.")
    assert gone.endswith("-stray")
    assert old_t1.startswith("t1-0.")
    assert old_t1.endswith("-stray")
    assert sorted(f.name for f in (tmp_path / old_t1).glob("*.log")) != []
    again.close()
    # a restart serves the new t1 and leaves the stray directories alone
    third = _broker(tmp_path)
    third.catch_up_to(4)
    third.on_committed(_topic("t1", new), 4)
    assert sorted(d.name for d in tmp_path.iterdir() if d.is_dir()) == left
    third.close()


def test_deleting_a_topic_renames_its_partitions_out_of_the_way(tmp_path: Path) -> None:
    b = _broker(tmp_path)
    b.catch_up_to(-1)
    old, new = uuid.uuid4(), uuid.uuid4()
    b.on_committed(_topic("t1", old), 1)
    _write(b, "t1", 4)
    b.on_committed([r.RemoveTopicRecord(topic_id=old)], 2)
    assert b.partitions.get("t1", 0) is None
    b.on_committed(_topic("t1", new), 3)
    p = b.partitions.get("t1", 0)
    assert p is not None
    assert p.log.log_end_offset == 0
    assert sorted(d.name for d in tmp_path.iterdir() if d.is_dir()) == ["t1-0"]
    b.close()


def test_a_stray_or_deleted_partition_of_a_249_character_topic_is_renamed(
    tmp_path: Path,
) -> None:
    """A topic name may be 249 characters; the rename adds the partition, a unique id
    and the suffix, past the file system's 255 (ENAMETOOLONG took the log directory
    offline, and a broker with one log directory stopped at every start). The topic part
    is cut short, as Kafka's logDirNameWithSuffixCappedLength does. Found by a
    fresh-eyes review."""
    from keeperless.broker.partition_manager import PartitionManager
    from keeperless.storage.log import LogConfig
    from keeperless.storage.partition_dirs import discard, write_topic_id

    for name in ("t" * 249 + "-0", "u" * 249 + "-12"):
        d = tmp_path / name
        d.mkdir()
        write_topic_id(d, uuid.uuid4())
    pm = PartitionManager(1, tmp_path, LogConfig())
    pm.remove_strays({})
    assert all(ld.online for ld in pm.dirs), "the log directory went offline"
    left = sorted(d.name for d in tmp_path.iterdir() if d.is_dir())
    assert len(left) == 2
    assert all(n.endswith("-stray") and len(n) <= 255 for n in left), left
    assert left[0].startswith("t" * 200)
    assert "-0." in left[0]
    assert "-12." in left[1]
    gone = discard(tmp_path / left[1])
    assert gone.name.endswith("-delete")
    assert len(gone.name) <= 255
