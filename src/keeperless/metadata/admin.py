"""The values a broker and a controller exchange about admin requests and ISR changes,
and the pure filters both apply to the metadata image (ACL and quota lookups): shared
by the roles without either importing the other's package."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.metadata.image import AclEntry, PartitionInfo, QuotaEntity

__all__ = [
    "ANY",
    "INTERNAL_TOPICS",
    "LITERAL",
    "MATCH",
    "MAX_TOPIC_NAME",
    "NO_AUTHORIZER",
    "PREFIXED",
    "WILDCARD",
    "AclFilter",
    "ApiError",
    "CreatePartitionsRequest",
    "CreateTopicResult",
    "DirAssignment",
    "DirAssignmentResult",
    "IsrChange",
    "IsrResult",
    "NewTopic",
    "QuotaAlteration",
    "describe_client_quotas",
    "matching_acls",
    "validate_topic_name",
]

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249
# Kafka's pattern type codes; the wildcard resource name
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
WILDCARD = "*"
# (entity, [(key, value, remove)]) of AlterClientQuotas
QuotaAlteration = tuple[QuotaEntity, Sequence[tuple[str, float, bool]]]


@dataclass(frozen=True, slots=True)
class ApiError:
    code: ErrorCode
    message: str | None = None

    @staticmethod
    def none() -> ApiError:
        return ApiError(ErrorCode.none)


# ACLs asked of a node with no authorizer (Kafka's AclApis)
NO_AUTHORIZER = ApiError(ErrorCode.security_disabled, "No Authorizer is configured.")


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Mapping[int, Sequence[int]] = field(default_factory=dict)
    configs: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    name: str
    error: ApiError
    topic_id: UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreatePartitionsRequest:
    name: str
    count: int
    assignments: Sequence[Sequence[int]] | None = None


# Kafka's Topic.INTERNAL_TOPICS: made by their coordinators, never auto-created, left out
# of pattern subscriptions, shown as internal. Other names starting with "__" (Debezium's
# __debezium-heartbeat.<prefix>, say) are ordinary topics.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def validate_topic_name(name: str) -> str | None:
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters"
    if not _LEGAL_TOPIC.match(name):
        return (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    return None


# AssignReplicasToDirs (KIP-858): (directory id, topic id, partition), and its result
DirAssignment = tuple[UUID, UUID, int]
DirAssignmentResult = tuple[UUID, UUID, int, ApiError]


@dataclass(frozen=True, slots=True)
class IsrChange:
    topic_id: UUID
    partition: int
    leader_epoch: int
    new_isr: tuple[int, ...]
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class IsrResult:
    topic_id: UUID
    partition: int
    error: ApiError
    state: PartitionInfo | None = None  # the partition after the change


@dataclass(frozen=True, slots=True)
class AclFilter:
    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int


def _name_matches(f: AclFilter, a: AclEntry) -> bool:
    if f.resource_name is None:
        return True
    if f.pattern_type in (LITERAL, PREFIXED):
        return a.pattern_type == f.pattern_type and a.resource_name == f.resource_name
    if f.pattern_type == ANY:
        return a.resource_name == f.resource_name
    # MATCH: every ACL that would apply to a resource of that name
    if a.pattern_type == LITERAL:
        return a.resource_name in (f.resource_name, WILDCARD)
    return a.pattern_type == PREFIXED and f.resource_name.startswith(a.resource_name)


def _matches(f: AclFilter, a: AclEntry) -> bool:
    return (
        f.resource_type in (ANY, a.resource_type)
        and (f.pattern_type in (ANY, MATCH) or f.pattern_type == a.pattern_type)
        and _name_matches(f, a)
        and f.principal in (None, a.principal)
        and f.host in (None, a.host)
        and f.operation in (ANY, a.operation)
        and f.permission_type in (ANY, a.permission_type)
    )


def matching_acls(acls: Mapping[UUID, AclEntry], f: AclFilter) -> Iterable[tuple[UUID, AclEntry]]:
    return ((i, a) for i, a in sorted(acls.items()) if _matches(f, a))


def describe_client_quotas(
    quotas: Mapping[QuotaEntity, Mapping[str, float]],
    components: Sequence[tuple[str, int, str | None]],
    strict: bool,
) -> Iterable[tuple[QuotaEntity, Mapping[str, float]]]:
    """Kafka's filter: each component is (type, match type 0 exact / 1 default / 2 any,
    name); ``strict`` means the entity has no other types."""
    for entity, values in sorted(quotas.items(), key=lambda kv: str(kv[0])):
        names = dict(entity)
        ok = True
        for etype, match_type, match in components:
            exact_miss = match_type == 0 and names.get(etype) != match
            default_miss = match_type == 1 and names.get(etype) is not None
            if etype not in names or exact_miss or default_miss:
                ok = False
        if ok and strict and len(names) != len(components):
            ok = False
        if ok:
            yield entity, values
