"""A controller driven as the active one is: records applied as appended, committed
later (the log itself is not needed for the controller's logic)."""

from __future__ import annotations

import random
import uuid
from typing import Any

from keeperless.controller.quorum_controller import QuorumController
from keeperless.metadata import _records_gen as r
from keeperless.metadata.admin import NewTopic


class ActiveLog:
    def __init__(self, c: QuorumController) -> None:
        self.c = c
        self.entries: list[tuple[list[Any], int]] = []
        self.history: list[tuple[list[Any], int]] = []  # what committed, in order
        self.offset = -1

    def append(self, records: list[Any]) -> None:
        if records:
            self.offset += len(records)
            self.c.replay(records, self.offset)
            self.entries.append((records, self.offset))

    def commit(self, n: int | None = None) -> None:
        n = len(self.entries) if n is None else n
        for records, last in self.entries[:n]:
            self.c.replay_committed(records, last)
            self.history.append((records, last))
        del self.entries[:n]


def active_cluster(level: int = 21) -> tuple[QuorumController, ActiveLog]:
    """Brokers 1-3 registered and unfenced; topics "a" (5 partitions, RF 2) and "b"
    (3 partitions, RF 3); everything committed."""
    c = QuorumController(
        1, random.Random(11), {"num.partitions": 5, "default.replication.factor": 2}
    )
    log = ActiveLog(c)
    log.append([r.FeatureLevelRecord(name="metadata.version", feature_level=level)])
    for b in (1, 2, 3):
        epoch = log.offset + 1
        log.append(c.register_broker(b, uuid.uuid4(), [("P", "h", b)], None, epoch, 0).records)
        log.append(c.broker_heartbeat(b, epoch, False, True, 0).all_records())
    log.append(c.create_topics([NewTopic("a"), NewTopic("b", 3, 3)], False).records)
    log.commit()
    return c, log
