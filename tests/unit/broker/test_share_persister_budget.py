"""A share-partition leader keeps asking the share coordinator through one move of its
partition, a crashed coordinator's included (found by a fresh-eyes trial: a kill -9 of
the coordinator's broker failed acknowledgements; the move took 10.6 s, the leader asked
for 10 s)."""

from __future__ import annotations

from keeperless.server.config import load_config
from keeperless.share.coordinator import ShareCoordinatorSettings
from keeperless.share.service import persister_budget_s


def test_the_budget_covers_a_crashed_coordinators_fencing_and_a_load() -> None:
    config = load_config(properties={
        "process.roles": "broker,controller", "node.id": "1",
        "controller.quorum.voters": "1@127.0.0.1:9093",
        "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "controller.listener.names": "CONTROLLER", "log.dirs": "/tmp/x"})  # fmt: skip
    settings = ShareCoordinatorSettings.of(config)
    budget = persister_budget_s(config, settings)
    fenced_after = config["broker.session.timeout.ms"] / 1000  # 9 s by default
    assert budget >= fenced_after + settings.write_timeout_ms / 1000
    assert budget >= 1 + 2 + 4 + 8  # Kafka's persister: five tries, 1-8 s apart
