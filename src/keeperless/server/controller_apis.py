"""The controller's side of the broker/controller protocol: the in-process channel used
when this node's controller is active, the client that picks local or remote, and the
handlers of the controller listener for the same RPCs (Kafka's ControllerApis)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.broker.controller_channel import RemoteController, not_controller
from keeperless.controller.acls import create_acls, delete_acls
from keeperless.controller.configs import alter_configs, incremental_alter_configs
from keeperless.controller.delegation_tokens import (
    TokenResult,
    create_token,
    expire_token,
    renew_token,
)
from keeperless.controller.directories import assign_replicas_to_dirs
from keeperless.controller.elections import elect_leaders
from keeperless.controller.features import kraft_version_refusal, update_features
from keeperless.controller.fencing import register_broker
from keeperless.controller.isr import alter_partition
from keeperless.controller.quorum_controller import Result
from keeperless.controller.quotas import alter_client_quotas
from keeperless.controller.reassignment import (
    ReassignmentTarget,
    alter_reassignments,
    list_reassignments,
)
from keeperless.controller.scram import alter_scram_credentials
from keeperless.metadata.admin import (
    NO_AUTHORIZER,
    AclFilter,
    ApiError,
    CreatePartitionsRequest,
    CreateTopicResult,
    DirAssignment,
    DirAssignmentResult,
    IsrChange,
    IsrResult,
    NewTopic,
    QuotaAlteration,
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
    new_topics,
    quota_alterations,
    scram_alterations,
    unregister_response,
    update_features_response,
)
from keeperless.metadata.features import KRAFT_VERSION_FEATURE, METADATA_VERSION_FEATURE
from keeperless.metadata.image import AclEntry
from keeperless.metadata.reassignment_requests import (
    alter_response,
    list_response,
    reassignment_targets,
)
from keeperless.metadata.token_requests import (
    create_request,
    create_response,
    expiry_response,
    ms_of,
)
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.context import session_of
from keeperless.protocol.framing import RequestHeader, response_class
from keeperless.protocol.session import ANONYMOUS
from keeperless.raft.core import MembershipError
from keeperless.raft.voters import Endpoint
from keeperless.server.controller_service import ControllerService, NotControllerError

__all__ = ["ControllerApis", "ControllerClient", "LocalController"]

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _principal(header: RequestHeader) -> str:
    """Who sent a request (a forwarded one: the client the envelope names)."""
    s = session_of(header)
    return s.principal if s is not None else ANONYMOUS


class LocalController:
    """The ControllerChannel of a node whose own controller is active."""

    def __init__(self, service: ControllerService, apis: ControllerApis | None = None) -> None:
        self.service = service
        self.apis = apis

    async def forward_request(self, api_key: int, version: int, req: Any) -> Any:
        """A client's request answered by this controller as if sent to its listener."""
        assert self.apis is not None
        header = RequestHeader(api_key, version, 0, f"node-{self.service.node_id}")
        return await self.apis.handlers()[ApiKey(api_key)](header, req)

    async def create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool
    ) -> list[CreateTopicResult]:
        return await self.service.call(lambda c: c.create_topics(topics, validate_only))

    async def delete_topics(
        self, names: Sequence[str], ids: Sequence[UUID]
    ) -> list[tuple[str | None, UUID | None, ApiError]]:
        return await self.service.call(lambda c: c.delete_topics(names, ids))

    async def create_partitions(
        self, reqs: Sequence[CreatePartitionsRequest], validate_only: bool
    ) -> list[tuple[str, ApiError]]:
        return await self.service.call(lambda c: c.create_partitions(reqs, validate_only))

    async def register_broker(
        self,
        broker_id: int,
        incarnation_id: UUID,
        endpoints: Sequence[tuple[str, str, int]],
        rack: str | None,
        features: Mapping[str, tuple[int, int]] | None = None,
        previous_broker_epoch: int = -1,
        log_dirs: Sequence[UUID] = (),
    ) -> tuple[ApiError, int]:
        # the epoch is the offset of the registration record: read when the operation
        # runs (its turn may come after others were appended), not when it arrived
        return await self.service.call(
            lambda c: register_broker(
                c,
                broker_id,
                incarnation_id,
                endpoints,
                rack,
                self.service.mlog.core.log_end_offset,
                _now_ms(),
                features,
                previous_broker_epoch,
                log_dirs,
            )
        )

    async def broker_heartbeat(
        self,
        broker_id: int,
        epoch: int,
        want_fence: bool,
        metadata_offset: int,
        want_shut_down: bool = False,
        offline_dirs: Sequence[UUID] = (),
    ) -> tuple[ApiError, bool, bool]:
        # caught up once the broker has applied its own registration record
        caught_up = metadata_offset >= epoch
        if self.service.is_active:
            steady = self.service.controller.steady_heartbeat(
                broker_id,
                epoch,
                want_fence,
                _now_ms(),
                want_shut_down=want_shut_down,
                metadata_offset=metadata_offset,
                offline_dirs=offline_dirs,
            )
            if steady is not None:
                return steady
        return await self.service.call(
            lambda c: c.broker_heartbeat(
                broker_id,
                epoch,
                want_fence,
                caught_up,
                _now_ms(),
                want_shut_down=want_shut_down,
                metadata_offset=metadata_offset,
                offline_dirs=offline_dirs,
            )
        )

    async def assign_replicas_to_dirs(
        self, broker_id: int, broker_epoch: int, assignments: Sequence[DirAssignment]
    ) -> tuple[ApiError, list[DirAssignmentResult]]:
        return await self.service.call(
            lambda c: assign_replicas_to_dirs(c, broker_id, broker_epoch, assignments)
        )

    async def allocate_producer_ids(self, broker_id: int, epoch: int) -> tuple[ApiError, int, int]:
        return await self.service.call(lambda c: c.allocate_producer_ids(broker_id, epoch))

    async def incremental_alter_configs(
        self,
        changes: Sequence[tuple[int, str, Sequence[tuple[str, int, str | None]]]],
        validate_only: bool,
    ) -> list[tuple[int, str, ApiError]]:
        return await self.service.call(
            lambda c: incremental_alter_configs(c, changes, validate_only)
        )

    async def unregister_broker(self, broker_id: int) -> ApiError:
        return await self.service.call(lambda c: c.unregister_broker(broker_id))

    async def update_features(
        self, updates: Sequence[tuple[str, int, int]], validate_only: bool
    ) -> list[tuple[str, ApiError]]:
        """All or nothing, as Kafka's: every update is checked (kraft.version against the
        metadata.version the same request sets) before any is made, and a refusal of one
        is every feature's answer."""
        kraft = [u for u in updates if u[0] == KRAFT_VERSION_FEATURE]
        rest = [u for u in updates if u[0] != KRAFT_VERSION_FEATURE]
        kv = self.service.mlog.core.kraft_version
        mv = next((lv for f, lv, _ in rest if f == METADATA_VERSION_FEATURE), None)
        results = [await self._kraft_version(lv, t, True, mv) for _, lv, t in kraft]
        if rest or not kraft:
            checked = await self.service.call(
                lambda c: update_features(c, rest, True, kv, announce=validate_only)
            )
            results += list(checked)
        refused = next((e for _, e in results if e.code != ErrorCode.none), None)
        if refused is not None or validate_only:
            return _all_refused(results, refused)
        if kraft:  # the change that can still fail (a voter gone quiet): made first
            done = [await self._kraft_version(lv, t, False, mv) for _, lv, t in kraft]
            refused = next((e for _, e in done if e.code != ErrorCode.none), None)
            if refused is not None:
                return _all_refused(results, refused)
        if rest:
            made = await self.service.call(lambda c: update_features(c, rest, False, kv))
            return [*(r for r in results if r[0] == KRAFT_VERSION_FEATURE), *made]
        return results

    async def _kraft_version(
        self, level: int, upgrade_type: int, validate_only: bool, metadata_version: int | None
    ) -> tuple[str, ApiError]:
        """kraft.version is the Raft log's (KIP-853), not a metadata record: the active
        controller's Raft core turns its static quorum dynamic (checked the same way
        without changing anything when ``validate_only``)."""
        mlog = self.service.mlog
        if level < mlog.core.kraft_version or (
            upgrade_type != 1 and level != mlog.core.kraft_version
        ):
            text = (
                f"Invalid update version {level} for feature kraft.version. Downgrading "
                "kraft.version is not supported."
            )
            return KRAFT_VERSION_FEATURE, ApiError(ErrorCode.invalid_update_version, text)
        refusal = kraft_version_refusal(self.service.controller, level, metadata_version)
        if refusal is not None:
            return KRAFT_VERSION_FEATURE, ApiError(ErrorCode.invalid_update_version, refusal)
        if level == mlog.core.kraft_version:
            return KRAFT_VERSION_FEATURE, ApiError.none()
        cfg = self.service.config
        name = cfg.controller_listener_names[0] if cfg.controller_listener_names else "CONTROLLER"
        endpoints: dict[int, tuple[Endpoint, ...]] = {
            v.node_id: (Endpoint(name, v.host, v.port),) for v in cfg.voters
        }
        try:
            if validate_only:
                mlog.core.upgrade_kraft_version(level, endpoints, 0, dry_run=True)
            else:
                await mlog.change_voters(
                    lambda core, now: core.upgrade_kraft_version(level, endpoints, now), 30.0
                )
        except MembershipError as e:
            return KRAFT_VERSION_FEATURE, ApiError(ErrorCode(e.code), str(e))
        return KRAFT_VERSION_FEATURE, ApiError.none()

    async def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None
    ) -> list[tuple[str, int, ApiError]]:
        return await self.service.call(lambda c: elect_leaders(c, election_type, partitions))

    async def create_acls(self, acls: Sequence[AclEntry]) -> list[ApiError]:
        return await self.service.call(lambda c: create_acls(c, acls))

    async def alter_scram_credentials(
        self,
        deletions: Sequence[tuple[str, int]],
        upsertions: Sequence[tuple[str, int, int, bytes, bytes]],
    ) -> list[tuple[str, ApiError]]:
        return await self.service.call(lambda c: alter_scram_credentials(c, deletions, upsertions))

    async def alter_client_quotas(
        self, changes: Sequence[QuotaAlteration], validate_only: bool
    ) -> list[ApiError]:
        return await self.service.call(lambda c: alter_client_quotas(c, changes, validate_only))

    async def delete_acls(self, filters: Sequence[AclFilter]) -> list[list[AclEntry]]:
        return await self.service.call(lambda c: delete_acls(c, filters))

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, changes: Sequence[IsrChange]
    ) -> tuple[ApiError, list[IsrResult]]:
        return await self.service.call(
            lambda c: alter_partition(c, broker_id, broker_epoch, changes)
        )


class ControllerClient:
    """Where a broker's own RPCs go: its own controller's handler, in process, when that
    one is active, else the remote active controller."""

    def __init__(self, local: LocalController | None, remote: RemoteController) -> None:
        self.local = local
        self.remote = remote

    async def _local_active(self) -> LocalController | None:
        local = self.local
        if local is not None and local.service.mlog.core.is_leader:
            # just elected here: use it as soon as it has caught up
            await local.service.wait_active(
                local.service.mlog.core.config.request_timeout_ms / 1000
            )
        return local if local is not None and local.service.is_active else None

    async def send(self, api_key: int, version: int, req: Any) -> Any:
        local = await self._local_active()
        if local is not None:
            resp = await local.forward_request(api_key, version, req)
            if not not_controller(resp):  # it stopped leading meanwhile: ask the new one
                return resp
        return await self.remote.forward(api_key, version, req)


class ControllerApis:
    """Handlers of the controller listener for the broker-to-controller RPCs."""

    def __init__(self, service: ControllerService, cluster_id: str, authorizer: bool) -> None:
        self.service = service
        self.cluster_id = cluster_id
        # ACLs are created and deleted only where an authorizer enforces them: without
        # one Kafka's controllers answer SECURITY_DISABLED
        self.authorizer = authorizer
        self.local = LocalController(service, self)

    def handlers(self) -> dict[ApiKey, Any]:
        return {
            ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.CREATE_ACLS: self.create_acls,
            ApiKey.DELETE_ACLS: self.delete_acls,
            ApiKey.CREATE_PARTITIONS: self.create_partitions,
            ApiKey.ELECT_LEADERS: self.elect_leaders,
            ApiKey.ALTER_CONFIGS: self.alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
            ApiKey.ALTER_CLIENT_QUOTAS: self.alter_client_quotas,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.alter_scram_credentials,
            ApiKey.ALTER_PARTITION: self.alter_partition,
            ApiKey.UPDATE_FEATURES: self.update_features,
            ApiKey.BROKER_REGISTRATION: self.register_broker,
            ApiKey.BROKER_HEARTBEAT: self.broker_heartbeat,
            ApiKey.ASSIGN_REPLICAS_TO_DIRS: self.assign_replicas_to_dirs,
            ApiKey.UNREGISTER_BROKER: self.unregister_broker,
            ApiKey.ALLOCATE_PRODUCER_IDS: self.allocate_producer_ids,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self.alter_partition_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: self.list_partition_reassignments,
            ApiKey.CREATE_DELEGATION_TOKEN: self.create_delegation_token,
            ApiKey.RENEW_DELEGATION_TOKEN: self.renew_delegation_token,
            ApiKey.EXPIRE_DELEGATION_TOKEN: self.expire_delegation_token,
        }

    def _not_controller(self, header: RequestHeader, body: dict[str, Any]) -> Any:
        err = ErrorCode.not_controller
        return build(
            response_class(header.api_key, header.api_version),
            {**body, "error_code": err, "throttle_time": 0},
        )

    async def create_topics(self, header: RequestHeader, req: Any) -> Any:
        topics = new_topics(req)
        try:
            results = await self.local.create_topics(topics, req.validate_only)
        except NotControllerError:
            results = [
                CreateTopicResult(t.name, ApiError(ErrorCode.not_controller)) for t in topics
            ]
        return build(
            response_class(ApiKey.CREATE_TOPICS, header.api_version),
            {
                "throttle_time": 0,
                "topics": [
                    {
                        "name": r.name,
                        "topic_id": r.topic_id,
                        "error_code": r.error.code,
                        "error_message": r.error.message,
                        "num_partitions": r.num_partitions,
                        "replication_factor": r.replication_factor,
                        "configs": [
                            {
                                "name": k,
                                "value": v,
                                "read_only": False,
                                "config_source": 1,
                                "is_sensitive": False,
                            }
                            for k, v in r.configs.items()
                        ],
                    }
                    for r in results
                ],
            },
        )

    async def delete_topics(self, header: RequestHeader, req: Any) -> Any:
        names, ids = delete_targets(req, header.api_version)
        try:
            results = await self.local.delete_topics(names, ids)
        except NotControllerError:
            results = [(n, None, ApiError(ErrorCode.not_controller)) for n in names]
        return delete_topics_response(header.api_version, results)

    async def create_partitions(self, header: RequestHeader, req: Any) -> Any:
        reqs = new_partitions(req)
        try:
            results = await self.local.create_partitions(reqs, req.validate_only)
        except NotControllerError:
            results = [(r.name, ApiError(ErrorCode.not_controller)) for r in reqs]
        return create_partitions_response(header.api_version, results)

    async def register_broker(self, header: RequestHeader, req: Any) -> Any:
        if req.cluster_id != self.cluster_id:
            # Kafka: "Expected cluster ID X, but got cluster ID Y"
            log.warning(
                "[node %d] Refused the registration of broker %d: expected cluster ID %s, "
                "but got cluster ID %s",
                self.service.node_id,
                req.broker_id,
                self.cluster_id,
                req.cluster_id,
            )
            return build(
                response_class(ApiKey.BROKER_REGISTRATION, header.api_version),
                {
                    "throttle_time": 0,
                    "error_code": ErrorCode.inconsistent_cluster_id,
                    "broker_epoch": -1,
                },
            )
        try:
            err, epoch = await self.local.register_broker(
                req.broker_id,
                req.incarnation_id,
                [(li.name, li.host, li.port) for li in req.listeners],
                req.rack,
                {f.name: (f.min_supported_version, f.max_supported_version) for f in req.features},
                getattr(req, "previous_broker_epoch", -1),
                tuple(getattr(req, "log_dirs", ()) or ()),
            )
        except NotControllerError:
            return self._not_controller(header, {"broker_epoch": -1})
        return build(
            response_class(ApiKey.BROKER_REGISTRATION, header.api_version),
            {"throttle_time": 0, "error_code": err.code, "broker_epoch": epoch},
        )

    async def broker_heartbeat(self, header: RequestHeader, req: Any) -> Any:
        try:
            err, fenced, shut_down = await self.local.broker_heartbeat(
                req.broker_id,
                req.broker_epoch,
                req.want_fence,
                req.current_metadata_offset,
                req.want_shut_down,
                tuple(getattr(req, "offline_log_dirs", ()) or ()),
            )
        except NotControllerError:
            return self._not_controller(
                header, {"is_caught_up": False, "is_fenced": True, "should_shut_down": False}
            )
        return build(
            response_class(ApiKey.BROKER_HEARTBEAT, header.api_version),
            {
                "throttle_time": 0,
                "error_code": err.code,
                "is_caught_up": not fenced,
                "is_fenced": fenced,
                "should_shut_down": shut_down,
            },
        )

    async def assign_replicas_to_dirs(self, header: RequestHeader, req: Any) -> Any:
        wanted = [
            (d.id_, t.topic_id, p.partition_index)
            for d in req.directories
            for t in d.topics
            for p in t.partitions
        ]
        try:
            top, results = await self.local.assign_replicas_to_dirs(
                req.broker_id, req.broker_epoch, wanted
            )
        except NotControllerError:
            top, results = ApiError(ErrorCode.not_controller), []
        tree: dict[Any, dict[Any, list[dict[str, Any]]]] = {}
        for d, t, idx, err in results:
            tree.setdefault(d, {}).setdefault(t, []).append(
                {"partition_index": idx, "error_code": err.code}
            )
        return build(
            response_class(ApiKey.ASSIGN_REPLICAS_TO_DIRS, header.api_version),
            {
                "throttle_time": 0,
                "error_code": top.code,
                "directories": [
                    {
                        "id_": d,
                        "topics": [{"topic_id": t, "partitions": ps} for t, ps in ts.items()],
                    }
                    for d, ts in tree.items()
                ],
            },
        )

    async def allocate_producer_ids(self, header: RequestHeader, req: Any) -> Any:
        try:
            err, start, count = await self.local.allocate_producer_ids(
                req.broker_id, req.broker_epoch
            )
        except NotControllerError:
            return self._not_controller(header, {"producer_id_start": -1, "producer_id_len": 0})
        return build(
            response_class(ApiKey.ALLOCATE_PRODUCER_IDS, header.api_version),
            {
                "throttle_time": 0,
                "error_code": err.code,
                "producer_id_start": start,
                "producer_id_len": count,
            },
        )

    async def alter_configs(self, header: RequestHeader, req: Any) -> Any:
        sets = legacy_config_sets(req)
        try:
            results = await self.service.call(lambda c: alter_configs(c, sets, req.validate_only))
        except NotControllerError:
            results = [(t, n, ApiError(ErrorCode.not_controller)) for t, n, _ in sets]
        return alter_configs_response(header.api_version, results, 33)

    async def incremental_alter_configs(self, header: RequestHeader, req: Any) -> Any:
        changes = config_changes(req)
        try:
            results = await self.local.incremental_alter_configs(changes, req.validate_only)
        except NotControllerError:
            results = [(t, n, ApiError(ErrorCode.not_controller)) for t, n, _ in changes]
        return alter_configs_response(header.api_version, results)

    async def unregister_broker(self, header: RequestHeader, req: Any) -> Any:
        try:
            err = await self.local.unregister_broker(req.broker_id)
        except NotControllerError:
            err = ApiError(ErrorCode.not_controller)
        return unregister_response(header.api_version, err)

    async def update_features(self, header: RequestHeader, req: Any) -> Any:
        updates = feature_updates(req, header.api_version)
        try:
            results = await self.local.update_features(updates, req.validate_only)
        except NotControllerError:
            return update_features_response(
                header.api_version, [], ApiError(ErrorCode.not_controller)
            )
        return update_features_response(header.api_version, results)

    async def alter_client_quotas(self, header: RequestHeader, req: Any) -> Any:
        changes = quota_alterations(req)
        try:
            results = await self.local.alter_client_quotas(changes, req.validate_only)
        except NotControllerError:
            results = [ApiError(ErrorCode.not_controller) for _ in changes]
        return alter_client_quotas_response(header.api_version, changes, results)

    async def alter_scram_credentials(self, header: RequestHeader, req: Any) -> Any:
        deletions, upsertions = scram_alterations(req)
        try:
            results = await self.local.alter_scram_credentials(deletions, upsertions)
        except NotControllerError:
            users = dict.fromkeys([u for u, _ in deletions] + [u[0] for u in upsertions])
            results = [(u, ApiError(ErrorCode.not_controller)) for u in users]
        return alter_scram_response(header.api_version, results)

    async def alter_partition_reassignments(self, header: RequestHeader, req: Any) -> Any:
        asked = reassignment_targets(req)
        targets = [ReassignmentTarget(t, p, r) for t, p, r in asked]
        allow = bool(getattr(req, "allow_replication_factor_change", True))
        try:
            results = await self.service.call(lambda c: alter_reassignments(c, targets, allow))
        except NotControllerError:
            err = ApiError(ErrorCode.not_controller)
            return alter_response(header.api_version, [(t, p, err) for t, p, _ in asked], err)
        return alter_response(header.api_version, results)

    async def list_partition_reassignments(self, header: RequestHeader, req: Any) -> Any:
        topics = (
            None
            if req.topics is None
            else [(t.name, list(t.partition_indexes)) for t in req.topics]
        )
        try:
            found = await self.service.call(lambda c: Result([], list_reassignments(c, topics)))
        except NotControllerError:
            return list_response(header.api_version, [], ApiError(ErrorCode.not_controller))
        return list_response(header.api_version, found)

    async def create_delegation_token(self, header: RequestHeader, req: Any) -> Any:
        """The owner (the requester unless the request names one), checked by the broker
        that forwarded it (CREATE_TOKENS on the owner), as Kafka's brokers do."""
        owner, renewers, max_life = create_request(req)
        requester = _principal(header)
        tokens = self.service.tokens
        try:
            res = await self.service.call(
                lambda c: create_token(c, tokens, _now_ms(), requester, owner, renewers, max_life)
            )
        except NotControllerError:
            res = TokenResult(ErrorCode.not_controller)
        if res.error == ErrorCode.none and res.token is not None:
            log.info("[node %d] Created delegation token %s for %s", self.service.node_id,
                     res.token.token_id, res.token.owner)  # fmt: skip
        return create_response(
            header.api_version, res.error, owner or requester, requester, res.token, res.hmac
        )

    async def renew_delegation_token(self, header: RequestHeader, req: Any) -> Any:
        return await self._token_expiry(header, renew_token, bytes(req.hmac),
                                        ms_of(req.renew_period))  # fmt: skip

    async def expire_delegation_token(self, header: RequestHeader, req: Any) -> Any:
        return await self._token_expiry(header, expire_token, bytes(req.hmac),
                                        ms_of(req.expiry_time_period))  # fmt: skip

    async def _token_expiry(
        self, header: RequestHeader, rule: Any, mac: bytes, period_ms: int
    ) -> Any:
        """Renew or expire (``rule``) the token of HMAC ``mac``, as its sender."""
        who, tokens = _principal(header), self.service.tokens
        try:
            res = await self.service.call(lambda c: rule(c, tokens, _now_ms(), who, mac, period_ms))
        except NotControllerError:
            res = TokenResult(ErrorCode.not_controller)
        if res.error == ErrorCode.none and res.token is not None:
            what = "Renewed" if header.api_key == ApiKey.RENEW_DELEGATION_TOKEN else "Expired"
            log.info("[node %d] %s delegation token %s of %s (expiry %d)", self.service.node_id,
                     what, res.token.token_id, res.token.owner, res.expiry_ms)  # fmt: skip
        return expiry_response(ApiKey(header.api_key), header.api_version, res.error,
                               res.expiry_ms)  # fmt: skip

    async def create_acls(self, header: RequestHeader, req: Any) -> Any:
        acls = acl_creations(req)
        if not self.authorizer:
            return create_acls_response(header.api_version, [NO_AUTHORIZER for _ in acls])
        try:
            results = await self.local.create_acls(acls)
        except NotControllerError:
            results = [ApiError(ErrorCode.not_controller) for _ in acls]
        return create_acls_response(header.api_version, results)

    async def delete_acls(self, header: RequestHeader, req: Any) -> Any:
        filters = acl_filters(req)
        if not self.authorizer:
            return delete_acls_response(header.api_version, [[] for _ in filters], NO_AUTHORIZER)
        try:
            results = await self.local.delete_acls(filters)
        except NotControllerError:
            return delete_acls_response(
                header.api_version, [[] for _ in filters], ApiError(ErrorCode.not_controller)
            )
        return delete_acls_response(header.api_version, results)

    async def alter_partition(self, header: RequestHeader, req: Any) -> Any:
        changes = [
            IsrChange(
                t.topic_id,
                p.partition_index,
                p.leader_epoch,
                tuple(
                    b.broker_id if header.api_version >= 3 else b
                    for b in (p.new_isr_with_epochs if header.api_version >= 3 else p.new_isr)
                ),
                p.partition_epoch,
            )
            for t in req.topics
            for p in t.partitions
        ]
        try:
            top, results = await self.local.alter_partition(
                req.broker_id, req.broker_epoch, changes
            )
        except NotControllerError:
            top, results = ApiError(ErrorCode.not_controller), []
        by_topic: dict[UUID, list[dict[str, Any]]] = {}
        for res in results:
            st = res.state
            by_topic.setdefault(res.topic_id, []).append(
                {
                    "partition_index": res.partition,
                    "error_code": res.error.code,
                    "leader_id": st.leader if st else -1,
                    "leader_epoch": st.leader_epoch if st else -1,
                    "isr": st.isr if st else (),
                    "leader_recovery_state": 0,
                    "partition_epoch": st.partition_epoch if st else -1,
                }
            )
        return build(
            response_class(ApiKey.ALTER_PARTITION, header.api_version),
            {
                "throttle_time": 0,
                "error_code": top.code,
                "topics": [{"topic_id": tid, "partitions": ps} for tid, ps in by_topic.items()],
            },
        )

    async def elect_leaders(self, header: RequestHeader, req: Any) -> Any:
        election_type, partitions = election_targets(req)
        try:
            results = await self.local.elect_leaders(election_type, partitions)
        except NotControllerError:
            return elect_leaders_response(
                header.api_version, [], ApiError(ErrorCode.not_controller)
            )
        return elect_leaders_response(header.api_version, results)


def _all_refused(
    results: list[tuple[str, ApiError]], refused: ApiError | None
) -> list[tuple[str, ApiError]]:
    """One refusal is every feature's answer (nothing was changed)."""
    if refused is None:
        return results
    return [(name, e if e.code != ErrorCode.none else refused) for name, e in results]
