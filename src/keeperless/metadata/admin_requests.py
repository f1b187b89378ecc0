"""Admin requests (kio messages, any version) as controller operations' arguments —
shared by the broker handlers that forward them and the controller listener that
receives them."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from kio.schema.errors import ErrorCode

from keeperless.metadata.admin import (
    AclFilter,
    CreatePartitionsRequest,
    NewTopic,
    QuotaAlteration,
)
from keeperless.metadata.image import AclEntry
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import response_class

__all__ = [
    "alter_configs_response",
    "config_changes",
    "create_partitions_response",
    "delete_targets",
    "delete_topics_response",
    "new_partitions",
    "new_topics",
    "unregister_response",
]


def new_topics(req: Any) -> list[NewTopic]:
    return [
        NewTopic(
            t.name,
            t.num_partitions,
            t.replication_factor,
            {a.partition_index: tuple(a.broker_ids) for a in t.assignments},
            {c.name: c.value for c in t.configs},
        )
        for t in req.topics
    ]


def new_partitions(req: Any) -> list[CreatePartitionsRequest]:
    return [
        CreatePartitionsRequest(
            t.name, t.count, [tuple(a.broker_ids) for a in t.assignments] if t.assignments else None
        )
        for t in req.topics
    ]


def delete_targets(req: Any, version: int) -> tuple[list[str], list[UUID]]:
    """(names, ids) of a DeleteTopics request; v6+ may name topics by id."""
    if version < 6:
        return list(req.topic_names), []
    names = [t.name for t in req.topics if t.name is not None]
    ids = [t.topic_id for t in req.topics if t.name is None and t.topic_id is not None]
    return names, ids


def config_changes(req: Any) -> list[tuple[int, str, list[tuple[str, int, str | None]]]]:
    """(resource type, name, [(key, operation, value)]) of IncrementalAlterConfigs."""
    return [
        (
            r.resource_type,
            r.resource_name,
            [(c.name, c.config_operation, c.value) for c in r.configs],
        )
        for r in req.resources
    ]


# -- responses shared by the broker (forwarding) and the controller listener ------------


def delete_topics_response(version: int, results: Any) -> Any:
    return build(
        response_class(ApiKey.DELETE_TOPICS, version),
        {
            "throttle_time": 0,
            "responses": [
                {"name": n, "topic_id": tid, "error_code": e.code, "error_message": e.message}
                for n, tid, e in results
            ],
        },
    )


def create_partitions_response(version: int, results: Any) -> Any:
    return build(
        response_class(ApiKey.CREATE_PARTITIONS, version),
        {
            "throttle_time": 0,
            "results": [
                {"name": n, "error_code": e.code, "error_message": e.message} for n, e in results
            ],
        },
    )


def legacy_config_sets(req: Any) -> list[tuple[int, str, list[tuple[str, str | None]]]]:
    """(resource type, name, [(key, value)]) of the legacy AlterConfigs: the whole set."""
    return [
        (r.resource_type, r.resource_name, [(c.name, c.value) for c in r.configs])
        for r in req.resources
    ]


def alter_configs_response(version: int, results: Any, api_key: int = 44) -> Any:
    return build(
        response_class(api_key, version),
        {
            "throttle_time": 0,
            "responses": [
                {
                    "error_code": e.code,
                    "error_message": e.message,
                    "resource_type": t,
                    "resource_name": n,
                }
                for t, n, e in results
            ],
        },
    )


def unregister_response(version: int, err: Any) -> Any:
    return build(
        response_class(ApiKey.UNREGISTER_BROKER, version),
        {"throttle_time": 0, "error_code": err.code, "error_message": err.message},
    )


def feature_updates(req: Any, version: int) -> list[tuple[str, int, int]]:
    """UpdateFeatures as (feature, level, upgrade type); v0's allow_downgrade means safe."""
    out = []
    for u in req.feature_updates:
        upgrade_type = (2 if u.allow_downgrade else 1) if version == 0 else int(u.upgrade_type)
        out.append((u.feature, int(u.max_version_level), upgrade_type))
    return out


def update_features_response(version: int, results: Any, top: Any = None) -> Any:
    if version >= 2 and top is None:
        # v2 has no per-feature results: the first failure is the answer
        top = next((e for _, e in results if e.code != ErrorCode.none), None)
    return build(
        response_class(ApiKey.UPDATE_FEATURES, version),
        {
            "throttle_time": 0,
            "error_code": top.code if top is not None else ErrorCode.none,
            "error_message": top.message if top is not None else None,
            "results": [
                {"feature": f, "error_code": e.code, "error_message": e.message} for f, e in results
            ],
        },
    )


def election_targets(req: Any) -> tuple[int, list[tuple[str, int]] | None]:
    if req.topic_partitions is None:
        return int(getattr(req, "election_type", 0)), None
    return int(getattr(req, "election_type", 0)), [
        (tp.topic, int(p)) for tp in req.topic_partitions for p in tp.partitions
    ]


def elect_leaders_response(version: int, results: Any, top: Any = None) -> Any:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, err in results:
        by_topic.setdefault(topic, []).append(
            {"partition_id": partition, "error_code": err.code, "error_message": err.message}
        )
    return build(
        response_class(ApiKey.ELECT_LEADERS, version),
        {
            "throttle_time": 0,
            "error_code": top.code if top is not None else ErrorCode.none,
            "replica_election_results": [
                {"topic": t, "partition_result": parts} for t, parts in by_topic.items()
            ],
        },
    )


def acl_creations(req: Any) -> list[AclEntry]:
    return [
        AclEntry(
            c.resource_type,
            c.resource_name,
            c.resource_pattern_type,
            c.principal,
            c.host,
            c.operation,
            c.permission_type,
        )
        for c in req.creations
    ]


def acl_filters(req: Any) -> list[AclFilter]:
    return [
        AclFilter(
            f.resource_type_filter,
            f.resource_name_filter,
            f.pattern_type_filter,
            f.principal_filter,
            f.host_filter,
            f.operation,
            f.permission_type,
        )
        for f in req.filters
    ]


def create_acls_response(version: int, results: Any) -> Any:
    return build(
        response_class(ApiKey.CREATE_ACLS, version),
        {
            "throttle_time": 0,
            "results": [{"error_code": e.code, "error_message": e.message} for e in results],
        },
    )


def delete_acls_response(version: int, results: Any, top: Any = None) -> Any:
    return build(
        response_class(ApiKey.DELETE_ACLS, version),
        {
            "throttle_time": 0,
            "filter_results": [
                {
                    "error_code": top.code if top is not None else ErrorCode.none,
                    "error_message": top.message if top is not None else None,
                    "matching_acls": [
                        {
                            "error_code": ErrorCode.none,
                            "error_message": None,
                            "resource_type": a.resource_type,
                            "resource_name": a.resource_name,
                            "pattern_type": a.pattern_type,
                            "principal": a.principal,
                            "host": a.host,
                            "operation": a.operation,
                            "permission_type": a.permission_type,
                        }
                        for a in removed
                    ],
                }
                for removed in results
            ],
        },
    )


def quota_alterations(req: Any) -> list[QuotaAlteration]:
    return [
        (
            tuple((e.entity_type, e.entity_name) for e in entry.entity),
            [(op.key, float(op.value), bool(op.remove)) for op in entry.ops],
        )
        for entry in req.entries
    ]


def alter_client_quotas_response(version: int, changes: Any, results: Any) -> Any:
    return build(
        response_class(ApiKey.ALTER_CLIENT_QUOTAS, version),
        {
            "throttle_time": 0,
            "entries": [
                {
                    "error_code": e.code,
                    "error_message": e.message,
                    "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                }
                for (entity, _), e in zip(changes, results, strict=True)
            ],
        },
    )


def scram_alterations(
    req: Any,
) -> tuple[list[tuple[str, int]], list[tuple[str, int, int, bytes, bytes]]]:
    return (
        [(d.name, int(d.mechanism)) for d in req.deletions],
        [
            (u.name, int(u.mechanism), int(u.iterations), bytes(u.salt), bytes(u.salted_password))
            for u in req.upsertions
        ],
    )


def alter_scram_response(version: int, results: Any) -> Any:
    return build(
        response_class(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, version),
        {
            "throttle_time": 0,
            "results": [
                {"user": u, "error_code": e.code, "error_message": e.message} for u, e in results
            ],
        },
    )
