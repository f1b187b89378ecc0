"""``keeperless migrate-zk --zookeeper-connect HOST:PORT[/chroot] -c server.properties
[--dry-run]``: the one-shot migration of a stopped ZooKeeper-mode Kafka cluster. It reads
the cluster's metadata from its ZooKeeper, says what the migration brings into the quorum
and what it could not, and refuses to start (a reassignment in progress, topics pending
deletion, storage formatted for another cluster, a node that is not a controller).
Without --dry-run it formats the controller's storage with ZooKeeper's cluster id and
writes the metadata as its bootstrap: the first active controller commits it in one
batch, ending with ZkMigrationStateRecord POST_MIGRATION. ZooKeeper is never written."""

from __future__ import annotations

import logging
import time
import warnings
from collections import Counter
from typing import Any, TextIO

from keeperless.metadata.features import metadata_version_for_release
from keeperless.storage.format import format_storage
from keeperless.storage.meta_properties import read_meta_properties, uuid_from_kafka
from keeperless.tools.errors import ToolError
from keeperless.zk.layout import ZkLayoutError, ZkMetadata, parse_layout
from keeperless.zk.reader import ZkUnreachable, read_tree
from keeperless.zk.records import MIGRATION_RELEASE, SCRAM_RELEASE, migration_records

__all__ = ["migrate_zk", "summary"]


def summary(md: ZkMetadata) -> list[str]:
    """What the migration brings along, one line per kind."""
    parts = sum(len(t.partitions) for t in md.topics.values())
    configured = sum(1 for t in md.topics.values() if t.configs)
    without_id = sum(1 for t in md.topics.values() if t.topic_id is None)
    patterns = Counter(a.pattern_type.lower() for a in md.acls)
    by_pattern = ", ".join(f"{n} {p}" for p, n in sorted(patterns.items())) or "-"
    mechs = Counter(c.mechanism for c in md.scram)
    controller = "none" if md.controller_id is None else str(md.controller_id)
    lines = [
        f"Cluster id: {md.cluster_id} (controller {controller}, controller epoch "
        f"{md.controller_epoch})",
        f"Brokers registered: {len(md.brokers)} ({', '.join(map(str, sorted(md.brokers))) or '-'})",
        f"Topics: {len(md.topics)} with {parts} partitions ({configured} with configs, "
        f"{without_id} without a topic id: one is given)",
        f"Broker configs: {len(md.broker_configs)} entities "
        f"({', '.join(sorted(b or '<default>' for b in md.broker_configs)) or '-'})",
        f"Client quotas: {len(md.quotas)} entities",
        f"SCRAM credentials: {len(md.scram)} "
        f"({', '.join(f'{n} {m}' for m, n in sorted(mechs.items())) or '-'})",
        f"ACLs: {len(md.acls)} ({by_pattern})",
        "Producer ids given out: "
        + ("none" if md.producer_id_block_end is None else f"up to {md.producer_id_block_end}"),
        "Finalized features: "
        + (", ".join(f"{k}={v}" for k, v in sorted(md.features.items())) or "none"),
    ]
    return lines


def migrate_zk(
    connect: str, cfg: Any, dry_run: bool, out: TextIO, release: str | None = None
) -> int:
    if "controller" not in cfg.roles:
        raise ToolError(
            "migrate-zk writes the metadata as a controller's bootstrap: -c must be the "
            "server.properties of a controller (process.roles with controller); format the "
            "other nodes with 'storage format -t <the cluster id>' as usual"
        )
    if release is not None:
        try:
            level = metadata_version_for_release(release)
        except ValueError as e:
            raise ToolError(f"--release-version: {e}") from None
        if level < metadata_version_for_release(MIGRATION_RELEASE):
            raise ToolError(f"--release-version {release}: a migration needs metadata.version "
                            f"{MIGRATION_RELEASE} or later")  # fmt: skip
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # its retries are not the tool's
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # kazoo's: "No chroot path exists" (said below)
            tree = read_tree(connect)
    except ZkUnreachable as e:
        raise ToolError(str(e)) from None
    try:
        md = parse_layout(tree)
    except ZkLayoutError as e:
        print(f"Cannot migrate: ZooKeeper at {connect} does not hold a valid ZooKeeper-mode "
              f"Kafka cluster ({len(e.problems)} problem(s)):", file=out)  # fmt: skip
        for path, what in e.problems:
            print(f"  {path}: {what}", file=out)
        return 1
    print(f"Read ZooKeeper at {connect}: {len(tree)} znodes.", file=out)
    for line in summary(md):
        print(line, file=out)
    refusals = md.refusals()
    if not _valid_id(md.cluster_id):
        refusals.append(f"the cluster id {md.cluster_id!r} is not a Kafka cluster id")
    for d in dict.fromkeys([*cfg.all_log_dirs, cfg.metadata_log_dir]):
        meta = read_meta_properties(d)
        if meta is not None and meta.cluster_id != md.cluster_id:
            refusals.append(f"{d} is formatted for cluster {meta.cluster_id}, not "
                            f"{md.cluster_id}")  # fmt: skip
        elif meta is not None:
            refusals.append(f"{d} is already formatted (cluster {meta.cluster_id}): the "
                            "migration formats new storage (did it run?)")  # fmt: skip
    if (
        md.scram
        and release is not None
        and metadata_version_for_release(release) < metadata_version_for_release(SCRAM_RELEASE)
    ):
        refusals.append(f"SCRAM credentials need metadata.version {SCRAM_RELEASE} or later "
                        f"(--release-version {release})")  # fmt: skip
    records, skipped = migration_records(md)
    for line in skipped:
        print(f"Not migrated: {line}", file=out)
    for r in refusals:
        print(f"Refused: {r}", file=out)
    if refusals:
        return 1
    if dry_run:
        print(f"Dry run: {len(records)} records would be written; nothing was written.", file=out)
        return 0
    res = format_storage(
        cfg.all_log_dirs, cfg.metadata_log_dir, cfg.node_id, md.cluster_id, release, False,
        int(time.time() * 1000), records=tuple(records),
    )  # fmt: skip
    for d in res.formatted:
        print(f"Formatting {d} with cluster id {md.cluster_id}.", file=out)
    print(f"Wrote {len(records)} metadata records as the bootstrap of "
          f"{cfg.metadata_log_dir}: start the node with 'keeperless server start'; its first "
          "active controller commits them in one batch.", file=out)  # fmt: skip
    return 0


def _valid_id(cid: str) -> bool:
    try:
        uuid_from_kafka(cid)
    except ValueError:
        return False
    return True
