"""Kafka Connect's group protocol (``ConnectProtocol`` V0, the eager "default" protocol):
what a worker says about itself in JoinGroup, the assignment the leader hands out in
SyncGroup, and the leader's assignor (Kafka's ``EagerAssignor``: connectors, then tasks,
round-robin over the members sorted by id). Pure: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "CONNECTOR_TASK",
    "PROTOCOL_NAME",
    "PROTOCOL_TYPE",
    "Assignment",
    "WorkerState",
    "assign",
    "decode_assignment",
    "decode_metadata",
    "encode_assignment",
    "encode_metadata",
]

PROTOCOL_TYPE = "connect"
PROTOCOL_NAME = "default"
CONNECTOR_TASK = -1  # the connector itself, in an assignment's task list
NO_ERROR = 0


@dataclass(frozen=True, slots=True)
class WorkerState:
    url: str
    config_offset: int


@dataclass(frozen=True, slots=True)
class Assignment:
    error: int
    leader: str
    leader_url: str
    config_offset: int
    connectors: tuple[str, ...] = ()
    tasks: tuple[tuple[str, int], ...] = ()
    # the whole group, for the leader (not on the wire)
    members: Mapping[str, str] = field(default_factory=dict)


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> int:
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(v)

    def string(self) -> str:
        n = self.take(">h")
        s = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return s


def encode_metadata(state: WorkerState) -> bytes:
    return struct.pack(">h", 0) + _string(state.url) + struct.pack(">q", state.config_offset)


def decode_metadata(data: bytes) -> WorkerState:
    r = _Reader(data)
    r.take(">h")  # version; later versions only add fields after these
    return WorkerState(r.string(), r.take(">q"))


def encode_assignment(a: Assignment) -> bytes:
    by_connector: dict[str, list[int]] = {}
    for c in a.connectors:
        by_connector.setdefault(c, []).append(CONNECTOR_TASK)
    for c, t in a.tasks:
        by_connector.setdefault(c, []).append(t)
    out = [
        struct.pack(">hh", 0, a.error),
        _string(a.leader),
        _string(a.leader_url),
        struct.pack(">qi", a.config_offset, len(by_connector)),
    ]
    for c, ids in by_connector.items():
        out.append(_string(c) + struct.pack(">i", len(ids)))
        out.append(b"".join(struct.pack(">i", i) for i in ids))
    return b"".join(out)


def decode_assignment(data: bytes) -> Assignment:
    r = _Reader(data)
    r.take(">h")
    error = r.take(">h")
    leader, leader_url = r.string(), r.string()
    offset = r.take(">q")
    connectors: list[str] = []
    tasks: list[tuple[str, int]] = []
    for _ in range(r.take(">i")):
        name = r.string()
        for _ in range(r.take(">i")):
            t = r.take(">i")
            if t == CONNECTOR_TASK:
                connectors.append(name)
            else:
                tasks.append((name, t))
    return Assignment(error, leader, leader_url, offset, tuple(connectors), tuple(tasks))


def assign(
    leader: str,
    members: Mapping[str, WorkerState],
    config_offset: int,
    connectors: Sequence[str],
    tasks: Sequence[tuple[str, int]],
) -> dict[str, Assignment]:
    """The leader's assignment for every member. A member whose config offset is behind
    the leader's still gets work: it reads the config topic to that offset first."""
    ids = sorted(members)
    leader_url = members[leader].url
    mine: dict[str, tuple[list[str], list[tuple[str, int]]]] = {m: ([], []) for m in ids}
    i = 0
    for c in sorted(connectors):
        mine[ids[i % len(ids)]][0].append(c)
        i += 1
    for t in sorted(tasks):
        mine[ids[i % len(ids)]][1].append(t)
        i += 1
    urls = {m: s.url for m, s in members.items()}
    return {
        m: Assignment(NO_ERROR, leader, leader_url, config_offset, tuple(cs), tuple(ts), urls)
        for m, (cs, ts) in mine.items()
    }
