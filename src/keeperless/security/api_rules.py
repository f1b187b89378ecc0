"""Which ACL each broker API needs, checked before its handler runs (Kafka's KafkaApis
rules): the cluster-wide APIs need an operation on CLUSTER; group APIs READ (or
DESCRIBE, DELETE) on the group; transactional APIs WRITE on the transactional id; the
topic admin APIs an operation per topic — the refused topics are answered with
TOPIC_AUTHORIZATION_FAILED and the handler gets the rest. Produce, Fetch, ListOffsets,
DeleteRecords and Metadata check per topic inside their handlers."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build, build_filled
from keeperless.protocol.framing import RequestHeader, response_class
from keeperless.security.authz import DENIED, AclOp, Authz, Resource

__all__ = ["authorized_handlers"]

Handler = Callable[[RequestHeader, Any], Awaitable[Any]]
_NO_TIME = datetime.datetime.fromtimestamp(0, datetime.UTC)
C, G, X, T = Resource.CLUSTER, Resource.GROUP, Resource.TRANSACTIONAL_ID, Resource.TOPIC

# api key -> operation on the cluster the whole request needs
_CLUSTER = {
    ApiKey.WRITE_TXN_MARKERS: AclOp.CLUSTER_ACTION,
    # the share coordinator's APIs, broker to broker (KIP-932)
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: AclOp.CLUSTER_ACTION,
    ApiKey.READ_SHARE_GROUP_STATE: AclOp.CLUSTER_ACTION,
    ApiKey.WRITE_SHARE_GROUP_STATE: AclOp.CLUSTER_ACTION,
    ApiKey.DELETE_SHARE_GROUP_STATE: AclOp.CLUSTER_ACTION,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: AclOp.CLUSTER_ACTION,
    ApiKey.DESCRIBE_ACLS: AclOp.DESCRIBE,
    ApiKey.CREATE_ACLS: AclOp.ALTER,
    ApiKey.DELETE_ACLS: AclOp.ALTER,
    ApiKey.ALTER_REPLICA_LOG_DIRS: AclOp.ALTER,
    ApiKey.DESCRIBE_LOG_DIRS: AclOp.DESCRIBE,
    ApiKey.ELECT_LEADERS: AclOp.ALTER,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: AclOp.ALTER,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: AclOp.DESCRIBE,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: AclOp.DESCRIBE_CONFIGS,
    ApiKey.ALTER_CLIENT_QUOTAS: AclOp.ALTER_CONFIGS,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: AclOp.DESCRIBE,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: AclOp.ALTER,
    ApiKey.DESCRIBE_QUORUM: AclOp.DESCRIBE,
    ApiKey.UPDATE_FEATURES: AclOp.ALTER,
    ApiKey.UNREGISTER_BROKER: AclOp.ALTER,
    ApiKey.LIST_CONFIG_RESOURCES: AclOp.DESCRIBE_CONFIGS,
    # adding or removing a controller (KIP-853), on a controller or forwarded by a broker
    ApiKey.ADD_RAFT_VOTER: AclOp.ALTER,
    ApiKey.REMOVE_RAFT_VOTER: AclOp.ALTER,
}
# api key -> (operation, resource, the request field naming it)
_ONE = {
    ApiKey.JOIN_GROUP: (AclOp.READ, G, "group_id"),
    ApiKey.HEARTBEAT: (AclOp.READ, G, "group_id"),
    ApiKey.LEAVE_GROUP: (AclOp.READ, G, "group_id"),
    ApiKey.SYNC_GROUP: (AclOp.READ, G, "group_id"),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (AclOp.READ, G, "group_id"),
    # share groups (KIP-932); READ on each topic is checked in their handlers
    ApiKey.SHARE_GROUP_HEARTBEAT: (AclOp.READ, G, "group_id"),
    ApiKey.SHARE_FETCH: (AclOp.READ, G, "group_id"),
    ApiKey.SHARE_ACKNOWLEDGE: (AclOp.READ, G, "group_id"),
    # InitProducerId without a transactional id (idempotent only) needs no ACL here
    ApiKey.INIT_PRODUCER_ID: (AclOp.WRITE, X, "transactional_id"),
    ApiKey.ADD_OFFSETS_TO_TXN: (AclOp.WRITE, X, "transactional_id"),
    ApiKey.END_TXN: (AclOp.WRITE, X, "transactional_id"),
    ApiKey.TXN_OFFSET_COMMIT: (AclOp.WRITE, X, "transactional_id"),
    ApiKey.OFFSET_COMMIT: (AclOp.READ, G, "group_id"),
    ApiKey.OFFSET_DELETE: (AclOp.DELETE, G, "group_id"),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (AclOp.READ, G, "group_id"),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (AclOp.DELETE, G, "group_id"),
}


# checked inside their handlers, per topic or partition (Kafka's KafkaApis does the same):
# the refused parts answered TOPIC_AUTHORIZATION_FAILED (or left out of a listing)
IN_HANDLER = frozenset({
    ApiKey.PRODUCE,  # WRITE per topic; a transactional id WRITE; IDEMPOTENT_WRITE
    ApiKey.FETCH,  # READ per topic; CLUSTER_ACTION for a follower
    ApiKey.LIST_OFFSETS,  # DESCRIBE per topic
    ApiKey.METADATA,  # DESCRIBE per topic (unlisted when all asked); CREATE to auto-create
    ApiKey.DELETE_RECORDS,  # DELETE per topic
    ApiKey.OFFSET_FOR_LEADER_EPOCH,  # CLUSTER_ACTION, else DESCRIBE per topic
    ApiKey.DESCRIBE_TOPIC_PARTITIONS,  # DESCRIBE per topic (unlisted when all asked)
    ApiKey.CREATE_DELEGATION_TOKEN,  # CREATE_TOKENS on the owner (a user) when not the sender
    ApiKey.DESCRIBE_DELEGATION_TOKEN,  # DESCRIBE per token or DESCRIBE_TOKENS on its owner
})  # fmt: skip
# checked by nobody, as in Kafka: the handshake before a principal exists, DescribeCluster
# (which only withholds the cluster's authorized operations), and renewing or expiring a
# token (its owner and renewers only: the controller's check, not an ACL)
UNCHECKED = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE,
                       ApiKey.DESCRIBE_CLUSTER, ApiKey.RENEW_DELEGATION_TOKEN,
                       ApiKey.EXPIRE_DELEGATION_TOKEN})  # fmt: skip


def refusal(header: RequestHeader, error: ErrorCode, message: str) -> Any:
    """A response to the whole request: its error_code (and error_message) set, every
    other required field zero."""
    cls = response_class(header.api_key, header.api_version)
    return build_filled(cls, {"error_code": error, "error_message": message})


# a controller's own RPCs (Raft between controllers, brokers' registration, heartbeats,
# ISR changes, producer id blocks): CLUSTER_ACTION, as Kafka's controllers check
_RPCS = (
    ApiKey.FETCH,
    ApiKey.VOTE,
    ApiKey.BEGIN_QUORUM_EPOCH,
    ApiKey.END_QUORUM_EPOCH,
    ApiKey.ALTER_PARTITION,
    ApiKey.ENVELOPE,
    ApiKey.FETCH_SNAPSHOT,
    ApiKey.BROKER_REGISTRATION,
    ApiKey.BROKER_HEARTBEAT,
    ApiKey.ALLOCATE_PRODUCER_IDS,
    ApiKey.ASSIGN_REPLICAS_TO_DIRS,
)
_CONTROLLER_RPC = {k: AclOp.CLUSTER_ACTION for k in _RPCS}
# a voter updating its own endpoints (KIP-853), served by controllers only
_CONTROLLER_RPC[ApiKey.UPDATE_RAFT_VOTER] = AclOp.CLUSTER_ACTION


def authorized_handlers(
    handlers: dict[int, Handler], authz: Authz, controller: bool = False
) -> dict[int, Handler]:
    """The handlers of a broker's (or, ``controller``, a controller's) listener with the
    checks Kafka makes before each."""
    if not authz.enabled:
        return handlers
    out = dict(handlers)
    # innermost first: the per-topic checks run after the checks of the whole request
    for key, wrap in _TOPIC_ADMIN.items():
        if key in out:
            out[key] = wrap(out[key], authz)
    for key, (op, res, field) in _ONE.items():
        if key in out:
            out[key] = _one_check(out[key], authz, op, res, field)
    for key, op in _CLUSTER.items():
        if key in out:
            out[key] = _cluster_check(out[key], authz, op)
    for key, op in (_CONTROLLER_RPC if controller else {}).items():
        if key in out:
            out[key] = _cluster_check(out[key], authz, op)
    return out


def _cluster_check(h: Handler, authz: Authz, op: AclOp) -> Handler:
    async def checked(header: RequestHeader, req: Any) -> Any:
        if authz.allowed(header, op, C):
            return await h(header, req)
        return _per_item_refusal(header, req, DENIED[C], f"{op.name} on the cluster is denied")

    return checked


def _one_check(h: Handler, authz: Authz, op: AclOp, res: Resource, field: str) -> Handler:
    async def checked(header: RequestHeader, req: Any) -> Any:
        name = getattr(req, field, None)
        if name is None or authz.allowed(header, op, res, name):
            if header.api_key == ApiKey.ADD_OFFSETS_TO_TXN and not authz.allowed(
                header, AclOp.READ, G, req.group_id
            ):
                return refusal(header, DENIED[G], "READ on the group is denied")
            if header.api_key == ApiKey.TXN_OFFSET_COMMIT and not authz.allowed(
                header, AclOp.READ, G, req.group_id
            ):
                return _per_item_refusal(header, req, DENIED[G], "READ on the group is denied")
            return await h(header, req)
        return _per_item_refusal(header, req, DENIED[res], f"{op.name} on {name!r} is denied")

    return checked


# the share coordinator's APIs: the fields of a refused share-partition besides its error
_SHARE_STATE: dict[ApiKey, dict[str, Any]] = {
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: {},
    ApiKey.READ_SHARE_GROUP_STATE: {"state_epoch": 0, "start_offset": -1, "state_batches": []},
    ApiKey.WRITE_SHARE_GROUP_STATE: {},
    ApiKey.DELETE_SHARE_GROUP_STATE: {},
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: {"state_epoch": 0, "leader_epoch": -1,
                                            "start_offset": -1},
}  # fmt: skip


def _per_item_refusal(header: RequestHeader, req: Any, err: ErrorCode, msg: str) -> Any:
    """The refusal in the shape each API answers with."""
    k = header.api_key
    cls = response_class(k, header.api_version)
    if k in (ApiKey.OFFSET_COMMIT, ApiKey.TXN_OFFSET_COMMIT):  # per partition
        topics = [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": err} for p in t.partitions]}
            for t in req.topics]  # fmt: skip
        return build(cls, {"throttle_time": 0, "topics": topics})
    if k == ApiKey.CREATE_ACLS:
        results = [{"error_code": err, "error_message": msg} for _ in req.creations]
        return build(cls, {"throttle_time": 0, "results": results})
    if k == ApiKey.DELETE_ACLS:
        results = [{"error_code": err, "error_message": msg, "matching_acls": []}
                   for _ in req.filters]  # fmt: skip
        return build(cls, {"throttle_time": 0, "filter_results": results})
    if k == ApiKey.ALTER_CLIENT_QUOTAS:
        entries = [{"error_code": err, "error_message": msg, "entity": [
            {"entity_type": e.entity_type, "entity_name": e.entity_name} for e in x.entity]}
            for x in req.entries]  # fmt: skip
        return build(cls, {"throttle_time": 0, "entries": entries})
    if k == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        users = {u.name for u in (*req.deletions, *req.upsertions)}
        results = [{"user": u, "error_code": err, "error_message": msg} for u in sorted(users)]
        return build(cls, {"throttle_time": 0, "results": results})
    if k == ApiKey.WRITE_TXN_MARKERS:
        markers = [{"producer_id": m.producer_id, "topics": [
            {"name": t.name, "partitions": [{"partition_index": i, "error_code": err}
                                           for i in t.partition_indexes]} for t in m.topics]}
            for m in req.markers]  # fmt: skip
        return build(cls, {"markers": markers})
    if k in _SHARE_STATE:  # per share-partition
        extra = _SHARE_STATE[ApiKey(k)]
        results = [{"topic_id": t.topic_id, "partitions": [
            {"partition": p.partition, "error_code": err, "error_message": msg, **extra}
            for p in t.partitions]} for t in req.topics]  # fmt: skip
        return build(cls, {"results": results})
    if k == ApiKey.ELECT_LEADERS and header.api_version == 0:  # v0: per partition
        results = [{"topic": t.topic, "partition_result": [
            {"partition_id": i, "error_code": err, "error_message": msg} for i in t.partitions]}
            for t in req.topic_partitions or ()]  # fmt: skip
        return build(cls, {"throttle_time": 0, "replica_election_results": results})
    if k == ApiKey.ALTER_REPLICA_LOG_DIRS:  # per partition
        results = [{"topic_name": t.name, "partitions": [
            {"partition_index": i, "error_code": err} for i in t.partitions]}
            for d in req.dirs for t in d.topics]  # fmt: skip
        return build(cls, {"throttle_time": 0, "results": results})
    return refusal(header, err, msg)


# -- topic admin APIs: the refused topics answered, the rest handled -------------------


def _split(
    h: Handler,
    items_field: str,
    allowed: Callable[[RequestHeader, Any], bool],
    refused_entry: Callable[[Any], dict[str, Any]],
    response_field: str,
) -> Handler:
    async def checked(header: RequestHeader, req: Any) -> Any:
        verdicts = [(i, allowed(header, i)) for i in getattr(req, items_field)]
        ok = tuple(i for i, yes in verdicts if yes)
        denied = [i for i, yes in verdicts if not yes]
        if not denied:
            return await h(header, req)
        cls = response_class(header.api_key, header.api_version)
        extra = build(cls, {"throttle_time": 0, response_field: [refused_entry(i) for i in denied]})
        if not ok:
            return extra
        resp = await h(header, dataclasses.replace(req, **{items_field: ok}))
        merged = tuple(getattr(resp, response_field)) + tuple(getattr(extra, response_field))
        return dataclasses.replace(resp, **{response_field: merged})

    return checked


def _create_topics(h: Handler, authz: Authz) -> Handler:
    def ok(header: RequestHeader, t: Any) -> bool:
        return authz.allowed(header, AclOp.CREATE, C) or authz.allowed(
            header, AclOp.CREATE, T, t.name
        )

    def refused(t: Any) -> dict[str, Any]:
        return {"name": t.name, "topic_id": UUID(int=0),
                "error_code": ErrorCode.topic_authorization_failed,
                "error_message": "Authorization failed.", "num_partitions": -1,
                "replication_factor": -1, "configs": None}  # fmt: skip

    return _split(h, "topics", ok, refused, "topics")


def _delete_topics(h: Handler, authz: Authz) -> Handler:
    async def checked(header: RequestHeader, req: Any) -> Any:
        field = "topics" if header.api_version >= 6 else "topic_names"

        def name_of(t: Any) -> str | None:
            if isinstance(t, str):
                return t
            if t.name is not None:
                return str(t.name)
            topic = authz.image().topics.get(t.topic_id)
            return topic.name if topic is not None else None

        def ok(header: RequestHeader, t: Any) -> bool:
            n = name_of(t)
            return n is None or authz.allowed(header, AclOp.DELETE, T, n)

        def refused(t: Any) -> dict[str, Any]:
            return {"name": name_of(t), "topic_id": getattr(t, "topic_id", UUID(int=0)),
                    "error_code": ErrorCode.topic_authorization_failed,
                    "error_message": "Authorization failed."}  # fmt: skip

        return await _split(h, field, ok, refused, "responses")(header, req)

    return checked


def _create_partitions(h: Handler, authz: Authz) -> Handler:
    return _split(
        h, "topics", lambda hd, t: authz.allowed(hd, AclOp.ALTER, T, t.name),
        lambda t: {"name": t.name, "error_code": ErrorCode.topic_authorization_failed,
                   "error_message": "Authorization failed."}, "results",
    )  # fmt: skip


def _configs(op: AclOp, response_field: str) -> Callable[[Handler, Authz], Handler]:
    def wrap(h: Handler, authz: Authz) -> Handler:
        # topics and groups on themselves, brokers and their loggers on the cluster
        on = {2: T, 32: G}

        def ok(header: RequestHeader, r: Any) -> bool:
            res = on.get(r.resource_type)
            if res is not None:
                return authz.allowed(header, op, res, r.resource_name)
            return authz.allowed(header, op, C)

        def refused(r: Any) -> dict[str, Any]:
            err = DENIED[on.get(r.resource_type, C)]
            return {"error_code": err, "error_message": "Authorization failed.",
                    "resource_type": r.resource_type, "resource_name": r.resource_name,
                    "configs": []}  # fmt: skip

        return _split(h, "resources", ok, refused, response_field)

    return wrap


def _find_coordinator(h: Handler, authz: Authz) -> Handler:
    """DESCRIBE on the group (key type 0) or the transactional id (1)."""

    async def checked(header: RequestHeader, req: Any) -> Any:
        res = X if getattr(req, "key_type", 0) == 1 else G

        def ok(header: RequestHeader, key: str) -> bool:
            return authz.allowed(header, AclOp.DESCRIBE, res, key)

        if header.api_version < 4:
            if ok(header, req.key):
                return await h(header, req)
            return refusal(header, DENIED[res], "DESCRIBE on the key is denied")

        def refused(key: str) -> dict[str, Any]:
            return {"key": key, "node_id": -1, "host": "", "port": -1,
                    "error_code": DENIED[res],
                    "error_message": "Authorization failed."}  # fmt: skip

        return await _split(h, "coordinator_keys", ok, refused, "coordinators")(header, req)

    return checked


def _describe_groups(h: Handler, authz: Authz) -> Handler:
    def refused(g: str) -> dict[str, Any]:
        return {"error_code": ErrorCode.group_authorization_failed, "group_id": g,
                "group_state": "", "protocol_type": "", "protocol_data": "", "members": [],
                "authorized_operations": -2147483648}  # fmt: skip

    return _split(h, "groups", lambda hd, g: authz.allowed(hd, AclOp.DESCRIBE, G, g),
                  refused, "groups")  # fmt: skip


def _consumer_group_describe(h: Handler, authz: Authz) -> Handler:
    def refused(g: str) -> dict[str, Any]:
        return {"error_code": ErrorCode.group_authorization_failed,
                "error_message": "Authorization failed.", "group_id": g, "group_state": "",
                "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
                "authorized_operations": -2147483648}  # fmt: skip

    return _split(h, "group_ids", lambda hd, g: authz.allowed(hd, AclOp.DESCRIBE, G, g),
                  refused, "groups")  # fmt: skip


def _describe_share_group_offsets(h: Handler, authz: Authz) -> Handler:
    """DESCRIBE on each group (Kafka's; its topics are not checked here yet)."""

    def refused(g: Any) -> dict[str, Any]:
        return {"group_id": g.group_id, "topics": [], "error_code": DENIED[G],
                "error_message": "Authorization failed."}  # fmt: skip

    ok = lambda hd, g: authz.allowed(hd, AclOp.DESCRIBE, G, g.group_id)  # noqa: E731
    return _split(h, "groups", ok, refused, "groups")


def _delete_groups(h: Handler, authz: Authz) -> Handler:
    def refused(g: str) -> dict[str, Any]:
        return {"group_id": g, "error_code": ErrorCode.group_authorization_failed}

    return _split(h, "groups_names", lambda hd, g: authz.allowed(hd, AclOp.DELETE, G, g),
                  refused, "results")  # fmt: skip


def _listed(
    field: str, key: str, res: Resource, cluster_sees_all: bool
) -> Callable[[Handler, Authz], Handler]:
    """A listing (ListGroups, ListTransactions) with only the entries the principal may
    describe (ListGroups: all of them with DESCRIBE on the cluster), as Kafka."""

    def wrap(h: Handler, authz: Authz) -> Handler:
        async def checked(header: RequestHeader, req: Any) -> Any:
            resp = await h(header, req)
            if cluster_sees_all and authz.allowed(header, AclOp.DESCRIBE, C):
                return resp
            mine = tuple(e for e in getattr(resp, field)
                         if authz.allowed(header, AclOp.DESCRIBE, res,
                                          getattr(e, key)))  # fmt: skip
            return dataclasses.replace(resp, **{field: mine})

        return checked

    return wrap


def _committed_topics(h: Handler, authz: Authz) -> Handler:
    """OffsetCommit and TxnOffsetCommit: READ on each topic; the partitions of the others
    answered TOPIC_AUTHORIZATION_FAILED, the rest committed (Kafka's rule: found by a
    helper's probe, a group's member rewrote the offsets of topics it may not read)."""

    def refused(t: Any) -> dict[str, Any]:
        return {"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": DENIED[T]}
            for p in t.partitions]}  # fmt: skip

    return _split(
        h,
        "topics",
        lambda hd, t: authz.allowed(hd, AclOp.READ, T, t.name),
        refused,
        "topics",
    )


def _described_offsets(
    header: RequestHeader, resp_topics: Any, asked: bool, authz: Authz
) -> tuple[Any, ...]:
    """OffsetFetch's topics as a principal may see them: those it may not DESCRIBE are
    left out of an all-topics answer, and refused where the request named them."""
    out = []
    for t in resp_topics:
        if authz.allowed(header, AclOp.DESCRIBE, T, t.name):
            out.append(t)
        elif asked:
            refused = {"committed_offset": -1, "metadata": "", "error_code": DENIED[T]}
            parts = tuple(dataclasses.replace(p, **refused) for p in t.partitions)
            out.append(dataclasses.replace(t, partitions=parts))
    return tuple(out)


def _offset_fetch(h: Handler, authz: Authz) -> Handler:
    """DESCRIBE on the group (each group from v8), then on each topic."""

    groups_checked = _offset_fetch_groups(h, authz)

    async def checked(header: RequestHeader, req: Any) -> Any:
        resp = await groups_checked(header, req)
        if header.api_version < 8:
            topics = _described_offsets(header, resp.topics, req.topics is not None, authz)
            return dataclasses.replace(resp, topics=topics)
        asked = {g.group_id: g.topics is not None for g in req.groups}
        groups = tuple(
            dataclasses.replace(
                g, topics=_described_offsets(header, g.topics, asked[g.group_id], authz)
            )
            if g.group_id in asked
            else g
            for g in resp.groups
        )
        return dataclasses.replace(resp, groups=groups)

    return checked


def _offset_fetch_groups(h: Handler, authz: Authz) -> Handler:
    """DESCRIBE on the group (each group from v8)."""

    async def checked(header: RequestHeader, req: Any) -> Any:
        if header.api_version < 8:
            if authz.allowed(header, AclOp.DESCRIBE, G, req.group_id):
                return await h(header, req)
            if header.api_version >= 2:
                return refusal(header, DENIED[G], "DESCRIBE on the group is denied")
            topics = [{"name": t.name, "partitions": [
                {"partition_index": i, "committed_offset": -1, "metadata": None,
                 "error_code": DENIED[G]} for i in t.partition_indexes]}
                for t in req.topics or ()]  # fmt: skip
            return build(
                response_class(ApiKey.OFFSET_FETCH, header.api_version), {"topics": topics}
            )

        def refused(g: Any) -> dict[str, Any]:
            return {"group_id": g.group_id, "topics": [], "error_code": DENIED[G]}

        ok = lambda hd, g: authz.allowed(hd, AclOp.DESCRIBE, G, g.group_id)  # noqa: E731
        return await _split(h, "groups", ok, refused, "groups")(header, req)

    return checked


def _describe_transactions(h: Handler, authz: Authz) -> Handler:
    """DESCRIBE on each transactional id; of an allowed one's partitions only the
    topics the principal may describe (Kafka's handleDescribeTransactionsRequest)."""

    def refused(tid: str) -> dict[str, Any]:
        return {"error_code": DENIED[X], "transactional_id": tid, "transaction_state": "",
                "transaction_timeout": 0, "transaction_start_time": _NO_TIME,
                "producer_id": -1, "producer_epoch": -1, "topics": ()}  # fmt: skip

    split = _split(h, "transactional_ids",
                   lambda hd, t: authz.allowed(hd, AclOp.DESCRIBE, X, t),
                   refused, "transaction_states")  # fmt: skip

    async def checked(header: RequestHeader, req: Any) -> Any:
        resp = await split(header, req)
        states = tuple(
            dataclasses.replace(s, topics=tuple(
                t for t in s.topics if authz.allowed(header, AclOp.DESCRIBE, T, t.topic)))
            for s in resp.transaction_states
        )  # fmt: skip
        return dataclasses.replace(resp, transaction_states=states)

    return checked


def _describe_producers(h: Handler, authz: Authz) -> Handler:
    """READ on each topic (Kafka's handleDescribeProducersRequest)."""

    def refused(t: Any) -> dict[str, Any]:
        return {"name": t.name, "partitions": [
            {"partition_index": i, "error_code": DENIED[T], "error_message": None,
             "active_producers": []} for i in t.partition_indexes]}  # fmt: skip

    return _split(h, "topics", lambda hd, t: authz.allowed(hd, AclOp.READ, T, t.name),
                  refused, "topics")  # fmt: skip


def _add_partitions_to_txn(h: Handler, authz: Authz) -> Handler:
    """Before v4 (producers): WRITE on the transactional id and on each topic - a
    refused topic fails with TOPIC_AUTHORIZATION_FAILED, the others are not attempted;
    from v4 (brokers verifying, KIP-890): CLUSTER_ACTION."""

    async def checked(header: RequestHeader, req: Any) -> Any:
        cls = response_class(ApiKey.ADD_PARTITIONS_TO_TXN, header.api_version)
        if header.api_version >= 4:
            if authz.allowed(header, AclOp.CLUSTER_ACTION, C):
                return await h(header, req)
            return build(cls, {"throttle_time": 0, "error_code": DENIED[C],
                               "results_by_transaction": []})  # fmt: skip
        topics = req.v3_and_below_topics
        if not authz.allowed(header, AclOp.WRITE, X, req.v3_and_below_transactional_id):
            errors = {t.name: DENIED[X] for t in topics}
        else:
            denied = {t.name for t in topics if not authz.allowed(header, AclOp.WRITE, T, t.name)}
            if not denied:
                return await h(header, req)
            errors = {t.name: DENIED[T] if t.name in denied
                      else ErrorCode.operation_not_attempted for t in topics}  # fmt: skip
        results = [{"name": t.name, "results_by_partition": [
            {"partition_index": i, "partition_error_code": errors[t.name]}
            for i in t.partitions]} for t in topics]  # fmt: skip
        return build(cls, {"throttle_time": 0, "results_by_topic_v3_and_below": results})

    return checked


_TOPIC_ADMIN: dict[ApiKey, Callable[[Handler, Authz], Handler]] = {
    ApiKey.OFFSET_COMMIT: _committed_topics,
    ApiKey.TXN_OFFSET_COMMIT: _committed_topics,
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
    ApiKey.DESCRIBE_PRODUCERS: _describe_producers,
    ApiKey.DESCRIBE_TRANSACTIONS: _describe_transactions,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.DESCRIBE_GROUPS: _describe_groups,
    ApiKey.CONSUMER_GROUP_DESCRIBE: _consumer_group_describe,
    ApiKey.SHARE_GROUP_DESCRIBE: _consumer_group_describe,  # the same fields
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: _describe_share_group_offsets,
    ApiKey.LIST_GROUPS: _listed("groups", "group_id", G, cluster_sees_all=True),
    ApiKey.DELETE_GROUPS: _delete_groups,
    ApiKey.LIST_TRANSACTIONS: _listed(
        "transaction_states", "transactional_id", X, cluster_sees_all=False
    ),
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.DESCRIBE_CONFIGS: _configs(AclOp.DESCRIBE_CONFIGS, "results"),
    ApiKey.ALTER_CONFIGS: _configs(AclOp.ALTER_CONFIGS, "responses"),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _configs(AclOp.ALTER_CONFIGS, "responses"),
}
