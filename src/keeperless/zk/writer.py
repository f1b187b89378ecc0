"""Writing to a ZooKeeper-mode cluster's ZooKeeper while a migration is in dual-write mode
(Kafka's ``ZkMigrationClient``): the active controller claims ZooKeeper's controllership
(``/controller_epoch`` bumped if still at the version read, ``/controller`` naming it, so
that a ZooKeeper-mode controller left running is fenced), then writes the metadata's
changes in transactions that each check ``/controller_epoch`` is still its claim: a
controller that claimed after it fences its writes (ZkFenced)."""

from __future__ import annotations

import json
import time

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
)
from kazoo.handlers.threading import KazooTimeoutError

from keeperless.zk.reader import ROOTS, ZkUnreachable, connect_client, read_znodes
from keeperless.zk.znodes import MANAGED_ROOTS, PRODUCER_ID_BLOCK, ZnodeOp

__all__ = ["ZkFenced", "ZkWriter"]

_OPS_PER_TRANSACTION = 200  # (ZooKeeper's requests are 1 MiB at most)


class ZkFenced(Exception):
    """Another controller claimed ZooKeeper after this one: it no longer writes there."""


class ZkWriter:
    def __init__(self, connect: str, timeout_s: float = 10.0) -> None:
        self.connect = connect
        self.timeout_s = timeout_s
        self.zk: KazooClient = connect_client(connect, timeout_s)
        self.epoch = -1  # ZooKeeper's controller epoch this controller claimed
        self._epoch_version = -1  # /controller_epoch's version after the claim
        self._controller_doc = b""  # what /controller says of it

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()

    def read_all(self) -> dict[str, bytes | None]:
        """The znodes a migration reads (zk/reader.py's ROOTS)."""
        return self._read(ROOTS)

    def read_managed(self) -> dict[str, bytes | None]:
        """The znodes dual-write owns, as they are."""
        return self._read((*MANAGED_ROOTS, PRODUCER_ID_BLOCK))

    def _read(self, roots: tuple[str, ...]) -> dict[str, bytes | None]:
        try:
            return read_znodes(self.zk, roots, self.timeout_s)
        except (KazooException, KazooTimeoutError) as e:
            raise ZkUnreachable(f"reading ZooKeeper at {self.connect}: {e!r}") from e

    def claim(self, node_id: int, kraft_epoch: int) -> int:
        """Become ZooKeeper's controller; the controller epoch claimed."""
        zk = self.zk
        try:
            zk.ensure_path("/controller_epoch")
            while True:
                raw, stat = zk.get("/controller_epoch")
                epoch = (int(raw) if raw else 0) + 1
                self._newer_claim(node_id, kraft_epoch)
                doc = {"version": 2, "brokerid": node_id,
                       "timestamp": str(int(time.time() * 1000)),
                       "kraftControllerEpoch": kraft_epoch}  # fmt: skip
                self._controller_doc = json.dumps(doc).encode()
                tx = zk.transaction()
                tx.set_data("/controller_epoch", str(epoch).encode(), version=stat.version)
                if zk.exists("/controller"):
                    tx.delete("/controller")
                tx.create("/controller", self._controller_doc, ephemeral=True)
                results = tx.commit()
                if not any(isinstance(r, Exception) for r in results):
                    self.epoch, self._epoch_version = epoch, stat.version + 1
                    return epoch
                if not any(isinstance(r, (BadVersionError, NodeExistsError, NoNodeError))
                           for r in results):  # fmt: skip
                    raise ZkUnreachable(f"claiming ZooKeeper's controllership: {results!r}")
                # another claim (or a ZooKeeper-mode controller's) came between: again
        except (KazooException, KazooTimeoutError) as e:
            raise ZkUnreachable(f"claiming ZooKeeper at {self.connect}: {e!r}") from e

    def _newer_claim(self, node_id: int, kraft_epoch: int) -> None:
        """ZkFenced if ZooKeeper names a KRaft controller of a newer epoch (or another
        one of the same): a controller that lost its leadership unawares must not claim
        over its successor (Kafka's tryRegisterKRaftControllerAsActiveController)."""
        try:
            raw, _ = self.zk.get("/controller")
            doc = json.loads(raw)
            theirs, them = int(doc.get("kraftControllerEpoch", -1)), doc.get("brokerid")
        except NoNodeError:
            return
        except (ValueError, TypeError, AttributeError):
            return  # (not a controller's: claimed over)
        if theirs > kraft_epoch or (theirs == kraft_epoch and them != node_id):
            raise ZkFenced(f"ZooKeeper names KRaft controller {them} of epoch {theirs}, "
                           f"newer than this controller's {kraft_epoch}")  # fmt: skip

    def hold(self) -> None:
        """Still ZooKeeper's controller: ZkFenced if another claimed since; /controller
        written again if it went with an expired session (ZooKeeper-mode brokers would
        elect one of theirs at once)."""
        try:
            _, stat = self.zk.get("/controller_epoch")
            if stat.version != self._epoch_version:
                raise ZkFenced(f"ZooKeeper's controller epoch is no longer {self.epoch}: "
                               "another controller claimed ZooKeeper")  # fmt: skip
            if not self.zk.exists("/controller"):
                tx = self.zk.transaction()
                tx.check("/controller_epoch", self._epoch_version)
                tx.create("/controller", self._controller_doc, ephemeral=True)
                results = tx.commit()
                if isinstance(results[0], BadVersionError):
                    raise ZkFenced("another controller claimed ZooKeeper")
        except (KazooException, KazooTimeoutError) as e:
            raise ZkUnreachable(f"checking ZooKeeper at {self.connect}: {e!r}") from e

    def apply(self, ops: list[ZnodeOp]) -> None:
        """Write ``ops`` (in order), each transaction checking the claim still holds."""
        zk = self.zk
        try:
            for root in MANAGED_ROOTS:
                zk.ensure_path(root)
            for i in range(0, len(ops), _OPS_PER_TRANSACTION):
                tx = zk.transaction()
                tx.check("/controller_epoch", self._epoch_version)
                if not zk.exists("/controller"):  # (it went with an expired session)
                    tx.create("/controller", self._controller_doc, ephemeral=True)
                chunk = ops[i : i + _OPS_PER_TRANSACTION]
                for op in chunk:
                    if op.kind == "create":
                        tx.create(op.path, op.data or b"")
                    elif op.kind == "set":
                        tx.set_data(op.path, op.data or b"")
                    else:
                        tx.delete(op.path)
                results = tx.commit()
                if isinstance(results[0], BadVersionError):
                    raise ZkFenced(
                        f"ZooKeeper's controller epoch is no longer {self.epoch}: another "
                        "controller claimed ZooKeeper"
                    )
                failed = [
                    (op, r)
                    for op, r in zip(chunk, results[len(results) - len(chunk) :], strict=True)
                    if isinstance(r, Exception) and not isinstance(r, RolledBackError)
                ]
                if failed:
                    op, err = failed[0]
                    raise ZkUnreachable(f"writing {op.path} ({op.kind}): {type(err).__name__}")
        except (KazooException, KazooTimeoutError) as e:
            raise ZkUnreachable(f"writing ZooKeeper at {self.connect}: {e!r}") from e
