"""Admin requests (kio messages, any version) as controller operations' arguments —
shared by the broker handlers that forward them and the controller listener that
receives them."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from keeperless.controller.quorum_controller import CreatePartitionsRequest, NewTopic

__all__ = ["config_changes", "delete_targets", "new_partitions", "new_topics"]


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
