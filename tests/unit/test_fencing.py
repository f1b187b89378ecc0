from __future__ import annotations

import random
import uuid

from keeperless.controller.fencing import fence_stale_brokers, start_sessions
from keeperless.controller.quorum_controller import NewTopic, QuorumController


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
        c.replay(hb.records, off + 1)
        off += 2
    c.replay(c.create_topics([NewTopic("t")], False).records, 10)
    return c


def test_missed_session_fences_and_moves_leaders_then_recovery() -> None:
    c = _cluster()
    led_by_5 = {i for i, p in c.image.topic("t").partitions.items() if p.leader == 5}
    assert led_by_5
    c.broker_heartbeat(4, 0, False, True, 8000)  # broker 4 keeps its session
    res = fence_stale_brokers(c, 9500)
    assert res.response == [5]
    c.replay(res.records, 20)
    assert c.image.brokers[5].fenced
    parts = c.image.topic("t").partitions
    assert {i for i, p in parts.items() if p.leader == -1} == led_by_5
    assert all(parts[i].isr == (5,) for i in led_by_5)  # the last ISR member is kept
    assert fence_stale_brokers(c, 9600).records == []
    # broker 5 restarts: new registration, caught up, unfenced, leads again
    reg = c.register_broker(5, uuid.uuid4(), [("PLAINTEXT", "h", 5)], None, 30, 10_000)
    c.replay(reg.records, 30)
    hb = c.broker_heartbeat(5, 30, False, True, 10_000)
    c.replay(hb.records, 31)
    parts = c.image.topic("t").partitions
    assert {i for i, p in parts.items() if p.leader == 5} == led_by_5
    assert all(parts[i].leader_epoch == 2 for i in led_by_5)


def test_new_active_controller_gives_a_full_session() -> None:
    c = _cluster()
    c._last_heartbeat_ms.clear()  # as after a failover
    start_sessions(c, 50_000)
    assert fence_stale_brokers(c, 55_000).records == []
    assert fence_stale_brokers(c, 60_000).response == [4, 5]
