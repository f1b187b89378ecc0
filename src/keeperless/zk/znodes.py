"""The metadata image as a ZooKeeper-mode Kafka 3.x cluster lays it out (``zk/layout.py``
reads the same znodes back): what the active controller writes to ZooKeeper while a
migration is in dual-write mode, so that the ZooKeeper-mode cluster could still be
rolled back to until the migration is finalized (Kafka's ``KRaftMigrationZkWriter``).

Written, each under its root: topics (``/brokers/topics/<t>`` with the assignment and
topic id, each partition's ``state``), topic and broker configs (``/config/topics``,
``/config/brokers``), client quotas and SCRAM credentials (``/config/users``,
``/config/clients``, ``/config/ips``), ACLs (``/kafka-acl``, ``/kafka-acl-extended``)
and the producer-id block (``/latest_producer_id_block``). ``changes`` turns the znodes
as they are into the znodes as they should be: creations (parents first), updates and
deletions (children first), nothing else under those roots touched twice.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from keeperless.metadata.image import BROKER_RESOURCE, MetadataImage
from keeperless.security.authorizer import AclOp, Resource
from keeperless.storage.meta_properties import uuid_to_kafka
from keeperless.zk.records import password_config

__all__ = [
    "MANAGED_ROOTS",
    "PRODUCER_ID_BLOCK",
    "ZnodeOp",
    "changes",
    "image_znodes",
    "sanitize",
    "with_unmigrated",
]

# the roots whose children dual-write owns (what is under them and not in the image goes)
MANAGED_ROOTS = (
    "/brokers/topics",
    "/config/topics",
    "/config/brokers",
    "/config/users",
    "/config/clients",
    "/config/ips",
    "/kafka-acl",
    "/kafka-acl-extended",
)
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
_BLOCK = 1000  # Kafka's producer-id block size
_SCRAM = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
_RESOURCE = {
    Resource.TOPIC: "Topic",
    Resource.GROUP: "Group",
    Resource.CLUSTER: "Cluster",
    Resource.TRANSACTIONAL_ID: "TransactionalId",
    Resource.DELEGATION_TOKEN: "DelegationToken",
    Resource.USER: "User",
}
_PERMISSION = {2: "Deny", 3: "Allow"}
_QUOTA_ROOT = {"user": "users", "client-id": "clients", "ip": "ips"}


def _j(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=False).encode()


def sanitize(name: str | None) -> str:
    """A user or client name as a znode name (Kafka's Sanitizer: URL encoding, a space
    %20, * %2A); None, the default entity, ``<default>``."""
    if name is None:
        return "<default>"
    return urllib.parse.quote(name, safe=".-_").replace("~", "%7E")


def _operation(op: int) -> str:
    return "".join(w.capitalize() for w in AclOp(op).name.split("_"))  # CLUSTER_ACTION


def _config_doc(config: Mapping[str, str]) -> bytes:
    return _j({"version": 1, "config": dict(sorted(config.items()))})


def _quota_value(v: float) -> str:
    """A whole rate as kafka-configs.sh stored it (2048), else as a double (0.5)."""
    return str(int(v)) if float(v).is_integer() else str(float(v))


def image_znodes(
    image: MetadataImage, controller_epoch: int, controller_id: int
) -> dict[str, bytes | None]:
    """path -> data of every znode under MANAGED_ROOTS (and the producer-id block) that
    the image makes (intermediate znodes without data: None)."""
    out: dict[str, bytes | None] = {}
    for t in sorted(image.topics.values(), key=lambda t: t.name):
        path = f"/brokers/topics/{t.name}"
        parts = sorted(t.partitions.items())
        out[path] = _j({
            "partitions": {str(i): list(p.replicas) for i, p in parts},
            "topic_id": uuid_to_kafka(t.topic_id),
            "adding_replicas": {str(i): list(p.adding) for i, p in parts if p.adding},
            "removing_replicas": {str(i): list(p.removing) for i, p in parts if p.removing},
            "version": 3,
        })  # fmt: skip
        out[f"{path}/partitions"] = None
        for i, p in parts:
            out[f"{path}/partitions/{i}"] = None
            out[f"{path}/partitions/{i}/state"] = _j({
                "controller_epoch": controller_epoch, "leader": p.leader, "version": 1,
                "leader_epoch": p.leader_epoch, "isr": list(p.isr),
            })  # fmt: skip
        out[f"/config/topics/{t.name}"] = _config_doc(image.topic_config(t.name))
    for (rtype, name), config in sorted(image.configs.items()):
        if rtype == BROKER_RESOURCE:
            # (never a password: ZooKeeper-mode brokers read them encrypted with their
            # password.encoder.secret, which the quorum does not have)
            plain = {k: v for k, v in config.items() if not password_config(k)}
            out[f"/config/brokers/{name or '<default>'}"] = _config_doc(plain)
    users: dict[str, dict[str, str]] = {}
    for (user, mechanism), cred in sorted(image.scram.items()):
        b64 = base64.b64encode
        users.setdefault(sanitize(user), {})[_SCRAM.get(mechanism, str(mechanism))] = (
            f"salt={b64(cred.salt).decode()},stored_key={b64(cred.stored_key).decode()},"
            f"server_key={b64(cred.server_key).decode()},iterations={cred.iterations}"
        )
    quota_docs: dict[str, dict[str, str]] = {}
    for entity, quotas in image.client_quotas.items():
        kinds = dict(entity)
        values = {k: _quota_value(v) for k, v in quotas.items()}
        if set(kinds) == {"user", "client-id"}:
            user = sanitize(kinds["user"])
            path = f"/config/users/{user}/clients/{sanitize(kinds['client-id'])}"
            quota_docs.setdefault(f"/config/users/{user}", {})
            out[f"/config/users/{user}/clients"] = None
        elif len(kinds) == 1:
            ((kind, entity_name),) = kinds.items()
            if kind not in _QUOTA_ROOT:
                continue
            path = f"/config/{_QUOTA_ROOT[kind]}/{sanitize(entity_name)}"
        else:
            continue  # (no such entity in ZooKeeper's layout)
        quota_docs.setdefault(path, {}).update(values)
    for user, creds in users.items():
        quota_docs.setdefault(f"/config/users/{user}", {}).update(creds)
    for path, config in quota_docs.items():
        out[path] = _config_doc(config)
    acls: dict[str, list[dict[str, str]]] = {}
    for a in image.acls.values():
        rtype = _RESOURCE.get(a.resource_type)  # type: ignore[call-overload]
        if rtype is None or a.pattern_type not in (3, 4):
            continue
        root = "/kafka-acl" if a.pattern_type == 3 else "/kafka-acl-extended/prefixed"
        if a.pattern_type == 4:
            out["/kafka-acl-extended/prefixed"] = None
        out[f"{root}/{rtype}"] = None
        acls.setdefault(f"{root}/{rtype}/{a.resource_name}", []).append({
            "principal": a.principal, "permissionType": _PERMISSION.get(a.permission_type, "Deny"),
            "operation": _operation(a.operation), "host": a.host,
        })  # fmt: skip
    for path, entries in acls.items():
        entries.sort(key=lambda e: (e["principal"], e["operation"], e["permissionType"], e["host"]))
        out[path] = _j({"version": 1, "acls": entries})
    if image.next_producer_id > 0:
        end = image.next_producer_id - 1
        out[PRODUCER_ID_BLOCK] = _j({
            "version": 1, "broker": controller_id,
            "block_start": str(max(0, end - _BLOCK + 1)), "block_end": str(end),
        })  # fmt: skip
    return out


def with_unmigrated(
    current: Mapping[str, bytes | None], wanted: dict[str, bytes | None]
) -> dict[str, bytes | None]:
    """``wanted`` keeping what ZooKeeper holds that was never migrated: the dynamic
    broker passwords, stored encrypted (a rollback's brokers still need them)."""
    out = dict(wanted)
    for path, data in current.items():
        if not path.startswith("/config/brokers/") or not data:
            continue
        try:
            kept = {
                k: v for k, v in json.loads(data).get("config", {}).items() if password_config(k)
            }
        except (ValueError, AttributeError, UnicodeDecodeError):
            continue
        if not kept:
            continue
        mine = out.get(path)
        config = json.loads(mine).get("config", {}) if mine else {}
        out[path] = _config_doc({**config, **kept})
    return out


@dataclass(frozen=True, slots=True)
class ZnodeOp:
    kind: str  # create, set, delete
    path: str
    data: bytes | None = None


def changes(
    current: Mapping[str, bytes | None], wanted: Mapping[str, bytes | None]
) -> list[ZnodeOp]:
    """What turns ``current`` (the managed znodes as they are) into ``wanted``: creations
    parents first, updates, then deletions children first. A znode's JSON is compared as
    JSON (ZooKeeper-mode Kafka wrote its keys in another order)."""
    ops: list[ZnodeOp] = []
    for path in sorted(wanted, key=lambda p: (p.count("/"), p)):
        data = wanted[path]
        if path not in current:
            ops.append(ZnodeOp("create", path, data))
        elif not _same(current[path], data):
            ops.append(ZnodeOp("set", path, data))
    gone = [p for p in current if p not in wanted and _managed(p)]
    for path in sorted(gone, key=lambda p: (-p.count("/"), p)):
        ops.append(ZnodeOp("delete", path))
    return ops


def _managed(path: str) -> bool:
    return path == PRODUCER_ID_BLOCK or any(path.startswith(r + "/") for r in MANAGED_ROOTS)


def _same(a: bytes | None, b: bytes | None) -> bool:
    if a == b or (not a and not b):
        return True
    if a is None or b is None:
        return False
    try:
        return bool(json.loads(a) == json.loads(b))
    except (ValueError, UnicodeDecodeError):
        return False
