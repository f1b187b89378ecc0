"""Kafka's StandardAuthorizer over the ACLs of the metadata image
(``authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer``):

- a principal in ``super.users`` may do anything;
- an ACL applies to a request when its resource type matches, its pattern does
  (LITERAL: the same name or the wildcard ``*``; PREFIXED: a prefix of the name), its
  principal does (the same, or ``User:*``) and its host does (the same, or ``*``);
- any applying DENY for the operation (or ALL) refuses; otherwise an applying ALLOW
  for the operation, for ALL, or for an operation that implies it (READ, WRITE, DELETE
  and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows;
- a resource no ACL names at all is allowed only with
  ``allow.everyone.if.no.acl.found=true``; anything else is refused."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from uuid import UUID

from keeperless.metadata.image import AclEntry

__all__ = ["STANDARD_AUTHORIZER", "AclOp", "Authorizer", "Resource"]

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


class Resource(IntEnum):
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class AclOp(IntEnum):
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


_LITERAL, _PREFIXED = 3, 4
_DENY, _ALLOW = 2, 3
CLUSTER_NAME = "kafka-cluster"

# what an ALLOW of the key also allows (Kafka's implied operations)
_IMPLIED = {
    AclOp.DESCRIBE: {AclOp.READ, AclOp.WRITE, AclOp.DELETE, AclOp.ALTER, AclOp.DESCRIBE},
    AclOp.DESCRIBE_CONFIGS: {AclOp.ALTER_CONFIGS, AclOp.DESCRIBE_CONFIGS},
}


@dataclass(slots=True)
class Authorizer:
    super_users: frozenset[str] = frozenset()
    allow_if_no_acl: bool = False
    _acls: Mapping[UUID, AclEntry] | None = None
    _by_type: dict[int, list[AclEntry]] = field(default_factory=dict)

    def _index(self, acls: Mapping[UUID, AclEntry]) -> dict[int, list[AclEntry]]:
        if acls is not self._acls:
            by: dict[int, list[AclEntry]] = {}
            for a in acls.values():
                by.setdefault(a.resource_type, []).append(a)
            self._acls, self._by_type = acls, by
        return self._by_type

    def authorize(
        self,
        acls: Mapping[UUID, AclEntry],
        principal: str,
        host: str,
        op: AclOp,
        resource: Resource,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        applying = [a for a in self._index(acls).get(resource, ()) if _names(a, name)]
        if not applying:
            return self.allow_if_no_acl
        mine = [a for a in applying if _who(a, principal, host)]
        if any(a.permission_type == _DENY and a.operation in (op, AclOp.ALL) for a in mine):
            return False
        allowed = _IMPLIED.get(op, {op})
        return any(
            a.permission_type == _ALLOW and (a.operation == AclOp.ALL or a.operation in allowed)
            for a in mine
        )

    def authorized_ops(
        self,
        acls: Mapping[UUID, AclEntry],
        principal: str,
        host: str,
        resource: Resource,
        name: str,
        ops: Iterable[AclOp],
    ) -> int:
        """The bit field of ``ops`` allowed (Kafka's authorized operations)."""
        bits = 0
        for op in ops:
            if self.authorize(acls, principal, host, op, resource, name):
                bits |= 1 << int(op)
        return bits


def _names(a: AclEntry, name: str) -> bool:
    if a.pattern_type == _LITERAL:
        return a.resource_name in (name, "*")
    if a.pattern_type == _PREFIXED:
        return name.startswith(a.resource_name)
    return False


def _who(a: AclEntry, principal: str, host: str) -> bool:
    return a.principal in (principal, "User:*") and a.host in (host, "*")
