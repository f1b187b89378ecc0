"""Share groups (KIP-932) on a broker, built once: the group coordinator's membership and
the partition leaders' fetch and acknowledge (apis.py), the share coordinator on
__share_group_state (coordinator.py) with the leaders' client of it
(persister.py), and the share-group offsets APIs (offsets.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from keeperless.group.coordinator import GroupCoordinator
from keeperless.group.offsets import GroupOffsets
from keeperless.protocol.apis import ApiKey
from keeperless.share.apis import ShareApis, ShareSettings
from keeperless.share.coordinator import ShareCoordinator, ShareCoordinatorSettings
from keeperless.share.offsets import ShareOffsetsApis
from keeperless.share.persister import SharePersister

__all__ = ["ShareGroups"]


def persister_budget_s(config: Any, settings: ShareCoordinatorSettings) -> float:
    """How long a leader keeps asking for a share-partition's state to be read or
    written: through one move of the coordinator's partition, a crashed coordinator's
    included - fenced after broker.session.timeout.ms, then loaded and written (Kafka's
    persister tries five times, 1, 2, 4 and 8 s apart). Shorter, an acknowledgement
    failed over a kill -9 of the coordinator's broker (found by a fresh-eyes trial: the
    move took 10.6 s, the budget was 10 s) and its records were delivered again."""
    return float(config["broker.session.timeout.ms"] + 2 * settings.write_timeout_ms) / 1000


class ShareGroups:
    def __init__(self, groups: GroupCoordinator, config: Any) -> None:
        self.apis = ShareApis(groups, ShareSettings.of(config))
        settings = ShareCoordinatorSettings.of(config)
        self.coordinator = ShareCoordinator(groups.broker, settings)
        groups.share_coordinator = self.coordinator  # FindCoordinator key type 2
        self.apis.persister = SharePersister(
            groups.broker, self.coordinator, persister_budget_s(config, settings)
        )
        self.offsets = ShareOffsetsApis(self.apis)

    def registrations(self, group_offsets: GroupOffsets) -> list[tuple[str, dict[ApiKey, Any]]]:
        """(owner, handlers) for the broker listener's registry; DeleteGroups (the group
        coordinator's) deletes a share group's state through offsets.py."""
        group_offsets.delete_share_group = self.offsets.delete_group
        return [
            ("share groups (KIP-932)", self.apis.handlers()),
            ("the share coordinator", self.coordinator.handlers()),
            ("share-group offsets", self.offsets.handlers()),
        ]

    def periodic(self, config: Any) -> list[tuple[int, Callable[[], object]]]:
        """(interval in ms, what to do): expired locks, sessions and members; the records
        of __share_group_state no state needs; fresh snapshots of idle share-partitions."""
        k = "share.coordinator."
        return [
            (500, self.apis.tick),
            (config[k + "state.topic.prune.interval.ms"], self.coordinator.prune),
            (config[k + "cold.partition.snapshot.interval.ms"],
             self.coordinator.refresh_snapshots),
        ]  # fmt: skip
