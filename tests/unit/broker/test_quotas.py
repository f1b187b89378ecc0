"""Client quotas (issue 17): Kafka's precedence of quota entities and the throttle
time that brings a client back to its rate."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from keeperless.broker.quotas import QuotaManager
from keeperless.metadata.image import MetadataImage

U, C = "user", "client-id"


def manager(quotas: dict, clock: list[float]) -> QuotaManager:
    image = replace(MetadataImage(), client_quotas=MappingProxyType(
        {k: MappingProxyType(v) for k, v in quotas.items()}))  # fmt: skip
    return QuotaManager(lambda: image, lambda: clock[0])


def test_the_most_specific_entity_wins() -> None:
    clock = [0.0]
    m = manager({
        ((C, None),): {"producer_byte_rate": 1.0},
        ((U, None),): {"producer_byte_rate": 2.0},
        ((U, "alice"),): {"producer_byte_rate": 3.0},
        ((C, "app"), (U, "alice")): {"producer_byte_rate": 4.0},
    }, clock)  # fmt: skip
    assert m._quota("alice", "app", "producer_byte_rate") == (((C, "app"), (U, "alice")), 4.0)
    assert m._quota("alice", "other", "producer_byte_rate") == (((U, "alice"),), 3.0)
    assert m._quota("bob", "other", "producer_byte_rate") == (((U, None),), 2.0)
    clients_only = manager({((C, None),): {"producer_byte_rate": 1.0}}, clock)
    assert clients_only._quota("bob", "other", "producer_byte_rate") == (((C, None),), 1.0)
    assert m._quota("alice", "app", "consumer_byte_rate") is None


def test_throttle_brings_the_rate_back_to_the_quota() -> None:
    clock = [100.0]
    m = manager({((C, "slow"),): {"producer_byte_rate": 1000.0}}, clock)
    # as Kafka: rates are measured over at least 10 one-second windows
    assert m.throttle("User:ANONYMOUS", "slow", 0, 5000, 0, 0.1) == 0  # 500 B/s
    t = m.throttle("User:ANONYMOUS", "slow", 0, 10000, 0, 0.1)  # 15000 B: 1500 B/s
    assert t == 5000  # (1500 - 1000) / 1000 * 10 s
    clock[0] += 15.0  # 15000 B over 15 s: back at the quota
    assert m.throttle("User:ANONYMOUS", "slow", 0, 1, 0, 0.1) == 0
    assert m.throttle("User:ANONYMOUS", "other", 0, 10**9, 0, 0.1) == 0  # not covered
    # followers' fetches are never throttled by consumer quotas
    m2 = manager({((C, None),): {"consumer_byte_rate": 1.0}}, clock)
    assert m2.throttle(None, "replica", 1, 10, 10**6, 0.1, replica=True) == 0
    assert m2.throttle(None, "consumer", 1, 10, 10**6, 0.1) > 0
