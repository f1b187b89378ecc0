"""UpdateFeatures guard rails and ElectLeaders, at the controller (no I/O)."""

from __future__ import annotations

import logging
import random
import uuid

import pytest
from kio.schema.errors import ErrorCode

from keeperless.controller.elections import PREFERRED, UNCLEAN, elect_leaders
from keeperless.controller.features import (
    SAFE_DOWNGRADE,
    UNSAFE_DOWNGRADE,
    UPGRADE,
    update_features,
)
from keeperless.controller.quorum_controller import QuorumController
from keeperless.metadata import _records_gen as r
from keeperless.metadata.admin import NewTopic

MV = "metadata.version"


class Log:
    """Replays what the controller returns, at increasing offsets."""

    def __init__(self, c: QuorumController) -> None:
        self.c = c
        self.offset = 0

    def apply(self, records: list[object]) -> None:
        if records:
            self.offset += len(records)
            self.c.replay(records, self.offset)


def _controller(
    level: int = 21,
    brokers: dict[int, tuple[int, int]] | None = None,
    features: dict[str, tuple[int, int]] | None = None,
) -> tuple[QuorumController, Log]:
    c = QuorumController(
        1, random.Random(1), {"num.partitions": 3, "default.replication.factor": 2}
    )
    log = Log(c)
    log.apply([r.FeatureLevelRecord(name=MV, feature_level=level)])
    for b, (lo, hi) in (brokers or {1: (7, 21), 2: (7, 21), 3: (7, 21)}).items():
        res = c.register_broker(
            b, uuid.uuid4(), [("PLAINTEXT", "h", b)], None, log.offset + 1, 0,
            {MV: (lo, hi), **(features or {})},
        )  # fmt: skip
        assert res.response[0].code == ErrorCode.none
        log.apply(res.records)
        epoch = c.image.brokers[b].epoch
        log.apply(c.broker_heartbeat(b, epoch, False, True, 0).all_records())
    return c, log


def _one(c: QuorumController, level: int, kind: int, validate_only: bool = False):  # type: ignore[no-untyped-def]
    res = update_features(c, [(MV, level, kind)], validate_only)
    [(feature, err)] = res.response
    assert feature == MV
    return res.records, err


def test_upgrade_and_safe_downgrade_write_a_feature_level_record() -> None:
    c, log = _controller(level=17)
    records, err = _one(c, 21, UPGRADE)
    assert err.code == ErrorCode.none
    assert records == [r.FeatureLevelRecord(name=MV, feature_level=21)]
    log.apply(records)
    assert c.image.features[MV] == 21
    # 21 -> 17: no level in between changed the metadata format
    records, err = _one(c, 17, SAFE_DOWNGRADE)
    assert err.code == ErrorCode.none
    log.apply(records)
    assert c.image.features[MV] == 17
    # validate-only answers without writing; the same level is a no-op
    records, err = _one(c, 21, UPGRADE, validate_only=True)
    assert (records, err.code) == ([], ErrorCode.none)
    assert _one(c, 17, UPGRADE)[0] == []


def test_only_a_change_made_is_logged_as_one(caplog: pytest.LogCaptureFixture) -> None:
    """features upgrade --dry-run used to log 'Upgrading metadata.version from 17 to 21'
    at WARNING although nothing changed."""
    c, _log = _controller(level=17)
    with caplog.at_level(logging.INFO, logger="keeperless.controller.features"):
        _one(c, 21, UPGRADE, validate_only=True)
    assert [rec.levelno for rec in caplog.records] == [logging.INFO]
    assert "Upgrading" not in caplog.text
    assert "dry run" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="keeperless.controller.features"):
        res = update_features(c, [(MV, 21, UPGRADE), ("no.such.feature", 1, UPGRADE)], False)
    assert res.records == []
    assert "Upgrading" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="keeperless.controller.features"):
        _one(c, 21, UPGRADE)
    assert [(x.levelno, x.getMessage()) for x in caplog.records] == [
        (logging.WARNING, "Upgrading metadata.version from 17 to 21.")
    ]


def test_refusals_name_the_reason_with_invalid_update_version() -> None:
    c, _ = _controller(level=21)
    cases = [
        (30, UPGRADE, "Local controller 1 only supports versions 7-29"),
        (
            16,
            SAFE_DOWNGRADE,
            "Unsupported metadata.version downgrade from 21 to 16. Refusing "
            "to perform the requested downgrade because it might delete metadata information.",
        ),
        (
            16,
            UNSAFE_DOWNGRADE,
            "Unsupported metadata.version downgrade from 21 to 16. Unsafe "
            "metadata downgrade is not supported in this version.",
        ),
        (
            17,
            UPGRADE,
            "Can't downgrade the version of this feature without setting the upgrade "
            "type to either safe or unsafe downgrade.",
        ),
    ]
    for level, kind, message in cases:
        records, err = _one(c, level, kind)
        assert records == []
        assert err.code == ErrorCode.invalid_update_version, (level, kind)
        assert message in (err.message or ""), err.message
    c2, _ = _controller(level=17)
    records, err = _one(c2, 21, SAFE_DOWNGRADE)
    assert "Can't downgrade to a newer version." in (err.message or "")
    res = update_features(c, [("no.such.feature", 1, UPGRADE)], False)
    assert "Local controller 1 does not support this feature." in (res.response[0][1].message or "")
    # known, but not built yet: streams groups (KIP-1071)
    res = update_features(c, [("streams.version", 1, UPGRADE)], False)
    assert "Local controller 1 only supports versions 0-0" in (res.response[0][1].message or "")


def test_a_dynamic_quorum_keeps_metadata_version_at_3_9_or_later() -> None:
    """kraft.version 1 depends on metadata.version 3.9-IV0 (21): with a dynamic quorum,
    metadata.version cannot go below it, and a static quorum below it cannot turn
    dynamic; group.version (KIP-848) depends on nothing."""
    from keeperless.controller.features import kraft_version_refusal

    both = (7, 21)
    c, _ = _controller(level=21, brokers={1: both}, features={"group.version": (0, 1)})
    res = update_features(c, [(MV, 20, SAFE_DOWNGRADE)], False, kraft_version=1)
    [(_, err)] = res.response
    assert err.code == ErrorCode.invalid_update_version
    assert (
        "kraft.version could not be set to 1 because it depends on metadata.version "
        "level 21 (3.9-IV0), and metadata.version would be 20 (3.8-IV0)" in (err.message or "")
    )
    res = update_features(c, [(MV, 20, SAFE_DOWNGRADE)], False, kraft_version=0)
    assert [e.code for _, e in res.response] == [ErrorCode.none]
    assert kraft_version_refusal(c, 1) is None
    old, _ = _controller(level=20, brokers={1: both}, features={"group.version": (0, 1)})
    assert "depends on metadata.version level 21 (3.9-IV0)" in (kraft_version_refusal(old, 1) or "")
    res = update_features(old, [("group.version", 1, UPGRADE)], False)
    assert [e.code for _, e in res.response] == [ErrorCode.none]


def test_a_broker_that_cannot_take_the_level_is_named() -> None:
    c, _ = _controller(level=17, brokers={1: (7, 21), 2: (7, 19), 3: (7, 21)})
    records, err = _one(c, 21, UPGRADE)
    assert records == []
    assert err.code == ErrorCode.invalid_update_version
    assert "Broker 2 only supports versions 7-19" in (err.message or "")
    assert _one(c, 19, UPGRADE)[1].code == ErrorCode.none


def test_a_broker_that_does_not_support_the_finalized_level_cannot_register() -> None:
    c, _log = _controller(level=21)
    res = c.register_broker(9, uuid.uuid4(), [("PLAINTEXT", "h", 9)], None, 99, 0, {MV: (7, 19)})
    err, epoch = res.response
    assert (res.records, epoch, err.code) == ([], -1, ErrorCode.unsupported_version)
    assert "does not support finalized version 21 of metadata.version" in (err.message or "")


def test_preferred_and_unclean_elections() -> None:
    c, log = _controller()
    log.apply(c.create_topics([NewTopic("t", 2, 2)], False).records)
    topic = c.image.topic("t")
    assert topic is not None
    p0 = topic.partitions[0]
    assert p0.leader == p0.replicas[0]
    # already led by the preferred replica
    res = elect_leaders(c, PREFERRED, [("t", 0), ("nope", 0), ("t", 9)])
    codes = [(t, p, e.code) for t, p, e in res.response]
    assert codes == [
        ("t", 0, ErrorCode.election_not_needed),
        ("nope", 0, ErrorCode.unknown_topic_or_partition),
        ("t", 9, ErrorCode.unknown_topic_or_partition),
    ]
    assert res.records == []
    # move leadership off the preferred replica (it stays in the ISR), then elect it back
    other = p0.replicas[1]
    log.apply(
        [
            r.PartitionChangeRecord(
                partition_id=0, topic_id=topic.topic_id, leader=other, isr=p0.replicas
            )
        ]
    )
    res = elect_leaders(c, PREFERRED, None)  # all partitions: the not-needed ones are left out
    assert [(t, p, e.code) for t, p, e in res.response] == [("t", 0, ErrorCode.none)]
    log.apply(res.records)
    assert c.image.topic("t").partitions[0].leader == p0.replicas[0]  # type: ignore[union-attr]
    # a preferred replica outside the ISR is not available
    log.apply(
        [
            r.PartitionChangeRecord(
                partition_id=0, topic_id=topic.topic_id, leader=other, isr=(other,)
            )
        ]
    )
    [(_, _, err)] = elect_leaders(c, PREFERRED, [("t", 0)]).response
    assert err.code == ErrorCode.preferred_leader_not_available
    assert "is not in the ISR" in (err.message or "")
    # unclean: only for leaderless partitions; picks a live replica outside the ISR
    [(_, _, err)] = elect_leaders(c, UNCLEAN, [("t", 0)]).response
    assert err.code == ErrorCode.election_not_needed
    log.apply(
        [r.PartitionChangeRecord(partition_id=0, topic_id=topic.topic_id, leader=-1, isr=(other,))]
    )
    log.apply([r.FenceBrokerRecord(id=other, epoch=c.image.brokers[other].epoch)])
    res = elect_leaders(c, UNCLEAN, [("t", 0)])
    assert res.response[0][2].code == ErrorCode.none
    log.apply(res.records)
    after = c.image.topic("t").partitions[0]  # type: ignore[union-attr]
    assert after.leader == p0.replicas[0]
    assert after.isr == (p0.replicas[0],)
    # nobody alive: no eligible leader
    log.apply(
        [r.PartitionChangeRecord(partition_id=0, topic_id=topic.topic_id, leader=-1, isr=(1,))]
    )
    for b in c.image.brokers.values():
        if not b.fenced:
            log.apply([r.FenceBrokerRecord(id=b.broker_id, epoch=b.epoch)])
    [(_, _, err)] = elect_leaders(c, UNCLEAN, [("t", 0)]).response
    assert err.code == ErrorCode.eligible_leaders_not_available


def test_eligible_leader_replicas_need_metadata_version_4_0_iv1() -> None:
    """KIP-966's feature depends on metadata.version 23: refused below it, whether the
    feature is raised or metadata.version lowered under it; both in one request pass."""
    elr = "eligible.leader.replicas.version"
    both = (7, 25)
    c, log = _controller(level=21, brokers={1: both, 2: both, 3: both},
                         features={elr: (0, 1)})  # fmt: skip
    res = update_features(c, [(elr, 1, UPGRADE)], False)
    assert res.records == []
    [(_, err)] = res.response
    assert err.code == ErrorCode.invalid_update_version
    assert "depends on metadata.version level 23 (4.0-IV1)" in (err.message or "")
    res = update_features(c, [(MV, 23, UPGRADE), (elr, 1, UPGRADE)], False)
    assert [e.code for _, e in res.response] == [ErrorCode.none, ErrorCode.none]
    # Kafka 4.1: min.insync.replicas becomes a cluster-level config with the feature
    [cfg] = [x for x in res.records if isinstance(x, r.ConfigRecord)]
    assert (cfg.resource_type, cfg.resource_name, cfg.name, cfg.value) == (
        4,
        "",
        "min.insync.replicas",
        "1",
    )
    log.apply(res.records)
    assert c.image.features[elr] == 1
    assert c.cluster_min_isr_records() == []  # written once
    res = update_features(c, [(MV, 22, SAFE_DOWNGRADE)], False)
    [(name, err)] = res.response
    assert name == MV
    assert err.code == ErrorCode.invalid_update_version
