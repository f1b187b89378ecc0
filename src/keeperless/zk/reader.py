"""Reading a ZooKeeper-mode Kafka cluster's znodes with kazoo (the ZooKeeper client):
a snapshot of every znode zk/layout.py reads, path -> data, under an optional chroot
(``host:port[,host:port]/chroot``, as Kafka's ``zookeeper.connect``)."""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

__all__ = ["ROOTS", "ZkUnreachable", "connect_client", "read_tree", "read_znodes"]

# what a migration reads; change notifications (/config/changes, /kafka-acl-changes...)
# and the ISR/log-dir event queues are not metadata
ROOTS = ("/cluster", "/controller", "/controller_epoch", "/brokers", "/config",
         "/kafka-acl", "/kafka-acl-extended", "/latest_producer_id_block", "/admin",
         "/feature")  # fmt: skip
_SKIP = frozenset({"/config/changes", "/brokers/seqid"})
# znodes asked at once (ZooKeeper throttles a client past ~1000 outstanding requests)
_PIPELINE = 250

log = logging.getLogger(__name__)


class ZkUnreachable(Exception):
    """ZooKeeper could not be read."""


def connect_client(connect: str, timeout_s: float = 10.0) -> KazooClient:
    """A started kazoo client of ``connect`` (its chroot, if it names one)."""
    zk = KazooClient(hosts=connect, timeout=timeout_s, connection_retry={"max_tries": 1})
    try:
        zk.start(timeout=timeout_s)
    except KazooTimeoutError:
        zk.close()
        raise ZkUnreachable(
            f"no ZooKeeper answered at {connect} within {timeout_s:.0f} s"
        ) from None
    return zk


def read_znodes(
    zk: KazooClient, roots: tuple[str, ...], timeout_s: float = 10.0
) -> dict[str, bytes | None]:
    """Every znode under ``roots`` with its data (None: none), a level at a time."""
    tree: dict[str, bytes | None] = {}
    level = [r for r in roots if r not in _SKIP]
    while level:  # a level at a time, its requests pipelined (not a round trip each)
        batch, level = level[:_PIPELINE], level[_PIPELINE:]
        asked = [(path, zk.get_async(path), zk.get_children_async(path)) for path in batch]
        for path, data_req, children_req in asked:
            try:
                data, _stat = data_req.get(timeout=timeout_s)
                children = children_req.get(timeout=timeout_s)
            except NoNodeError:
                continue  # gone meanwhile, or never there (an optional root)
            tree[path] = data if data else None
            level += [c for c in (f"{path}/{n}" for n in children) if c not in _SKIP]
    return tree


def read_tree(connect: str, timeout_s: float = 10.0) -> dict[str, bytes | None]:
    """Every znode under ROOTS (the chroot's, if ``connect`` names one) with its data."""
    zk = connect_client(connect, timeout_s)
    try:
        return read_znodes(zk, ROOTS, timeout_s)
    except (KazooException, KazooTimeoutError) as e:
        raise ZkUnreachable(f"reading ZooKeeper at {connect}: {type(e).__name__} {e}") from e
    finally:
        zk.stop()
        zk.close()
