"""Eligible leader replicas (KIP-966) on the controller: replicas that leave the ISR
while it is below min.insync.replicas stay eligible, the last ISR member fenced leaves
the ISR into the ELR, a leader comes from the ELR when the ISR is empty, an ELR member
coming back leads, and with the feature off nothing of this happens."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.controller.elections import UNCLEAN, elect_leaders
from keeperless.controller.fencing import register_broker
from keeperless.controller.isr import alter_partition
from keeperless.controller.quorum_controller import QuorumController
from keeperless.metadata import _records_gen as r
from keeperless.metadata.admin import IsrChange
from keeperless.metadata.image import PartitionInfo
from keeperless.protocol.records import build_batch
from tests.unit.brokers import make_broker
from tests.unit.controller_log import ActiveLog, active_cluster

ELR = "eligible.leader.replicas.version"


def _cluster(elr: bool = True) -> tuple[QuorumController, ActiveLog]:
    """Brokers 1-3; topic "b" (RF 3) with min.insync.replicas=2; ELR on or off."""
    c, log = active_cluster(level=23)
    records: list[r.FeatureLevelRecord | r.ConfigRecord] = [
        r.ConfigRecord(resource_type=2, resource_name="b", name="min.insync.replicas", value="2")
    ]
    if elr:
        records.append(r.FeatureLevelRecord(name=ELR, feature_level=1))
    log.append(records)
    log.commit()
    return c, log


def _part(c: QuorumController) -> PartitionInfo:
    t = c.image.topic("b")
    assert t is not None
    return t.partitions[0]


def _shrink(c: QuorumController, log: ActiveLog, new_isr: tuple[int, ...]) -> None:
    info = _part(c)
    t = c.image.topic("b")
    assert t is not None
    ch = IsrChange(t.topic_id, 0, info.leader_epoch, new_isr, info.partition_epoch)
    res = alter_partition(c, info.leader, c.image.brokers[info.leader].epoch, [ch])
    assert res.response[1][0].error.code == ErrorCode.none, res.response
    log.append(res.records)
    log.commit()


def _fence(c: QuorumController, log: ActiveLog, broker: int) -> None:
    res = c.broker_heartbeat(broker, c.image.brokers[broker].epoch, True, True, 0)
    log.append(res.all_records())
    log.commit()


def _to_isr_of_leader_alone(c: QuorumController, log: ActiveLog) -> tuple[int, int, int]:
    """The ISR shrinks to its leader alone, one member at a time: (leader, the member
    that left while the ISR was at min ISR, the one that left below it)."""
    p = _part(c)
    leader = p.leader
    first, second = [b for b in p.replicas if b != leader]
    _shrink(c, log, (leader, second))
    assert _part(c).elr == ()  # 2 >= min ISR: nobody is eligible out of the ISR
    _shrink(c, log, (leader,))
    return leader, first, second


def test_a_replica_leaving_the_isr_below_min_isr_stays_eligible() -> None:
    c, log = _cluster()
    leader, first, second = _to_isr_of_leader_alone(c, log)
    p = _part(c)
    assert p.isr == (leader,)
    assert p.elr == (second,)  # it had every record committed while the ISR was 2
    assert first not in p.elr  # it left while the ISR was at min ISR
    # back to min ISR: the ELR is cleared
    _shrink(c, log, (leader, second))
    assert (_part(c).elr, _part(c).last_known_elr) == ((), ())


def test_the_last_isr_member_fenced_hands_over_to_an_eligible_replica() -> None:
    c, log = _cluster()
    leader, _first, second = _to_isr_of_leader_alone(c, log)
    _fence(c, log, leader)
    p = _part(c)
    assert p.leader == second  # elected from the ELR
    assert p.isr == (second,)
    assert p.elr == (leader,)  # the fenced leader had every committed record too


def test_an_eligible_replica_coming_back_leads_a_leaderless_partition() -> None:
    c, log = _cluster()
    leader, first, second = _to_isr_of_leader_alone(c, log)
    _fence(c, log, second)
    _fence(c, log, first)
    _fence(c, log, leader)
    p = _part(c)
    assert (p.leader, p.isr) == (-1, ())
    assert set(p.elr) == {leader, second}
    # the lagging replica is not eligible: an unclean election would be needed for it
    res = c.broker_heartbeat(first, c.image.brokers[first].epoch, False, True, 0)
    log.append(res.all_records())
    log.commit()
    assert _part(c).leader == -1
    res = c.broker_heartbeat(second, c.image.brokers[second].epoch, False, True, 0)
    log.append(res.all_records())
    log.commit()
    p = _part(c)
    assert (p.leader, p.isr) == (second, (second,))
    assert p.elr == (leader,)


def test_an_unclean_election_clears_the_eligible_replicas() -> None:
    c, log = _cluster()
    leader, first, second = _to_isr_of_leader_alone(c, log)
    for b in (second, first, leader):
        _fence(c, log, b)
    res = c.broker_heartbeat(first, c.image.brokers[first].epoch, False, True, 0)
    log.append(res.all_records())
    log.commit()
    res = elect_leaders(c, UNCLEAN, [("b", 0)])
    assert res.response[0][2].code == ErrorCode.none
    log.append(res.records)
    log.commit()
    p = _part(c)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (first, (first,), (), ())


def test_with_the_feature_off_the_last_isr_member_stays_and_the_partition_is_offline() -> None:
    c, log = _cluster(elr=False)
    leader, _first, second = _to_isr_of_leader_alone(c, log)
    assert _part(c).elr == ()
    _fence(c, log, leader)
    p = _part(c)
    assert (p.leader, p.isr, p.elr) == (-1, (leader,), ())
    assert second not in p.isr


def test_the_high_watermark_stays_while_the_isr_is_below_min_isr(tmp_path: Path) -> None:
    """The broker's side of KIP-966: with the feature on, a leader whose ISR is below
    the topic's min.insync.replicas does not advance its high watermark (what it has
    alone is not committed); at min ISR it does; with the feature off it always did."""
    b = make_broker(tmp_path)
    tid = uuid.uuid4()
    b.on_committed([
        r.FeatureLevelRecord(name="metadata.version", feature_level=23),
        r.TopicRecord(name="t", topic_id=tid),
        r.ConfigRecord(resource_type=2, resource_name="t", name="min.insync.replicas", value="2"),
        r.PartitionRecord(partition_id=0, topic_id=tid, replicas=(1, 2), isr=(1,), leader=1,
                          leader_epoch=1),
    ], 3)  # fmt: skip
    p = b.partitions.get("t", 0)
    assert p is not None
    p.append(build_batch([(b"k", b"v", ())] * 3), 1, 1 << 20, 0)
    assert p.high_watermark == 3  # feature off: the leader alone commits
    b.on_committed([r.FeatureLevelRecord(name=ELR, feature_level=1)], 4)
    assert p.hw_min_isr == 2
    p.append(build_batch([(b"k", b"v", ())] * 3), 1, 1 << 20, 0)
    assert p.high_watermark == 3  # below min ISR: it stays
    b.on_committed([r.PartitionChangeRecord(partition_id=0, topic_id=tid, isr=(1, 2))], 5)
    p.record_follower_fetch(2, 6, 0)
    assert p.high_watermark == 6  # at min ISR: what both have is committed
    b.close()


def test_a_replica_back_from_an_unclean_shutdown_is_no_longer_eligible() -> None:
    """A broker that registers without naming its last epoch (no clean-shutdown file:
    a crash, whose unflushed tail may be gone) leaves every ELR, into the last known
    ELR; one whose clean-shutdown file names its epoch stays eligible."""
    c, log = _cluster()
    leader, _first, second = _to_isr_of_leader_alone(c, log)
    assert _part(c).elr == (second,)
    _fence(c, log, second)
    epoch = c.image.brokers[second].epoch
    clean = register_broker(c, second, uuid.uuid4(), [("P", "h", second)], None,
                            log.offset + 1, 0, None, epoch)  # fmt: skip
    assert clean.response[0].code == ErrorCode.none
    log.append(clean.records)
    log.commit()
    assert _part(c).elr == (second,)
    later = c.session_timeout_ms + 1  # the clean incarnation's session is over
    crashed = register_broker(c, second, uuid.uuid4(), [("P", "h", second)], None,
                              log.offset + 1, later, None, -1)  # fmt: skip
    assert crashed.response[0].code == ErrorCode.none
    log.append(crashed.records)
    log.commit()
    p = _part(c)
    assert p.elr == ()
    assert p.isr == (leader,)


def test_every_replica_back_from_a_crash_the_last_known_leader_leads() -> None:
    """Kafka's balanced recovery: every replica crashed (each back without its epoch,
    so none is eligible), the leader at the moment the ISR emptied leads again when it
    is back - rather than the partition staying offline until an unclean election."""
    c, log = _cluster()
    leader, first, second = _to_isr_of_leader_alone(c, log)
    for b in (first, second, leader):
        _fence(c, log, b)
    p = _part(c)
    assert (p.leader, p.isr, set(p.elr), p.last_known_elr) == (-1, (), {leader, second},
                                                                 (leader,))  # fmt: skip
    later = c.session_timeout_ms + 1
    for b in (second, leader):  # back from crashes: not eligible any more
        res = register_broker(c, b, uuid.uuid4(), [("P", "h", b)], None, log.offset + 1,
                              later, None, -1)  # fmt: skip
        log.append(res.records)
        log.commit()
    p = _part(c)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (-1, (), (), (leader,))
    res = c.broker_heartbeat(second, c.image.brokers[second].epoch, False, True, later)
    log.append(res.all_records())
    log.commit()
    assert _part(c).leader == -1  # not the last known leader
    res = c.broker_heartbeat(leader, c.image.brokers[leader].epoch, False, True, later)
    log.append(res.all_records())
    log.commit()
    p = _part(c)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (leader, (leader,), (), ())


def test_the_clean_shutdown_file_names_the_brokers_epoch(tmp_path: Path) -> None:
    from keeperless.broker.partition_manager import PartitionManager
    from keeperless.storage.log import LogConfig

    PartitionManager(1, tmp_path, LogConfig()).close(42)
    assert PartitionManager(1, tmp_path, LogConfig()).previous_broker_epoch == 42
    # read once: a crash after this start leaves no file, and the next start says -1
    assert PartitionManager(1, tmp_path, LogConfig()).previous_broker_epoch == -1


def test_the_high_watermark_is_saved_and_read_back(tmp_path: Path) -> None:
    """Kafka's replication-offset-checkpoint: a broker restarted and then elected (from
    the ELR, its ISR below min ISR, where the high watermark stays) knows what was
    committed; without it the partition showed consumers nothing."""
    tid = uuid.uuid4()
    records = [
        r.TopicRecord(name="t", topic_id=tid),
        r.PartitionRecord(partition_id=0, topic_id=tid, replicas=(2, 1), isr=(2, 1), leader=2,
                          leader_epoch=1),
    ]  # fmt: skip
    b = make_broker(tmp_path)
    b.on_committed(records, 2)
    p = b.partitions.get("t", 0)
    assert p is not None
    p.append_replica(build_batch([(b"k", b"v", ())] * 5, leader_epoch=1), 0)
    p.follower_hw(4)
    b.close()
    again = make_broker(tmp_path, caught_up=False)
    again.catch_up_to(2)  # live once the metadata naming the partition is in
    again.on_committed(records, 2)
    q = again.partitions.get("t", 0)
    assert q is not None
    assert q.high_watermark == 4
    again.close()


def test_the_last_known_leader_already_back_leads_once_nobody_is_eligible() -> None:
    """The other order: the last known leader is back (and up) while another crashed
    replica is still eligible; when that one comes back from its crash, nobody is
    eligible and the last known leader, already up, leads."""
    c, log = _cluster()
    leader, first, second = _to_isr_of_leader_alone(c, log)
    for b in (first, second, leader):
        _fence(c, log, b)
    later = c.session_timeout_ms + 1
    res = register_broker(c, leader, uuid.uuid4(), [("P", "h", leader)], None,
                          log.offset + 1, later, None, -1)  # fmt: skip
    log.append(res.records)
    log.commit()
    res = c.broker_heartbeat(leader, c.image.brokers[leader].epoch, False, True, later)
    log.append(res.all_records())
    log.commit()
    assert _part(c).leader == -1  # second is still eligible (and down)
    res = register_broker(c, second, uuid.uuid4(), [("P", "h", second)], None,
                          log.offset + 1, later, None, -1)  # fmt: skip
    log.append(res.records)
    log.commit()
    p = _part(c)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (leader, (leader,), (), ())


def test_a_lower_min_isr_clears_the_eligible_replicas() -> None:
    """Kafka's handleMinIsrUpdate: once the ISR is at or above the new min ISR, nobody
    outside it is eligible (they may lack what was committed since)."""
    from keeperless.controller.configs import SET, incremental_alter_configs

    c, log = _cluster()
    _, _, second = _to_isr_of_leader_alone(c, log)
    assert _part(c).elr == (second,)
    res = incremental_alter_configs(c, [(2, "b", [("min.insync.replicas", SET, "1")])], False)
    log.append(res.all_records())
    log.commit()
    assert _part(c).elr == ()
    # raised again: nobody becomes eligible by it
    res = incremental_alter_configs(c, [(2, "b", [("min.insync.replicas", SET, "3")])], False)
    log.append(res.all_records())
    log.commit()
    assert _part(c).elr == ()


def test_turned_off_the_next_change_clears_what_the_elr_left() -> None:
    """Found by a new user: ELR turned off kept a partition's ELR, the member rejoined
    the ISR, and ELR turned on again showed it in both (ISR 2,4 and ELR 4). As Kafka's
    PartitionChangeBuilder: with the feature off, any change clears ELR and LastKnownElr."""
    c, log = _cluster()
    leader, _first, second = _to_isr_of_leader_alone(c, log)
    assert _part(c).elr == (second,)
    log.append([r.FeatureLevelRecord(name=ELR, feature_level=0)])
    log.commit()
    _shrink(c, log, (leader, second))  # it rejoins while the feature is off
    p = _part(c)
    assert p.isr == (leader, second)
    assert (p.elr, p.last_known_elr) == ((), ())
    log.append([r.FeatureLevelRecord(name=ELR, feature_level=1)])
    log.commit()
    assert not set(_part(c).isr) & set(_part(c).elr)


def test_a_fence_resolves_each_topics_min_isr_once(monkeypatch: Any) -> None:
    """min.insync.replicas is resolved once per topic, not once per partition: at 1M
    partitions the resolution was 7 % of a controlled shutdown's CPU. The answer is
    still each topic's own."""
    from keeperless.controller import eligible

    c, _ = _cluster()
    asked: list[str] = []
    real = eligible.resolve_topic

    def counting(key: str, topic: Any, *rest: Any) -> Any:
        asked.append(key)
        return real(key, topic, *rest)

    monkeypatch.setattr(eligible, "resolve_topic", counting)
    of = c.elr_min_isr()
    assert of is not None
    assert [of("b") for _ in range(5)] == [2] * 5
    assert of("other") == 1
    assert len(asked) == 2
