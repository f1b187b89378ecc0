from __future__ import annotations

from pathlib import Path

import pytest

from keeperless.server.config import ConfigError, load_config

BASE = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.quorum.voters": "1@127.0.0.1:9093",
    "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/tmp/x",
}


def test_sample_configs_load() -> None:
    root = Path(__file__).parents[3] / "config"
    for name in ("server.properties", "controller.properties", "broker.properties"):
        cfg = load_config(root / name)
        assert cfg.node_id >= 1


def test_sample_configs_name_absolute_data_directories() -> None:
    """As Kafka's samples (/tmp/kraft-combined-logs): a tool run from another directory
    finds the node's data (a relative ./data made `storage info` say 'not formatted')."""
    root = Path(__file__).parents[3] / "config"
    files = sorted(f for f in root.glob("**/*.properties") if not f.name.startswith("connect-"))
    assert len(files) >= 10
    for f in files:
        cfg = load_config(f)
        assert cfg.all_log_dirs, f
        for d in cfg.all_log_dirs:
            assert d.is_absolute(), f"{f}: log.dirs {d} is relative"
            assert str(d).startswith("/tmp/keeperless-"), f"{f}: {d}"


def test_combined_defaults() -> None:
    cfg = load_config(properties=BASE)
    assert cfg.is_broker
    assert cfg.is_controller
    assert [e.port for e in cfg.broker_listeners] == [9092]
    assert cfg["num.partitions"] == 1
    assert cfg.retention_ms == 168 * 3_600_000


def test_override_wins() -> None:
    cfg = load_config(properties=BASE, overrides=["num.partitions=6"])
    assert cfg["num.partitions"] == 6


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("num.partitions", "many", "num.partitions"),
        ("num.partitions", "0", "num.partitions"),
        ("process.roles", "leader", "process.roles"),
        ("auto.create.topics.enable", "yes", "auto.create.topics.enable"),
        ("listeners", "127.0.0.1:9092", "listeners"),
        ("controller.quorum.voters", "one@host", "controller.quorum.voters"),
        ("no.such.key", "1", "no.such.key"),
        ("node.id", "7", "controller.quorum.voters"),
        ("advertised.listeners", "OTHER://127.0.0.1:9099", "not one of listeners"),
        ("advertised.listeners", "PLAINTEXT://0.0.0.0:9092", "nonroutable"),
        ("group.consumer.assignors", "sticky", "group.consumer.assignors"),
    ],
)
def test_bad_values_name_the_key(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_config(properties={**BASE, key: value})


# Kafka 4's own config/server.properties (combined mode), as shipped
KAFKA_SAMPLE = """
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def test_kafkas_own_sample_server_properties_loads(tmp_path: Path) -> None:
    """Kafka 4's config/server.properties advertises its controller listener (KIP-853):
    the controller's advertised endpoint, never one a broker hands to clients (a user
    starting from Kafka's sample was refused)."""
    f = tmp_path / "server.properties"
    f.write_text(KAFKA_SAMPLE)
    cfg = load_config(f)
    assert [(e.listener, e.host, e.port) for e in cfg.advertised_broker_listeners] == [
        ("PLAINTEXT", "localhost", 9092)
    ]
    ep = cfg.advertised_controller_endpoint
    assert ep is not None
    assert (ep.listener, ep.host, ep.port) == ("CONTROLLER", "localhost", 9093)
    # without it advertised, the controller listener as it listens
    plain = load_config(properties=BASE)
    ep = plain.advertised_controller_endpoint
    assert ep is not None
    assert (ep.host, ep.port) == ("127.0.0.1", 9093)


def test_kafka_keys_we_do_not_act_on_are_accepted() -> None:
    load_config(properties={**BASE, "num.network.threads": "3"})


def test_share_lock_durations_stay_within_the_brokers_limits() -> None:
    """Kafka's ShareGroupConfig: group.share.record.lock.duration.ms between the min and
    max keys (found by a new user: 5000 was taken, and the limits were unknown keys)."""
    lock = "group.share.record.lock.duration.ms"
    with pytest.raises(ConfigError, match="must be greater than or equal to group.share.min"):
        load_config(properties={**BASE, lock: "5000"})
    with pytest.raises(ConfigError, match="must be less than or equal to group.share.max"):
        load_config(properties={**BASE, lock: "70000"})
    cfg = load_config(properties={**BASE, lock: "5000",
                                  "group.share.min.record.lock.duration.ms": "1000"})  # fmt: skip
    assert cfg[lock] == 5000


def test_a_groups_lock_duration_is_checked_against_the_controllers_limits() -> None:
    from keeperless.metadata.group_configs import validate_group_config

    key = "share.record.lock.duration.ms"
    assert "between 15000 and 60000" in (validate_group_config(key, "5000") or "")
    lowered = {"group.share.min.record.lock.duration.ms": 1000,
               "group.share.max.record.lock.duration.ms": 60000}  # fmt: skip
    assert validate_group_config(key, "5000", lowered) is None
    assert "between 1000 and 60000" in (validate_group_config(key, "500", lowered) or "")
    assert "Not a number" in (validate_group_config(key, "soon", lowered) or "")


def test_kafka_3_inter_broker_protocol_version_is_a_known_release() -> None:
    """A broker rolled from a ZooKeeper-mode cluster keeps its inter.broker.protocol.version:
    accepted when it names a release, refused naming the key otherwise; it narrows the
    broker's registered metadata.version to that release."""
    from keeperless.metadata.features import (
        METADATA_VERSION_FEATURE,
        SUPPORTED_FEATURES,
        metadata_version_for_release,
        registration_features,
    )

    cfg = load_config(properties={**BASE, "inter.broker.protocol.version": "3.6"})
    assert cfg["inter.broker.protocol.version"] == "3.6"
    with pytest.raises(ConfigError, match="inter.broker.protocol.version"):
        load_config(properties={**BASE, "inter.broker.protocol.version": "banana"})
    level = metadata_version_for_release("3.6")
    assert registration_features("3.6")[METADATA_VERSION_FEATURE] == (level, level)
    assert registration_features(None) == SUPPORTED_FEATURES
