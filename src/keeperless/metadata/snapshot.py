"""A metadata image as the records that rebuild it — the content of a KIP-630 snapshot
(`<offset>-<epoch>.checkpoint`), streamed rather than built twice."""

from __future__ import annotations

import struct
from collections.abc import Generator, Iterable, Iterator
from typing import Any
from uuid import UUID

from keeperless.metadata import _records_gen as r
from keeperless.metadata.codec import encode_record
from keeperless.metadata.features import METADATA_VERSION_FEATURE, record_version
from keeperless.metadata.fieldspec import ZERO_UUID
from keeperless.metadata.image import AclEntry, DelegationToken, MetadataImage, TopicImage
from keeperless.protocol.control import control_batch, snapshot_footer, snapshot_header
from keeperless.protocol.records import build_batch

__all__ = [
    "SnapshotWriter",
    "image_records",
    "snapshot_of_records",
    "token_record",
    "topic_records",
]

_BATCH_RECORDS = 1000
Batch = bytes | memoryview  # (a cached batch may be a view into the snapshot it was in)
Spans = dict[UUID, list[tuple[int, int]]]  # each topic's batches: where, in a snapshot
_BASE_OFFSET = struct.Struct(">q")
_RECORDS_COUNT = struct.Struct(">i")
_RECORDS_COUNT_AT = 57  # the last int32 of the v2 batch header


def image_records(image: MetadataImage) -> Iterator[Any]:
    """Records that, replayed in order on an empty image, rebuild ``image``."""
    yield from _head_records(image)
    level = image.features.get(METADATA_VERSION_FEATURE)
    for topic in _sorted_topics(image):
        yield from topic_records(topic, level)
    yield from _tail_records(image)


def _sorted_topics(image: MetadataImage) -> list[TopicImage]:
    return sorted(image.topics.values(), key=lambda t: t.name)


def topic_records(topic: TopicImage, level: int | None = None) -> Iterator[Any]:
    # directories exist from PartitionRecord v1 (metadata.version 3.7-IV2) on
    dirs = level is None or record_version(r.PartitionRecord(), level) >= 1
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
            adding_replicas=p.adding,
            removing_replicas=p.removing,
            eligible_leader_replicas=p.elr or None,
            last_known_elr=p.last_known_elr or None,
            directories=(p.directories or tuple(ZERO_UUID for _ in p.replicas)) if dirs else (),
        )


def _head_records(image: MetadataImage) -> Iterator[Any]:
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
            log_dirs=b.log_dirs,
        )


def _tail_records(image: MetadataImage) -> Iterator[Any]:
    for (rtype, rname), entries in sorted(image.configs.items()):
        for key, value in sorted(entries.items()):
            yield r.ConfigRecord(resource_type=rtype, resource_name=rname, name=key, value=value)
    if image.zk_migration_state:
        yield r.ZkMigrationStateRecord(zk_migration_state=image.zk_migration_state)
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
    for _, t in sorted(image.delegation_tokens.items()):
        yield token_record(t)


def token_record(t: DelegationToken) -> r.DelegationTokenRecord:
    return r.DelegationTokenRecord(
        owner=t.owner,
        requester=t.requester,
        renewers=t.renewers,
        issue_timestamp=t.issue_ms,
        max_timestamp=t.max_ms,
        expiration_timestamp=t.expiry_ms,
        token_id=t.token_id,
    )


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


def _batches(
    records: Iterable[Any], timestamp_ms: int, level: int | None = None
) -> Iterator[bytes]:
    """The records in batches of up to _BATCH_RECORDS, each with base offset 0, written
    at the versions metadata.version ``level`` allows."""
    batch: list[tuple[bytes | None, bytes | None, tuple[()]]] = []
    for rec in records:
        batch.append((None, encode_record(rec, record_version(rec, level)), ()))
        if len(batch) >= _BATCH_RECORDS:
            yield build_batch(batch, timestamp_ms=timestamp_ms)
            batch.clear()
    if batch:
        yield build_batch(batch, timestamp_ms=timestamp_ms)


class _Out:
    """Snapshot bytes being assembled: batches placed at consecutive offsets."""

    def __init__(self, timestamp_ms: int) -> None:
        self.timestamp_ms = timestamp_ms
        self.buf = bytearray(
            control_batch(snapshot_header(timestamp_ms), timestamp_ms=timestamp_ms)
        )
        self.offset = 1

    def add(self, batch: Batch) -> int:
        """Where ``batch`` begins in the snapshot."""
        # The base offset is outside the CRC: a cached batch is placed by patching it.
        pos = len(self.buf)
        self.buf += batch
        _BASE_OFFSET.pack_into(self.buf, pos, self.offset)
        self.offset += _RECORDS_COUNT.unpack_from(batch, _RECORDS_COUNT_AT)[0]
        return pos

    def finish(self) -> bytes:
        self.buf += control_batch(
            snapshot_footer(), base_offset=self.offset, timestamp_ms=self.timestamp_ms
        )
        return bytes(self.buf)


def snapshot_of_records(records: Iterable[Any], timestamp_ms: int, control: bytes = b"") -> bytes:
    """A snapshot file: SNAPSHOT_HEADER, the ``control`` batch (the quorum's voters),
    the records in batches, SNAPSHOT_FOOTER."""
    out = _Out(timestamp_ms)
    if control:
        out.add(control)
    for batch in _batches(records, timestamp_ms):
        out.add(batch)
    return out.finish()


class SnapshotWriter:
    """Writes successive snapshots of an image, re-encoding only the topics that changed.

    The image shares untouched ``TopicImage`` objects between versions, so a topic whose
    object is the one encoded last time reuses its batches: at a million partitions a
    snapshot costs what changed since the previous one plus copying bytes, not ~7 µs per
    partition. One writer is used by one thread at a time.

    A running node writes in a forked child (runtime/forked.py), whose copy of this
    writer dies with it: the child hands back ``spans`` with the snapshot, and the
    node's writer ``adopt``s the batches from the bytes, for the next child to reuse.
    """

    def __init__(self) -> None:
        self._topics: dict[UUID, tuple[TopicImage, list[Batch]]] = {}
        self._level: int | None = None
        self.spans: Spans = {}  # the last snapshot's topics' batches: where they are in it

    def adopt(self, image: MetadataImage, data: bytes, spans: Spans) -> None:
        """Keep the batches of the snapshot ``data`` of ``image`` that a copy of this
        writer wrote (``spans``: its ``spans``), as though this one had written it."""
        view = memoryview(data)
        self._level = image.features.get(METADATA_VERSION_FEATURE)
        self._topics = {
            t.topic_id: (t, [view[a:b] for a, b in spans[t.topic_id]])
            for t in image.topics.values()
            if t.topic_id in spans
        }

    def write(self, image: MetadataImage, timestamp_ms: int, control: bytes = b"") -> bytes:
        steps = self.steps(image, timestamp_ms, control)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                data: bytes = done.value
                return data

    def steps(
        self, image: MetadataImage, timestamp_ms: int, control: bytes = b""
    ) -> Generator[None, None, bytes]:
        """The snapshot's bytes as the generator's return value; it yields after each
        topic it had to encode, so that the caller can share the thread meanwhile.
        ``control``: a control batch placed right after the header (the quorum's
        kraft.version and voter set, KIP-853)."""
        level = image.features.get(METADATA_VERSION_FEATURE)
        if level != self._level:  # other record versions: nothing cached is reusable
            self._topics, self._level = {}, level
        out = _Out(timestamp_ms)
        if control:
            out.add(control)
        for batch in _batches(_head_records(image), timestamp_ms, level):
            out.add(batch)
        cache: dict[UUID, tuple[TopicImage, list[Batch]]] = {}
        spans: Spans = {}
        for topic in _sorted_topics(image):
            hit = self._topics.get(topic.topic_id)
            batches: list[Batch]
            if hit is not None and hit[0] is topic:
                batches = hit[1]
            else:
                batches = list(_batches(topic_records(topic, level), timestamp_ms, level))
                yield
            cache[topic.topic_id] = (topic, batches)
            placed = spans[topic.topic_id] = []
            for cached in batches:
                at = out.add(cached)
                placed.append((at, at + len(cached)))
        self._topics, self.spans = cache, spans  # deleted topics drop out
        for batch in _batches(_tail_records(image), timestamp_ms, level):
            out.add(batch)
        return out.finish()
