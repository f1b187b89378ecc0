"""Config resolution as Kafka's DescribeConfigs reports it: a topic config falls back to
its broker synonyms, dynamic per-broker before the cluster default before the file."""

from __future__ import annotations

from pathlib import Path

from keeperless.metadata.config_catalog import (
    BROKER_CONFIGS,
    READ_ONLY,
    ConfigSource,
    ConfigType,
    topic_config_type,
)
from keeperless.metadata.config_resolution import TOPIC_SYNONYMS, resolve_broker, resolve_topic
from keeperless.metadata.topic_configs import TOPIC_CONFIGS

S = ConfigSource


def test_a_topic_config_falls_back_through_its_broker_synonyms() -> None:
    static = {"log.retention.hours": "24"}
    value, source, synonyms = resolve_topic("retention.ms", {}, {}, {}, static)
    assert (value, source) == (str(24 * 3_600_000), S.STATIC_BROKER_CONFIG)
    assert synonyms[0] == ("log.retention.hours", str(24 * 3_600_000), S.STATIC_BROKER_CONFIG)
    # the cluster-wide dynamic default wins over the file, per-broker over both
    cluster = {"log.retention.ms": "5000"}
    assert resolve_topic("retention.ms", {}, {}, cluster, static)[:2] == (
        "5000",
        S.DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    per = {"log.retention.minutes": "2"}
    value, source, synonyms = resolve_topic("retention.ms", {}, per, cluster, static)
    assert (value, source) == ("120000", S.DYNAMIC_BROKER_CONFIG)
    assert [s for _, _, s in synonyms] == [
        S.DYNAMIC_BROKER_CONFIG,
        S.DYNAMIC_DEFAULT_BROKER_CONFIG,
        S.STATIC_BROKER_CONFIG,
        S.DEFAULT_CONFIG,
    ]
    # the topic's own value first of all
    value, source, synonyms = resolve_topic(
        "retention.ms", {"retention.ms": "7"}, per, cluster, static
    )
    assert (value, source) == ("7", S.DYNAMIC_TOPIC_CONFIG)
    assert synonyms[0] == ("retention.ms", "7", S.DYNAMIC_TOPIC_CONFIG)
    # nothing set anywhere: Kafka's default through the last synonym (168 hours)
    assert resolve_topic("retention.ms", {}, {}, {}, {})[:2] == ("604800000", S.DEFAULT_CONFIG)
    assert resolve_topic("segment.ms", {}, {}, {}, {})[:2] == ("604800000", S.DEFAULT_CONFIG)


def test_broker_configs_resolve_with_their_sources() -> None:
    assert resolve_broker("num.partitions", {}, {}, {})[:2] == ("1", S.DEFAULT_CONFIG)
    assert resolve_broker("num.partitions", {}, {}, {"num.partitions": "3"})[:2] == (
        "3",
        S.STATIC_BROKER_CONFIG,
    )
    assert resolve_broker("log.retention.ms", {}, {}, {"log.retention.hours": "1"})[:2] == (
        "3600000",
        S.STATIC_BROKER_CONFIG,
    )
    assert resolve_broker("advertised.listeners", {}, {}, {})[:2] == (None, S.DEFAULT_CONFIG)


def test_every_topic_config_has_a_type_a_default_a_doc_and_known_synonyms() -> None:
    for key, d in TOPIC_CONFIGS.items():
        assert d.doc, key
        assert d.default is not None, key
        d.validate(d.default)  # every default passes its own validator
        assert topic_config_type(key) != ConfigType.UNKNOWN
        for broker_key, _ in TOPIC_SYNONYMS.get(key, ()):
            assert broker_key in BROKER_CONFIGS, broker_key
            assert BROKER_CONFIGS[broker_key].scope != READ_ONLY, broker_key
    assert topic_config_type("cleanup.policy") == ConfigType.LIST
    assert topic_config_type("retention.ms") == ConfigType.LONG


def test_every_key_a_server_properties_may_set_is_in_the_catalog() -> None:
    from keeperless.server.config import _PARSERS, ACCEPTED_KAFKA_KEYS

    missing = sorted((set(_PARSERS) | ACCEPTED_KAFKA_KEYS) - set(BROKER_CONFIGS))
    assert not missing


def test_a_node_takes_each_default_from_the_catalog(tmp_path: Path) -> None:
    """Each config key is defined once: what a node uses for a key it was not given is
    the catalog's default (the one DescribeConfigs shows), parsed."""
    from keeperless.server.config import _PARSERS, load_config

    path = tmp_path / "server.properties"
    path.write_text("process.roles=broker,controller\nnode.id=1\n"
                    "controller.quorum.voters=1@127.0.0.1:9093\n"
                    "listeners=PLAINTEXT://:9092,CONTROLLER://:9093\n"
                    "controller.listener.names=CONTROLLER\n"
                    f"log.dirs={tmp_path / 'data'}\n")  # fmt: skip
    cfg = load_config(path)
    for key, parser in _PARSERS.items():
        if key in cfg.raw:
            continue
        default = BROKER_CONFIGS[key].default
        assert cfg[key] == (None if default is None else parser(key, default)), key


def test_every_broker_default_passes_its_own_definition() -> None:
    for d in BROKER_CONFIGS.values():
        if d.default is not None:
            d.validate(d.default)


def test_the_node_and_alter_configs_refuse_a_value_with_the_same_words() -> None:
    """One definition per key: a value the node's parser refuses in server.properties is
    refused by IncrementalAlterConfigs in the same words (Kafka's)."""
    import random

    import pytest

    from keeperless.controller.configs import incremental_alter_configs
    from keeperless.controller.quorum_controller import QuorumController
    from keeperless.metadata.image import BROKER_RESOURCE
    from keeperless.server.config import ConfigError, load_config

    base = {"process.roles": "broker,controller", "node.id": "1",
            "controller.quorum.voters": "1@127.0.0.1:9093",
            "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
            "controller.listener.names": "CONTROLLER", "log.dirs": "/tmp/x"}  # fmt: skip
    c = QuorumController(1, random.Random(1), {})
    for key, bad, why in (
        ("log.retention.ms", "-5", "Value must be at least -1"),
        ("log.cleaner.min.cleanable.ratio", "1.5", "Value must be no more than 1"),
        ("log.cleaner.threads", "lots", "Not a number of type INT"),
        ("log.cleanup.policy", "forever", "String must be one of: delete, compact"),
    ):
        with pytest.raises(ConfigError) as node:
            load_config(properties={**base, key: bad})
        res = incremental_alter_configs(c, [(BROKER_RESOURCE, "", [(key, 0, bad)])], False)
        (_, _, err) = res.response[0]
        assert why in str(node.value), (key, node.value)
        assert str(node.value) == err.message, (key, node.value, err)


def test_every_catalog_key_is_taken_from_server_properties() -> None:
    """Found while unifying the definitions: log.cleanup.policy (and 21 other keys
    DescribeConfigs lists and AlterConfigs takes) was refused in server.properties as an
    unknown key. Each is taken at its default, and a bad value is refused."""
    import pytest

    from keeperless.server.config import ConfigError, load_config

    base = {"process.roles": "broker,controller", "node.id": "1",
            "controller.quorum.voters": "1@127.0.0.1:9093",
            "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
            "controller.listener.names": "CONTROLLER", "log.dirs": "/tmp/x"}  # fmt: skip
    for key, d in BROKER_CONFIGS.items():
        if d.default is not None and key not in base:
            load_config(properties={**base, key: d.default})
    with pytest.raises(ConfigError, match="log.roll.jitter.ms"):
        load_config(properties={**base, "log.roll.jitter.ms": "soon"})


def test_each_key_has_kafkas_importance_and_the_generated_docs_are_current() -> None:
    """Importance as Kafka's ConfigDef ranks it (a topic key can rank lower than its
    broker synonym), in every definition - broker, topic and group keys alike - and in
    docs/configuration.md, which is generated from them."""
    from pathlib import Path

    from keeperless.metadata.group_configs import GROUP_CONFIGS
    from keeperless.metadata.topic_configs import TOPIC_CONFIGS
    from keeperless.tools.config_docs import render

    assert BROKER_CONFIGS["log.dirs"].importance == "high"
    assert BROKER_CONFIGS["min.insync.replicas"].importance == "high"
    assert TOPIC_CONFIGS["min.insync.replicas"].importance == "medium"
    assert BROKER_CONFIGS["num.partitions"].importance == "medium"
    assert BROKER_CONFIGS["producer.id.expiration.ms"].importance == "low"
    assert BROKER_CONFIGS["metrics.http.listener"].importance == "low"  # not Kafka's
    assert GROUP_CONFIGS["share.auto.offset.reset"].importance == "medium"
    # Kafka's name for the cleaner's load factor (it was misspelt here)
    assert "log.cleaner.io.buffer.load.factor" in BROKER_CONFIGS
    docs = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"
    assert docs.read_text() == render(), (
        "docs/configuration.md is stale: python -m keeperless.tools.config_docs > "
        "docs/configuration.md"
    )
