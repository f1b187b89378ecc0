"""The StandardAuthorizer's rules (issue 17) and the refusals the broker answers with."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from keeperless.metadata.image import AclEntry
from keeperless.protocol.apis import BROKER_APIS, CONTROLLER_APIS
from keeperless.protocol.framing import RequestHeader, encode_response
from keeperless.security.api_rules import _CLUSTER, _CONTROLLER_RPC, _ONE, _per_item_refusal
from keeperless.security.authorizer import AclOp, Authorizer, Resource

_REQUESTS = {
    43: SimpleNamespace(topic_partitions=[SimpleNamespace(topic="t", partitions=[0])]),
}
LIT, PRE = 3, 4
DENY, ALLOW = 2, 3
T, G, C = Resource.TOPIC, Resource.GROUP, Resource.CLUSTER


def acls(*entries: tuple[int, str, int, str, str, int, int]) -> dict[uuid.UUID, AclEntry]:
    return {uuid.uuid4(): AclEntry(*e) for e in entries}


def test_literal_allow_and_implied_describe() -> None:
    a = Authorizer()
    book = acls((T, "orders", LIT, "User:alice", "*", AclOp.WRITE, ALLOW))
    assert a.authorize(book, "User:alice", "1.2.3.4", AclOp.WRITE, T, "orders")
    assert a.authorize(book, "User:alice", "1.2.3.4", AclOp.DESCRIBE, T, "orders")  # implied
    assert not a.authorize(book, "User:alice", "1.2.3.4", AclOp.READ, T, "orders")
    assert not a.authorize(book, "User:bob", "1.2.3.4", AclOp.WRITE, T, "orders")
    assert not a.authorize(book, "User:alice", "1.2.3.4", AclOp.WRITE, T, "orders2")


def test_deny_wins_and_is_not_implied() -> None:
    a = Authorizer()
    book = acls(
        (T, "*", LIT, "User:*", "*", AclOp.ALL, ALLOW),
        (T, "secret", LIT, "User:alice", "*", AclOp.READ, DENY),
    )
    assert not a.authorize(book, "User:alice", "h", AclOp.READ, T, "secret")
    assert a.authorize(book, "User:alice", "h", AclOp.DESCRIBE, T, "secret")  # deny READ only
    assert a.authorize(book, "User:bob", "h", AclOp.READ, T, "secret")
    book2 = acls((G, "g", LIT, "User:alice", "*", AclOp.ALL, DENY),
                 (G, "g", LIT, "User:alice", "*", AclOp.READ, ALLOW))  # fmt: skip
    assert not a.authorize(book2, "User:alice", "h", AclOp.READ, G, "g")


def test_prefixed_hosts_super_users_and_no_acl() -> None:
    a = Authorizer(super_users=frozenset({"User:root"}))
    book = acls((T, "logs-", PRE, "User:alice", "10.0.0.1", AclOp.READ, ALLOW))
    assert a.authorize(book, "User:alice", "10.0.0.1", AclOp.READ, T, "logs-app")
    assert not a.authorize(book, "User:alice", "10.0.0.2", AclOp.READ, T, "logs-app")
    assert not a.authorize(book, "User:alice", "10.0.0.1", AclOp.READ, T, "log")
    assert a.authorize(book, "User:root", "h", AclOp.ALTER, C, "kafka-cluster")
    assert not a.authorize({}, "User:alice", "h", AclOp.READ, T, "free")
    assert Authorizer(allow_if_no_acl=True).authorize({}, "User:alice", "h", AclOp.READ, T, "free")
    # a resource some ACL names is not "no ACL found", even for another principal
    named = acls((T, "free", LIT, "User:bob", "*", AclOp.READ, ALLOW))
    assert not Authorizer(allow_if_no_acl=True).authorize(
        named, "User:alice", "h", AclOp.READ, T, "free"
    )


def test_configs_implication_and_the_index_follows_the_image() -> None:
    a = Authorizer()
    book = acls((C, "kafka-cluster", LIT, "User:ops", "*", AclOp.ALTER_CONFIGS, ALLOW))
    assert a.authorize(book, "User:ops", "h", AclOp.DESCRIBE_CONFIGS, C, "kafka-cluster")
    assert not a.authorize(book, "User:ops", "h", AclOp.ALTER, C, "kafka-cluster")
    assert not a.authorize({}, "User:ops", "h", AclOp.DESCRIBE_CONFIGS, C, "kafka-cluster")


# answered per item (partition, ACL, entity, user), not with one error code
_PER_ITEM = {8, 27, 28, 30, 31, 34, 49, 51, 83, 84, 85, 86, 87}


@pytest.mark.parametrize("key", sorted((set(_CLUSTER) | set(_ONE)) - _PER_ITEM))
def test_every_refusal_encodes_in_every_version(key: int) -> None:
    lo, hi = BROKER_APIS[key]
    denied = ErrorCode.cluster_authorization_failed
    for version in range(lo, hi + 1):
        header = RequestHeader(key, version, 7, "t")
        resp = _per_item_refusal(header, _REQUESTS.get(key), denied, "denied")
        assert encode_response(header, resp)
        if key == 35 and version < 3:
            assert resp.results == ()  # Kafka's answer before DescribeLogDirs had an error
        elif key == 43 and version == 0:
            [r] = resp.replica_election_results
            assert r.partition_result[0].error_code == denied
        else:
            assert resp.error_code == denied


def test_share_state_refusals_name_each_share_partition() -> None:
    """A broker without CLUSTER_ACTION asking the share coordinator: every share-partition
    of the request answered CLUSTER_AUTHORIZATION_FAILED, in each API's shape."""
    import uuid

    tid = uuid.uuid4()
    req = SimpleNamespace(topics=[SimpleNamespace(topic_id=tid, partitions=[
        SimpleNamespace(partition=0), SimpleNamespace(partition=2)])])  # fmt: skip
    denied = ErrorCode.cluster_authorization_failed
    for key in (83, 84, 85, 86, 87):
        header = RequestHeader(key, 0, 1, "t")
        resp = _per_item_refusal(header, req, denied, "no")
        assert encode_response(header, resp)
        [r] = resp.results
        assert r.topic_id == tid
        assert [(p.partition, p.error_code) for p in r.partitions] == [(0, denied), (2, denied)]


def test_per_item_refusals() -> None:
    denied = ErrorCode.topic_authorization_failed
    req = SimpleNamespace(
        dirs=[SimpleNamespace(topics=[SimpleNamespace(name="t", partitions=[0, 1])])]
    )
    resp = _per_item_refusal(RequestHeader(34, 2, 1, "t"), req, denied, "no")
    assert [p.error_code for p in resp.results[0].partitions] == [denied, denied]
    req = SimpleNamespace(topics=[SimpleNamespace(name="t", partitions=[
        SimpleNamespace(partition_index=3)])])  # fmt: skip
    for key in (8, 28):
        resp = _per_item_refusal(RequestHeader(key, 3, 1, "t"), req, denied, "no")
        assert resp.topics[0].partitions[0].error_code == denied


@pytest.mark.parametrize("key", sorted(_CONTROLLER_RPC))
def test_every_controller_refusal_encodes(key: int) -> None:
    lo, hi = CONTROLLER_APIS[key]
    denied = ErrorCode.cluster_authorization_failed
    for version in range(lo, hi + 1):
        header = RequestHeader(key, version, 7, "t")
        resp = _per_item_refusal(header, None, denied, "denied")
        assert encode_response(header, resp)
        assert resp.error_code == denied


def _rules(controller: bool) -> dict[str, set[int]]:
    from keeperless.security import api_rules as a

    out = {"cluster": set(a._CLUSTER), "one resource": set(a._ONE),
           "per item": set(a._TOPIC_ADMIN), "in the handler": set(a.IN_HANDLER),
           "none (as Kafka)": set(a.UNCHECKED)}  # fmt: skip
    if controller:
        out["controller RPC"] = set(a._CONTROLLER_RPC)
    return out


@pytest.mark.parametrize("listener", ["broker", "controller"])
def test_every_served_api_has_an_authorization_rule(listener: str) -> None:
    """Generated from the API table: an API served on a listener with no rule declared
    (or declared both as checked and as unchecked) fails the build."""
    from keeperless.protocol.apis import APIS, Listener

    rules = _rules(listener == "controller")
    served = [k for k, s in APIS.items() if s.versions(Listener(listener)) is not None]
    checked = set().union(*(v for n, v in rules.items() if n not in ("none (as Kafka)",
                                                                    "in the handler")))  # fmt: skip
    missing = [k.title for k in served if not any(k in v for v in rules.values())]
    assert not missing, f"no authorization rule for {missing} (security/api_rules.py)"
    unchecked = rules["none (as Kafka)"]
    both = [k.title for k in served
            if k in unchecked and (k in checked or k in rules["in the handler"])]  # fmt: skip
    assert not both


def test_the_rule_table_check_can_fail() -> None:
    from keeperless.security import api_rules as a

    a.IN_HANDLER = a.IN_HANDLER - {75}  # type: ignore[misc]
    try:
        with pytest.raises(AssertionError, match="DescribeTopicPartitions"):
            test_every_served_api_has_an_authorization_rule("broker")
    finally:
        a.IN_HANDLER = a.IN_HANDLER | {75}  # type: ignore[misc]


@pytest.mark.parametrize("key", [69, 77])  # ConsumerGroupDescribe, ShareGroupDescribe
def test_a_refused_consumer_group_describe_encodes_in_every_version(key: int) -> None:
    from keeperless.security.api_rules import _consumer_group_describe
    from keeperless.security.authz import Authz

    class Deny(Authz):
        def allowed(self, who: Any, op: Any, resource: Any, name: str = "") -> bool:
            return False

    async def handler(header: Any, req: Any) -> Any:
        raise AssertionError("not reached")

    import asyncio

    wrapped = _consumer_group_describe(handler, Deny(lambda: None, None))  # type: ignore[arg-type]
    lo, hi = BROKER_APIS[key]
    for version in range(lo, hi + 1):
        header = RequestHeader(key, version, 7, "t")
        resp = asyncio.run(wrapped(header, SimpleNamespace(group_ids=["g"])))
        assert encode_response(header, resp)
        assert resp.groups[0].error_code == ErrorCode.group_authorization_failed
