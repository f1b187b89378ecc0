"""ACLs in the metadata log (Kafka's AclControlManager, the controller side of KIP-801):
CreateAcls and DeleteAcls produce AccessControlEntryRecord / RemoveAccessControlEntryRecord;
DescribeAcls is answered by brokers from their image. Enforcement is a later issue.

Codes are Kafka's: resource types (2 TOPIC, 3 GROUP, 4 CLUSTER, 5 TRANSACTIONAL_ID,
6 DELEGATION_TOKEN, 7 USER), pattern types (1 ANY, 2 MATCH, 3 LITERAL, 4 PREFIXED),
operations (1 ANY, 2 ALL, 3 READ ... 14), permissions (1 ANY, 2 DENY, 3 ALLOW)."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.controller.quorum_controller import QuorumController, Result
from keeperless.metadata import _records_gen as r
from keeperless.metadata.admin import AclFilter, ApiError, matching_acls
from keeperless.metadata.image import AclEntry
from keeperless.metadata.snapshot import acl_record

__all__ = ["create_acls", "delete_acls", "validate_acl"]

ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
WILDCARD = "*"
RESOURCE_TYPES = {2, 3, 4, 5, 6, 7}
OPERATIONS = set(range(2, 15))
PERMISSIONS = {2, 3}


def validate_acl(a: AclEntry) -> str | None:
    if a.resource_type not in RESOURCE_TYPES:
        return f"Invalid resource type {a.resource_type}"
    if a.pattern_type not in (LITERAL, PREFIXED):
        return f"Invalid pattern type {a.pattern_type}: ACLs are LITERAL (3) or PREFIXED (4)"
    if not a.resource_name:
        return "Resource name should not be empty"
    if a.operation not in OPERATIONS:
        return f"Invalid operation {a.operation}"
    if a.permission_type not in PERMISSIONS:
        return f"Invalid permission type {a.permission_type}: DENY (2) or ALLOW (3)"
    kind, sep, name = a.principal.partition(":")
    if not sep or not kind or not name:
        return f"Could not parse principal from `{a.principal}` (no colon is present)"
    if not a.host:
        return "Host should not be empty"
    return None


def create_acls(c: QuorumController, acls: Sequence[AclEntry]) -> Result[list[ApiError]]:
    existing = set(c.image.acls.values())
    records: list[r.AccessControlEntryRecord] = []
    results: list[ApiError] = []
    for a in acls:
        bad = validate_acl(a)
        if bad is not None:
            results.append(ApiError(ErrorCode.invalid_request, bad))
            continue
        results.append(ApiError.none())
        if a in existing:
            continue  # already there: nothing to write, as Kafka does
        existing.add(a)
        records.append(acl_record(c._uuid(), a))
    return Result(list(records), results)


def delete_acls(c: QuorumController, filters: Sequence[AclFilter]) -> Result[list[list[AclEntry]]]:
    """Per filter, the ACLs it removed (an ACL matched by two filters goes once)."""
    gone: set[UUID] = set()
    records: list[r.RemoveAccessControlEntryRecord] = []
    results: list[list[AclEntry]] = []
    for f in filters:
        removed = []
        for acl_id, a in matching_acls(c.image.acls, f):
            if acl_id in gone:
                continue
            gone.add(acl_id)
            removed.append(a)
            records.append(r.RemoveAccessControlEntryRecord(id=acl_id))
        results.append(removed)
    return Result(list(records), results)
