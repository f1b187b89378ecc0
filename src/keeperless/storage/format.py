"""`storage format` / `storage info` and the start-up check of formatted log directories."""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keeperless.metadata._records_gen import FeatureLevelRecord
from keeperless.metadata.bootstrap import (
    BOOTSTRAP_CHECKPOINT,
    bootstrap_records,
    build_snapshot,
    scram_record,
)
from keeperless.metadata.features import (
    ELR_FEATURE,
    KRAFT_VERSION_FEATURE,
    LATEST_PRODUCTION_METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    SUPPORTED_FEATURES,
    broken_dependencies,
    default_feature_levels,
    metadata_version_for_release,
    release_for_level,
)
from keeperless.metadata.snapshot import snapshot_of_records
from keeperless.raft.voters import (
    KRAFT_VERSION_DYNAMIC,
    Endpoint,
    Voter,
    VoterSet,
    voters_records,
)
from keeperless.storage.durable import write_atomically
from keeperless.storage.meta_properties import (
    META_PROPERTIES,
    MetaProperties,
    StorageError,
    random_kafka_uuid,
    read_meta_properties,
    uuid_from_kafka,
    uuid_to_kafka,
    write_meta_properties,
)

log = logging.getLogger(__name__)

__all__ = [
    "BOOTSTRAP_VOTERS_CHECKPOINT",
    "FormatResult",
    "check_storage",
    "format_storage",
    "parse_dynamic_voters",
    "storage_info",
]

# the bootstrap snapshot of a dynamic quorum (KIP-853): its kraft.version and first voters
BOOTSTRAP_VOTERS_CHECKPOINT = "__cluster_metadata-0/00000000000000000000-0000000000.checkpoint"


def parse_dynamic_voters(spec: str, listener: str) -> VoterSet:
    """``--initial-controllers``: ``id@host:port:directory-id,...`` as Kafka's
    DynamicVoters parses it, with its messages."""
    voters: dict[int, Voter] = {}
    items = spec.split(",")
    while len(items) > 1 and not items[-1]:
        items.pop()  # (as Java's String.split: trailing empty entries go)
    for item in items:
        v = _parse_dynamic_voter(item.strip(), listener)
        if v.id in voters:
            raise ValueError(f"Node id {v.id} was specified more than once.")
        voters[v.id] = v
    if not voters:
        raise ValueError("No voters given.")
    return VoterSet.of(voters.values())


def _parse_dynamic_voter(text: str, listener: str) -> Voter:
    node, at, rest = text.partition("@")
    if not at:
        raise ValueError(f"No @ found in dynamic voter string: {text!r}.")
    if not node:
        raise ValueError(f"Invalid @ at beginning of dynamic voter string: {text!r}.")
    try:
        node_id = int(node)
    except ValueError:
        raise ValueError(f"Failed to parse node id in dynamic voter string: {text!r}.") from None
    if node_id < 0:
        raise ValueError(f"Invalid negative node id {node_id} in dynamic voter string.")
    if not rest:
        raise ValueError(f"No hostname found after node id: {text!r}.")
    if rest.startswith("["):
        host, bracket, rest = rest[1:].partition("]")
        if not bracket:
            raise ValueError("Hostname began with left bracket, but no right bracket was found.")
    else:
        host, colon, after = rest.partition(":")
        if not colon:
            raise ValueError(f"No colon following hostname could be found: {text!r}.")
        rest = ":" + after
    if not rest.startswith(":"):
        raise ValueError("Port section must start with a colon.")
    port_s, colon, dir_s = rest[1:].partition(":")
    if not colon:
        raise ValueError(f"No colon following port could be found: {text!r}.")
    try:
        port = int(port_s)
    except ValueError:
        raise ValueError(f"Failed to parse port in dynamic voter string: {text!r}.") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"Invalid port {port} in dynamic voter string.")
    try:
        directory_id = uuid_from_kafka(dir_s)
    except ValueError:
        raise ValueError(
            f"Failed to parse directory ID in dynamic voter string: {text!r}."
        ) from None
    if directory_id.int < 100:  # Kafka's reserved ids: zero (unassigned), lost, migrating
        raise ValueError(f"Invalid directory ID {dir_s} in dynamic voter string: it is reserved.")
    return Voter(node_id, directory_id, (Endpoint(listener, host, port),))


@dataclass(frozen=True, slots=True)
class FormatResult:
    formatted: list[Path]
    skipped: list[Path]
    metadata_version: int


def format_storage(
    log_dirs: tuple[Path, ...],
    metadata_log_dir: Path,
    node_id: int,
    cluster_id: str,
    release_version: str | None,
    ignore_formatted: bool,
    now_ms: int,
    add_scram: tuple[str, ...] = (),
    features: tuple[str, ...] = (),
    initial_controllers: VoterSet | None = None,
    records: tuple[Any, ...] = (),
) -> FormatResult:
    """``initial_controllers``: the first voters of a dynamic quorum (KIP-853; from
    ``--standalone`` or ``--initial-controllers``): the metadata directory gets the
    voter's directory id and the bootstrap snapshot of the voter set. ``records``: more
    metadata for the bootstrap checkpoint (a migrated ZooKeeper cluster's), written by the
    first active controller in one batch."""
    try:
        uuid_from_kafka(cluster_id)
    except ValueError as e:
        raise StorageError(f"Invalid cluster id: {e}") from None
    level = (
        LATEST_PRODUCTION_METADATA_VERSION
        if release_version is None
        else metadata_version_for_release(release_version)
    )
    try:
        extra: list[Any] = [*_feature_records(features, level, initial_controllers is not None)]
        extra += [scram_record(spec) for spec in add_scram]
        extra += records
    except ValueError as e:
        raise StorageError(str(e)) from None
    try:  # encoded before anything is written: a record that cannot be leaves no trace
        snapshot = build_snapshot(bootstrap_records(level, extra), now_ms)
    except (ValueError, OverflowError, struct.error) as e:
        raise StorageError(f"cannot encode the bootstrap metadata: {e}") from None
    formatted: list[Path] = []
    skipped: list[Path] = []
    for d in log_dirs:
        existing = read_meta_properties(d)
        if existing is not None:
            if not ignore_formatted:
                raise StorageError(
                    f"Log directory {d} is already formatted (cluster.id={existing.cluster_id}). "
                    "Use --ignore-formatted to skip formatted directories."
                )
            skipped.append(d)
            continue
        # (another log directory inside it is not data)
        if d.exists() and any(e not in log_dirs for e in d.iterdir()):
            raise StorageError(
                f"Log directory {d} is not empty and has no {META_PROPERTIES}; "
                "refusing to format over existing data"
            )
        directory_id = random_kafka_uuid()
        me = initial_controllers.get(node_id) if initial_controllers is not None else None
        if d == metadata_log_dir and me is not None and me.directory_id is not None:
            directory_id = uuid_to_kafka(me.directory_id)
        write_meta_properties(d, MetaProperties(cluster_id, node_id, directory_id))
        if d == metadata_log_dir:
            write_atomically(d / BOOTSTRAP_CHECKPOINT, snapshot)
            if initial_controllers is not None:
                control = voters_records(
                    initial_controllers, kraft_version=KRAFT_VERSION_DYNAMIC, timestamp_ms=now_ms
                )
                path = d / BOOTSTRAP_VOTERS_CHECKPOINT
                path.parent.mkdir(parents=True, exist_ok=True)
                write_atomically(path, snapshot_of_records([], now_ms, control))
        formatted.append(d)
    return FormatResult(formatted, skipped, level)


def _feature_records(
    specs: tuple[str, ...], metadata_version: int, dynamic: bool = False
) -> list[Any]:
    """The bootstrap FeatureLevelRecords: each feature at its default for the
    metadata.version (KIP-1022; ELR from 4.1-IV0 on) unless ``--feature NAME=LEVEL``
    names another level, each checked against what this build supports and the levels
    it depends on (kraft.version is 1 for a dynamic quorum and needs 3.9-IV0)."""
    levels = default_feature_levels(metadata_version)
    for spec in specs:
        name, sep, value = spec.partition("=")
        name = name.strip()
        try:
            level = int(value)
        except ValueError:
            level = -1
        if not sep or not name or level < 0:
            raise ValueError(f"--feature {spec!r}: expected NAME=LEVEL, e.g. {ELR_FEATURE}=1")
        if name == METADATA_VERSION_FEATURE:
            raise ValueError("--feature metadata.version: use --release-version")
        if name == KRAFT_VERSION_FEATURE:
            # (in the Raft log's bootstrap snapshot, not a FeatureLevelRecord: Kafka's rules)
            if level == 0 and dynamic:
                raise ValueError(
                    f"Cannot set kraft.version to {level} if KIP-853 configuration is "
                    "present. Try removing the --feature flag for kraft.version."
                )
            if level != 0 and not dynamic:
                raise ValueError(
                    f"Cannot set kraft.version to {level} unless KIP-853 configuration is "
                    "present. Try removing the --feature flag for kraft.version."
                )
            if level > 1:
                raise ValueError(f"Feature kraft.version only supports levels 0-1, not {level}")
            continue
        lo, hi = SUPPORTED_FEATURES.get(name, (0, 0))
        if name not in SUPPORTED_FEATURES:
            raise ValueError(f"Unsupported feature: {name}. Supported features are: "
                             f"{', '.join(sorted(SUPPORTED_FEATURES))}")  # fmt: skip
        if not lo <= level <= hi:
            raise ValueError(f"Feature {name} only supports levels {lo}-{hi}, not {level}")
        levels[name] = level
    everything = {
        **levels,
        METADATA_VERSION_FEATURE: metadata_version,
        KRAFT_VERSION_FEATURE: int(dynamic),
    }
    for name, level, dep, needed in broken_dependencies(everything):
        needs = f"{dep} level {needed}"
        if dep == METADATA_VERSION_FEATURE:
            release = release_for_level(needed)
            needs += f" ({release}); use --release-version {release} or later"
        raise ValueError(f"{name} could not be set to {level} because it depends on {needs}")
    return [FeatureLevelRecord(name=n, feature_level=lv) for n, lv in levels.items() if lv]


def storage_info(log_dirs: tuple[Path, ...]) -> list[tuple[Path, MetaProperties | None]]:
    return [(d, read_meta_properties(d)) for d in log_dirs]


def check_storage(
    log_dirs: tuple[Path, ...],
    node_id: int,
    config_path: str,
    metadata_log_dir: Path | None = None,
) -> str:
    """Verify every log directory is formatted for this node and one cluster; return the
    cluster id. Raises StorageError with one line saying what to run. A directory that
    cannot be read (a failed disk: an I/O error, or something else than a directory
    where it should be) is left offline, as Kafka does, unless it is the metadata log's
    or no other one is readable."""
    cluster_ids: dict[str, Path] = {}
    failed: list[str] = []
    zk_mode: list[tuple[Path, MetaProperties]] = []  # a ZooKeeper-mode broker's (version 0)
    for d in log_dirs:
        try:
            if d.exists() and not d.is_dir():
                raise NotADirectoryError(f"{d} is not a directory")
            meta = read_meta_properties(d)
        except OSError as e:
            if d == metadata_log_dir or len(failed) + 1 == len(log_dirs):
                raise StorageError(f"Log directory {d} cannot be read: {e}") from None
            log.error("Log directory %s cannot be read (%s): it starts offline", d, e)
            failed.append(str(d))
            continue
        if meta is None:
            raise StorageError(
                f"Log directory {d} is not formatted. To join an existing cluster, run: "
                f"keeperless storage format -t <its cluster id> -c {config_path} (the "
                "cluster id is what `kafka-cluster.sh cluster-id` prints; a controller "
                "joining a dynamic quorum adds --no-initial-controllers); for a new "
                "cluster, -t $(keeperless storage random-uuid)"
            )
        if meta.node_id != node_id:
            raise StorageError(
                f"Log directory {d} was formatted for node.id={meta.node_id}, but this node is "
                f"node.id={node_id}. Fix node.id or use the directory of node {meta.node_id}."
            )
        cluster_ids.setdefault(meta.cluster_id, d)
        if meta.version == 0:
            zk_mode.append((d, meta))
    if len(cluster_ids) == 1 and zk_mode:
        for d, meta in zk_mode:
            adopted = MetaProperties(meta.cluster_id, node_id, random_kafka_uuid())
            write_meta_properties(d, adopted)
            log.info(
                "Adopted log directory %s of ZooKeeper-mode broker %d (meta.properties version "
                "0): rewritten as version 1 with directory.id=%s",
                d, node_id, adopted.directory_id,
            )  # fmt: skip
    if len(cluster_ids) > 1:
        desc = ", ".join(f"{p} has cluster.id={c}" for c, p in cluster_ids.items())
        raise StorageError(f"Log directories belong to different clusters: {desc}")
    return next(iter(cluster_ids))
