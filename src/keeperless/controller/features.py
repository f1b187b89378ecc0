"""UpdateFeatures: finalized feature levels (``metadata.version``) with Kafka's guard rails.

A level is refused, naming who cannot take it, unless this controller and every
registered broker support it; a downgrade must say so (safe or unsafe), and a downgrade
across a level that changed the metadata format is refused — Kafka cannot rewrite
metadata to an older format either, so ``--unsafe`` is refused as well, with its own
message.  Several updates in one request apply all or none.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from keeperless.controller.quorum_controller import QuorumController, Result
from keeperless.metadata import _records_gen as r
from keeperless.metadata.admin import ApiError
from keeperless.metadata.features import (
    KRAFT_VERSION_FEATURE,
    METADATA_VERSION_FEATURE,
    SUPPORTED_FEATURES,
    broken_dependencies,
    metadata_changed_between,
    release_for_level,
)

__all__ = [
    "SAFE_DOWNGRADE",
    "UNSAFE_DOWNGRADE",
    "UPGRADE",
    "kraft_version_refusal",
    "update_features",
]

log = logging.getLogger(__name__)

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def _range(lo: int, hi: int) -> str:
    return f"{lo}-{hi}"


def _not_supported(c: QuorumController, feature: str, level: int) -> str | None:
    if feature not in SUPPORTED_FEATURES:
        return f"Local controller {c.node_id} does not support this feature."
    lo, hi = SUPPORTED_FEATURES[feature]
    if not lo <= level <= hi:
        return f"Local controller {c.node_id} only supports versions {_range(lo, hi)}"
    for b in sorted(c.image.brokers.values(), key=lambda b: b.broker_id):
        if feature not in b.supported_features:
            if level == 0:
                continue  # (level 0 is the feature off: what a broker without it does)
            return f"Broker {b.broker_id} does not support this feature."
        blo, bhi = b.supported_features[feature]
        if not blo <= level <= bhi:
            return f"Broker {b.broker_id} only supports versions {_range(blo, bhi)}"
    return None


def _update(
    c: QuorumController, feature: str, level: int, upgrade_type: int
) -> tuple[ApiError, r.FeatureLevelRecord | None]:
    def invalid(msg: str) -> tuple[ApiError, None]:
        text = f"Invalid update version {level} for feature {feature}. {msg}"
        log.warning(text)
        return ApiError(ErrorCode.invalid_update_version, text), None

    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return ApiError(ErrorCode.invalid_request, f"Invalid upgrade type {upgrade_type}"), None
    reason = _not_supported(c, feature, level)
    if reason is not None:
        return invalid(reason)
    current = c.image.features.get(feature, 0)
    if level < current and upgrade_type == UPGRADE:
        return invalid(
            "Can't downgrade the version of this feature without setting the upgrade type "
            "to either safe or unsafe downgrade."
        )
    if level > current and upgrade_type != UPGRADE:
        return invalid("Can't downgrade to a newer version.")
    lossy = level < current and metadata_changed_between(current, level)
    if feature == METADATA_VERSION_FEATURE and lossy:
        why = (
            "Unsafe metadata downgrade is not supported in this version."
            if upgrade_type == UNSAFE_DOWNGRADE
            else "Refusing to perform the requested downgrade because it might delete "
            "metadata information."
        )
        text = f"Unsupported metadata.version downgrade from {current} to {level}. {why}"
        log.warning(text)
        return ApiError(ErrorCode.invalid_update_version, text), None
    if level == current:
        return ApiError.none(), None
    return ApiError.none(), r.FeatureLevelRecord(name=feature, feature_level=level)


def _check_dependencies(
    c: QuorumController,
    records: list[r.FeatureLevelRecord],
    results: list[tuple[str, ApiError]],
    kraft_version: int,
) -> None:
    """A feature level that needs another feature's level (eligible leader replicas
    need metadata.version 4.0-IV1, a dynamic quorum 3.9-IV0) is refused, naming the
    dependency, if the levels after this request would break it - whether the feature
    is raised or the one it needs lowered."""
    final = {**c.image.features, KRAFT_VERSION_FEATURE: kraft_version}
    final.update({rec.name: rec.feature_level for rec in records})
    changed = {rec.name for rec in records}
    for feature, level, dep, needed in broken_dependencies(final):
        blame = feature if feature in changed else dep
        text = (
            f"Invalid update version {final.get(blame, 0)} for feature {blame}. {feature} "
            f"could not be set to {level} because it depends on {dep} level "
            f"{_level(dep, needed)}, and {dep} would be {_level(dep, final.get(dep, 0))}."
        )
        log.warning(text)
        for i, (name, _) in enumerate(results):
            if name == blame:
                results[i] = (name, ApiError(ErrorCode.invalid_update_version, text))


def _level(feature: str, level: int) -> str:
    if feature == METADATA_VERSION_FEATURE:
        return f"{level} ({release_for_level(level)})"
    return str(level)


def kraft_version_refusal(
    c: QuorumController, level: int, metadata_version: int | None = None
) -> str | None:
    """Why kraft.version cannot become ``level`` at this cluster's feature levels (a
    dynamic quorum needs metadata.version 3.9-IV0; ``metadata_version``: the one the
    same request sets), or None."""
    levels = {**c.image.features, KRAFT_VERSION_FEATURE: level}
    if metadata_version is not None:
        levels[METADATA_VERSION_FEATURE] = metadata_version
    for feature, lv, dep, needed in broken_dependencies(levels):
        if feature == KRAFT_VERSION_FEATURE:
            return (
                f"Invalid update version {lv} for feature {feature}. {feature} could not be "
                f"set to {lv} because it depends on {dep} level {_level(dep, needed)}, and "
                f"{dep} would be {_level(dep, levels.get(dep, 0))}."
            )
    return None


def update_features(
    c: QuorumController,
    updates: Sequence[tuple[str, int, int]],
    validate_only: bool,
    kraft_version: int = 0,
    announce: bool = True,
) -> Result[list[tuple[str, ApiError]]]:
    """``updates`` are (feature, level, upgrade type); answers one error per feature."""
    results: list[tuple[str, ApiError]] = []
    records: list[r.FeatureLevelRecord] = []
    seen: set[str] = set()
    for feature, level, upgrade_type in updates:
        if feature in seen:
            results.append(
                (feature, ApiError(ErrorCode.invalid_request, f"Duplicate feature {feature}"))
            )
            continue
        seen.add(feature)
        err, rec = _update(c, feature, level, upgrade_type)
        results.append((feature, err))
        if rec is not None:
            records.append(rec)
    _check_dependencies(c, records, results, kraft_version)
    failed = any(e.code != ErrorCode.none for _, e in results)
    for rec in records:
        # a change is announced only when it is made: a dry run (validate_only) or a
        # request refused as a whole changes nothing
        current = c.image.features.get(rec.name, 0)
        verb = "Upgrading" if rec.feature_level > current else "Downgrading"
        if validate_only and announce:
            log.info(
                "Validated (dry run, nothing changed): %s %s from %d to %d would be allowed.",
                verb.lower(),
                rec.name,
                current,
                rec.feature_level,
            )
        elif not failed:
            log.warning("%s %s from %d to %d.", verb, rec.name, current, rec.feature_level)
    if validate_only or failed:
        return Result([], results)
    final = {**c.image.features, **{rec.name: rec.feature_level for rec in records}}
    return Result([*records, *c.cluster_min_isr_records(final)], results)
