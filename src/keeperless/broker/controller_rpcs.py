"""The broker's own RPCs to the active controller - CreateTopics (auto-creation),
BrokerRegistration, BrokerHeartbeat, AllocateProducerIds, AlterPartition - built and
read here, and handed to one ``send`` keyed by API that knows nothing of them: the
node's (controller_apis.ControllerClient.send) answers in process with the controller's
own handler when this node's controller is the active one, else sends the request to
the active controller's listener. Both paths run the same handler."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.metadata.admin import (
    ApiError,
    CreateTopicResult,
    DirAssignment,
    DirAssignmentResult,
    IsrChange,
    IsrResult,
    NewTopic,
)
from keeperless.metadata.features import registration_features
from keeperless.metadata.image import PartitionInfo
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import request_class

__all__ = ["ControllerRpcs", "Send", "registration_refused"]

# (api key, version, request) -> the active controller's response
Send = Callable[[int, int, Any], Awaitable[Any]]

_VERSIONS = {
    ApiKey.CREATE_TOPICS: 7,
    ApiKey.ALTER_PARTITION: 3,
    ApiKey.BROKER_REGISTRATION: 3,
    ApiKey.BROKER_HEARTBEAT: 1,
    ApiKey.ALLOCATE_PRODUCER_IDS: 0,
    ApiKey.ASSIGN_REPLICAS_TO_DIRS: 0,
}


def registration_refused(err: ApiError) -> str:
    """What a broker says when its registration is refused (Kafka's
    BrokerRegistrationResponse carries no message: the likely why, by error)."""
    why = err.message or _REFUSALS.get(err.code, "")
    return f"broker registration refused: {err.code.name.upper()}: {why}"


_REFUSALS = {
    ErrorCode.unsupported_version: (
        "the cluster's finalized metadata.version (or another finalized feature) is outside "
        "what this broker supports; with inter.broker.protocol.version set it registers at "
        "that release only: make it the cluster's release (kafka-features.sh describe "
        "shows it), or remove it"
    ),
}


class ControllerRpcs:
    def __init__(self, send: Send, cluster_id: str) -> None:
        self.send = send
        self.cluster_id = cluster_id  # carried by the registration

    async def _rpc(self, api_key: ApiKey, body: dict[str, Any]) -> Any:
        version = _VERSIONS[api_key]
        return await self.send(api_key, version, build(request_class(api_key, version), body))

    async def create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool
    ) -> list[CreateTopicResult]:
        body = {
            "topics": [
                {
                    "name": t.name,
                    "num_partitions": t.num_partitions,
                    "replication_factor": t.replication_factor,
                    "assignments": [
                        {"partition_index": p, "broker_ids": list(b)}
                        for p, b in t.assignments.items()
                    ],
                    "configs": [{"name": k, "value": v} for k, v in t.configs.items()],
                }
                for t in topics
            ],
            "timeout": 30000,
            "validate_only": validate_only,
        }
        resp = await self._rpc(ApiKey.CREATE_TOPICS, body)
        return [
            CreateTopicResult(
                r.name,
                ApiError(r.error_code, r.error_message),
                r.topic_id,
                r.num_partitions,
                r.replication_factor,
                {
                    c.name: c.value
                    for c in (r.configs or ())
                    if c.value is not None and c.config_source == 1
                },
            )
            for r in resp.topics
        ]

    async def register_broker(
        self,
        broker_id: int,
        incarnation_id: UUID,
        endpoints: Sequence[tuple[str, str, int]],
        rack: str | None,
        previous_broker_epoch: int = -1,
        log_dirs: Sequence[UUID] = (),
        ibp: str | None = None,
    ) -> tuple[ApiError, int]:
        """BrokerRegistration; ``ibp``: Kafka 3.x's inter.broker.protocol.version, if
        this broker was given one (it then registers at that release only)."""
        features = registration_features(ibp)
        body = {
            "broker_id": broker_id,
            "cluster_id": self.cluster_id,
            "incarnation_id": incarnation_id,
            "listeners": [
                {"name": n, "host": h, "port": p, "security_protocol": 0} for n, h, p in endpoints
            ],
            "features": [
                {"name": name, "min_supported_version": lo, "max_supported_version": hi}
                for name, (lo, hi) in sorted(features.items())
            ],
            "rack": rack,
            "log_dirs": list(log_dirs),
            "previous_broker_epoch": previous_broker_epoch,
        }
        resp = await self._rpc(ApiKey.BROKER_REGISTRATION, body)
        return ApiError(resp.error_code), resp.broker_epoch

    async def broker_heartbeat(
        self,
        broker_id: int,
        epoch: int,
        want_fence: bool,
        metadata_offset: int,
        want_shut_down: bool = False,
        offline_dirs: Sequence[UUID] = (),
    ) -> tuple[ApiError, bool, bool]:
        body = {
            "broker_id": broker_id,
            "broker_epoch": epoch,
            "current_metadata_offset": metadata_offset,
            "want_fence": want_fence,
            "want_shut_down": want_shut_down,
            "offline_log_dirs": list(offline_dirs),
        }
        resp = await self._rpc(ApiKey.BROKER_HEARTBEAT, body)
        return ApiError(resp.error_code), bool(resp.is_fenced), bool(resp.should_shut_down)

    async def assign_replicas_to_dirs(
        self, broker_id: int, broker_epoch: int, assignments: Sequence[DirAssignment]
    ) -> tuple[ApiError, list[DirAssignmentResult]]:
        return assignments_result(
            await self._rpc(
                ApiKey.ASSIGN_REPLICAS_TO_DIRS,
                assignments_body(broker_id, broker_epoch, assignments),
            )
        )

    async def allocate_producer_ids(self, broker_id: int, epoch: int) -> tuple[ApiError, int, int]:
        resp = await self._rpc(
            ApiKey.ALLOCATE_PRODUCER_IDS, {"broker_id": broker_id, "broker_epoch": epoch}
        )
        return ApiError(resp.error_code), resp.producer_id_start, resp.producer_id_len

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, changes: Sequence[IsrChange]
    ) -> tuple[ApiError, list[IsrResult]]:
        by_topic: dict[UUID, list[IsrChange]] = {}
        for ch in changes:
            by_topic.setdefault(ch.topic_id, []).append(ch)
        body = {
            "broker_id": broker_id,
            "broker_epoch": broker_epoch,
            "topics": [
                {
                    "topic_id": tid,
                    "partitions": [
                        {
                            "partition_index": ch.partition,
                            "leader_epoch": ch.leader_epoch,
                            "new_isr_with_epochs": [
                                {"broker_id": x, "broker_epoch": -1} for x in ch.new_isr
                            ],
                            "leader_recovery_state": 0,
                            "partition_epoch": ch.partition_epoch,
                        }
                        for ch in chs
                    ],
                }
                for tid, chs in by_topic.items()
            ],
        }
        resp = await self._rpc(ApiKey.ALTER_PARTITION, body)
        return ApiError(resp.error_code), [
            IsrResult(
                t.topic_id,
                p.partition_index,
                ApiError(p.error_code),
                PartitionInfo((), tuple(p.isr), p.leader_id, p.leader_epoch, p.partition_epoch),
            )
            for t in resp.topics
            for p in t.partitions
        ]


def assignments_body(
    broker_id: int, broker_epoch: int, assignments: Sequence[DirAssignment]
) -> dict[str, Any]:
    """An AssignReplicasToDirs request: directories, then topics, then partitions."""
    tree: dict[UUID, dict[UUID, list[int]]] = {}
    for dir_id, tid, idx in assignments:
        tree.setdefault(dir_id, {}).setdefault(tid, []).append(idx)
    return {
        "broker_id": broker_id,
        "broker_epoch": broker_epoch,
        "directories": [
            {
                "id_": d,
                "topics": [
                    {"topic_id": t, "partitions": [{"partition_index": i} for i in ps]}
                    for t, ps in topics.items()
                ],
            }
            for d, topics in tree.items()
        ],
    }


def assignments_result(resp: Any) -> tuple[ApiError, list[DirAssignmentResult]]:
    return ApiError(resp.error_code), [
        (d.id_, t.topic_id, p.partition_index, ApiError(p.error_code))
        for d in resp.directories
        for t in d.topics
        for p in t.partitions
    ]
