"""A ZooKeeper-mode cluster's metadata as KRaft records (what Kafka's ZK migration
writes in its one committed batch): topics with their ids, partitions with their
replicas, ISR, leaders and leader epochs, topic and broker configs, client quotas,
SCRAM credentials, ACLs and the next producer id, then the migration's state."""

from __future__ import annotations

import base64
import uuid
from typing import Any

from keeperless.metadata import _records_gen as r
from keeperless.metadata.config_catalog import BROKER_CONFIGS, ConfigType
from keeperless.metadata.image import MIGRATING
from keeperless.security.authorizer import AclOp, Resource
from keeperless.storage.meta_properties import uuid_from_kafka
from keeperless.zk.layout import ZkMetadata

__all__ = [
    "MIGRATION",
    "MIGRATION_RELEASE",
    "POST_MIGRATION",
    "PRE_MIGRATION",
    "SCRAM_RELEASE",
    "migration_records",
    "password_config",
]

MIGRATION_RELEASE = "3.4-IV0"  # the first metadata.version with ZkMigrationStateRecord
SCRAM_RELEASE = "3.5-IV2"  # the first with UserScramCredentialRecord

# Kafka's ZkMigrationState (the values of 3.5 on)
MIGRATION = 1  # the metadata lives in the quorum, and is written back to ZooKeeper
PRE_MIGRATION = 2  # a migration is to copy ZooKeeper's metadata into the quorum
POST_MIGRATION = 3  # the metadata lives in the quorum now
_TOPIC_CONFIG, _BROKER_CONFIG = 2, 4
_SCRAM = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
_PATTERN = {"LITERAL": 3, "PREFIXED": 4}
_PERMISSION = {"deny": 2, "allow": 3}
# the names ZooKeeper's ACL JSON uses (Kafka's SecurityUtils): Read, ClusterAction...
_RESOURCE = {"topic": Resource.TOPIC, "group": Resource.GROUP, "cluster": Resource.CLUSTER,
             "transactionalid": Resource.TRANSACTIONAL_ID,
             "delegationtoken": Resource.DELEGATION_TOKEN, "user": Resource.USER}  # fmt: skip


_OPERATION = {op.name.replace("_", ""): int(op) for op in AclOp}  # READ, CLUSTERACTION...


def password_config(key: str) -> bool:
    """A password config (Kafka's dynamic passwords are stored encrypted in ZooKeeper)."""
    if key.startswith("listener.name."):
        key = key.split(".", 3)[-1] if key.count(".") >= 3 else key
        # listener.name.<listener>.[<mechanism>.]<config>
        return any(
            key.endswith(known) and d.type == ConfigType.PASSWORD
            for known, d in BROKER_CONFIGS.items()
        )
    found = BROKER_CONFIGS.get(key)
    return found is not None and found.type == ConfigType.PASSWORD


def migration_records(md: ZkMetadata, state: int = POST_MIGRATION) -> tuple[list[Any], list[str]]:
    """The records, ending with the migration's ``state`` (POST_MIGRATION for a stopped
    cluster's one-shot migration, MIGRATION for a live one's dual-write), and what could
    not be migrated (one line each)."""
    out: list[Any] = []
    skipped: list[str] = []
    for name, t in sorted(md.topics.items()):
        tid = uuid_from_kafka(t.topic_id) if t.topic_id else uuid.uuid4()
        out.append(r.TopicRecord(name=name, topic_id=tid))
        for p in sorted(t.partitions.values(), key=lambda p: p.index):
            out.append(r.PartitionRecord(
                partition_id=p.index, topic_id=tid, replicas=p.replicas, isr=p.isr,
                removing_replicas=p.removing, adding_replicas=p.adding, leader=p.leader,
                leader_epoch=p.leader_epoch, partition_epoch=0,
                directories=(MIGRATING,) * len(p.replicas),
            ))  # fmt: skip
        for key, value in sorted(t.configs.items()):
            out.append(r.ConfigRecord(resource_type=_TOPIC_CONFIG, resource_name=name,
                                      name=key, value=value))  # fmt: skip
    for broker, conf in sorted(md.broker_configs.items()):
        for key, value in sorted(conf.items()):
            if password_config(key):
                skipped.append(f"broker {broker or '<default>'} config {key}: ZooKeeper holds it "
                               "encrypted with password.encoder.secret; set it again after the "
                               "migration (kafka-configs.sh --alter)")  # fmt: skip
                continue
            out.append(r.ConfigRecord(resource_type=_BROKER_CONFIG, resource_name=broker,
                                      name=key, value=value))  # fmt: skip
    for entity, quotas in sorted(md.quotas.items(), key=lambda kv: str(kv[0])):
        data = tuple(r.ClientQuotaRecordEntityData(entity_type=k, entity_name=n)
                     for k, n in entity)  # fmt: skip
        for quota, rate in sorted(quotas.items()):
            out.append(r.ClientQuotaRecord(entity=data, key=quota, value=rate))
    for c in md.scram:
        out.append(r.UserScramCredentialRecord(
            name=c.user, mechanism=_SCRAM[c.mechanism], salt=base64.b64decode(c.salt),
            stored_key=base64.b64decode(c.stored_key),
            server_key=base64.b64decode(c.server_key), iterations=c.iterations,
        ))  # fmt: skip
    for a in md.acls:
        rtype = _RESOURCE.get(a.resource_type.lower())
        pattern = _PATTERN.get(a.pattern_type)
        permission = _PERMISSION.get(a.permission.lower())
        op = _OPERATION.get(a.operation.replace("_", "").upper())
        if rtype is None or pattern is None or permission is None or op is None:
            where = f"{a.resource_type}:{a.pattern_type}:{a.name}"
            skipped.append(f"ACL {a.permission} {a.principal} {a.operation} on {where} "
                           "(unknown to Kafka)")  # fmt: skip
            continue
        out.append(r.AccessControlEntryRecord(
            id=uuid.uuid4(), resource_type=int(rtype), resource_name=a.name,
            pattern_type=pattern, principal=a.principal, host=a.host, operation=op,
            permission_type=permission,
        ))  # fmt: skip
    if md.producer_id_block_end is not None:
        out.append(r.ProducerIdsRecord(broker_id=-1, broker_epoch=-1,
                                       next_producer_id=md.producer_id_block_end + 1))  # fmt: skip
    out.append(r.ZkMigrationStateRecord(zk_migration_state=state))
    return out, skipped
