"""Feature levels: `metadata.version` and the release names that map to it (Kafka's
MetadataVersion)."""

from __future__ import annotations

from typing import Any

__all__ = [
    "ELR_FEATURE",
    "ELR_METADATA_VERSION",
    "FEATURE_BOOTSTRAP",
    "FEATURE_DEPENDENCIES",
    "KRAFT_VERSION_FEATURE",
    "LATEST_METADATA_VERSION",
    "LATEST_PRODUCTION_METADATA_VERSION",
    "METADATA_VERSION_FEATURE",
    "MINIMUM_METADATA_VERSION",
    "SUPPORTED_FEATURES",
    "default_feature_levels",
    "elr_enabled",
    "features_body",
    "metadata_changed_between",
    "metadata_version_for_release",
    "record_version",
    "release_for_level",
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
)
MINIMUM_METADATA_VERSION = _RELEASES[0][1]
LATEST_METADATA_VERSION = _RELEASES[-1][1]
# what `storage format` writes when no --release-version is given (Kafka 4.1's)
LATEST_PRODUCTION_METADATA_VERSION = 27
# KIP-966: leaders elected from eligible replicas (ELR) once this is 1
ELR_FEATURE = "eligible.leader.replicas.version"
ELR_METADATA_VERSION = 23  # the metadata.version ELR needs (4.0-IV1)
# What this build supports, as brokers register it and controllers check it.
# KIP-853: 0 a static controller quorum, 1 a dynamic one; kept in the Raft log
# (KRaftVersionRecord), not in FeatureLevelRecords
KRAFT_VERSION_FEATURE = "kraft.version"
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    METADATA_VERSION_FEATURE: (MINIMUM_METADATA_VERSION, LATEST_METADATA_VERSION),
    ELR_FEATURE: (0, 1),
    KRAFT_VERSION_FEATURE: (0, 1),
}
# a feature level and the metadata.version it needs (Kafka's feature dependencies)
FEATURE_DEPENDENCIES: dict[tuple[str, int], int] = {(ELR_FEATURE, 1): ELR_METADATA_VERSION}
# a feature level and the first metadata.version whose new clusters get it by default
# (Kafka's FeatureVersion.bootstrapMetadataVersion): ELR is on for clusters formatted
# at 4.1-IV0 or later
FEATURE_BOOTSTRAP: dict[tuple[str, int], int] = {(ELR_FEATURE, 1): 26}


def default_feature_levels(metadata_version: int) -> dict[str, int]:
    """Each feature other than metadata.version at the level a cluster formatted, or a
    features command run, at ``metadata_version`` gets by default (Kafka's
    Features.defaultValue): the highest level bootstrapped at or before it."""
    out: dict[str, int] = {}
    for name, (_lo, hi) in sorted(SUPPORTED_FEATURES.items()):
        if name in (METADATA_VERSION_FEATURE, KRAFT_VERSION_FEATURE):
            continue  # (kraft.version: set by the quorum's format flags, in the Raft log)
        out[name] = max(
            (lv for lv in range(1, hi + 1) if FEATURE_BOOTSTRAP.get((name, lv), 1 << 15)
             <= metadata_version),
            default=0,
        )  # fmt: skip
    return out


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
