"""The broker's ApiVersions against Apache Kafka 4.1's: clients decide what a broker is
from this table (kafka-python infers the broker's release from it)."""

from __future__ import annotations

from keeperless.protocol.apis import ADVERTISED_MIN, API_NAMES, BROKER_APIS, GATED

# What an Apache Kafka 4.1 broker advertises on a client listener with default settings
# (share groups, streams groups and telemetry off), from kafka-broker-api-versions.
KAFKA_4_1 = {
    0: (0, 13), 1: (4, 18), 2: (1, 10), 3: (0, 13), 8: (2, 9), 9: (1, 9), 10: (0, 6),
    11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5), 17: (0, 1),
    18: (0, 4), 19: (2, 7), 20: (1, 6), 21: (0, 2), 22: (0, 5), 23: (2, 4), 24: (0, 5),
    25: (0, 4), 26: (0, 5), 27: (1, 1), 28: (0, 5), 29: (1, 3), 30: (1, 3), 31: (1, 3),
    32: (1, 4), 33: (0, 2), 34: (1, 2), 35: (1, 4), 36: (0, 2), 37: (0, 3), 38: (1, 3),
    39: (1, 2), 40: (1, 2), 41: (1, 3), 42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 1),
    46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0), 55: (0, 2),
    57: (0, 2), 60: (0, 2), 61: (0, 0), 64: (0, 0), 65: (0, 0), 66: (0, 2), 68: (0, 1),
    69: (0, 1), 74: (0, 1), 75: (0, 0), 80: (0, 0), 81: (0, 0),
}  # fmt: skip

# What it adds once share.version is 1 (KIP-932; v0 was Kafka 4.0's early access)
# and the share coordinator's (broker to broker, v0), except where keeperless is Kafka
# 4.2's on purpose: a share-partition's lag (KIP-1226) in DescribeShareGroupOffsets v1,
# from ReadShareGroupStateSummary v1's delivery-complete count, is what
# kafka-share-groups.sh --describe shows in its LAG column
KAFKA_4_1_SHARE_GROUPS = {76: (1, 1), 77: (1, 1), 78: (1, 1), 79: (1, 1), 83: (0, 0),
                          84: (0, 0), 85: (0, 0), 86: (0, 0), 87: (0, 0),
                          90: (0, 0), 91: (0, 0), 92: (0, 0)}  # fmt: skip
SHARE_NEWER_THAN_4_1 = {87: (0, 1), 90: (0, 1)}

# Where keeperless is Kafka 4.2's on purpose: WriteTxnMarkers v2 carries the marker's
# transaction version, so a partition holds a TV2 marker to a strictly newer epoch and a
# late copy of one transaction's marker cannot end the producer's next (KIP-890).
NEWER_THAN_4_1 = {27: (1, 2)}

# Kafka APIs that belong to later issues (none now).
LATER: set[int] = set()
# Issue 13's own APIs not served yet (the issue stays open while this is not empty)
NOT_YET: set[int] = set()


def advertised(features: tuple[str, ...] = ()) -> dict[int, tuple[int, int]]:
    """What the broker advertises with these features finalized at level 1."""
    return {
        k: (ADVERTISED_MIN.get(k, lo), hi)
        for k, (lo, hi) in BROKER_APIS.items()
        if k not in GATED or GATED[k][0] in features
    }


def test_share_groups_add_kafka_4_1s_share_apis() -> None:
    added = {k: v for k, v in advertised(("share.version",)).items() if k not in advertised()}
    assert added == KAFKA_4_1_SHARE_GROUPS | SHARE_NEWER_THAN_4_1


def test_every_advertised_range_is_kafka_4_1s() -> None:
    ours = advertised()
    wrong = {
        API_NAMES.get(k, k): (ours[k], KAFKA_4_1.get(k))
        for k in ours
        if ours[k] != NEWER_THAN_4_1.get(k, KAFKA_4_1.get(k))
    }
    assert not wrong, f"(ours, Kafka 4.1's): {wrong}"


def test_every_kafka_api_is_served_or_belongs_to_a_later_issue() -> None:
    missing = sorted(set(KAFKA_4_1) - set(BROKER_APIS) - LATER - NOT_YET)
    assert not NOT_YET & set(BROKER_APIS), "served now: take it off NOT_YET"
    assert not LATER & set(BROKER_APIS), "served now: take it off LATER"
    assert not missing, [API_NAMES.get(k, k) for k in missing]


def test_kafka_python_takes_it_for_a_4_1_broker() -> None:
    from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions

    assert infer_broker_version_from_api_versions(advertised()) == (4, 1)
