"""Feature levels: `metadata.version` and the release names that map to it (Kafka's
MetadataVersion)."""

from __future__ import annotations

from typing import Any

__all__ = [
    "ELR_FEATURE",
    "ELR_METADATA_VERSION",
    "FEATURE_BOOTSTRAP",
    "FEATURE_DEPENDENCIES",
    "FEATURE_ORDER",
    "GROUP_VERSION_FEATURE",
    "KRAFT_VERSION_FEATURE",
    "LATEST_METADATA_VERSION",
    "LATEST_PRODUCTION_METADATA_VERSION",
    "METADATA_VERSION_FEATURE",
    "MINIMUM_METADATA_VERSION",
    "SHARE_VERSION_FEATURE",
    "STREAMS_VERSION_FEATURE",
    "SUPPORTED_FEATURES",
    "TRANSACTION_VERSION_FEATURE",
    "broken_dependencies",
    "consumer_protocol_enabled",
    "default_feature_levels",
    "describe_level",
    "elr_enabled",
    "features_body",
    "known_metadata_version",
    "metadata_changed_between",
    "metadata_version_for_release",
    "record_version",
    "registration_features",
    "release_for_level",
    "share_groups_enabled",
]

METADATA_VERSION_FEATURE = "metadata.version"

# (release name, feature level), in order. The bare release ("3.7") means its last IV.
_RELEASES: tuple[tuple[str, int], ...] = (
    ("3.3-IV3", 7),
    ("3.4-IV0", 8),
    ("3.5-IV0", 9),
    ("3.5-IV1", 10),
    ("3.5-IV2", 11),
    ("3.6-IV0", 12),
    ("3.6-IV1", 13),
    ("3.6-IV2", 14),
    ("3.7-IV0", 15),
    ("3.7-IV1", 16),
    ("3.7-IV2", 17),
    ("3.7-IV3", 18),
    ("3.7-IV4", 19),
    ("3.8-IV0", 20),
    ("3.9-IV0", 21),
    ("4.0-IV0", 22),
    ("4.0-IV1", 23),  # eligible leader replicas (KIP-966): PartitionRecord v2
    ("4.0-IV2", 24),
    ("4.0-IV3", 25),
    ("4.1-IV0", 26),  # new clusters get eligible leader replicas (KIP-966) by default
    ("4.1-IV1", 27),
    ("4.2-IV0", 28),  # new clusters get share groups (KIP-932) by default
    ("4.2-IV1", 29),  # new clusters get streams groups (KIP-1071) by default
)
MINIMUM_METADATA_VERSION = _RELEASES[0][1]
LATEST_METADATA_VERSION = _RELEASES[-1][1]
# what `storage format` writes when no --release-version is given: Kafka 4.2's first,
# whose new clusters get share groups (KIP-932, production-ready in Kafka 4.2: a
# ShareConsumer of confluent-kafka reads from a new cluster as from Kafka 4.2's). Not
# 4.2-IV1, whose new clusters would get streams groups (KIP-1071), not built yet.
LATEST_PRODUCTION_METADATA_VERSION = 28
# KIP-966: leaders elected from eligible replicas (ELR) once this is 1
ELR_FEATURE = "eligible.leader.replicas.version"
ELR_METADATA_VERSION = 23  # the metadata.version ELR needs (4.0-IV1)
# What this build supports, as brokers register it and controllers check it.
# KIP-853: 0 a static controller quorum, 1 a dynamic one; kept in the Raft log
# (KRaftVersionRecord), not in FeatureLevelRecords
KRAFT_VERSION_FEATURE = "kraft.version"
# KIP-848: 1 lets consumers use the consumer group protocol (ConsumerGroupHeartbeat)
GROUP_VERSION_FEATURE = "group.version"
# KIP-890: 1 flexible transaction-log records, 2 an epoch bump at each transaction's
# end (the EndTxn v5 / Produce v12 / TxnOffsetCommit v5 path of a TV2 client)
TRANSACTION_VERSION_FEATURE = "transaction.version"
# KIP-932: 1 lets consumers read as share groups (ShareGroupHeartbeat, ShareFetch)
SHARE_VERSION_FEATURE = "share.version"
# KIP-1071 streams groups (not built yet: level 0 only)
STREAMS_VERSION_FEATURE = "streams.version"
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    METADATA_VERSION_FEATURE: (MINIMUM_METADATA_VERSION, LATEST_METADATA_VERSION),
    ELR_FEATURE: (0, 1),
    KRAFT_VERSION_FEATURE: (0, 1),
    GROUP_VERSION_FEATURE: (0, 1),
    TRANSACTION_VERSION_FEATURE: (0, 2),
    SHARE_VERSION_FEATURE: (0, 1),
    STREAMS_VERSION_FEATURE: (0, 0),
}
# the features other than metadata.version, in the order Kafka's tools list them
# (its Feature enum)
FEATURE_ORDER: tuple[str, ...] = (
    KRAFT_VERSION_FEATURE,
    TRANSACTION_VERSION_FEATURE,
    GROUP_VERSION_FEATURE,
    ELR_FEATURE,
    SHARE_VERSION_FEATURE,
    STREAMS_VERSION_FEATURE,
)
# a feature level and the levels of other features it needs (Kafka's
# FeatureVersion.dependencies)
FEATURE_DEPENDENCIES: dict[tuple[str, int], dict[str, int]] = {
    (KRAFT_VERSION_FEATURE, 1): {METADATA_VERSION_FEATURE: 21},  # 3.9-IV0
    (ELR_FEATURE, 1): {METADATA_VERSION_FEATURE: ELR_METADATA_VERSION},
}
# a feature level and the first metadata.version whose new clusters get it by default
# (Kafka's FeatureVersion.bootstrapMetadataVersion), whether or not this build
# supports the level yet
FEATURE_BOOTSTRAP: dict[tuple[str, int], int] = {
    (KRAFT_VERSION_FEATURE, 1): 21,  # 3.9-IV0
    (TRANSACTION_VERSION_FEATURE, 1): 24,  # 4.0-IV2
    (TRANSACTION_VERSION_FEATURE, 2): 24,
    (GROUP_VERSION_FEATURE, 1): 22,  # 4.0-IV0
    (ELR_FEATURE, 1): 26,  # 4.1-IV0
    (SHARE_VERSION_FEATURE, 1): 28,  # 4.2-IV0
    (STREAMS_VERSION_FEATURE, 1): 29,  # 4.2-IV1
}


def default_feature_levels(metadata_version: int, kraft: bool = False) -> dict[str, int]:
    """Each feature other than metadata.version at the level a cluster formatted, or a
    features command run, at ``metadata_version`` gets by default (Kafka's
    Features.defaultValue): the highest level this build supports that is bootstrapped
    at or before it, in Kafka's order. kraft.version only if ``kraft``: a format sets it
    from its quorum flags, and a release upgrade leaves it alone."""
    out: dict[str, int] = {}
    for name in FEATURE_ORDER:
        if name == KRAFT_VERSION_FEATURE and not kraft:
            continue
        hi = SUPPORTED_FEATURES[name][1]
        out[name] = max(
            (lv for lv in range(1, hi + 1) if FEATURE_BOOTSTRAP.get((name, lv), 1 << 15)
             <= metadata_version),
            default=0,
        )  # fmt: skip
    return out


def broken_dependencies(levels: dict[str, int]) -> list[tuple[str, int, str, int]]:
    """(feature, level, needed feature, needed level) for each finalized level whose
    dependency the other levels in ``levels`` (absent: 0) do not meet."""
    return [
        (feature, level, dep, needed)
        for (feature, level), deps in FEATURE_DEPENDENCIES.items()
        if levels.get(feature, 0) == level
        for dep, needed in deps.items()
        if levels.get(dep, 0) < needed
    ]


def describe_level(feature: str, level: int) -> str:
    """``metadata.version=21 (3.9-IV0)``, or ``group.version=1``."""
    if feature == METADATA_VERSION_FEATURE:
        return f"{feature}={level} ({release_for_level(level)})"
    return f"{feature}={level}"


def share_groups_enabled(features: Any) -> bool:
    """Share groups (KIP-932) are on: share.version finalized at 1."""
    return bool(features.get(SHARE_VERSION_FEATURE, 0) >= 1)


def consumer_protocol_enabled(features: Any) -> bool:
    """The consumer group protocol (KIP-848) is on: group.version finalized at 1."""
    return bool(features.get(GROUP_VERSION_FEATURE, 0) >= 1)


# Levels that changed the metadata format (Kafka's MetadataVersion.didMetadataChange):
# a downgrade across one of them could lose metadata, so it is refused.
_METADATA_CHANGED = frozenset({7, 8, 11, 13, 14, 15, 17, 23})


# Kafka's MetadataVersion gates: the first level with each capability.
_CONTROLLED_SHUTDOWN_STATE = 7  # 3.3-IV3: RegisterBrokerRecord v1
_MIGRATION = 8  # 3.4-IV0: RegisterBrokerRecord v2
_DIRECTORY_ASSIGNMENT = 17  # 3.7-IV2: PartitionRecord/PartitionChangeRecord v1, RegisterBroker v3


def directory_assignment(level: int | None) -> bool:
    """Whether replicas are assigned to log directories in the metadata (KIP-858,
    3.7-IV2): directories in partition records, a broker's directories in its
    registration, AssignReplicasToDirs. None (not finalized yet): the latest."""
    return level is None or level >= _DIRECTORY_ASSIGNMENT


def record_version(record: Any, level: int | None) -> int:
    """The version of ``record`` that a controller at metadata.version ``level`` writes
    (Kafka's MetadataVersion.partitionRecordVersion() and friends); None: the highest.
    Fields a version lacks are not written, so older software can read what we write
    until the cluster is upgraded."""
    highest: int = record.HIGHEST_VERSION
    if level is None:
        return highest
    name = type(record).__name__
    if name in ("PartitionRecord", "PartitionChangeRecord"):
        if level >= ELR_METADATA_VERSION:
            return min(highest, 2)
        return min(highest, 1 if level >= _DIRECTORY_ASSIGNMENT else 0)
    if name == "RegisterBrokerRecord":
        if level >= _DIRECTORY_ASSIGNMENT:
            return min(highest, 3)
        if level >= _MIGRATION:
            return 2
        return 1 if level >= _CONTROLLED_SHUTDOWN_STATE else 0
    if name == "BrokerRegistrationChangeRecord":
        # as Kafka writes them: v0 for fencing, v1 for the controlled-shutdown state
        if record.log_dirs:
            return 2
        return 1 if record.in_controlled_shutdown else 0
    return highest


def metadata_changed_between(a: int, b: int) -> bool:
    """True if a level in (low, high] changed the metadata format."""
    low, high = min(a, b), max(a, b)
    return any(level in _METADATA_CHANGED for level in range(low + 1, high + 1))


def metadata_version_for_release(name: str) -> int:
    """Feature level for a release name like ``3.9`` or ``3.7-IV4``."""
    for release, level in _RELEASES:
        if release == name:
            return level
    matching = [level for release, level in _RELEASES if release.split("-")[0] == name]
    if matching:
        return matching[-1]
    known = ", ".join(sorted({r.split("-")[0] for r, _ in _RELEASES}))
    raise ValueError(f"Unknown release version {name!r}; known releases: {known}")


def registration_features(ibp: str | None) -> dict[str, tuple[int, int]]:
    """The features a broker registers as supported: all of this build's, or, for a
    broker given Kafka 3.x's ``inter.broker.protocol.version`` (one rolled from a
    ZooKeeper-mode cluster, as in a migration), metadata.version at that release's
    level only - the controller then refuses a broker of another release, so the
    cluster's brokers never mix them (Kafka's migrating brokers register so)."""
    if not ibp:
        return dict(SUPPORTED_FEATURES)
    level = metadata_version_for_release(ibp)
    return {**SUPPORTED_FEATURES, METADATA_VERSION_FEATURE: (level, level)}


def known_metadata_version(level: int) -> bool:
    return any(lv == level for _, lv in _RELEASES)


def release_for_level(level: int) -> str:
    for release, lv in _RELEASES:
        if lv == level:
            return release
    return f"level {level}"


def features_body(image: Any, kraft_version: int = 0) -> dict[str, Any]:
    """ApiVersions' feature fields (KIP-584) from a metadata image and the Raft log's
    kraft.version."""
    finalized = {**image.features, KRAFT_VERSION_FEATURE: kraft_version}
    return {
        "supported_features": [
            {"name": name, "min_version": lo, "max_version": hi}
            for name, (lo, hi) in sorted(SUPPORTED_FEATURES.items())
        ],
        "finalized_features_epoch": max(image.offset, -1),
        "finalized_features": [
            {"name": name, "max_version_level": level, "min_version_level": level}
            for name, level in sorted(finalized.items())
            if level
        ],
    }


def elr_enabled(features: Any) -> bool:
    """Eligible leader replicas (KIP-966) are on: the feature finalized at 1 (which
    needs metadata.version 4.0-IV1)."""
    return bool(
        features.get(ELR_FEATURE, 0) >= 1
        and features.get(METADATA_VERSION_FEATURE, 0) >= ELR_METADATA_VERSION
    )
