from __future__ import annotations

import random
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.controller.configs import APPEND, DELETE, SET, SUBTRACT, incremental_alter_configs
from keeperless.controller.quorum_controller import QuorumController
from keeperless.metadata.admin import NewTopic


def _assert_refused(c: QuorumController, cases: list[tuple[Any, str]]) -> None:
    """Each change is refused INVALID_CONFIG with a message saying what is wrong."""
    for change, says in cases:
        res = incremental_alter_configs(c, [change], False)
        err = res.response[0][2]
        assert err.code == ErrorCode.invalid_config, change
        assert says in (err.message or ""), (change, err.message)


def _controller() -> QuorumController:
    c = QuorumController(
        1, random.Random(1), {"num.partitions": 1, "default.replication.factor": 1}
    )
    res = c.register_broker(1, uuid.uuid4(), [("PLAINTEXT", "h", 1)], None, 0, 0)
    c.replay(res.records, 0)
    c.replay(c.broker_heartbeat(1, 0, False, True, 0).all_records(), 1)
    c.replay(c.create_topics([NewTopic("t")], False).records, 5)
    return c


def test_set_append_subtract_delete() -> None:
    c = _controller()
    res = incremental_alter_configs(
        c, [(2, "t", [("cleanup.policy", SET, "delete"), ("retention.ms", SET, "10")])], False
    )
    assert res.response[0][2].code == ErrorCode.none
    c.replay(res.records, 10)
    res = incremental_alter_configs(c, [(2, "t", [("cleanup.policy", APPEND, "compact")])], False)
    c.replay(res.records, 11)
    assert c.image.topic_config("t")["cleanup.policy"] == "delete,compact"
    res = incremental_alter_configs(
        c,
        [(2, "t", [("cleanup.policy", SUBTRACT, "delete"), ("retention.ms", DELETE, None)])],
        False,
    )
    c.replay(res.records, 12)
    assert dict(c.image.topic_config("t")) == {"cleanup.policy": "compact"}


def test_append_and_subtract_start_from_the_default_when_nothing_is_set() -> None:
    """Kafka's ConfigurationControlManager: APPEND compact to a topic on the default
    cleanup.policy (delete) gives delete,compact; SUBTRACT of the default leaves it empty."""
    c = _controller()
    res = incremental_alter_configs(c, [(2, "t", [("cleanup.policy", APPEND, "compact")])], False)
    assert res.response[0][2].code == ErrorCode.none
    c.replay(res.records, 10)
    assert c.image.topic_config("t")["cleanup.policy"] == "delete,compact"
    c.replay(
        incremental_alter_configs(c, [(2, "t", [("cleanup.policy", DELETE, None)])], False).records,
        11,
    )
    res = incremental_alter_configs(c, [(2, "t", [("cleanup.policy", SUBTRACT, "delete")])], False)
    c.replay(res.records, 12)
    assert c.image.topic_config("t")["cleanup.policy"] == ""
    # a broker's list config the same way (its static default)
    res = incremental_alter_configs(
        c, [(4, "", [("log.cleanup.policy", APPEND, "compact")])], False
    )
    assert res.response[0][2].code == ErrorCode.none, res.response[0][2].message
    c.replay(res.records, 13)
    assert c.image.configs[(4, "")]["log.cleanup.policy"] == "delete,compact"


def test_rejections_carry_kafka_error_codes() -> None:
    c = _controller()
    cases = [
        ((2, "missing", [("retention.ms", SET, "1")]), ErrorCode.unknown_topic_or_partition),
        ((2, "t", [("bogus", SET, "1")]), ErrorCode.invalid_config),
        ((2, "t", [("retention.ms", SET, "soon")]), ErrorCode.invalid_config),
        ((4, "1", [("node.id", SET, "2")]), ErrorCode.invalid_config),
        # read-only in KRaft since Kafka 4.0 (KAFKA-18403)
        ((4, "1", [("advertised.listeners", SET, "PLAINTEXT://h:1")]), ErrorCode.invalid_config),
        ((4, "9", [("log.retention.ms", SET, "2")]), ErrorCode.invalid_request),
    ]
    for change, code in cases:
        res = incremental_alter_configs(c, [change], False)
        assert res.response[0][2].code == code, change
        assert res.records == []
    ok = incremental_alter_configs(c, [(4, "", [("log.retention.ms", SET, "5")])], True)
    assert ok.response[0][2].code == ErrorCode.none
    assert ok.records == []  # validate_only


def test_subtracting_the_last_value_stores_an_empty_list() -> None:
    """Kafka stores the empty value (issue 13: it was refused as an invalid policy)."""
    c = _controller()
    c.replay(
        incremental_alter_configs(
            c, [(2, "t", [("cleanup.policy", SET, "delete")])], False
        ).records,
        10,
    )
    res = incremental_alter_configs(c, [(2, "t", [("cleanup.policy", SUBTRACT, "delete")])], False)
    assert res.response[0][2].code == ErrorCode.none, res.response[0][2].message
    c.replay(res.records, 11)
    assert c.image.topic_config("t")["cleanup.policy"] == ""


def test_legacy_alter_configs_replaces_the_whole_set() -> None:
    from keeperless.controller.configs import alter_configs

    c = _controller()
    res = incremental_alter_configs(
        c, [(2, "t", [("retention.ms", SET, "10"), ("segment.bytes", SET, "1048576")])], False
    )
    c.replay(res.records, 10)
    res = alter_configs(c, [(2, "t", [("cleanup.policy", "compact")])], False)
    assert res.response[0][2].code == ErrorCode.none
    c.replay(res.records, 11)
    assert dict(c.image.topic_config("t")) == {"cleanup.policy": "compact"}
    # refusals change nothing
    for configs, code in [
        ([("retention.ms", None)], ErrorCode.invalid_request),
        ([("retention.ms", "1"), ("retention.ms", "2")], ErrorCode.invalid_request),
        ([("retention.ms", "soon")], ErrorCode.invalid_config),
    ]:
        res = alter_configs(c, [(2, "t", configs)], False)
        assert res.response[0][2].code == code, configs
        assert res.records == []
    res = alter_configs(c, [(2, "missing", [])], False)
    assert res.response[0][2].code == ErrorCode.unknown_topic_or_partition


def test_group_configs_as_kafka_validates_them() -> None:
    """KIP-848/932 group configs: stored for any group name, in Kafka's ranges."""
    c = _controller()
    ok = incremental_alter_configs(c, [(32, "g", [
        ("consumer.session.timeout.ms", SET, "50000"),
        ("consumer.heartbeat.interval.ms", SET, "6000"),
        ("share.auto.offset.reset", SET, "by_duration:PT1H30M"),
    ])], False)  # fmt: skip
    assert ok.response[0][2].code == ErrorCode.none, ok.response[0][2].message
    c.replay(ok.records, 10)
    assert c.image.configs[(32, "g")]["consumer.session.timeout.ms"] == "50000"
    cases = [
        (("consumer.session.timeout.ms", SET, "10000"), "must be between 45000 and 60000"),
        (("consumer.session.timeout.ms", SET, "soon"), "Not a number"),
        (("no.such", SET, "1"), "Unknown group config name: no.such"),
        (("no.such", DELETE, None), "Unknown group config name: no.such"),
        (("share.auto.offset.reset", SET, "whenever"), "by_duration"),
        (("share.isolation.level", SET, "dirty"), "read_committed, read_uncommitted"),
        (("consumer.session.timeout.ms", APPEND, "1"), "only valid for list configs"),
    ]
    for op, says in cases:
        res = incremental_alter_configs(c, [(32, "g", [op])], False)
        err = res.response[0][2]
        assert err.code == ErrorCode.invalid_config, op
        assert says in (err.message or ""), (op, err.message)
        assert res.records == []
    nameless = incremental_alter_configs(c, [(32, "", [("share.isolation.level", SET,
                                                        "read_committed")])], False)  # fmt: skip
    assert nameless.response[0][2].code == ErrorCode.invalid_request
    gone = incremental_alter_configs(c, [(32, "g", [("consumer.session.timeout.ms", DELETE,
                                                     None)])], False)  # fmt: skip
    c.replay(gone.records, 11)
    assert "consumer.session.timeout.ms" not in c.image.configs[(32, "g")]


# Kafka 4.1's "Update Mode" of broker configs, as its broker-configs documentation lists
_KAFKA_41_MODES = {
    "log.retention.ms": "cluster-wide",
    "message.max.bytes": "cluster-wide",
    "log.cleaner.threads": "cluster-wide",
    "num.replica.fetchers": "cluster-wide",
    "sasl.kerberos.min.time.before.relogin": "per-broker",
    "ssl.keystore.location": "per-broker",
    "listeners": "per-broker",
    "advertised.listeners": "read-only",
    "num.partitions": "read-only",
    "default.replication.factor": "read-only",
    "node.id": "read-only",
    "log.dirs": "read-only",
}


def test_update_modes_are_kafkas() -> None:
    from keeperless.metadata.config_catalog import kafka_update_mode

    assert {k: kafka_update_mode(k) for k in _KAFKA_41_MODES} == _KAFKA_41_MODES


def test_dynamic_broker_configs_as_kafka_takes_them() -> None:
    """Tried as a new user would: sasl.kerberos.min.time.before.relogin=58000 on a broker
    was refused, which Kafka accepts; num.partitions was accepted (and never used), which
    Kafka refuses; a per-broker config has no cluster-wide default; what keeperless reads
    only at start is refused saying so."""
    c = _controller()
    ok = incremental_alter_configs(
        c, [(4, "1", [("sasl.kerberos.min.time.before.relogin", SET, "58000")])], False
    )
    assert ok.response[0][2].code == ErrorCode.none, ok.response[0][2].message
    cases = [
        ((4, "", [("num.partitions", SET, "3")]), "Cannot update these configs dynamically"),
        ((4, "", [("sasl.kerberos.min.time.before.relogin", SET, "58000")]),
         "at default cluster level, broker id must be specified"),
        ((4, "1", [("ssl.client.auth", SET, "required")]),
         "keeperless reads it at start (Kafka changes it on a running broker)"),
    ]  # fmt: skip
    _assert_refused(c, cases)


def test_key_stores_are_changed_per_broker_and_per_listener() -> None:
    """Kafka's DynamicListenerConfig: a broker's key and trust stores change while it
    runs, for all its listeners or one (listener.name.<l>.<key>), never as a cluster-wide
    default; a listener's own value of a key Kafka does not reload, or of a cluster-wide
    key, is refused."""
    c = _controller()
    ok = incremental_alter_configs(c, [(4, "1", [
        ("ssl.keystore.location", SET, "/a.pem"),
        ("listener.name.external.ssl.keystore.location", SET, "/b.pem"),
        ("listener.name.external.ssl.key.password", SET, "secret"),
    ])], False)  # fmt: skip
    assert ok.response[0][2].code == ErrorCode.none, ok.response[0][2].message
    c.replay(ok.records, 10)
    assert c.image.configs[(4, "1")]["listener.name.external.ssl.keystore.location"] == "/b.pem"
    cases = [
        ((4, "", [("listener.name.external.ssl.keystore.location", SET, "/b.pem")]),
         "at default cluster level, broker id must be specified: "
         "[listener.name.external.ssl.keystore.location]"),
        ((4, "1", [("listener.name.external.ssl.client.auth", SET, "required")]),
         "keeperless reads it at start"),
        ((4, "1", [("listener.name.external.log.retention.ms", SET, "5")]),
         "Cannot update these configs dynamically: [listener.name.external.log.retention.ms]"),
        ((4, "1", [("listener.name.external.no.such.key", SET, "5")]),
         "Cannot update these configs dynamically"),
    ]  # fmt: skip
    _assert_refused(c, cases)


def test_a_manual_replica_assignment_is_refused_in_kafkas_words() -> None:
    """Found by a new user: partitions of different replica counts were taken, and every
    refusal said only "Invalid replica assignment [3, 9]". As Kafka's
    validateManualPartitionAssignment: what is wrong, named."""
    from tests.unit.controller_log import active_cluster

    c, _log = active_cluster()

    def refusal(assignments: dict[int, tuple[int, ...]], **kw: int) -> str:
        res = c.create_topics([NewTopic("m", assignments=assignments, **kw)], False)
        (result,) = res.response
        assert res.records == []
        return f"{result.error.code.name}: {result.error.message}"

    assert refusal({0: (1, 2), 1: (2,)}) == (
        "invalid_replica_assignment: The manual partition assignment includes a partition "
        "with 1 replica(s), but this is not consistent with previous partitions, which "
        "have 2 replica(s).")  # fmt: skip
    assert refusal({0: (1, 9)}) == (
        "invalid_replica_assignment: The manual partition assignment includes broker 9, "
        "but no such broker is registered.")  # fmt: skip
    assert refusal({0: (2, 2)}) == (
        "invalid_replica_assignment: The manual partition assignment includes the broker 2 "
        "more than once.")  # fmt: skip
    assert refusal({0: ()}) == (
        "invalid_replica_assignment: The manual partition assignment includes an empty "
        "replica list.")  # fmt: skip
    assert refusal({0: (1,), 2: (2,)}) == (
        "invalid_replica_assignment: partitions should be a consecutive 0-based integer "
        "sequence")  # fmt: skip
    assert refusal({0: (1,)}, replication_factor=1) == (
        "invalid_request: A manual partition assignment was specified, but replication "
        "factor was not set to -1.")  # fmt: skip
    ok = c.create_topics([NewTopic("m", assignments={0: (1, 2), 1: (2, 3)})], False)
    assert ok.response[0].error.code == ErrorCode.none
