"""The durable election state (`quorum-state`), written before a vote or leadership
takes effect, and the roles a replica takes. Encoding follows Kafka's quorum-state JSON
file. What one role alone knows is in roles.py."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

__all__ = ["ElectionState", "Role"]


@dataclass(frozen=True, slots=True)
class ElectionState:
    epoch: int = 0
    leader_id: int = -1
    voted_id: int = -1
    voters: tuple[int, ...] = ()

    def encode(self) -> bytes:
        return json.dumps(
            {
                "leaderId": self.leader_id,
                "leaderEpoch": self.epoch,
                "votedId": self.voted_id,
                "appliedOffset": 0,
                "currentVoters": [{"voterId": v} for v in self.voters],
                "data_version": 0,
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> ElectionState:
        try:
            obj = json.loads(data)
            return cls(
                epoch=int(obj["leaderEpoch"]),
                leader_id=int(obj["leaderId"]),
                voted_id=int(obj["votedId"]),
                voters=tuple(int(v["voterId"]) for v in obj.get("currentVoters") or ()),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"quorum-state is damaged: {e}") from None


class Role(enum.Enum):
    """The election states of Kafka's QuorumState."""

    UNATTACHED = "Unattached"
    PROSPECTIVE = "Prospective"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"
