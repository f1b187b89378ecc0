"""AlterPartitionReassignments (45) and ListPartitionReassignments (46) as kio messages,
any version: what a request asks and how an answer is written, shared by the brokers
(which forward both) and the controller."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.metadata.admin import ApiError
from keeperless.metadata.image import PartitionInfo
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import response_class

__all__ = ["alter_response", "list_response", "reassignment_targets"]


def reassignment_targets(req: Any) -> list[tuple[str, int, tuple[int, ...] | None]]:
    """(topic, partition, target replicas or None to cancel), in request order."""
    return [
        (t.name, p.partition_index, None if p.replicas is None else tuple(p.replicas))
        for t in req.topics
        for p in t.partitions
    ]


def alter_response(
    version: int,
    results: Sequence[tuple[str, int, ApiError]],
    error: ApiError | None = None,
) -> Any:
    """Per partition results grouped by topic (in request order), or one error for all."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for name, p, err in results:
        e = error or err
        topics.setdefault(name, []).append(
            {"partition_index": p, "error_code": e.code, "error_message": e.message}
        )
    top = error or ApiError.none()
    return build(
        response_class(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version),
        {
            "throttle_time": 0,
            "allow_replication_factor_change": True,
            "error_code": top.code,
            "error_message": top.message,
            "responses": [{"name": n, "partitions": ps} for n, ps in topics.items()],
        },
    )


def list_response(
    version: int,
    found: Sequence[tuple[str, int, PartitionInfo]],
    error: ApiError | None = None,
) -> Any:
    topics: dict[str, list[dict[str, Any]]] = {}
    for name, p, info in found:
        topics.setdefault(name, []).append({
            "partition_index": p,
            "replicas": list(info.replicas),
            "adding_replicas": list(info.adding),
            "removing_replicas": list(info.removing),
        })  # fmt: skip
    top = error or ApiError.none()
    return build(
        response_class(ApiKey.LIST_PARTITION_REASSIGNMENTS, version),
        {
            "throttle_time": 0,
            "error_code": top.code if top.code else ErrorCode.none,
            "error_message": top.message,
            "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()],
        },
    )
