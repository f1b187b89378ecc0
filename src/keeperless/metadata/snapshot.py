"""A metadata image as the records that rebuild it — the content of a KIP-630 snapshot
(`<offset>-<epoch>.checkpoint`), streamed rather than built twice."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any
from uuid import UUID

from keeperless.metadata import _records_gen as r
from keeperless.metadata.codec import encode_record
from keeperless.metadata.image import AclEntry, MetadataImage
from keeperless.protocol.control import control_batch, snapshot_footer, snapshot_header
from keeperless.protocol.records import build_batch

__all__ = ["image_records", "snapshot_bytes", "snapshot_of_records"]

_BATCH_RECORDS = 1000


def image_records(image: MetadataImage) -> Iterator[Any]:
    """Records that, replayed in order on an empty image, rebuild ``image``."""
    for name, level in sorted(image.features.items()):
        yield r.FeatureLevelRecord(name=name, feature_level=level)
    for b in sorted(image.brokers.values(), key=lambda b: b.broker_id):
        yield r.RegisterBrokerRecord(
            broker_id=b.broker_id,
            incarnation_id=b.incarnation_id,
            broker_epoch=b.epoch,
            end_points=tuple(
                r.RegisterBrokerRecordBrokerEndpoint(name=n, host=h, port=p, security_protocol=0)
                for n, h, p in b.endpoints
            ),
            features=tuple(
                r.RegisterBrokerRecordBrokerFeature(
                    name=name, min_supported_version=lo, max_supported_version=hi
                )
                for name, (lo, hi) in sorted(b.supported_features.items())
            ),
            rack=b.rack,
            fenced=b.fenced,
            in_controlled_shutdown=b.in_controlled_shutdown,
        )
    for topic in sorted(image.topics.values(), key=lambda t: t.name):
        yield r.TopicRecord(name=topic.name, topic_id=topic.topic_id)
        for idx in sorted(topic.partitions):
            p = topic.partitions[idx]
            yield r.PartitionRecord(
                partition_id=idx,
                topic_id=topic.topic_id,
                replicas=p.replicas,
                isr=p.isr,
                leader=p.leader,
                leader_epoch=p.leader_epoch,
                partition_epoch=p.partition_epoch,
                directories=tuple(UUID(int=0) for _ in p.replicas),
            )
    for (rtype, rname), entries in sorted(image.configs.items()):
        for key, value in sorted(entries.items()):
            yield r.ConfigRecord(resource_type=rtype, resource_name=rname, name=key, value=value)
    if image.next_producer_id:
        yield r.ProducerIdsRecord(
            broker_id=-1, broker_epoch=-1, next_producer_id=image.next_producer_id
        )
    for entity, values in sorted(image.client_quotas.items(), key=lambda kv: str(kv[0])):
        for qkey, qvalue in sorted(values.items()):
            yield r.ClientQuotaRecord(
                entity=tuple(
                    r.ClientQuotaRecordEntityData(entity_type=t, entity_name=n) for t, n in entity
                ),
                key=qkey,
                value=qvalue,
            )
    for (user, mechanism), cred in sorted(image.scram.items()):
        yield r.UserScramCredentialRecord(
            name=user,
            mechanism=mechanism,
            salt=cred.salt,
            stored_key=cred.stored_key,
            server_key=cred.server_key,
            iterations=cred.iterations,
        )
    for acl_id, a in sorted(image.acls.items()):
        yield acl_record(acl_id, a)


def acl_record(acl_id: UUID, a: AclEntry) -> r.AccessControlEntryRecord:
    return r.AccessControlEntryRecord(
        id=acl_id,
        resource_type=a.resource_type,
        resource_name=a.resource_name,
        pattern_type=a.pattern_type,
        principal=a.principal,
        host=a.host,
        operation=a.operation,
        permission_type=a.permission_type,
    )


def snapshot_of_records(records: Iterable[Any], timestamp_ms: int) -> bytes:
    """A snapshot file: SNAPSHOT_HEADER, the records in batches, SNAPSHOT_FOOTER."""
    out = bytearray(control_batch(snapshot_header(timestamp_ms), timestamp_ms=timestamp_ms))
    offset = 1
    batch: list[tuple[bytes | None, bytes | None, tuple[()]]] = []

    def flush() -> None:
        nonlocal offset
        if batch:
            out.extend(build_batch(batch, base_offset=offset, timestamp_ms=timestamp_ms))
            offset += len(batch)
            batch.clear()

    for rec in records:
        batch.append((None, encode_record(rec), ()))
        if len(batch) >= _BATCH_RECORDS:
            flush()
    flush()
    out.extend(control_batch(snapshot_footer(), base_offset=offset, timestamp_ms=timestamp_ms))
    return bytes(out)


def snapshot_bytes(image: MetadataImage, timestamp_ms: int) -> bytes:
    return snapshot_of_records(image_records(image), timestamp_ms)
