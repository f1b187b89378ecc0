"""``keeperless migrate-zk --zookeeper-connect HOST:PORT[/chroot] -c server.properties
--dry-run``: read a ZooKeeper-mode Kafka cluster's metadata from its ZooKeeper and say
what a migration would bring into the quorum, what it could not, and why it must not
start (a reassignment in progress, topics pending deletion, storage formatted for
another cluster). Writing the migrated metadata is issue 31's next step."""

from __future__ import annotations

from collections import Counter
from typing import Any, TextIO

from keeperless.storage.meta_properties import read_meta_properties
from keeperless.tools.errors import ToolError
from keeperless.zk.layout import ZkLayoutError, ZkMetadata, parse_layout
from keeperless.zk.reader import ZkUnreachable, read_tree

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


def migrate_zk(connect: str, cfg: Any, dry_run: bool, out: TextIO) -> int:
    if not dry_run:
        raise ToolError(
            "only --dry-run is supported so far: it reads ZooKeeper and says what would be "
            "migrated; writing the metadata into this node's storage is not built yet"
        )
    try:
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
    for r in refusals:
        print(f"Refused: {r}", file=out)
    if refusals:
        return 1
    print("Dry run: nothing was written.", file=out)
    return 0


def _valid_id(cid: str) -> bool:
    from keeperless.storage.meta_properties import uuid_from_kafka

    try:
        uuid_from_kafka(cid)
    except ValueError:
        return False
    return True
