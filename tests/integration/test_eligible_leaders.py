"""Eligible leader replicas (KIP-966) on a real cluster, with real clients: turned on
with Kafka's feature tool, min.insync.replicas becomes a cluster-level config, and a
partition whose ISR shrank below min ISR and then lost its last member is led again by
an eligible replica coming back - with every acknowledged record - where without ELR it
stays offline until its last ISR member returns or an unclean election loses data."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.cluster import Cluster, keeperless, wait_until


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One controller and brokers 2-5 (5 hosts no replica of the test's topic: it
    answers while the others are stopped)."""
    # formatted at 3.9, before ELR: the test upgrades to it as an operator would
    c = Cluster(tmp_path_factory.mktemp("elr"), controllers=1, brokers=4, release="3.9")
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _partition(c: Cluster, topic: str) -> dict[str, str]:
    """The fields of partition 0's line of kafka-topics.sh --describe."""
    out = keeperless("topics", "--bootstrap-server", c.bootstrap, "--describe", "--topic",
                     topic, check=True).stdout  # fmt: skip
    line = next(x for x in out.splitlines() if "\tPartition: 0\t" in x)
    return dict(f.split(": ", 1) for f in line.strip("\t").split("\t") if ": " in f)


def _produce(c: Cluster, topic: str, n: int, acks: str) -> tuple[list[str], list[str]]:
    """(values acknowledged, errors)."""
    from confluent_kafka import Producer

    acked: list[str] = []
    errors: list[str] = []

    def done(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.value().decode())
        else:
            errors.append(err.name())

    p = Producer({"bootstrap.servers": c.bootstrap, "acks": acks, "linger.ms": 5,
                  "message.timeout.ms": 5000, "retries": 0})  # fmt: skip
    tag = uuid.uuid4().hex[:6]
    for i in range(n):
        p.produce(topic, f"{tag}-{i}".encode(), partition=0, on_delivery=done)
        p.poll(0)
    p.flush(30)
    return acked, errors


def _read(c: Cluster, topic: str) -> set[str]:
    from confluent_kafka import Consumer, TopicPartition

    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": uuid.uuid4().hex,
                     "enable.auto.commit": False})  # fmt: skip
    cons.assign([TopicPartition(topic, 0, 0)])
    got: set[str] = set()
    try:
        idle = 0
        while idle < 6:
            batch = cons.consume(1000, 0.5)
            idle = 0 if batch else idle + 1
            got.update(m.value().decode() for m in batch if m.error() is None)
    finally:
        cons.close()
    return got


def test_an_eligible_replica_leads_again_with_every_acknowledged_record(three: Cluster) -> None:
    c = three
    bs = ["--bootstrap-server", c.bootstrap]
    refused = keeperless("features", "upgrade", *bs,
                         "--feature", "eligible.leader.replicas.version=1")  # fmt: skip
    assert refused.returncode == 1
    assert "depends on metadata.version level 23" in refused.stdout
    both = keeperless("features", "upgrade", *bs, "--release-version", "4.0-IV1",
                      "--feature", "eligible.leader.replicas.version=1")  # fmt: skip
    assert both.returncode == 1
    assert "Can not specify `release-version` with other feature flags." in both.stderr
    keeperless("features", "upgrade", *bs, "--metadata", "4.0-IV1",
               "--feature", "eligible.leader.replicas.version=1", check=True)  # fmt: skip
    # min.insync.replicas is now a cluster-level config every topic shows
    topic = f"elr-{uuid.uuid4().hex[:6]}"
    keeperless("topics", *bs, "--create", "--topic", topic, "--replica-assignment", "2:3:4",
               "--config", "min.insync.replicas=2", check=True)  # fmt: skip
    plain = f"plain-{uuid.uuid4().hex[:6]}"
    keeperless("topics", *bs, "--create", "--topic", plain, check=True)
    other = keeperless("configs", *bs, "--entity-type", "topics", "--entity-name", plain,
                       "--describe", "--all", check=True).stdout  # fmt: skip
    assert "min.insync.replicas=1 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:" in (
        other
    )
    wait_until(lambda: _partition(c, topic)["Isr"] == "2,3,4", what="the ISR")
    acked, errors = _produce(c, topic, 500, "all")
    assert len(acked) == 500, errors
    assert _partition(c, topic)["Elr"] == ""
    c.brokers[4].stop()
    wait_until(lambda: _partition(c, topic)["Isr"] == "2,3", what="4 out of the ISR")
    assert _partition(c, topic)["Elr"] == ""  # at min ISR: nobody eligible outside it
    c.brokers[3].stop()
    wait_until(lambda: _partition(c, topic)["Isr"] == "2", what="3 out of the ISR")
    assert _partition(c, topic)["Elr"] == "3"  # below min ISR: 3 has every committed record
    more, errors = _produce(c, topic, 50, "all")
    assert more == []  # acks=all refused below min ISR
    assert errors
    c.brokers[2].stop()  # the last ISR member: the partition is offline, 2 and 3 eligible
    desc = _partition(c, topic)
    assert (desc["Leader"], desc["Isr"], desc["Elr"]) == ("none", "", "2,3")
    c.brokers[3].start()  # an eligible replica back: it leads, with the ISR its own
    wait_until(lambda: _partition(c, topic)["Leader"] == "3", timeout=30,
               what="the eligible replica to lead")  # fmt: skip
    desc = _partition(c, topic)
    assert (desc["Isr"], desc["Elr"]) == ("3", "2")
    assert set(acked) <= _read(c, topic)
    c.brokers[2].start()
    c.brokers[4].start()
    wait_until(lambda: _partition(c, topic)["Isr"].count(",") == 2, timeout=60,
               what="the ISR whole again")  # fmt: skip
    assert _partition(c, topic)["Elr"] == ""
    again, errors = _produce(c, topic, 100, "all")
    assert len(again) == 100, errors
    assert set(acked) | set(again) <= _read(c, topic)
