"""Partition replication across 3 brokers: ISR, acks=all, failover without losing an
acknowledged write, a restarted broker rejoining the ISR, controlled shutdown."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.cluster import Cluster, wait_until

TOPIC = "replicated"
PARTITIONS = 3


@pytest.fixture
def cluster33(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path,
        controllers=3,
        brokers=3,
        extra={
            "replica.lag.time.max.ms": "2000",
            "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500",
        },
    )
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _partitions(bootstrap: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr) as a client sees it."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=10)
    t = md.topics[TOPIC]
    return {p.id: (p.leader, list(p.replicas), sorted(p.isrs)) for p in t.partitions.values()}


def _produce(bootstrap: str, start: int, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failed: list[str] = []
    for i in range(start, start + n):
        p.produce(
            TOPIC,
            value=f"m{i}".encode(),
            partition=i % PARTITIONS,
            on_delivery=lambda err, _m: failed.append(str(err)) if err else None,
        )
    assert p.flush(60) == 0
    assert not failed, failed[:3]


def _consume_all(bootstrap: str, expected: int) -> list[tuple[int, int, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    out: list[tuple[int, int, bytes]] = []

    def more() -> bool:
        for m in c.consume(1000, timeout=0.5):
            if m.error() is None:
                out.append((m.partition(), m.offset(), m.value()))
        return len(out) >= expected

    wait_until(more, timeout=60, what=f"{expected} messages")
    c.close()
    return out


def test_failover_keeps_every_acknowledged_write(cluster33: Cluster) -> None:
    bs = cluster33.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
    wait_until(
        lambda: all(len(isr) == 3 for _, _, isr in _partitions(bs).values()),
        what="a full ISR",
    )
    _produce(bs, 0, 3000)  # acks=all: on every ISR member before acknowledged

    parts = _partitions(bs)
    victim = parts[0][0]
    led = sorted(p for p, (leader, _, _) in parts.items() if leader == victim)
    cluster33.brokers[victim].kill9()
    survivors = ",".join(b.bootstrap for i, b in cluster33.brokers.items() if i != victim)

    def moved() -> bool:
        now = _partitions(survivors)
        return all(now[p][0] not in (victim, -1) for p in led)

    wait_until(moved, timeout=30, what="new leaders from the ISR after the session timeout")
    wait_until(
        lambda: all(victim not in isr for _, _, isr in _partitions(survivors).values()),
        what="the dead broker out of every ISR",
    )
    _produce(survivors, 3000, 1000)

    got = _consume_all(survivors, 4000)
    values = sorted(int(v[1:]) for _, _, v in got)
    assert values == list(range(4000))  # nothing acknowledged was lost, nothing doubled
    for p in range(PARTITIONS):
        offsets = sorted(o for part, o, _ in got if part == p)
        assert offsets == list(range(len(offsets)))

    # the broker comes back, catches up from the new leaders and rejoins every ISR
    cluster33.brokers[victim].start()
    wait_until(
        lambda: all(len(isr) == 3 for _, _, isr in _partitions(bs).values()),
        timeout=40,
        what="the restarted broker back in every ISR",
    )
    copy = cluster33.brokers[victim].data
    assert all((copy / f"{TOPIC}-{p}" / "leader-epoch-checkpoint").exists() for p in range(3))

    # controlled shutdown: a broker stopped with SIGTERM hands over its leaderships first
    parts = _partitions(bs)
    leader = parts[1][0]
    led = [p for p, (lead, _, _) in parts.items() if lead == leader]
    cluster33.brokers[leader].stop()
    rest = ",".join(b.bootstrap for i, b in cluster33.brokers.items() if i != leader)
    wait_until(
        lambda: all(_partitions(rest)[p][0] not in (leader, -1) for p in led),
        what="leaderships moved off the stopped broker",
    )
    # moved by its own request as it stopped (Kafka's controlled shutdown: in controlled
    # shutdown, then told to shut down and fenced), not by a session timeout
    controller_logs = "".join(n.logs() for n in cluster33.controllers.values())
    assert f"Broker {leader} is in controlled shutdown" in controller_logs
    assert f"Broker {leader} finished its controlled shutdown" in controller_logs
    assert "Controlled shutdown complete" in cluster33.brokers[leader].logs()
    if leader != victim:
        assert f"Fenced broker {leader}: no heartbeat" not in controller_logs
    _produce(rest, 4000, 300)
    assert len(_consume_all(rest, 4300)) == 4300
