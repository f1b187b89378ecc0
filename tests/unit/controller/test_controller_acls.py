"""ACL records: CreateAcls/DeleteAcls at the controller, filters, snapshots."""

from __future__ import annotations

import random

from kio.schema.errors import ErrorCode

from keeperless.controller.acls import create_acls, delete_acls
from keeperless.controller.quorum_controller import QuorumController
from keeperless.metadata.admin import AclFilter, matching_acls
from keeperless.metadata.image import AclEntry, MetadataDelta, MetadataImage
from keeperless.metadata.snapshot import image_records

TOPIC, GROUP = 2, 3
READ, WRITE = 3, 4
ALLOW, DENY = 3, 2


def _acl(name: str, principal: str = "User:alice", pattern: int = 3, op: int = READ) -> AclEntry:
    return AclEntry(TOPIC, name, pattern, principal, "*", op, ALLOW)


def test_create_validate_and_skip_duplicates() -> None:
    c = QuorumController(1, random.Random(1), {})
    res = create_acls(
        c,
        [
            _acl("orders"),
            _acl("orders"),  # the same binding twice: written once
            AclEntry(TOPIC, "x", 3, "alice", "*", READ, ALLOW),  # no principal type
            AclEntry(TOPIC, "x", 1, "User:a", "*", READ, ALLOW),  # ANY is a filter only
            AclEntry(TOPIC, "", 3, "User:a", "*", READ, ALLOW),
        ],
    )
    codes = [e.code for e in res.response]
    assert codes == [ErrorCode.none, ErrorCode.none] + [ErrorCode.invalid_request] * 3
    assert "Could not parse principal" in (res.response[2].message or "")
    assert len(res.records) == 1
    c.replay(res.records, 1)
    assert list(c.image.acls.values()) == [_acl("orders")]
    assert create_acls(c, [_acl("orders")]).records == []  # already there


def test_filters_and_delete() -> None:
    c = QuorumController(1, random.Random(1), {})
    acls = [
        _acl("orders"),
        _acl("ord", pattern=4),  # PREFIXED
        _acl("*"),
        _acl("payments", principal="User:bob", op=WRITE),
        AclEntry(GROUP, "g1", 3, "User:alice", "*", READ, DENY),
    ]
    c.replay(create_acls(c, acls).records, 1)

    def names(f: AclFilter) -> list[str]:
        return sorted(a.resource_name for _, a in matching_acls(c.image.acls, f))

    everything = AclFilter(1, None, 1, None, None, 1, 1)
    assert len(names(everything)) == 5
    # MATCH: what applies to topic "orders": literal, prefix and wildcard
    assert names(AclFilter(TOPIC, "orders", 2, None, None, 1, 1)) == ["*", "ord", "orders"]
    assert names(AclFilter(TOPIC, "orders", 3, None, None, 1, 1)) == ["orders"]
    assert names(AclFilter(1, None, 1, "User:bob", None, 1, 1)) == ["payments"]
    assert names(AclFilter(1, None, 1, None, None, 1, DENY)) == ["g1"]
    res = delete_acls(
        c,
        [
            AclFilter(TOPIC, None, 1, "User:alice", None, 1, 1),
            AclFilter(1, None, 1, None, None, 1, 1),
        ],
    )
    assert [len(x) for x in res.response] == [3, 2]  # the second filter gets what is left
    c.replay(res.records, 2)
    assert dict(c.image.acls) == {}


def test_acls_survive_a_snapshot() -> None:
    c = QuorumController(1, random.Random(1), {})
    c.replay(create_acls(c, [_acl("orders"), _acl("x", op=WRITE)]).records, 1)
    delta = MetadataDelta(MetadataImage())
    for rec in image_records(c.image):
        delta.replay(rec)
    assert dict(delta.apply().acls) == dict(c.image.acls)
