"""What the three internal topics hold, replayed: connector and task configurations and
target states (config topic), connector, task and topic statuses (status topic), and
source offsets (offset topic), with Kafka Connect's record keys and JSON values, so any
tool that reads these topics sees what it expects. Pure: records in, state out; the
records to write are built here too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ConfigState",
    "OffsetState",
    "StatusState",
    "connector_key",
    "offset_key",
]

STATES = ("STARTED", "PAUSED", "STOPPED")


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _loads(value: bytes | None) -> Any:
    return None if value is None else json.loads(value)


def connector_key(name: str) -> str:
    return f"connector-{name}"


def offset_key(connector: str, partition: Mapping[str, Any]) -> bytes:
    return _dumps([connector, dict(partition)])


# --- config topic ------------------------------------------------------------------


def connector_config_record(
    name: str, config: Mapping[str, str] | None
) -> tuple[str, bytes | None]:
    return connector_key(name), None if config is None else _dumps({"properties": dict(config)})


def task_config_record(name: str, task: int, config: Mapping[str, str]) -> tuple[str, bytes]:
    return f"task-{name}-{task}", _dumps({"properties": dict(config)})


def commit_record(name: str, tasks: int) -> tuple[str, bytes]:
    return f"commit-{name}", _dumps({"tasks": tasks})


def target_state_record(name: str, state: str | None) -> tuple[str, bytes | None]:
    if state is None:
        return f"target-state-{name}", None
    # Kafka writes STOPPED as PAUSED in "state" for workers that predate it
    legacy = "PAUSED" if state == "STOPPED" else state
    return f"target-state-{name}", _dumps({"state": legacy, "state.v2": state})


def restart_record(name: str, include_tasks: bool, only_failed: bool) -> tuple[str, bytes]:
    return f"restart-connector-{name}", _dumps(
        {"include-tasks": include_tasks, "only-failed": only_failed}
    )


@dataclass(slots=True)
class ConfigState:
    """Kafka's ClusterConfigState, replayed from the config topic."""

    offset: int = -1
    connectors: dict[str, dict[str, str]] = field(default_factory=dict)
    target_states: dict[str, str] = field(default_factory=dict)
    tasks: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    pending: dict[str, dict[int, dict[str, str]]] = field(default_factory=dict)
    restarts: dict[str, tuple[bool, bool]] = field(default_factory=dict)

    def apply(self, offset: int, key: str, value: bytes | None) -> str | None:
        """Replay one record; returns the connector it concerns, if any."""
        self.offset = offset
        doc = _loads(value)
        if key.startswith("target-state-"):
            name = key[len("target-state-") :]
            if doc is None:
                self.target_states.pop(name, None)
            else:
                state = doc.get("state.v2") or doc.get("state")
                if state in STATES:
                    self.target_states[name] = state
            return name
        if key.startswith("connector-"):
            name = key[len("connector-") :]
            if doc is None:
                self.connectors.pop(name, None)
                self.tasks.pop(name, None)
                self.pending.pop(name, None)
                self.target_states.pop(name, None)
            else:
                self.connectors[name] = dict(doc["properties"])
                self.target_states.setdefault(name, "STARTED")
            return name
        if key.startswith("task-"):
            name, _, index = key[len("task-") :].rpartition("-")
            if doc is not None and index.isdigit():
                self.pending.setdefault(name, {})[int(index)] = dict(doc["properties"])
            return None
        if key.startswith("commit-"):
            name = key[len("commit-") :]
            count = int(doc["tasks"]) if doc else 0
            got = self.pending.pop(name, {})
            if all(i in got for i in range(count)):
                self.tasks[name] = [got[i] for i in range(count)]
            return name
        if key.startswith("restart-connector-"):
            name = key[len("restart-connector-") :]
            if doc is not None:
                self.restarts[name] = (bool(doc["include-tasks"]), bool(doc["only-failed"]))
            return name
        return None

    def target(self, name: str) -> str:
        return self.target_states.get(name, "STARTED")

    def all_tasks(self) -> list[tuple[str, int]]:
        return [
            (c, i) for c, ts in self.tasks.items() if c in self.connectors for i in range(len(ts))
        ]


# --- status topic ------------------------------------------------------------------


def status_record(
    kind: str,
    name: str,
    task: int | None,
    state: str | None,
    trace: str | None,
    worker_id: str,
    generation: int,
) -> tuple[str, bytes | None]:
    key = f"status-connector-{name}" if task is None else f"status-task-{name}-{task}"
    if state is None:
        return key, None
    value = {"state": state, "trace": trace, "worker_id": worker_id, "generation": generation}
    return key, _dumps(value)


def topic_record(topic: str, connector: str, task: int, ts_ms: int) -> tuple[str, bytes]:
    value = {
        "topic": {"name": topic, "connector": connector, "task": task, "discoverTimestamp": ts_ms}
    }
    return f"status-topic-{topic}:connector-{connector}", _dumps(value)


@dataclass(slots=True)
class StatusState:
    connectors: dict[str, dict[str, Any]] = field(default_factory=dict)
    tasks: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    topics: dict[str, dict[str, int]] = field(default_factory=dict)  # connector -> topic -> ts

    def apply(self, key: str, value: bytes | None) -> None:
        doc = _loads(value)
        if key.startswith("status-connector-"):
            name = key[len("status-connector-") :]
            if doc is None:
                self.connectors.pop(name, None)
            else:
                self.connectors[name] = doc
        elif key.startswith("status-task-"):
            name, _, index = key[len("status-task-") :].rpartition("-")
            if not index.isdigit():
                return
            if doc is None:
                self.tasks.pop((name, int(index)), None)
            else:
                self.tasks[(name, int(index))] = doc
        elif key.startswith("status-topic-"):
            topic, _, connector = key[len("status-topic-") :].partition(":connector-")
            if doc is None:
                self.topics.get(connector, {}).pop(topic, None)
            else:
                ts = int(doc["topic"].get("discoverTimestamp", 0))
                self.topics.setdefault(connector, {})[topic] = ts


# --- offset topic ------------------------------------------------------------------


@dataclass(slots=True)
class OffsetState:
    """Source offsets by connector and source partition (as canonical JSON)."""

    offsets: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        try:
            name, partition = json.loads(key)
        except (ValueError, TypeError):
            return  # not a key Connect writes; Kafka skips these too
        if not isinstance(name, str) or not isinstance(partition, dict):
            return
        pkey = json.dumps(partition, sort_keys=True)
        mine = self.offsets.setdefault(name, {})
        if value is None:
            mine.pop(pkey, None)
        else:
            mine[pkey] = json.loads(value)

    def get(self, connector: str, partition: Mapping[str, Any]) -> dict[str, Any] | None:
        return self.offsets.get(connector, {}).get(json.dumps(dict(partition), sort_keys=True))

    def of(self, connector: str) -> list[dict[str, Any]]:
        return [
            {"partition": json.loads(p), "offset": o}
            for p, o in sorted(self.offsets.get(connector, {}).items())
        ]
