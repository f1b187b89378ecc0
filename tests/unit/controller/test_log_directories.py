"""JBOD (KIP-858): the controller's directory rules (defaultDir, AssignReplicasToDirs,
a directory reported offline, a replica on it never elected) and a broker's placement
of replicas across its directories."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from keeperless.broker.partition_manager import PartitionManager
from keeperless.controller.directories import assign_replicas_to_dirs
from keeperless.controller.elections import PREFERRED, UNCLEAN, elect_leaders
from keeperless.controller.quorum_controller import QuorumController
from keeperless.metadata import _records_gen as r
from keeperless.metadata.admin import NewTopic
from keeperless.metadata.image import MIGRATING, UNASSIGNED, PartitionInfo
from keeperless.metadata.snapshot import image_records
from keeperless.storage.log import LogConfig
from tests.unit.controller_log import ActiveLog

D1, D2 = uuid.UUID(int=1001), uuid.UUID(int=1002)  # broker 1's two directories
ONE = {2: (uuid.UUID(int=2001),), 3: (uuid.UUID(int=3001),)}


def _cluster() -> tuple[QuorumController, ActiveLog]:
    """Broker 1 with two log directories, brokers 2 and 3 with one; topic "t" (RF 3,
    replicas 1,2,3) with broker 1 leading."""
    c = QuorumController(1, random.Random(3), {"num.partitions": 1,
                                                "default.replication.factor": 3})  # fmt: skip
    log = ActiveLog(c)
    log.append([r.FeatureLevelRecord(name="metadata.version", feature_level=21)])
    for b, dirs in ((1, (D1, D2)), (2, ONE[2]), (3, ONE[3])):
        epoch = log.offset + 1
        res = c.register_broker(b, uuid.uuid4(), [("P", "h", b)], None, epoch, 0, None, dirs)
        log.append(res.records)
        log.append(c.broker_heartbeat(b, epoch, False, True, 0).all_records())
    log.append(c.create_topics([NewTopic("t", assignments={0: (1, 2, 3)})], False).records)
    log.commit()
    return c, log


def _part(c: QuorumController) -> tuple[uuid.UUID, PartitionInfo]:
    t = c.image.topic("t")
    assert t is not None
    return t.topic_id, t.partitions[0]


def test_a_new_replica_starts_in_its_brokers_only_directory_or_unassigned() -> None:
    c, _ = _cluster()
    assert c.image.brokers[1].log_dirs == (D1, D2)
    _, p = _part(c)
    assert p.directory(1) == UNASSIGNED  # two directories: the broker chooses
    assert p.directory(2) == ONE[2][0]
    assert p.directory(3) == ONE[3][0]


def test_assign_replicas_to_dirs_writes_the_directory() -> None:
    c, log = _cluster()
    tid, _ = _part(c)
    epoch = c.image.brokers[1].epoch
    res = assign_replicas_to_dirs(c, 1, epoch, [(D2, tid, 0), (D2, tid, 7)])
    top, results = res.response
    assert top.code == ErrorCode.none
    assert [e.code for *_, e in results] == [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    log.append(res.records)
    log.commit()
    assert _part(c)[1].directory(1) == D2
    # kept in a snapshot
    from keeperless.metadata.image import MetadataDelta, MetadataImage

    delta = MetadataDelta(MetadataImage())
    for rec in image_records(c.image):
        delta.replay(rec)
    again = delta.apply()
    t = again.topic("t")
    assert t is not None
    assert t.partitions[0].directory(1) == D2
    assert again.brokers[1].log_dirs == (D1, D2)
    # a stale epoch, a broker that is not a replica
    assert assign_replicas_to_dirs(c, 1, epoch - 1, [(D2, tid, 0)]).response[0].code == (
        ErrorCode.stale_broker_epoch
    )


def test_an_offline_directory_moves_its_leaderships_and_its_replicas_leave_the_isr() -> None:
    c, log = _cluster()
    tid, _ = _part(c)
    b1 = c.image.brokers[1]
    log.append(assign_replicas_to_dirs(c, 1, b1.epoch, [(D2, tid, 0)]).records)
    log.commit()
    assert _part(c)[1].leader == 1
    # D1 fails: nothing of "t" is there, nothing moves
    res = c.broker_heartbeat(1, b1.epoch, False, True, 0, offline_dirs=[D1])
    log.append(res.all_records())
    log.commit()
    assert _part(c)[1].leader == 1
    assert c.image.brokers[1].log_dirs == (D2,)
    # D2 fails: its replica leaves the ISR and the leadership moves
    res = c.broker_heartbeat(1, b1.epoch, False, True, 0, offline_dirs=[D1, D2])
    log.append(res.all_records())
    log.commit()
    _, p = _part(c)
    assert p.leader in (2, 3)
    assert 1 not in p.isr
    # a replica on an offline directory is never elected, even as the preferred leader
    res_elect = elect_leaders(c, PREFERRED, [("t", 0)])
    assert res_elect.response[0][2].code == ErrorCode.preferred_leader_not_available


def test_a_broker_spreads_new_replicas_and_creates_none_where_a_directory_is_offline(
    tmp_path: Path,
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    pm = PartitionManager(1, [a, b], LogConfig())
    info = PartitionInfo((1,), (1,), 1, 0, 0, directories=(UNASSIGNED,))
    for i in range(4):
        p = pm.ensure("t", i, uuid.UUID(int=500), info, LogConfig(), 0)
        assert p is not None
    assert sorted(d.path.name for d in pm.dir_of.values()) == ["a", "a", "b", "b"]
    # each placement is told to the controller
    assert set(pm.assignments.values()) == {d.dir_id for d in pm.dirs}
    pm.close()
    # b is lost: a replica the metadata knows (not new) is not created again in a -
    # it may be on b; a new one (UNASSIGNED) is
    (b / "t-1").rename(tmp_path / "moved-away")
    pm = PartitionManager(1, [a, b], LogConfig())
    pm.dirs[1].online = False
    known = PartitionInfo((1,), (1,), 1, 0, 0, directories=(MIGRATING,))
    assert pm.ensure("t", 1, uuid.UUID(int=500), known, LogConfig(), 0) is None
    assert ("t", 1) in pm.offline
    assert pm.ensure("t", 9, uuid.UUID(int=500), info, LogConfig(), 0) is not None
    pm.close()


def test_a_broker_back_without_the_directory_of_its_replica_does_not_lead_it() -> None:
    c, log = _cluster()
    tid, _ = _part(c)
    log.append(assign_replicas_to_dirs(c, 1, c.image.brokers[1].epoch, [(D2, tid, 0)]).records)
    for b in (2, 3, 1):  # ISR down to broker 1, then broker 1 stops too: leaderless
        log.append(c.broker_heartbeat(b, c.image.brokers[b].epoch, True, True, 0).all_records())
    log.commit()
    _, p = _part(c)
    assert (p.leader, p.isr) == (-1, (1,))
    # it comes back with D1 alone (D2's disk is gone): the partition stays offline
    epoch = log.offset + 1
    res = c.register_broker(1, uuid.uuid4(), [("P", "h", 1)], None, epoch, 0, None, (D1,))
    log.append(res.records)
    log.append(c.broker_heartbeat(1, epoch, False, True, 0).all_records())
    log.commit()
    assert not c.image.brokers[1].fenced
    assert _part(c)[1].leader == -1
    # an unclean election passes it over too: broker 2, back, is chosen
    epoch = log.offset + 1
    res = c.register_broker(2, uuid.uuid4(), [("P", "h", 2)], None, epoch, 0, None, ONE[2])
    log.append(res.records)
    log.append(c.broker_heartbeat(2, epoch, False, True, 0).all_records())
    log.commit()
    res_elect = elect_leaders(c, UNCLEAN, [("t", 0)])
    assert res_elect.response[0][2].code == ErrorCode.none
    log.append(res_elect.records)
    log.commit()
    assert _part(c)[1].leader == 2


def test_a_log_directory_inside_another_is_its_own(tmp_path: Path) -> None:
    """The fault harness's layout (disk-b inside the first directory): a failure in the
    inner one was taken for the outer one's (the metadata log's), and stopped the node."""
    outer, inner = tmp_path / "data", tmp_path / "data" / "disk-b"
    pm = PartitionManager(1, [outer, inner], LogConfig())
    found = pm.dir_containing(inner / "t-0" / "00000000000000000000.log")
    assert found is not None
    assert found.path == inner
    found = pm.dir_containing(outer / "t-1")
    assert found is not None
    assert found.path == outer
    gone = pm.dir_failed(inner / "replication-offset-checkpoint.tmp", OSError(20, "x"))
    assert gone is pm.dirs[1]
    assert [d.path for d in pm.online_dirs] == [outer]


def test_a_replica_whose_directory_was_replaced_has_lost_its_data() -> None:
    """Eligible leader replicas on: every replica stopped one after the other, broker 1
    last (its replica eligible, and the last known leader). It comes back with D2
    replaced by an empty D3 and creates its replica again there: that replica holds
    nothing, so it leaves the ELR and the last known leader, and does not lead."""
    c, log = _cluster()
    log.append([r.FeatureLevelRecord(name="metadata.version", feature_level=23),
                r.FeatureLevelRecord(name="eligible.leader.replicas.version", feature_level=1),
                r.ConfigRecord(resource_type=2, resource_name="t", name="min.insync.replicas",
                               value="2")])  # fmt: skip
    tid, _ = _part(c)
    log.append(assign_replicas_to_dirs(c, 1, c.image.brokers[1].epoch, [(D2, tid, 0)]).records)
    for b in (2, 3, 1):
        log.append(c.broker_heartbeat(b, c.image.brokers[b].epoch, True, True, 0).all_records())
    log.commit()
    _, p = _part(c)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (-1, (), (1, 3), (1,))
    d3 = uuid.UUID(int=1003)
    epoch = log.offset + 1
    res = c.register_broker(1, uuid.uuid4(), [("P", "h", 1)], None, epoch, 0, None, (D1, d3))
    log.append(res.records)
    log.append(assign_replicas_to_dirs(c, 1, epoch, [(d3, tid, 0)]).records)
    log.commit()
    _, p = _part(c)
    assert p.directory(1) == d3
    assert (p.elr, p.last_known_elr) == ((3,), ())
    log.append(c.broker_heartbeat(1, epoch, False, True, 0).all_records())
    log.commit()
    assert _part(c)[1].leader == -1  # broker 3, eligible, leads when it is back
    # a move between two directories a broker still has is not a loss
    res3 = assign_replicas_to_dirs(c, 1, epoch, [(D1, tid, 0)])
    assert all(rec.isr is None and rec.eligible_leader_replicas is None for rec in res3.records)


def test_a_partition_that_cannot_be_created_takes_its_directory_offline(tmp_path: Path) -> None:
    """Seed 4303: a new partition placed in a directory whose disk had just failed
    raised out of the metadata publisher (NotADirectoryError reading partition.metadata)
    instead of taking that directory offline."""
    a, b = tmp_path / "a", tmp_path / "b"
    pm = PartitionManager(1, [a, b], LogConfig())
    b.mkdir()
    b.rename(tmp_path / "b.failed")
    b.write_text("a failed disk\n")
    info = PartitionInfo((1,), (1,), 1, 0, 0, directories=(pm.dirs[1].dir_id,))
    assert pm.ensure("t", 0, uuid.UUID(int=500), info, LogConfig(), 0) is None
    assert [d.path for d in pm.offline_dirs] == [b]
    assert ("t", 0) in pm.offline
    pm.close()


@pytest.mark.parametrize("refetched", ["epoch 3", "epoch 1 then 3"])
def test_a_resumed_move_drops_what_the_replica_no_longer_has(
    tmp_path: Path, refetched: str
) -> None:
    """A move between directories cut short by a stop resumes from its future replica
    (Kafka's future logs), first truncated where it diverges from the current replica by
    their leader epochs: here the copy holds epoch 2's offsets 10-14, which the current
    replica (a follower) truncated after the copy was made, and fetched again from a new
    leader: in epoch 3, or two more records of epoch 1 first (where epoch 1 ends is then
    the copy's own end of it, 10, not the current replica's, 12)."""
    import asyncio

    from keeperless.broker.log_dir_moves import LogDirMoves
    from keeperless.broker.partitions import Partition
    from keeperless.protocol.records import build_batch

    def batches(epoch: int, base: int, n: int, tag: bytes) -> bytes:
        return b"".join(
            build_batch([(None, tag + b"%d" % i, ())], base_offset=base + i, leader_epoch=epoch)
            for i in range(n)
        )

    a, b = tmp_path / "a", tmp_path / "b"
    tid = uuid.UUID(int=500)
    pm = PartitionManager(1, [a, b], LogConfig())
    info = PartitionInfo((1, 2), (1, 2), 2, 3, 0, directories=(pm.dirs[0].dir_id, MIGRATING))
    p = pm.ensure("t", 0, tid, info, LogConfig(), 0)
    assert p is not None
    assert pm.dir_of[("t", 0)] is pm.dirs[0]
    again = (
        batches(3, 10, 10, b"x")
        if refetched == "epoch 3"
        else batches(1, 10, 2, b"z") + batches(3, 12, 8, b"x")
    )
    p.append_replica(batches(1, 0, 10, b"w") + again, 0)
    future = Partition("t", 0, tid, b / f"t-0.{uuid.uuid4().hex}-future", LogConfig(), 0)
    future.append_replica(batches(1, 0, 10, b"w") + batches(2, 10, 5, b"y"), 0)
    future.close()
    (current,) = (a / "t-0").glob("*.log")
    want = current.read_bytes()
    pm.close()

    async def restart() -> PartitionManager:
        pm = PartitionManager(1, [a, b], LogConfig())
        assert list(pm.futures) == [("t", 0)]
        assert pm.ensure("t", 0, tid, info, LogConfig(), 0) is not None
        moves = LogDirMoves(pm, None)
        moves.resume()
        future = moves.moves[("t", 0)].future
        assert future is not None
        copy_log = future.log
        for _ in range(500):
            if not moves.moves:
                break
            await asyncio.sleep(0.01)
        assert not moves.moves, "the resumed move did not finish"
        # the copy's open log is served from, in its new place: nothing read again
        moved = pm.partitions[("t", 0)]
        assert moved.log is copy_log
        assert moved.log.dir == b / "t-0"
        return pm

    pm = asyncio.run(restart())
    assert pm.dir_of[("t", 0)] is pm.dirs[1]
    assert pm.assignments[(tid, 0)] == pm.dirs[1].dir_id
    (moved,) = (b / "t-0").glob("*.log")
    assert moved.read_bytes() == want  # epoch 3's records, none of the copy's epoch 2
    assert not list(b.glob("*-future"))
    # written on after the swap (a new segment rolled too): in the new place, kept
    moved = pm.partitions[("t", 0)]
    moved.log.config = LogConfig(segment_bytes=1)
    moved.append_replica(batches(4, 20, 3, b"v"), 0)
    pm.close()
    pm = PartitionManager(1, [a, b], LogConfig())
    again = pm.ensure("t", 0, tid, info, LogConfig(), 0)
    assert again is not None
    assert pm.dir_of[("t", 0)] is pm.dirs[1]
    assert again.log.log_end_offset == 23
    assert again.epochs.latest_epoch == 4
    assert not (a / "t-0").exists()
    pm.close()


def test_a_deleted_partition_on_a_failed_disk_takes_its_directory_offline(
    tmp_path: Path,
) -> None:
    """Seed 5006: a topic deleted while the disk of one of its replicas had just failed
    raised out of the metadata publisher (NotADirectoryError renaming the replica for
    deletion) instead of taking that directory offline."""
    a, b = tmp_path / "a", tmp_path / "b"
    pm = PartitionManager(1, [a, b], LogConfig())
    info = PartitionInfo((1,), (1,), 1, 0, 0, directories=(pm.dirs[1].dir_id,))
    tid = uuid.UUID(int=501)
    assert pm.ensure("t", 0, tid, info, LogConfig(), 0) is not None
    b.rename(tmp_path / "b.failed")
    b.write_text("a failed disk\n")
    pm.remove("t", 0, tid, "its topic was deleted")
    assert [d.path for d in pm.offline_dirs] == [b]
    pm.close()


def test_a_stray_copy_set_aside_at_start_is_not_discarded_again(tmp_path: Path) -> None:
    """Campaign seed 8837: a disk came back holding a copy of a partition of a deleted
    and re-created topic that the other disk also held. The start set it aside (stray),
    then opening the partition 'discarded' it again as a second copy: the rename of a
    directory no longer there took the whole log directory offline, and its replicas
    stayed out of every ISR for the rest of the run."""
    from keeperless.storage.partition_dirs import write_topic_id

    a, b = tmp_path / "a", tmp_path / "b"
    new, old = uuid.UUID(int=7), uuid.UUID(int=8)
    for d, tid in ((a, new), (b, old)):
        (d / "t-0").mkdir(parents=True)
        write_topic_id(d / "t-0", tid)
    pm = PartitionManager(1, [a, b], LogConfig())
    pm.remove_strays({("t", 0): new})
    assert not (b / "t-0").exists()
    info = PartitionInfo((1,), (1,), 1, 0, 0, directories=(pm.dirs[0].dir_id,))
    assert pm.ensure("t", 0, new, info, LogConfig(), 0) is not None
    assert all(d.online for d in pm.dirs), "a log directory went offline"
    assert next(d.name for d in b.iterdir() if d.name.startswith("t-0")).endswith("-stray")
    pm.close()


def test_discarding_a_partition_directory_already_gone_is_no_disk_failure(
    tmp_path: Path,
) -> None:
    a = tmp_path / "a"
    a.mkdir()
    pm = PartitionManager(1, [a], LogConfig())
    pm._discard(a / "gone-0")
    assert pm.dirs[0].online
    pm.close()


def test_a_partitions_known_directories_follow_each_tuple_it_is_given() -> None:
    """known_directories keeps its last answer for the same tuple (the decoder hands one
    tuple to every partition in the same directories): a different tuple, equal or
    not, is answered for itself."""
    from keeperless.metadata.image import known_directories

    a, b = uuid.uuid4(), uuid.uuid4()
    both = (a, b)
    assert known_directories(both) == both
    assert known_directories(both) is known_directories(both)
    assert known_directories((MIGRATING, MIGRATING)) == ()
    assert known_directories([a]) == (a,)
    assert known_directories((b, MIGRATING)) == (b, MIGRATING)
    assert known_directories((MIGRATING, b)) == (MIGRATING, b)
    assert known_directories(()) == ()
    assert known_directories(None) == ()
    assert known_directories(both) == both
