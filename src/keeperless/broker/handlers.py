"""Request dispatch for the broker listener, and the metadata/admin handlers.

Admin requests are forwarded to the active controller (forwarder.py) and
answered after their records commit and the broker's own image has them.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.broker.controller_channel import ControllerUnavailableError
from keeperless.broker.data_plane import DataPlane
from keeperless.broker.describe_configs import describe_configs
from keeperless.broker.log_dir_apis import LogDirApis
from keeperless.broker.own_configs import answered_here
from keeperless.metadata.admin import (
    INTERNAL_TOPICS,
    NO_AUTHORIZER,
    AclFilter,
    ApiError,
    NewTopic,
    describe_client_quotas,
    matching_acls,
    validate_topic_name,
)
from keeperless.metadata.admin_requests import (
    acl_creations,
    acl_filters,
    alter_client_quotas_response,
    alter_configs_response,
    alter_scram_response,
    config_changes,
    create_acls_response,
    create_partitions_response,
    delete_acls_response,
    delete_targets,
    delete_topics_response,
    elect_leaders_response,
    election_targets,
    feature_updates,
    legacy_config_sets,
    new_partitions,
    quota_alterations,
    scram_alterations,
    unregister_response,
    update_features_response,
)
from keeperless.metadata.features import features_body
from keeperless.metadata.image import AclEntry, MetadataImage
from keeperless.protocol.acl_operations import NOT_REQUESTED, all_operations
from keeperless.protocol.apis import ADVERTISED_MIN, BROKER_APIS, GATED, ApiKey
from keeperless.protocol.build import build, build_filled
from keeperless.protocol.context import listener_of
from keeperless.protocol.framing import ProtocolError, RequestHeader, response_class
from keeperless.security.authz import AclOp, Resource

T = Resource.TOPIC
CLUSTER_NAME = "kafka-cluster"
CLUSTER_OPS = (AclOp.CREATE, AclOp.ALTER, AclOp.DESCRIBE, AclOp.CLUSTER_ACTION,
               AclOp.DESCRIBE_CONFIGS, AclOp.ALTER_CONFIGS, AclOp.IDEMPOTENT_WRITE)  # fmt: skip
TOPIC_OPS = (AclOp.READ, AclOp.WRITE, AclOp.CREATE, AclOp.DELETE, AclOp.ALTER,
             AclOp.DESCRIBE, AclOp.DESCRIBE_CONFIGS, AclOp.ALTER_CONFIGS)  # fmt: skip

__all__ = ["BrokerHandlers"]

log = logging.getLogger(__name__)
Handler = Callable[[RequestHeader, Any], Awaitable[Any]]
SETTLE_TIMEOUT_S = 10.0
# Kafka's max.request.partition.size.limit: DescribeTopicPartitions' page size at most
MAX_PARTITIONS_PER_DESCRIBE = 2000


class BrokerHandlers(LogDirApis):
    """The broker's own APIs (the data plane, metadata and the admin APIs it answers or
    forwards); the coordinators register theirs beside these (``server/node.py``)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.data = DataPlane(broker)
        # what ApiVersions advertises: set from the registry once every part registered
        self.apis: dict[int, tuple[int, int]] = dict(BROKER_APIS)

    def handlers(self) -> dict[ApiKey, Handler]:
        return {
            ApiKey.PRODUCE: self.data.produce,
            ApiKey.FETCH: self.data.fetch,
            ApiKey.LIST_OFFSETS: self.data.list_offsets,
            ApiKey.METADATA: self.metadata,
            ApiKey.API_VERSIONS: self.api_versions,
            ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.DELETE_RECORDS: self.data.delete_records,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.data.offset_for_leader_epoch,
            ApiKey.DESCRIBE_ACLS: self.describe_acls,
            ApiKey.CREATE_ACLS: self.create_acls,
            ApiKey.DELETE_ACLS: self.delete_acls,
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
            ApiKey.ALTER_CONFIGS: self.alter_configs,
            ApiKey.ALTER_REPLICA_LOG_DIRS: self.alter_replica_log_dirs,
            ApiKey.DESCRIBE_LOG_DIRS: self.describe_log_dirs,
            ApiKey.CREATE_PARTITIONS: self.create_partitions,
            ApiKey.ELECT_LEADERS: self.elect_leaders,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
            ApiKey.DESCRIBE_CLIENT_QUOTAS: self.describe_client_quotas,
            ApiKey.ALTER_CLIENT_QUOTAS: self.alter_client_quotas,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.describe_scram_credentials,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.alter_scram_credentials,
            ApiKey.DESCRIBE_QUORUM: self.forwarded,
            ApiKey.ADD_RAFT_VOTER: self.forwarded,
            ApiKey.REMOVE_RAFT_VOTER: self.forwarded,
            ApiKey.UPDATE_FEATURES: self.update_features,
            ApiKey.DESCRIBE_CLUSTER: self.describe_cluster,
            ApiKey.UNREGISTER_BROKER: self.unregister_broker,
            ApiKey.DESCRIBE_TOPIC_PARTITIONS: self.describe_topic_partitions,
        }

    async def _settle(self, predicate: Callable[[MetadataImage], bool]) -> None:
        """Answer only once this broker's image shows what the controller committed."""
        await self.broker.wait_for(predicate, SETTLE_TIMEOUT_S)

    # -- ApiVersions ----------------------------------------------------------------------

    async def api_versions(self, header: RequestHeader, req: Any) -> Any:
        return build(
            response_class(ApiKey.API_VERSIONS, header.api_version), self.api_versions_body()
        )

    def api_versions_body(self, error: ErrorCode = ErrorCode.none) -> dict[str, Any]:
        features = self.broker.image.features
        return {
            "error_code": error,
            "api_keys": [
                {"api_key": k, "min_version": ADVERTISED_MIN.get(k, lo), "max_version": hi}
                for k, (lo, hi) in sorted(self.apis.items())
                if k not in GATED or features.get(GATED[k][0], 0) >= GATED[k][1]
            ],
            "throttle_time": 0,
            **features_body(self.broker.image, self.broker.kraft_version()),
        }

    # -- Metadata -------------------------------------------------------------------------

    def _brokers(self, header: RequestHeader, include_fenced: bool = False) -> list[dict[str, Any]]:
        out = []
        listener = listener_of(header)
        for b in sorted(self.broker.image.brokers.values(), key=lambda b: b.broker_id):
            if b.fenced and b.broker_id != self.broker.node_id and not include_fenced:
                continue
            found = b.endpoint(listener)
            if found is None:
                continue  # not on the listener this client uses (Kafka leaves it out)
            out.append(
                {
                    "node_id": b.broker_id,
                    "host": found[0],
                    "port": found[1],
                    "rack": b.rack,
                    "broker_id": b.broker_id,
                    "is_fenced": b.fenced,
                }
            )
        return out

    def _cluster_ops(self, header: RequestHeader) -> int:
        if not self.broker.authz.enabled:
            return all_operations("cluster")
        return self.broker.authz.ops(header, Resource.CLUSTER, CLUSTER_NAME, CLUSTER_OPS)

    def _topic_ops(self, header: RequestHeader, name: str) -> int:
        if not self.broker.authz.enabled:
            return all_operations("topic")
        return self.broker.authz.topic_ops(header, name, TOPIC_OPS)

    async def metadata(self, header: RequestHeader, req: Any) -> Any:
        image = self.broker.image
        authz = self.broker.authz
        by_id: list[Any] = []  # v10+: topics asked for by id (a KIP-848 assignment's)
        if req.topics is None or (header.api_version == 0 and not req.topics):
            # all topics: those this principal may not describe are left out
            names = [
                n for n in sorted(image.topic_ids) if authz.allowed(header, AclOp.DESCRIBE, T, n)
            ]
        else:
            names = [t.name for t in req.topics if t.name is not None]
            by_id = [
                t.topic_id
                for t in req.topics
                if t.name is None and getattr(t, "topic_id", None) is not None
            ]
        auto = (
            getattr(req, "allow_auto_topic_creation", True)
            and self.broker.settings.auto_create_topics
        )
        # Kafka's answers for missing topics, at once: an illegal name is
        # INVALID_TOPIC_EXCEPTION; one being auto-created (in the background) is
        # LEADER_NOT_AVAILABLE until it exists; any other is UNKNOWN_TOPIC_OR_PARTITION
        missing: dict[str, ErrorCode] = {}
        for n in names:
            if n in image.topic_ids:
                continue
            if validate_topic_name(n) is not None:
                missing[n] = ErrorCode.invalid_topic_exception
            elif not authz.allowed(header, AclOp.DESCRIBE, T, n):
                missing[n] = ErrorCode.topic_authorization_failed
            elif auto and req.topics is not None and n not in INTERNAL_TOPICS:
                # auto-creation needs CREATE on the cluster or the topic
                creatable_here = authz.allowed(header, AclOp.CREATE, Resource.CLUSTER) or (
                    authz.allowed(header, AclOp.CREATE, T, n)
                )
                missing[n] = (
                    ErrorCode.leader_not_available
                    if creatable_here
                    else ErrorCode.topic_authorization_failed
                )
            else:
                missing[n] = ErrorCode.unknown_topic_or_partition
        creatable = [n for n, e in missing.items() if e == ErrorCode.leader_not_available]
        if creatable:
            partitions, rf = self.broker.new_topic_defaults()
            self.broker.auto_create.create([NewTopic(n, partitions, rf) for n in creatable])
        topics = []
        for tid in by_id:
            found = image.topics.get(tid)
            if found is None:
                topics.append(
                    {
                        "error_code": ErrorCode.unknown_topic_id,
                        "name": None,
                        "topic_id": tid,
                        "partitions": (),
                    }
                )
            else:
                names.append(found.name)
        for name in names:
            t = image.topic(name)
            if t is not None and not authz.allowed(header, AclOp.DESCRIBE, T, name):
                t = None
                missing[name] = ErrorCode.topic_authorization_failed
            if t is None:
                topics.append(
                    {
                        "error_code": missing[name],
                        "name": name,
                        "topic_id": None,
                        "partitions": (),
                    }
                )
                continue
            parts = [self._partition_entry(image, t.partitions[i], i) for i in sorted(t.partitions)]
            topics.append(
                {
                    "error_code": ErrorCode.none,
                    "name": name,
                    "topic_id": t.topic_id,
                    "is_internal": name in INTERNAL_TOPICS,
                    "partitions": parts,
                    "topic_authorized_operations": self._topic_ops(header, name)
                    if getattr(req, "include_topic_authorized_operations", False)
                    else NOT_REQUESTED,
                }
            )
        return build(
            response_class(ApiKey.METADATA, header.api_version),
            {
                "throttle_time": 0,
                "brokers": self._brokers(header),
                "cluster_id": self.broker.settings.cluster_id,
                "controller_id": self.broker.node_id,
                "topics": topics,
                "error_code": ErrorCode.none,
                "cluster_authorized_operations": self._cluster_ops(header)
                if getattr(req, "include_cluster_authorized_operations", False)
                else NOT_REQUESTED,
            },
        )

    async def describe_topic_partitions(self, header: RequestHeader, req: Any) -> Any:
        """DescribeTopicPartitions (KIP-966): topics in name order, at most
        response_partition_limit partitions an answer (and never more than Kafka's
        max.request.partition.size.limit, 2000), resumed from a cursor."""
        image = self.broker.image
        limit = max(min(req.response_partition_limit, MAX_PARTITIONS_PER_DESCRIBE), 1)
        cursor = req.cursor
        authz = self.broker.authz
        if req.topics:
            wanted = sorted({t.name for t in req.topics})
        else:  # every topic this principal may describe, as Kafka's
            wanted = [
                n for n in sorted(image.topic_ids) if authz.allowed(header, AclOp.DESCRIBE, T, n)
            ]
        if cursor is not None and req.topics and cursor.topic_name not in wanted:
            raise ProtocolError(
                f"DescribeTopicPartitions: the cursor's topic {cursor.topic_name!r} is not "
                "one of the requested topics"
            )
        if cursor is not None:
            wanted = [n for n in wanted if n >= cursor.topic_name]
        topics: list[dict[str, Any]] = []
        next_cursor = None
        for i, name in enumerate(wanted):
            t = image.topic(name)
            if t is None or not authz.allowed(header, AclOp.DESCRIBE, T, name):
                code = (
                    ErrorCode.invalid_topic_exception
                    if validate_topic_name(name)
                    else ErrorCode.unknown_topic_or_partition
                    if authz.allowed(header, AclOp.DESCRIBE, T, name)
                    else ErrorCode.topic_authorization_failed
                )
                topics.append(
                    {"error_code": code, "name": name, "topic_id": None, "partitions": []}
                )
                continue
            if limit == 0:
                next_cursor = {"topic_name": name, "partition_index": 0}
                break
            start = cursor.partition_index if cursor and name == cursor.topic_name else 0
            indexes = [p for p in sorted(t.partitions) if p >= start]
            taken, rest = indexes[:limit], indexes[limit:]
            limit -= len(taken)
            topics.append(
                {
                    "error_code": ErrorCode.none,
                    "name": name,
                    "topic_id": t.topic_id,
                    "is_internal": name in INTERNAL_TOPICS,
                    "partitions": [self._partition_entry(image, t.partitions[p], p) for p in taken],
                    "topic_authorized_operations": self._topic_ops(header, name),
                }
            )
            if rest:
                next_cursor = {"topic_name": name, "partition_index": rest[0]}
                break
            if limit == 0 and i + 1 < len(wanted):
                nxt = wanted[i + 1]
                next_cursor = {"topic_name": nxt, "partition_index": 0}
                break
        return build(
            response_class(ApiKey.DESCRIBE_TOPIC_PARTITIONS, header.api_version),
            {"throttle_time": 0, "topics": topics, "next_cursor": next_cursor},
        )

    @staticmethod
    def _partition_entry(image: MetadataImage, info: Any, idx: int) -> dict[str, Any]:
        return {
            "error_code": ErrorCode.none
            if info.leader in image.brokers
            else ErrorCode.leader_not_available,
            "partition_index": idx,
            "leader_id": info.leader,
            "leader_epoch": info.leader_epoch,
            "replica_nodes": info.replicas,
            "isr_nodes": info.isr,
            "eligible_leader_replicas": info.elr,
            "last_known_elr": info.last_known_elr,
            "offline_replicas": (),
        }

    async def describe_cluster(self, header: RequestHeader, req: Any) -> Any:
        err, msg = ErrorCode.none, None
        if getattr(req, "endpoint_type", 1) != 1:  # KIP-919: controllers are asked directly
            err = ErrorCode.unsupported_endpoint_type
            msg = "The broker listener only describes brokers (endpoint type 1)"
        return build(
            response_class(ApiKey.DESCRIBE_CLUSTER, header.api_version),
            {
                "throttle_time": 0,
                "error_code": err,
                "error_message": msg,
                "endpoint_type": 1,
                "cluster_id": self.broker.settings.cluster_id,
                "controller_id": self.broker.node_id,
                "brokers": self._brokers(header, getattr(req, "include_fenced_brokers", False))
                if err == ErrorCode.none
                else [],
                "cluster_authorized_operations": self._cluster_ops(header)
                if getattr(req, "include_cluster_authorized_operations", False)
                else NOT_REQUESTED,
            },
        )

    # -- Admin, forwarded to the controller -----------------------------------------------

    async def create_topics(self, header: RequestHeader, req: Any) -> Any:
        try:
            resp = await self.broker.forwarder.forward(header, req)
        except ControllerUnavailableError as e:
            timed_out = {"error_code": ErrorCode.request_timed_out, "error_message": str(e),
                         "num_partitions": -1, "replication_factor": -1,
                         "configs": None}  # fmt: skip
            topics_out = [{"name": t.name, **timed_out} for t in req.topics]
            return build(
                response_class(ApiKey.CREATE_TOPICS, header.api_version),
                {"throttle_time": 0, "topics": topics_out},
            )
        made = [r.name for r in resp.topics if r.error_code == ErrorCode.none]
        if made and not req.validate_only:
            await self._settle(lambda img: all(n in img.topic_ids for n in made))
        topics = []
        for res in resp.topics:
            ok = res.error_code == ErrorCode.none
            # every config of the new topic: the broker's defaults and what was set
            cfgs = self.broker.topic_config(res.name) if ok else {}
            cfgs.update({c.name: c.value for c in getattr(res, "configs", None) or ()
                         if c.value is not None and c.config_source == 1})  # fmt: skip
            topics.append(
                {
                    "name": res.name,
                    "topic_id": getattr(res, "topic_id", None),
                    "error_code": res.error_code,
                    "error_message": res.error_message,
                    "num_partitions": getattr(res, "num_partitions", -1),
                    "replication_factor": getattr(res, "replication_factor", -1),
                    "configs": [
                        {
                            "name": k,
                            "value": v,
                            "read_only": False,
                            "config_source": 5,
                            "is_sensitive": False,
                        }
                        for k, v in sorted(cfgs.items())
                    ]
                    if ok
                    else None,
                }
            )
        return build(
            response_class(ApiKey.CREATE_TOPICS, header.api_version),
            {"throttle_time": 0, "topics": topics},
        )

    async def delete_topics(self, header: RequestHeader, req: Any) -> Any:
        names, ids = delete_targets(req, header.api_version)
        try:
            resp = await self.broker.forwarder.forward(header, req)
        except ControllerUnavailableError as e:
            err = ApiError(ErrorCode.request_timed_out, str(e))
            results = [(n, None, err) for n in names] + [(None, i, err) for i in ids]
            return delete_topics_response(header.api_version, results)
        done = [r for r in resp.responses if r.error_code == ErrorCode.none]
        gone_ids = [getattr(r, "topic_id", None) for r in done]
        gone_names = [r.name for r in done if r.name]
        await self._settle(
            lambda img: (
                not any(t in img.topics for t in gone_ids if t is not None)
                and not any(n in img.topic_ids for n in gone_names)
            )
        )
        return resp

    async def create_partitions(self, header: RequestHeader, req: Any) -> Any:
        reqs = new_partitions(req)
        try:
            resp = await self.broker.forwarder.forward(header, req)
        except ControllerUnavailableError as e:
            results = [(r.name, ApiError(ErrorCode.request_timed_out, str(e))) for r in reqs]
            return create_partitions_response(header.api_version, results)
        ok = {r.name for r in resp.results if r.error_code == ErrorCode.none}
        grown = {r.name: r.count for r in reqs if r.name in ok}
        if grown and not req.validate_only:
            await self._settle(
                lambda img: all(
                    (t := img.topic(n)) is not None and len(t.partitions) >= c
                    for n, c in grown.items()
                )
            )
        return resp

    async def forwarded(self, header: RequestHeader, req: Any) -> Any:
        """Forwarded to the active controller as it is, as Kafka's brokers do: DescribeQuorum
        (kafka-metadata-quorum --bootstrap-server) and adding or removing a controller
        (KIP-853; authorized by the controller, as the client the envelope names)."""
        try:
            return await self.broker.forwarder.forward(header, req)
        except ControllerUnavailableError as e:
            cls = response_class(header.api_key, header.api_version)
            return build_filled(
                cls, {"error_code": ErrorCode.request_timed_out, "error_message": str(e)}
            )

    async def alter_configs(self, header: RequestHeader, req: Any) -> Any:
        """Legacy AlterConfigs, forwarded as it is (but for a refused change of this
        broker's key stores); answered once this broker's image holds the new set of
        every resource that was altered."""
        b = self.broker
        mine = answered_here(b.node_id, b.image, b.check_own_configs, req, legacy=True)
        if mine:
            here = {(t, n) for t, n, _ in mine}
            rest = tuple(r for r in req.resources if (r.resource_type, r.resource_name) not in here)
            if not rest:
                return alter_configs_response(header.api_version, mine, 33)
            resp = await self.alter_configs(header, dataclasses.replace(req, resources=rest))
            theirs = [(r.resource_type, r.resource_name, ApiError(r.error_code, r.error_message))
                      for r in resp.responses]  # fmt: skip
            return alter_configs_response(header.api_version, mine + theirs, 33)
        try:
            resp = await self.broker.forwarder.forward(header, req)
        except ControllerUnavailableError as e:
            results = [
                (r.resource_type, r.resource_name, ApiError(ErrorCode.request_timed_out, str(e)))
                for r in req.resources
            ]
            return alter_configs_response(header.api_version, results, 33)
        done = {(r.resource_type, r.resource_name) for r in resp.responses if r.error_code == 0}
        wanted = {(t, n): dict(kv) for t, n, kv in legacy_config_sets(req) if (t, n) in done}
        if wanted and not req.validate_only:
            await self._settle(
                lambda img: all(dict(img.configs.get(k, {})) == v for k, v in wanted.items())
            )
        return resp

    async def incremental_alter_configs(self, header: RequestHeader, req: Any) -> Any:
        # a broker's loggers are this process's, changed here as Kafka's KafkaApis does,
        # and its key and trust stores are loaded here first; the rest is forwarded
        b = self.broker
        mine = answered_here(b.node_id, b.image, b.check_own_configs, req)
        if mine:
            here = {(t, n) for t, n, _ in mine}
            rest = tuple(r for r in req.resources if (r.resource_type, r.resource_name) not in here)
            if not rest:
                return alter_configs_response(header.api_version, mine)
            resp = await self.incremental_alter_configs(
                header, dataclasses.replace(req, resources=rest)
            )
            theirs = [
                (r.resource_type, r.resource_name, ApiError(r.error_code, r.error_message))
                for r in resp.responses
            ]
            return alter_configs_response(header.api_version, mine + theirs)
        changes = config_changes(req)
        try:
            resp = await self.broker.forwarder.forward(header, req)
        except ControllerUnavailableError as e:
            results = [(t, n, ApiError(ErrorCode.request_timed_out, str(e))) for t, n, _ in changes]
            return alter_configs_response(header.api_version, results)
        done = {(r.resource_type, r.resource_name) for r in resp.responses if r.error_code == 0}
        expected = [
            (t, n, k, v if op == 0 else None)
            for t, n, ops in changes
            if (t, n) in done
            for k, op, v in ops
            if op in (0, 1)
        ]
        if expected and not req.validate_only:
            await self._settle(
                lambda img: all(img.configs.get((t, n), {}).get(k) == v for t, n, k, v in expected)
            )
        return resp

    async def unregister_broker(self, header: RequestHeader, req: Any) -> Any:
        try:
            resp = await self.broker.forwarder.forward(header, req)
        except ControllerUnavailableError as e:
            return unregister_response(
                header.api_version, ApiError(ErrorCode.request_timed_out, str(e))
            )
        if resp.error_code == ErrorCode.none:
            await self._settle(lambda img: req.broker_id not in img.brokers)
        return resp

    async def describe_acls(self, header: RequestHeader, req: Any) -> Any:
        if not self.broker.authz.enabled:  # as Kafka's AclApis: nothing enforces ACLs
            return build(
                response_class(ApiKey.DESCRIBE_ACLS, header.api_version),
                {"throttle_time": 0, "error_code": NO_AUTHORIZER.code,
                 "error_message": NO_AUTHORIZER.message, "resources": []},
            )  # fmt: skip
        f = AclFilter(
            req.resource_type_filter,
            req.resource_name_filter,
            req.pattern_type_filter,
            req.principal_filter,
            req.host_filter,
            req.operation,
            req.permission_type,
        )
        by_resource: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
        for _, a in matching_acls(self.broker.image.acls, f):
            by_resource.setdefault((a.resource_type, a.resource_name, a.pattern_type), []).append(
                {
                    "principal": a.principal,
                    "host": a.host,
                    "operation": a.operation,
                    "permission_type": a.permission_type,
                }
            )
        return build(
            response_class(ApiKey.DESCRIBE_ACLS, header.api_version),
            {
                "throttle_time": 0,
                "error_code": ErrorCode.none,
                "error_message": None,
                "resources": [
                    {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
                    for (t, n, p), acls in sorted(by_resource.items())
                ],
            },
        )

    async def describe_scram_credentials(self, header: RequestHeader, req: Any) -> Any:
        # one pass over the credentials (a pass per user stalled the node for minutes
        # at 52,000 users: a helper's probe)
        by_user: dict[str, list[dict[str, int]]] = {}
        for (u, m), c in sorted(self.broker.image.scram.items()):
            by_user.setdefault(u, []).append({"mechanism": m, "iterations": c.iterations})
        # null or empty: every user (Kafka's DescribeUserScramCredentials)
        asked = [u.name for u in req.users or ()]
        times_asked = collections.Counter(asked)
        users = asked or list(by_user)
        results = []
        for user in dict.fromkeys(users):
            if times_asked[user] > 1:
                results.append(
                    {
                        "user": user,
                        "error_code": ErrorCode.duplicate_resource,
                        "error_message": "Cannot describe SCRAM credentials for the same user "
                        "twice in a single request",
                        "credential_infos": [],
                    }
                )
                continue
            infos = by_user.get(user, [])
            missing = not infos
            results.append(
                {
                    "user": user,
                    "error_code": ErrorCode.resource_not_found if missing else ErrorCode.none,
                    "error_message": "Attempt to describe a user credential that does not exist"
                    if missing
                    else None,
                    "credential_infos": infos,
                }
            )
        return build(
            response_class(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, header.api_version),
            {
                "throttle_time": 0,
                "error_code": ErrorCode.none,
                "error_message": None,
                "results": results,
            },
        )

    async def alter_scram_credentials(self, header: RequestHeader, req: Any) -> Any:
        deletions, upsertions = scram_alterations(req)
        try:
            resp = await self.broker.forwarder.forward(header, req)
        except ControllerUnavailableError as e:
            users = dict.fromkeys([u for u, _ in deletions] + [u[0] for u in upsertions])
            results = [(u, ApiError(ErrorCode.request_timed_out, str(e))) for u in users]
            return alter_scram_response(header.api_version, results)
        ok = {r.user for r in resp.results if r.error_code == ErrorCode.none}
        gone = [(u, m) for u, m in deletions if u in ok]
        added = [(u, m, i) for u, m, i, _, _ in upsertions if u in ok]
        if gone or added:
            await self._settle(
                lambda img: (
                    all(k not in img.scram for k in gone)
                    and all(
                        (c := img.scram.get((u, m))) is not None and c.iterations == i
                        for u, m, i in added
                    )
                )
            )
        return resp

    async def describe_client_quotas(self, header: RequestHeader, req: Any) -> Any:
        components = [(c.entity_type, int(c.match_type), c.match) for c in req.components]
        found = describe_client_quotas(self.broker.image.client_quotas, components, req.strict)
        return build(
            response_class(ApiKey.DESCRIBE_CLIENT_QUOTAS, header.api_version),
            {
                "throttle_time": 0,
                "error_code": ErrorCode.none,
                "error_message": None,
                "entries": [
                    {
                        "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                        "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
                    }
                    for entity, values in found
                ],
            },
        )

    async def alter_client_quotas(self, header: RequestHeader, req: Any) -> Any:
        changes = quota_alterations(req)
        try:
            resp = await self.broker.forwarder.forward(header, req)
        except ControllerUnavailableError as e:
            results = [ApiError(ErrorCode.request_timed_out, str(e)) for _ in changes]
            return alter_client_quotas_response(header.api_version, changes, results)
        if not req.validate_only:
            wanted = [
                (tuple(sorted(entity)), k, None if rm else v)
                for (entity, ops), entry in zip(changes, resp.entries, strict=False)
                if entry.error_code == ErrorCode.none
                for k, v, rm in ops
            ]
            if wanted:
                await self._settle(
                    lambda img: all(img.client_quotas.get(e, {}).get(k) == v for e, k, v in wanted)
                )
        return resp

    async def create_acls(self, header: RequestHeader, req: Any) -> Any:
        acls = acl_creations(req)
        try:
            resp = await self.broker.forwarder.forward(header, req)
        except ControllerUnavailableError as e:
            results = [ApiError(ErrorCode.request_timed_out, str(e)) for _ in acls]
            return create_acls_response(header.api_version, results)
        made = [a for a, r in zip(acls, resp.results, strict=False) if r.error_code == 0]
        if made:
            await self._settle(lambda img: set(made) <= set(img.acls.values()))
        return resp

    async def delete_acls(self, header: RequestHeader, req: Any) -> Any:
        filters = acl_filters(req)
        try:
            resp = await self.broker.forwarder.forward(header, req)
        except ControllerUnavailableError as e:
            return delete_acls_response(
                header.api_version,
                [[] for _ in filters],
                ApiError(ErrorCode.request_timed_out, str(e)),
            )
        removed = {
            AclEntry(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host,
                     m.operation, m.permission_type)
            for r in resp.filter_results for m in r.matching_acls
        }  # fmt: skip
        if removed:
            await self._settle(lambda img: not removed & set(img.acls.values()))
        return resp

    async def update_features(self, header: RequestHeader, req: Any) -> Any:
        updates = feature_updates(req, header.api_version)
        try:
            resp = await self.broker.forwarder.forward(header, req)
        except ControllerUnavailableError as e:
            return update_features_response(
                header.api_version, [], ApiError(ErrorCode.request_timed_out, str(e))
            )
        ok = resp.error_code == 0 and all(r.error_code == 0 for r in resp.results)
        if not req.validate_only and ok:
            wanted = {f: level for f, level, _ in updates}
            await self._settle(
                lambda img: all(img.features.get(f) == lv for f, lv in wanted.items())
            )
        return resp

    async def elect_leaders(self, header: RequestHeader, req: Any) -> Any:
        election_type, _ = election_targets(req)
        try:
            resp = await self.broker.forwarder.forward(header, req)
        except ControllerUnavailableError as e:
            return elect_leaders_response(
                header.api_version, [], ApiError(ErrorCode.request_timed_out, str(e))
            )
        elected = [(r.topic, p.partition_id) for r in resp.replica_election_results
                   for p in r.partition_result if p.error_code == 0]  # fmt: skip

        def settled(img: MetadataImage) -> bool:
            for t, p in elected:
                topic = img.topic(t)
                info = topic.partitions.get(p) if topic is not None else None
                if info is None:
                    continue
                if election_type == 0 and info.leader != info.replicas[0]:
                    return False
                if election_type == 1 and info.leader == -1:
                    return False
            return True

        if elected:
            await self._settle(settled)
        return resp

    async def describe_configs(self, header: RequestHeader, req: Any) -> Any:
        return describe_configs(self.broker, header, req)
