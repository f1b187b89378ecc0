from __future__ import annotations

import random
import uuid

from keeperless.controller.fencing import fence_stale_brokers, start_sessions
from keeperless.controller.quorum_controller import QuorumController
from keeperless.metadata import _records_gen as r
from keeperless.metadata.admin import NewTopic


def _cluster() -> QuorumController:
    c = QuorumController(
        1, random.Random(3), {"num.partitions": 4, "default.replication.factor": 1}
    )
    c.session_timeout_ms = 9000
    off = 0
    for b in (4, 5):
        res = c.register_broker(b, uuid.uuid4(), [("PLAINTEXT", "h", b)], None, off, 0)
        c.replay(res.records, off)
        hb = c.broker_heartbeat(b, off, False, True, 0)
        c.replay(hb.all_records(), off + 1)
        off += 2
    c.replay(c.create_topics([NewTopic("t")], False).records, 10)
    return c


def test_missed_session_fences_and_moves_leaders_then_recovery() -> None:
    c = _cluster()
    led_by_5 = {i for i, p in c.image.topic("t").partitions.items() if p.leader == 5}
    assert led_by_5
    c.broker_heartbeat(4, 0, False, True, 8000)  # broker 4 keeps its session
    res = fence_stale_brokers(c, 9500)
    records = res.all_records()
    assert res.response == [5]
    c.replay(records, 20)
    assert c.image.brokers[5].fenced
    parts = c.image.topic("t").partitions
    assert {i for i, p in parts.items() if p.leader == -1} == led_by_5
    assert all(parts[i].isr == (5,) for i in led_by_5)  # the last ISR member is kept
    assert fence_stale_brokers(c, 9600).records == []
    # broker 5 restarts: new registration, caught up, unfenced, leads again
    reg = c.register_broker(5, uuid.uuid4(), [("PLAINTEXT", "h", 5)], None, 30, 10_000)
    c.replay(reg.records, 30)
    hb = c.broker_heartbeat(5, 30, False, True, 10_000)
    c.replay(hb.all_records(), 31)
    parts = c.image.topic("t").partitions
    assert {i for i, p in parts.items() if p.leader == 5} == led_by_5
    assert all(parts[i].leader_epoch == 2 for i in led_by_5)


def test_new_active_controller_gives_a_full_session() -> None:
    c = _cluster()
    c.cluster.last_heartbeat_ms.clear()  # as after a failover
    start_sessions(c, 50_000)
    assert fence_stale_brokers(c, 55_000).records == []
    assert fence_stale_brokers(c, 60_000).response == [4, 5]


def test_placement_spreads_racks_and_uses_fenced_brokers_only_when_needed() -> None:
    c = QuorumController(
        1, random.Random(5), {"num.partitions": 6, "default.replication.factor": 3}
    )
    off = 0
    for b, rack in ((1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")):
        res = c.register_broker(b, uuid.uuid4(), [("PLAINTEXT", "h", b)], rack, off, 0)
        c.replay(res.records, off)
        c.replay(c.broker_heartbeat(b, off, False, True, 0).all_records(), off + 1)
        off += 2
    c.replay(c.create_topics([NewTopic("racks")], False).records, 50)
    racks = {b: c.image.brokers[b].rack for b in c.image.brokers}
    for p in c.image.topic("racks").partitions.values():
        assert len({racks[x] for x in p.replicas}) == 3, p.replicas
    # fence two brokers: RF 5 still fits by using one of them, RF 3 avoids them
    for b in (5, 6):
        c.replay(c.broker_heartbeat(b, 2 * (b - 1), True, True, 0).all_records(), off)
        off += 1
    c.replay(c.create_topics([NewTopic("rf3", 4, 3)], False).records, 100)
    assert all(
        5 not in p.replicas and 6 not in p.replicas
        for p in c.image.topic("rf3").partitions.values()
    )
    res = c.create_topics([NewTopic("rf5", 2, 5)], False)
    assert res.response[0].error.code == 0
    c.replay(res.records, 200)
    for p in c.image.topic("rf5").partitions.values():
        assert p.leader not in (5, 6)
        assert 5 not in p.isr
        assert 6 not in p.isr
    too_many = c.create_topics([NewTopic("rf7", 1, 7)], False)
    assert too_many.response[0].error.code == 38  # INVALID_REPLICATION_FACTOR


def test_fencing_a_leader_promotes_an_isr_member_and_shrinks_the_isr() -> None:
    """A new partition's ISR is every live replica; fencing its leader elects the next ISR
    member and drops the fenced broker from the ISR. With no other ISR member left the
    partition goes offline, keeping its last ISR member."""
    c = _cluster()
    c.replay(c.create_topics([NewTopic("rf2", 2, 2)], False).records, 40)
    parts = c.image.topic("rf2").partitions
    assert all(set(p.isr) == {4, 5} for p in parts.values())
    leader = parts[0].leader
    other = 9 - leader
    c.broker_heartbeat(other, 2 * (other - 4), False, True, 8000)
    res = c.broker_heartbeat(leader, 2 * (leader - 4), True, True, 8000)  # leader stops
    c.replay(res.all_records(), 50)
    p0 = c.image.topic("rf2").partitions[0]
    assert (p0.leader, p0.isr, p0.leader_epoch) == (other, (other,), 1)
    res = c.broker_heartbeat(other, 2 * (other - 4), True, True, 8100)  # and the other one
    c.replay(res.all_records(), 60)
    p0 = c.image.topic("rf2").partitions[0]
    assert (p0.leader, p0.isr) == (-1, (other,))


def test_the_broker_index_follows_every_change() -> None:
    """Fencing uses the controller's broker -> partitions index; it must match a walk of
    the image after creates, reassignment-free changes, deletes and a snapshot load."""
    c = _cluster()
    c.replay(c.create_topics([NewTopic("a", 3, 2), NewTopic("b", 2, 1)], False).records, 40)
    c.replay(c.delete_topics(["b"], []).records, 41)

    def walk() -> dict[int, set]:
        out: dict[int, set] = {}
        for t in c.image.topics.values():
            for p, info in t.partitions.items():
                for b in info.replicas:
                    out.setdefault(b, set()).add((t.topic_id, p))
        return out

    def index() -> dict[int, set]:
        return {b: set(s) for b, s in c.partitions_by_broker.items() if s}

    assert index() == walk()
    res = c.broker_heartbeat(4, 0, True, True, 100)  # broker 4 stops cleanly
    c.replay(res.all_records(), 42)
    assert index() == walk()
    from keeperless.metadata.snapshot import SnapshotWriter
    from keeperless.raft.messages import SnapshotId
    from keeperless.runtime.metadata_log import image_of_snapshot

    c.load_image(image_of_snapshot(SnapshotWriter().write(c.image, 0), SnapshotId(43, 1))[1])
    assert index() == walk()
    from keeperless.controller.fencing import iter_leaders_after_fence

    def key(rec: object) -> tuple:
        return (rec.topic_id, rec.partition_id)  # type: ignore[attr-defined]

    indexed = sorted(iter_leaders_after_fence(c.image, 5, c.partitions_by_broker), key=key)
    assert indexed
    assert indexed == sorted(iter_leaders_after_fence(c.image, 5), key=key)


def test_only_independent_changes_may_be_split_across_batches() -> None:
    """CreateTopics must commit whole (a failover must never leave half a topic); the
    leader moves of a fenced broker are independent and may be appended in chunks."""
    c = _cluster()
    assert c.create_topics([NewTopic("whole", 3, 2)], False).atomic
    assert not c.broker_heartbeat(4, 0, True, True, 100).atomic


def test_a_fence_cut_short_by_a_failover_is_finished_by_the_next_heartbeat() -> None:
    """Kafka's order: the leaderships move first and the fence record comes last, so a
    failover that commits only part of a controlled shutdown leaves the broker unfenced;
    its next heartbeat moves what is left and fences it."""
    c = _cluster()
    c.replay(c.create_topics([NewTopic("many", 40, 2)], False).records, 20)
    led = {i for i, p in c.image.topic("many").partitions.items() if p.leader == 5}
    assert len(led) > 2
    records = c.broker_heartbeat(5, 2, True, True, 100).all_records()
    assert records[-1] == r.BrokerRegistrationChangeRecord(broker_id=5, broker_epoch=2, fenced=1)
    c.replay(records[:2], 30)  # only the first batch made it
    assert not c.image.brokers[5].fenced
    c.replay(c.broker_heartbeat(5, 2, True, True, 200).all_records(), 40)
    assert c.image.brokers[5].fenced
    parts = c.image.topic("many").partitions
    assert all(parts[i].leader != 5 for i in led)
    assert all(5 not in p.isr or p.isr == (5,) for p in parts.values())


def test_steady_heartbeats_are_answered_without_an_operation() -> None:
    """A heartbeat that changes nothing keeps the session at once (it never waits behind
    a long operation); anything else needs the full operation."""
    c = _cluster()
    assert c.steady_heartbeat(5, 2, False, 8000) is not None
    assert c.steady_heartbeat(4, 99, False, 8000) is None  # a stale epoch
    assert c.steady_heartbeat(4, 0, True, 8000) is None  # wants to be fenced
    c.broker_heartbeat(4, 0, False, True, 0)
    assert fence_stale_brokers(c, 9500).response == [4]
    c.replay(fence_stale_brokers(c, 20_000).all_records(), 50)
    assert c.steady_heartbeat(5, 2, False, 20_000) is None  # fenced: must catch up first


def test_a_restarted_broker_is_fenced_before_its_new_incarnation_registers() -> None:
    """A broker killed while leading (then maybe missing its unflushed tail) comes back
    after its session ran out but before the session check fenced it: the old
    incarnation is fenced first (leaderships move, it leaves the ISRs), and only then is
    the new one registered. Registered in place, it went on leading with a shorter log
    and followers truncated acknowledged writes (fault harness, seed 7001)."""
    from kio.schema.errors import ErrorCode

    from keeperless.controller.fencing import register_broker

    c = QuorumController(
        1, random.Random(3), {"num.partitions": 4, "default.replication.factor": 2}
    )
    c.session_timeout_ms = 9000
    off = 0
    for b in (4, 5):
        res = c.register_broker(b, uuid.uuid4(), [("PLAINTEXT", "h", b)], None, off, 0)
        c.replay(res.records, off)
        c.replay(c.broker_heartbeat(b, off, False, True, 0).all_records(), off + 1)
        off += 2
    c.replay(c.create_topics([NewTopic("t")], False).records, 10)
    led_by_5 = {i for i, p in c.image.topic("t").partitions.items() if p.leader == 5}
    assert led_by_5
    c.broker_heartbeat(4, 0, False, True, 9500)
    # while the old session lives, a new incarnation is refused and nothing changes
    live = register_broker(c, 5, uuid.uuid4(), [("PLAINTEXT", "h", 5)], None, 20, 5000)
    assert live.response[0].code == ErrorCode.duplicate_broker_registration
    assert live.all_records() == []
    # session over, not fenced yet: the old incarnation is fenced first
    first = register_broker(c, 5, uuid.uuid4(), [("PLAINTEXT", "h", 5)], None, 20, 9600)
    assert first.response[0].code == ErrorCode.duplicate_broker_registration
    c.replay(first.all_records(), 20)
    assert c.image.brokers[5].fenced
    parts = c.image.topic("t").partitions
    assert all(parts[i].leader == 4 and 5 not in parts[i].isr for i in led_by_5)
    assert all(5 not in p.isr for p in parts.values())
    # the retry registers the new incarnation, which leads nothing until it catches up
    again = register_broker(c, 5, uuid.uuid4(), [("PLAINTEXT", "h", 5)], None, 40, 9700)
    assert again.response[0].code == ErrorCode.none
    c.replay(again.records, 40)
    assert not any(p.leader == 5 for p in c.image.topic("t").partitions.values())


def test_a_late_copy_of_a_registration_keeps_the_epoch_the_broker_has() -> None:
    """The same process's registration arriving again (a TCP retransmission after a
    partition healed, after the broker had timed out and registered on a new connection)
    registered it anew: an epoch the broker never heard of, its heartbeats refused, fenced
    for good (fault harness, seed 12001). Kafka's brokers register once per process."""
    c = _cluster()
    inc = uuid.uuid4()
    first = c.register_broker(6, inc, [("PLAINTEXT", "h", 6)], None, 30, 1000)
    c.replay(first.records, 30)
    again = c.register_broker(6, inc, [("PLAINTEXT", "h", 6)], None, 31, 1500)
    assert again.records == []
    assert again.response[1] == 30
    assert c.image.brokers[6].epoch == 30
    # another process of broker 6 is still told to wait while this one lives
    other = c.register_broker(6, uuid.uuid4(), [("PLAINTEXT", "h", 6)], None, 32, 2000)
    assert other.response[0].code.name == "duplicate_broker_registration"


def test_a_fence_reads_the_index_topic_by_topic_as_its_changes_are_consumed() -> None:
    """At 1M partitions, grouping every partition a broker holds before the first change
    held the leader's event loop for 1.3 s (2-3 s on a busy machine: the quorum lost
    its leader at every try of a controlled shutdown). The changes come from the index
    one topic at a time, as they are consumed: a topic's partitions are read only when
    its turn comes."""
    from keeperless.controller.fencing import iter_leaders_after_fence

    c = _cluster()
    c.replay(c.create_topics([NewTopic("u", 3, 2), NewTopic("v", 3, 2)], False).records, 11)
    held = c.partitions_by_broker[5]
    topics = list(held.by_topic)
    assert len(topics) >= 2
    changes = iter_leaders_after_fence(c.image, 5, c.partitions_by_broker)
    first = next(changes)
    later = [t for t in topics if t != first.topic_id]
    for tid in later:  # (what reading them now would give)
        for p in list(held.by_topic[tid]):
            held.discard((tid, p))
    assert {rec.topic_id for rec in changes} <= {first.topic_id}
