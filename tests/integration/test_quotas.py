"""Issue 17: client quotas from the metadata log enforced — a producer and a consumer
over their byte rates are throttled (throttle_time_ms, a muted connection) to within
20% of the configured rate; others on the same broker are not."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from tests.integration.cluster import Node, keeperless

RATE = 200_000  # bytes per second
VALUE = b"v" * 1000


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    yield from Node(tmp_path_factory.mktemp("quotas")).running()


def _quota(node: Node, client: str, key: str) -> None:
    keeperless("configs", "--bootstrap-server", node.bootstrap, "--alter", "--add-config",
               f"{key}={RATE}", "--entity-type", "clients", "--entity-name", client,
               check=True)  # fmt: skip


# Kafka measures a rate over at least ten one-second windows, so a new client's first
# burst may reach ten seconds of its quota: the rate is measured after that
STEADY_FROM, STEADY_TO = 11.0, 21.0


def _steady(stamps: list[tuple[float, int]], t0: float) -> float:
    got = sum(n for t, n in stamps if STEADY_FROM <= t - t0 < STEADY_TO)
    return got / (STEADY_TO - STEADY_FROM)


def _produce_for(node: Node, topic: str, client: str, seconds: float) -> float:
    """Acknowledged payload bytes per second of a producer sending as fast as it may
    (in the steady state if it runs past it, else over the whole run)."""
    from confluent_kafka import Producer

    stamps: list[tuple[float, int]] = []

    def done(err: object, msg: object) -> None:
        if err is None:
            stamps.append((time.monotonic(), len(VALUE)))

    # requests of up to 16 KB: one request is appended whole before the client is told to
    # wait, so 1 MB ones (librdkafka's default) would make the rate jump by 5 s of quota
    p = Producer({"bootstrap.servers": node.bootstrap, "client.id": client, "linger.ms": 5,
                  "batch.size": 16384, "queue.buffering.max.kbytes": 512})  # fmt: skip
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        try:
            p.produce(topic, value=VALUE, on_delivery=done)
        except BufferError:
            p.poll(0.05)
    p.flush(60)
    if seconds >= STEADY_TO:
        return _steady(stamps, t0)
    return sum(n for _, n in stamps) / (time.monotonic() - t0)


def test_a_producer_is_held_to_its_byte_rate(node: Node) -> None:
    topic = f"q-{uuid.uuid4().hex[:8]}"
    keeperless("topics", "--bootstrap-server", node.bootstrap, "--create", "--topic", topic,
               check=True)  # fmt: skip
    _quota(node, "slow", "producer_byte_rate")
    time.sleep(0.5)
    slow = _produce_for(node, topic, "slow", STEADY_TO)
    assert 0.8 * RATE <= slow <= 1.2 * RATE, f"{slow:.0f} B/s against a quota of {RATE}"
    fast = _produce_for(node, topic, "fast", 3)
    assert fast > 2 * RATE  # another client id is not throttled


def test_a_consumer_is_held_to_its_byte_rate(node: Node) -> None:
    from confluent_kafka import Consumer, Producer

    topic = f"c-{uuid.uuid4().hex[:8]}"
    keeperless("topics", "--bootstrap-server", node.bootstrap, "--create", "--topic", topic,
               check=True)  # fmt: skip
    # batches of 16 KB: a fetch returns at least one whole batch, and a 1 MB one would
    # be five seconds of the quota at once
    p = Producer({"bootstrap.servers": node.bootstrap, "batch.size": 16384})
    for _ in range(8000):  # 8 MB: more than 21 s of the quota
        p.produce(topic, value=VALUE)
        p.poll(0)
    assert p.flush(60) == 0
    _quota(node, "reader", "consumer_byte_rate")
    time.sleep(0.5)
    # fetches of 64 KB (a third of a second at the quota) rather than 1 MB: the rate is
    # then even enough to measure over 12 s
    c = Consumer({"bootstrap.servers": node.bootstrap, "client.id": "reader",
                  "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                  "max.partition.fetch.bytes": 65536, "fetch.max.bytes": 65536,
                  "message.max.bytes": 65536})  # fmt: skip
    c.subscribe([topic])
    stamps: list[tuple[float, int]] = []
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < STEADY_TO:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                stamps.append((time.monotonic(), len(m.value())))
    finally:
        c.close()
    rate = _steady(stamps, t0)
    assert 0.8 * RATE <= rate <= 1.2 * RATE, f"{rate:.0f} B/s against a quota of {RATE}"
