"""Partition reassignment on the controller (KIP-455, Kafka's ReplicationControlManager):
the first record adds the target replicas and marks adding/removing, the ISR completing
it removes the old ones (moving the leader off them), cancel reverts, a new target
replaces one in progress, bad targets are refused with Kafka's words, and a snapshot
keeps a reassignment in progress."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from keeperless.controller.isr import alter_partition
from keeperless.controller.quorum_controller import QuorumController
from keeperless.controller.reassignment import (
    ReassignmentTarget,
    alter_reassignments,
    list_reassignments,
)
from keeperless.metadata.admin import IsrChange
from keeperless.metadata.image import MetadataDelta, MetadataImage, PartitionInfo
from keeperless.metadata.snapshot import image_records
from tests.unit.controller_log import ActiveLog, active_cluster


def _cluster() -> tuple[QuorumController, ActiveLog]:
    """Brokers 1-5; topic "b" has 3 partitions of RF 3 on brokers 1-3."""
    c, log = active_cluster()
    for b in (4, 5):
        epoch = log.offset + 1
        log.append(c.register_broker(b, uuid.uuid4(), [("P", "h", b)], None, epoch, 0).records)
        log.append(c.broker_heartbeat(b, epoch, False, True, 0).all_records())
    log.commit()
    return c, log


def _part(c: QuorumController, topic: str = "b", p: int = 0) -> PartitionInfo:
    t = c.image.topic(topic)
    assert t is not None
    return t.partitions[p]


def _move(c: QuorumController, log: ActiveLog, replicas: tuple[int, ...] | None,
          p: int = 0) -> ErrorCode:  # fmt: skip
    res = alter_reassignments(c, [ReassignmentTarget("b", p, replicas)])
    log.append(res.records)
    log.commit()
    return res.response[0][2].code


def _isr(c: QuorumController, log: ActiveLog, new_isr: tuple[int, ...], p: int = 0) -> None:
    info = _part(c, p=p)
    t = c.image.topic("b")
    assert t is not None
    broker = c.image.brokers[info.leader]
    ch = IsrChange(t.topic_id, p, info.leader_epoch, new_isr, info.partition_epoch)
    res = alter_partition(c, info.leader, broker.epoch, [ch])
    assert res.response[1][0].error.code == ErrorCode.none, res.response
    log.append(res.records)
    log.commit()


def test_a_move_adds_then_completes_when_the_new_replicas_join_the_isr() -> None:
    c, log = _cluster()
    before = _part(c)
    assert set(before.replicas) == {1, 2, 3}
    target = (4, 5, before.replicas[0])
    assert _move(c, log, target) == ErrorCode.none
    p = _part(c)
    gone = tuple(sorted(set(before.replicas) - set(target)))
    assert p.replicas == target + gone
    assert (p.adding, p.removing) == ((4, 5), gone)
    assert p.isr == before.isr  # the new replicas catch up first
    listed = list_reassignments(c, None)
    assert [(t, i) for t, i, _ in listed] == [("b", 0)]
    _isr(c, log, (*before.isr, 4))
    assert _part(c).reassigning  # 5 is not in the ISR yet
    _isr(c, log, (*before.isr, 4, 5))
    done = _part(c)
    assert done.replicas == target
    assert not done.reassigning
    assert set(done.isr) == set(target)
    assert done.leader in target
    assert list_reassignments(c, None) == []


def test_a_leader_being_removed_hands_over_and_a_subset_completes_at_once() -> None:
    c, log = _cluster()
    before = _part(c)
    keep = tuple(b for b in before.replicas if b != before.leader)
    assert _move(c, log, keep) == ErrorCode.none  # every target already in the ISR
    after = _part(c)
    assert after.replicas == keep
    assert not after.reassigning
    assert after.leader == keep[0]
    assert after.leader_epoch > before.leader_epoch


def test_cancel_reverts_and_a_new_target_replaces_one_in_progress() -> None:
    c, log = _cluster()
    original = _part(c).replicas
    assert _move(c, log, (4, 5, original[0])) == ErrorCode.none
    assert _move(c, log, None) == ErrorCode.none
    reverted = _part(c)
    assert reverted.replicas == original
    assert not reverted.reassigning
    assert _move(c, log, None) == ErrorCode.no_reassignment_in_progress
    # replace: to 4,5 then to 5,1,2 before the first completes
    assert _move(c, log, (4, 5, original[0])) == ErrorCode.none
    assert _move(c, log, (5, 1, 2)) == ErrorCode.none
    p = _part(c)
    assert p.replicas[:3] == (5, 1, 2)
    # 5 is still being added; 4 (added by the replaced target) and the original 3 are
    # removed, 4 still marked as not original
    assert p.adding == (4, 5)
    assert p.removing == tuple(sorted({4, *original} - {1, 2}))
    assert p.reassigning
    _isr(c, log, (*p.isr, 5))
    assert _part(c).replicas == (5, 1, 2)


def test_the_same_target_again_changes_nothing_and_cancel_still_reverts() -> None:
    """kafka-reassign-partitions.sh --additional --throttle resubmits what runs: the
    replicas being added stay so, and a cancellation reverts to the original ones (it
    once cleared the adding set, and the cancellation kept all six replicas)."""
    c, log = _cluster()
    original = _part(c).replicas
    target = (4, 5, original[0])
    assert _move(c, log, target) == ErrorCode.none
    moving = _part(c)
    res = alter_reassignments(c, [ReassignmentTarget("b", 0, target)])
    assert res.records == []
    assert res.response[0][2].code == ErrorCode.none
    assert _part(c) == moving
    # a new target adding another broker, then cancelled: the original replicas
    assert _move(c, log, (4, original[1], original[0])) == ErrorCode.none
    assert _part(c).adding == (4, 5)
    assert _move(c, log, None) == ErrorCode.none
    reverted = _part(c)
    assert sorted(reverted.replicas) == sorted(original)  # in the current order, as Kafka
    assert not reverted.reassigning


def test_bad_targets_are_refused_with_kafkas_words() -> None:
    c, _ = _cluster()
    cases = [
        (ReassignmentTarget("nope", 0, (1,)), ErrorCode.unknown_topic_or_partition,
         "Unable to find a topic named nope."),
        (ReassignmentTarget("b", 9, (1,)), ErrorCode.unknown_topic_or_partition,
         "Unable to find partition b:9."),
        (ReassignmentTarget("b", 0, ()), ErrorCode.invalid_replica_assignment,
         "empty replica list"),
        (ReassignmentTarget("b", 1, (1, 1, 2)), ErrorCode.invalid_replica_assignment,
         "includes the broker 1 more than once"),
        (ReassignmentTarget("b", 2, (1, 2, 9)), ErrorCode.invalid_replica_assignment,
         "includes broker 9, but no such broker is registered"),
    ]  # fmt: skip
    res = alter_reassignments(c, [t for t, _, _ in cases])
    assert res.records == []  # nothing half-applied
    for (t, code, words), (topic, p, err) in zip(cases, res.response, strict=True):
        assert (topic, p) == (t.topic, t.partition)
        assert err.code == code, (t, err)
        assert err.message is not None
        assert words in err.message, (t, err)
    rf = alter_reassignments(c, [ReassignmentTarget("b", 0, (1, 2))], allow_rf_change=False)
    assert rf.response[0][2].code == ErrorCode.invalid_replication_factor
    assert _part(c).replicas != (1, 2)


def test_a_reassignment_in_progress_is_in_the_snapshot() -> None:
    c, log = _cluster()
    assert _move(c, log, (4, 5, _part(c).replicas[0])) == ErrorCode.none
    delta = MetadataDelta(MetadataImage())
    for rec in image_records(c.image):
        delta.replay(rec)
    rebuilt = delta.apply().topic("b")
    assert rebuilt is not None
    assert rebuilt.partitions[0] == _part(c)
    assert rebuilt.partitions[0].adding == (4, 5)


def test_preferred_leaders_come_back_automatically() -> None:
    """auto.leader.rebalance.enable (Kafka's KRaft controller): a partition led by
    another replica than its first goes back to the first one when that one is in the
    ISR and active; not while it is being reassigned, not to a fenced or lagging one."""
    from keeperless.controller.elections import balance_leaders
    from keeperless.metadata import _records_gen as r

    c, log = _cluster()
    t = c.image.topic("b")
    assert t is not None
    for p in (0, 1, 2):
        info = t.partitions[p]
        other = next(b for b in info.isr if b != info.replicas[0])
        log.append([r.PartitionChangeRecord(partition_id=p, topic_id=t.topic_id, leader=other)])
    # partition 1's preferred replica lags (out of the ISR); partition 2 is being moved
    p1 = _part(c, p=1)
    log.append([r.PartitionChangeRecord(partition_id=1, topic_id=t.topic_id,
                isr=tuple(b for b in p1.isr if b != p1.replicas[0]))])  # fmt: skip
    log.commit()
    assert _move(c, log, (4, 5, _part(c, p=2).replicas[0]), p=2) == ErrorCode.none
    res = balance_leaders(c, [t.topic_id])
    assert res.response == ["b-0"]
    log.append(res.records)
    log.commit()
    assert _part(c, p=0).leader == _part(c, p=0).replicas[0]
    assert _part(c, p=1).leader != _part(c, p=1).replicas[0]
    assert balance_leaders(c, [t.topic_id]).records == []
