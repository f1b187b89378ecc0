"""Kafka's controlled shutdown: an unfenced broker asking to shut down gives up its
leaderships and ISR memberships, is marked InControlledShutdown, and is told to shut down
(and fenced) once that is committed and every other active broker has caught up."""

from __future__ import annotations

import random
import uuid

from keeperless.controller.quorum_controller import QuorumController
from keeperless.metadata import _records_gen as r
from keeperless.metadata.admin import NewTopic
from tests.unit.controller_log import ActiveLog, active_cluster


def test_controlled_shutdown_moves_waits_for_the_others_then_fences() -> None:
    c, log = active_cluster()
    epoch3 = c.image.brokers[3].epoch
    held = {
        (t.name, i)
        for t in c.image.topics.values()
        for i, p in t.partitions.items()
        if 3 in p.replicas
    }
    assert held

    hb = c.broker_heartbeat(3, epoch3, False, True, 100, want_shut_down=True, metadata_offset=0)
    assert hb.response[1:] == (False, False)  # not fenced, not yet
    records = hb.all_records()
    assert records[-1] == r.BrokerRegistrationChangeRecord(
        broker_id=3, broker_epoch=epoch3, in_controlled_shutdown=1
    )
    log.append(records)
    b3 = c.image.brokers[3]
    assert b3.in_controlled_shutdown
    assert not b3.fenced
    for t in c.image.topics.values():
        for p in t.partitions.values():
            assert p.leader != 3
            assert 3 not in p.isr or p.isr == (3,)
    # no new replicas while it shuts down unless the replication factor needs it (then
    # as a follower: a rolling restart keeps the replication factor), no steady answer
    res = c.create_topics([NewTopic("new", 6, 2), NewTopic("all3", 6, 3)], False)
    log.append(res.records)
    assert all(3 not in p.replicas for p in c.image.topic("new").partitions.values())
    for p in c.image.topic("all3").partitions.values():
        assert sorted(p.replicas) == [1, 2, 3]
        assert p.leader != 3
        assert 3 not in p.isr
    assert c.steady_heartbeat(3, epoch3, False, 200, want_shut_down=True) is None

    # not committed yet: keep waiting
    again = c.broker_heartbeat(3, epoch3, False, True, 300, want_shut_down=True)
    assert again.response[1:] == (False, False)
    assert again.all_records() == []
    log.commit()
    # committed, but brokers 1 and 2 have not reported that offset yet
    assert c.broker_heartbeat(3, epoch3, False, True, 400, want_shut_down=True).response[1:] == (
        False,
        False,
    )
    for b in (1, 2):
        assert c.steady_heartbeat(
            b, c.image.brokers[b].epoch, False, 500, metadata_offset=log.offset
        )
    done = c.broker_heartbeat(3, epoch3, False, True, 600, want_shut_down=True)
    assert done.response[1:] == (True, True)  # fenced, shut down now
    fence = done.all_records()
    assert fence[-1] == r.BrokerRegistrationChangeRecord(broker_id=3, broker_epoch=epoch3, fenced=1)
    log.append(fence)
    assert c.image.brokers[3].fenced
    # a stopped broker's session is over: no expiry fencing it again
    assert 3 not in c.cluster.last_heartbeat_ms


def test_staying_in_controlled_shutdown_and_fenced_brokers_shut_down_at_once() -> None:
    c, log = active_cluster()
    e2 = c.image.brokers[2].epoch
    log.append(c.broker_heartbeat(2, e2, False, True, 0, want_shut_down=True).all_records())
    # a broker in controlled shutdown cannot go back to running
    assert c.broker_heartbeat(2, e2, False, True, 10).response[1:] == (False, False)
    assert c.image.brokers[2].in_controlled_shutdown
    # a fenced broker asking to shut down may do so at once, with nothing to write
    e1 = c.image.brokers[1].epoch
    log.append(c.broker_heartbeat(1, e1, True, True, 20).all_records())
    assert c.image.brokers[1].fenced
    res = c.broker_heartbeat(1, e1, False, True, 30, want_shut_down=True)
    assert res.response[1:] == (True, True)
    assert res.all_records() == []


def test_a_registration_ends_the_controlled_shutdown_state() -> None:
    import uuid

    c, log = active_cluster()
    e3 = c.image.brokers[3].epoch
    log.append(c.broker_heartbeat(3, e3, False, True, 0, want_shut_down=True).all_records())
    log.append(c.broker_heartbeat(3, e3, True, True, 10).all_records())  # fenced
    reg = c.register_broker(3, uuid.uuid4(), [("P", "h", 3)], None, log.offset + 1, 20_000)
    log.append(reg.records)
    assert not c.image.brokers[3].in_controlled_shutdown
    assert c.image.brokers[3].fenced


def test_a_rolling_restart_keeps_the_replication_factor() -> None:
    """Two brokers, one in controlled shutdown (SIGTERM during a roll): an RF 2 topic is
    still created, led by the other broker, as Kafka places replicas on registered
    brokers that are fenced or shutting down when the replication factor needs them
    (it was refused with "only 1 broker(s) are registered")."""
    c = QuorumController(
        1, random.Random(3), {"num.partitions": 1, "default.replication.factor": 2}
    )
    log = ActiveLog(c)
    log.append([r.FeatureLevelRecord(name="metadata.version", feature_level=21)])
    epochs = {}
    for b in (1, 2):
        epochs[b] = log.offset + 1
        log.append(c.register_broker(b, uuid.uuid4(), [("P", "h", b)], None, epochs[b], 0).records)
        log.append(c.broker_heartbeat(b, epochs[b], False, True, 0).all_records())
    log.commit()
    hb = c.broker_heartbeat(2, epochs[2], False, True, 10, want_shut_down=True, metadata_offset=0)
    log.append(hb.all_records())
    assert c.image.brokers[2].in_controlled_shutdown
    res = c.create_topics([NewTopic("rolled", 3, 2)], False)
    assert [t.error.code for t in res.response] == [0]
    log.append(res.records)
    for p in c.image.topic("rolled").partitions.values():
        assert sorted(p.replicas) == [1, 2]
        assert (p.leader, p.isr) == (1, (1,))
    # with both brokers resting, no leader can be placed: refused, saying why
    log.append(c.broker_heartbeat(1, epochs[1], True, True, 20).all_records())
    refused = c.create_topics([NewTopic("nowhere", 1, 2)], False).response[0].error
    assert refused.code == 38  # INVALID_REPLICATION_FACTOR
    assert "fenced" in (refused.message or "")
