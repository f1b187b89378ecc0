"""A transaction version 2 producer for the Jepsen workload, and the delayed-marker fault
(issue 29): no Python client speaks TV2, so this process speaks it request by request
as Kafka's Java client does once ApiVersions shows ``transaction.version=2`` - Produce
v12 (the leader adds the partition), EndTxn v5 (the next epoch in its answer), no
AddPartitionsToTxn.

The fault: now and then, while a transaction is open on a partition the previous one
also wrote, a copy of the previous transaction's marker is sent to that partition's
leader - what a coordinator's marker delayed on the network past the producer's next
transaction would do (Jepsen's finding on Kafka with TV1). Under TV2 the copy carries
an epoch that is not newer than the open transaction's, and must be refused; if it were
taken, the next transaction's records would be ended by it and the checker would see
aborted reads or lost writes. Every copy sent and the answer are in the history."""

from __future__ import annotations

import contextlib
import datetime
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from keeperless.protocol.apis import ApiKey
from keeperless.protocol.records import build_batch
from keeperless.tools.client import call
from keeperless.tools.errors import ToolError
from tests.chaos.history import History

__all__ = ["Tv2Producer"]

# moved, timed out, loading, not enough replicas (before or after the append: the retry
# is deduplicated by its sequence), concurrent transactions
_RETRIABLE = {6, 7, 13, 14, 15, 16, 19, 20, 51}
_MAX_OPS = 2000


class _Gone(Exception):
    """The producer cannot go on (fenced, or the outcome is unknown): a new one starts."""


class Tv2Producer:
    def __init__(
        self,
        bootstrap: str,
        topic: str,
        keys: int,
        history: History,
        stop: threading.Event,
        rng: random.Random,
        next_value: Callable[[], int],
        name: str = "jepsen-tv2-0",
    ) -> None:
        self.servers = [
            (h, int(p)) for h, _, p in (s.rpartition(":") for s in bootstrap.split(","))
        ]
        self.topic, self.keys, self.history, self.stop = topic, keys, history, stop
        self.rng, self.next_value, self.name = rng, next_value, name
        self.leaders: dict[int, tuple[str, int]] = {}
        self.late_copies = {"sent": 0, "refused": 0, "taken": 0}

    # -- plumbing ---------------------------------------------------------------------

    def _refresh(self) -> None:
        md = call(self.servers, ApiKey.METADATA, 12, {
            "topics": [{"name": self.topic, "topic_id": None}],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False,
        })  # fmt: skip
        brokers = {b.node_id: (b.host, b.port) for b in md.brokers}
        for t in md.topics:
            for p in t.partitions:
                if p.leader_id in brokers:
                    self.leaders[p.partition_index] = brokers[p.leader_id]

    def _coordinator(self) -> list[tuple[str, int]]:
        resp = call(self.servers, ApiKey.FIND_COORDINATOR, 4,
                    {"key_type": 1, "coordinator_keys": [self.name]})  # fmt: skip
        c = resp.coordinators[0]
        if int(c.error_code) != 0:
            raise ToolError(f"no transaction coordinator: {c.error_code}")
        return [(c.host, c.port)]

    def _retry(self, f: Callable[[], Any], ok: Callable[[Any], bool], deadline_s: float) -> Any:
        """f until ok (or a non-retriable answer), while the cluster recovers."""
        end = time.monotonic() + deadline_s
        while True:
            try:
                r = f()
                if ok(r) or self.stop.is_set() or time.monotonic() > end:
                    return r
            except (ToolError, OSError) as e:
                if self.stop.is_set() or time.monotonic() > end:
                    raise _Gone(str(e)) from e
            time.sleep(0.2)
            with contextlib.suppress(ToolError, OSError):
                self._refresh()

    def _init(self) -> tuple[int, int]:
        def once() -> Any:
            return call(self._coordinator(), ApiKey.INIT_PRODUCER_ID, 5, {
                "transactional_id": self.name,
                "transaction_timeout": datetime.timedelta(seconds=20),
                "producer_id": -1, "producer_epoch": -1})  # fmt: skip

        r = self._retry(once, lambda r: int(r.error_code) == 0, 60)
        if int(r.error_code) != 0:
            raise _Gone(f"InitProducerId: {r.error_code}")
        return int(r.producer_id), int(r.producer_epoch)

    def _produce(self, pid: int, epoch: int, seq: int, key: int, value: int) -> int:
        batch = build_batch([(None, str(value).encode(), ())], producer_id=pid,
                            producer_epoch=epoch, base_sequence=seq,
                            transactional=True)  # fmt: skip

        def once() -> Any:
            if key not in self.leaders:
                self._refresh()
            return call([self.leaders[key]], ApiKey.PRODUCE, 12, {
                "transactional_id": self.name, "acks": -1,
                "timeout": datetime.timedelta(seconds=10),
                "topic_data": [{"name": self.topic,
                                "partition_data": [{"index": key, "records": batch}]}],
            }).responses[0].partition_responses[0]  # fmt: skip

        pr = self._retry(once, lambda r: int(r.error_code) not in _RETRIABLE, 30)
        if int(pr.error_code) != 0:
            raise _Gone(f"Produce: {pr.error_code}")
        return int(pr.base_offset)

    def _end(self, pid: int, epoch: int, commit: bool) -> tuple[int, int]:
        def once() -> Any:
            return call(self._coordinator(), ApiKey.END_TXN, 5, {
                "transactional_id": self.name, "producer_id": pid, "producer_epoch": epoch,
                "committed": commit})  # fmt: skip

        r = self._retry(once, lambda r: int(r.error_code) not in _RETRIABLE, 30)
        if int(r.error_code) != 0:
            raise _Gone(f"EndTxn: {r.error_code}")
        return int(r.producer_id), int(r.producer_epoch)

    def _late_copy(self, key: int, marker: tuple[int, int, bool]) -> None:
        """The previous transaction's marker, again, while this one is open on ``key``."""
        pid, epoch, commit = marker
        try:
            r = call([self.leaders[key]], ApiKey.WRITE_TXN_MARKERS, 2, {"markers": [{
                "producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
                "coordinator_epoch": 0, "transaction_version": 2,
                "topics": [{"name": self.topic, "partition_indexes": [key]}]}]})  # fmt: skip
            code = int(r.markers[0].topics[0].partitions[0].error_code)
        except (ToolError, OSError, KeyError, IndexError):
            return
        self.late_copies["sent"] += 1
        self.late_copies["taken" if code == 0 else "refused"] += 1
        self.history.info(self.name, "late-marker",
                          {"partition": key, "epoch": epoch, "error_code": code})  # fmt: skip

    def _tv2_finalized(self) -> bool:
        """As Kafka's client decides: transaction.version >= 2 in ApiVersions."""
        try:
            r = call(self.servers, ApiKey.API_VERSIONS, 3, {
                "client_software_name": "jepsen-tv2", "client_software_version": "1"})  # fmt: skip
        except (ToolError, OSError):
            return False
        levels = {f.name: f.max_version_level for f in r.finalized_features}
        return int(levels.get("transaction.version", 0)) >= 2

    # -- the process ------------------------------------------------------------------

    def run(self) -> None:
        h = self.history
        pid = epoch = -1
        seqs: dict[int, int] = {}
        last: tuple[set[int], tuple[int, int, bool]] | None = None
        for _ in range(_MAX_OPS):
            if self.stop.is_set():
                return
            if pid < 0:
                if not self._tv2_finalized():
                    time.sleep(1.0)
                    continue
                try:
                    pid, epoch = self._init()
                except _Gone:
                    time.sleep(1.0)
                    continue
                h.info(self.name, "restart")
                seqs, last = {}, None
            keys = self.rng.sample(range(self.keys), self.rng.randint(1, 2))
            op = h.invoke(self.name, "txn")
            mops: list[Any] = []
            commit = self.rng.random() >= 0.1
            try:
                for key in keys:
                    v = self.next_value()
                    mops.append(["send", str(key), v, -1])
                    off = self._produce(pid, epoch, seqs.get(key, 0), key, v)
                    seqs[key] = seqs.get(key, 0) + 1
                    mops[-1][3] = off
                if last is not None and self.rng.random() < 0.3:
                    shared = [k for k in keys if k in last[0]]
                    if shared:
                        self._late_copy(shared[0], last[1])
                commit_at = h.now()
                new_pid, new_epoch = self._end(pid, epoch, commit)
            except _Gone as e:
                h.complete(op, self.name, "info", "txn", {"mops": mops, "error": str(e)[:200]})
                pid = -1
                continue
            if commit:
                h.complete(op, self.name, "ok", "txn", {"mops": mops, "commit_at": commit_at})
            else:
                h.complete(op, self.name, "fail", "txn", {"mops": mops, "aborted": "by choice"})
            # the markers this transaction's end wrote carry epoch + 1 (TV2)
            last = (set(keys), (pid, epoch + 1, commit))
            if new_pid != pid:
                h.info(self.name, "restart")  # a new producer id: its epoch ran out
            pid, epoch, seqs = new_pid, new_epoch, {}
            time.sleep(0.05)
