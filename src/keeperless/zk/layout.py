"""A ZooKeeper-mode Kafka cluster's metadata as Kafka 3.x lays it out in ZooKeeper
(``kafka.zk.ZkData``), read from a snapshot of the znodes: path -> data.

- ``/cluster/id`` ``{"version":"1","id":...}``; ``/controller`` ``{"brokerid":...}``;
  ``/controller_epoch`` a number;
- ``/brokers/ids/<id>`` (endpoints, rack), ``/brokers/topics/<t>`` (``partitions``,
  ``adding_replicas``, ``removing_replicas``, ``topic_id``) and its
  ``partitions/<p>/state`` (``leader``, ``leader_epoch``, ``isr``, ``controller_epoch``);
- ``/config/{topics,brokers,clients,users,ips}/<name>`` ``{"version":1,"config":{...}}``
  (user and client names sanitized as Kafka's Sanitizer does; ``<default>`` the default
  entity; SCRAM credentials in a user's config as ``salt=...,stored_key=...,
  server_key=...,iterations=N``; ``/config/users/<u>/clients/<c>`` a user and client's
  quotas);
- ``/kafka-acl/<ResourceType>/<name>`` (literal) and
  ``/kafka-acl-extended/<pattern type>/<ResourceType>/<name>`` ``{"version":1,"acls":
  [{"principal","permissionType","operation","host"}]}``;
- ``/latest_producer_id_block`` ``{"broker","block_start","block_end"}``;
- ``/admin/reassign_partitions``, ``/admin/delete_topics/<t>``, ``/feature``.

Everything wrong is collected (path and what), so one run names every problem."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from keeperless.metadata.admin import validate_topic_name
from keeperless.metadata.config_catalog import BROKER_CONFIGS
from keeperless.metadata.topic_configs import (
    TOPIC_CONFIGS,
    TopicConfigError,
    validate_topic_configs,
)
from keeperless.storage.meta_properties import uuid_from_kafka

__all__ = [
    "QUOTA_KEYS",
    "ZkAcl",
    "ZkBroker",
    "ZkLayoutError",
    "ZkMetadata",
    "ZkPartition",
    "ZkScram",
    "ZkTopic",
    "parse_layout",
]

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# Kafka's client quota keys (QuotaConfig): the rest of a user's or client's config is not
# a quota (a user's SCRAM credentials are kept apart)
QUOTA_KEYS = frozenset({
    "producer_byte_rate", "consumer_byte_rate", "request_percentage",
    "controller_mutation_rate",
})  # fmt: skip
_IP_QUOTAS = frozenset({"connection_creation_rate"})
# every SCRAM mechanism name Kafka ever stored (only SHA-256 and SHA-512 are Kafka's)
SCRAM_KEYS = frozenset({"SCRAM-SHA-256", "SCRAM-SHA-512"})
DEFAULT_ENTITY = "<default>"


class ZkLayoutError(Exception):
    """The znodes are not a ZooKeeper-mode Kafka cluster's: each problem as (path, what)."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{p}: {what}" for p, what in problems))


@dataclass(frozen=True, slots=True)
class ZkBroker:
    broker_id: int
    endpoints: tuple[str, ...]
    rack: str | None


@dataclass(frozen=True, slots=True)
class ZkPartition:
    index: int
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ZkTopic:
    name: str
    topic_id: str | None  # Kafka's base64 form; None: written before Kafka 2.8
    partitions: dict[int, ZkPartition]
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ZkAcl:
    resource_type: str  # Topic, Group, Cluster, TransactionalId, DelegationToken, User
    pattern_type: str  # LITERAL, PREFIXED
    name: str
    principal: str
    host: str
    operation: str
    permission: str  # Allow, Deny


@dataclass(frozen=True, slots=True)
class ZkScram:
    user: str
    mechanism: str
    salt: str  # base64, as Kafka stores them
    stored_key: str
    server_key: str
    iterations: int


@dataclass
class ZkMetadata:
    cluster_id: str
    controller_id: int | None
    controller_epoch: int
    brokers: dict[int, ZkBroker]
    topics: dict[str, ZkTopic]
    broker_configs: dict[str, dict[str, str]]  # broker id or "" (the default) -> configs
    # (entity type, name or None for <default>) pairs -> quotas
    quotas: dict[tuple[tuple[str, str | None], ...], dict[str, float]]
    scram: list[ZkScram]
    acls: list[ZkAcl]
    producer_id_block_end: int | None  # the last producer id given out
    reassignments: dict[tuple[str, int], tuple[int, ...]]  # pending
    deleting: list[str]  # topics pending deletion
    features: dict[str, int]

    def refusals(self) -> list[str]:
        """Why a migration must not start (Kafka's migration driver checks these too)."""
        out = []
        if self.reassignments:
            some = ", ".join(f"{t}-{p}" for t, p in sorted(self.reassignments)[:5])
            out.append(f"a partition reassignment is in progress ({some}): wait for it "
                       "to complete or cancel it first")  # fmt: skip
        moving = sorted(
            f"{t.name}-{p.index}" for t in self.topics.values() for p in t.partitions.values()
            if p.adding or p.removing
        )  # fmt: skip
        if moving and not self.reassignments:
            out.append(f"partitions are being moved ({', '.join(moving[:5])}): wait for "
                       "the reassignment to complete first")  # fmt: skip
        if self.deleting:
            out.append(f"topics are pending deletion ({', '.join(sorted(self.deleting)[:5])}): "
                       "wait until they are deleted")  # fmt: skip
        return out


def _json(tree: Mapping[str, bytes | None], path: str, problems: list[tuple[str, str]]) -> Any:
    data = tree.get(path)
    if data is None:
        problems.append((path, "missing" if path not in tree else "empty"))
        return None
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        problems.append((path, f"not JSON ({e})"))
        return None


def _children(tree: Mapping[str, bytes | None], path: str) -> list[str]:
    prefix = path.rstrip("/") + "/"
    return sorted({p[len(prefix) :].split("/", 1)[0] for p in tree if p.startswith(prefix)})


_INT32 = range(-(2**31), 2**31)


def _ints(v: Any, path: str, what: str, problems: list[tuple[str, str]]) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(isinstance(x, int) and 0 <= x < 2**31 for x in v):
        problems.append((path, f"{what} is not a list of broker ids: {v!r}"))
        return ()
    return tuple(v)


def _config(
    tree: Mapping[str, bytes | None], path: str, problems: list[tuple[str, str]]
) -> dict[str, str]:
    doc = _json(tree, path, problems)
    if doc is None:
        return {}
    conf = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(conf, dict):
        problems.append((path, 'no "config" object'))
        return {}
    return {str(k): str(v) for k, v in conf.items()}


def _topic(
    tree: Mapping[str, bytes | None], name: str, problems: list[tuple[str, str]]
) -> ZkTopic | None:
    path = f"/brokers/topics/{name}"
    doc = _json(tree, path, problems)
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), dict):
        if doc is not None:
            problems.append((path, 'no "partitions" object'))
        return None
    adding = doc.get("adding_replicas") or {}
    removing = doc.get("removing_replicas") or {}
    parts: dict[int, ZkPartition] = {}
    for key, replicas in doc["partitions"].items():
        try:
            index = int(key)
        except ValueError:
            problems.append((path, f"partition {key!r} is not a number"))
            continue
        reps = _ints(replicas, path, f"partition {index}'s replicas", problems)
        state_path = f"{path}/partitions/{index}/state"
        state = _json(tree, state_path, problems)
        if not isinstance(state, dict):
            continue
        leader = state.get("leader")
        epoch = state.get("leader_epoch")
        if not isinstance(leader, int) or not isinstance(epoch, int) or epoch not in _INT32:
            problems.append((state_path, "no leader or leader_epoch (32-bit numbers)"))
            continue
        isr = _ints(state.get("isr"), state_path, "isr", problems)
        if leader < 0 or leader not in reps:
            problems.append((state_path, f"partition has no leader among its replicas "
                                         f"(leader {leader}, replicas {list(reps)})"))  # fmt: skip
            continue
        if not set(isr) <= set(reps) or leader not in isr:
            problems.append((state_path, f"isr {list(isr)} is not among the replicas "
                                         f"{list(reps)} or lacks the leader {leader}"))  # fmt: skip
            continue
        parts[index] = ZkPartition(
            index, reps, leader, epoch, isr,
            _ints(adding.get(key, []), path, "adding_replicas", problems),
            _ints(removing.get(key, []), path, "removing_replicas", problems),
        )  # fmt: skip
    numbers = sorted(int(k) for k in doc["partitions"] if str(k).isdigit())
    if numbers != list(range(len(doc["partitions"]))):
        problems.append((path, f"partitions are not numbered 0..n-1: {numbers}"))
    err = validate_topic_name(name)
    if err is not None:
        problems.append((path, f"not a valid topic name: {err}"))
    tid = doc.get("topic_id")
    if tid is not None:
        try:
            if not isinstance(tid, str) or uuid_from_kafka(tid).int in (0, 1):
                raise ValueError(f"{tid!r} is reserved")
        except ValueError as e:
            problems.append((path, f"topic_id: {e}"))
    configs = _config(tree, f"/config/topics/{name}", problems) if (
        f"/config/topics/{name}" in tree) else {}  # fmt: skip
    for key in sorted(set(configs) - set(TOPIC_CONFIGS)):
        problems.append((f"/config/topics/{name}", f"unknown topic config {key!r}"))
    for key, value in sorted(configs.items()):
        if key in TOPIC_CONFIGS:
            try:
                validate_topic_configs({key: value})
            except TopicConfigError as e:
                problems.append((f"/config/topics/{name}", str(e)))
    return ZkTopic(name, tid if isinstance(tid, str) else None, parts, configs)


def _scram(user: str, mechanism: str, text: str, path: str,
           problems: list[tuple[str, str]]) -> ZkScram | None:  # fmt: skip
    fields = dict(kv.split("=", 1) for kv in text.split(",") if "=" in kv)
    try:
        iterations = int(fields["iterations"])
        if not 4096 <= iterations <= 16384:
            raise ValueError(iterations)
        return ZkScram(user, mechanism, fields["salt"], fields["stored_key"],
                       fields["server_key"], iterations)  # fmt: skip
    except (KeyError, ValueError):
        problems.append((path, f"{mechanism} credential is not salt=,stored_key=,"
                               "server_key=,iterations= (4096 to 16384)"))  # fmt: skip
        return None


def _name(raw: str) -> str | None:
    return None if raw == DEFAULT_ENTITY else urllib.parse.unquote(raw)


def _quotas(
    conf: dict[str, str], path: str, problems: list[tuple[str, str]], allowed: frozenset[str]
) -> dict[str, float]:
    out = {}
    for k, v in conf.items():
        if k in SCRAM_KEYS and allowed is not _IP_QUOTAS:
            continue  # a user's credentials, read apart
        if k not in allowed:
            problems.append((path, f"unknown quota or user config {k!r}"))
            continue
        try:
            rate = float(v)
        except ValueError:
            rate = -1.0
        if not 0 <= rate < float("inf"):
            problems.append((path, f"quota {k}={v!r} is not a number >= 0"))
            continue
        out[k] = rate
    return out


def parse_layout(tree: Mapping[str, bytes | None]) -> ZkMetadata:
    """The cluster's metadata; ZkLayoutError naming every znode that is missing or
    malformed."""
    problems: list[tuple[str, str]] = []
    cid = _json(tree, "/cluster/id", problems)
    cluster_id = cid.get("id") if isinstance(cid, dict) else None
    if cid is not None and not isinstance(cluster_id, str):
        problems.append(("/cluster/id", 'no "id"'))
    controller = tree.get("/controller")
    controller_id = None
    if controller is not None:
        doc = _json(tree, "/controller", problems)
        controller_id = doc.get("brokerid") if isinstance(doc, dict) else None
    raw_epoch = tree.get("/controller_epoch")
    try:
        controller_epoch = int(raw_epoch) if raw_epoch is not None else 0
    except ValueError:
        problems.append(("/controller_epoch", f"not a number: {raw_epoch!r}"))
        controller_epoch = 0
    brokers = {}
    for child in _children(tree, "/brokers/ids"):
        path = f"/brokers/ids/{child}"
        doc = _json(tree, path, problems)
        if isinstance(doc, dict) and child.isdigit():
            eps = doc.get("endpoints") or []
            brokers[int(child)] = ZkBroker(int(child), tuple(map(str, eps)), doc.get("rack"))
    topics = {}
    for name in _children(tree, "/brokers/topics"):
        t = _topic(tree, name, problems)
        if t is not None:
            topics[name] = t
    seen_ids: dict[str, str] = {}
    for t in topics.values():
        if t.topic_id is not None:
            other = seen_ids.setdefault(t.topic_id, t.name)
            if other != t.name:
                problems.append((f"/brokers/topics/{t.name}",
                                 f"topic_id {t.topic_id} is also topic {other}'s"))  # fmt: skip
    broker_configs = {
        ("" if b == DEFAULT_ENTITY else b): _config(tree, f"/config/brokers/{b}", problems)
        for b in _children(tree, "/config/brokers")
    }
    for b, conf in broker_configs.items():
        for k in sorted(conf):
            if k not in BROKER_CONFIGS and not k.startswith("listener.name."):
                problems.append((f"/config/brokers/{b or DEFAULT_ENTITY}",
                                 f"unknown broker config {k!r}"))  # fmt: skip
    quotas: dict[tuple[tuple[str, str | None], ...], dict[str, float]] = {}
    scram: list[ZkScram] = []
    for kind, entity in (("clients", "client-id"), ("users", "user"), ("ips", "ip")):
        for raw in _children(tree, f"/config/{kind}"):
            path = f"/config/{kind}/{raw}"
            if path not in tree:
                continue
            # (no data: a user with only user-and-client quotas, as Kafka creates it)
            conf = _config(tree, path, problems) if tree[path] is not None else {}
            entity_key: tuple[tuple[str, str | None], ...] = ((entity, _name(raw)),)
            if kind == "users":
                for mech in SCRAM_MECHANISMS:
                    if mech in conf and raw != DEFAULT_ENTITY:
                        cred = _scram(urllib.parse.unquote(raw), mech, conf[mech], path, problems)
                        if cred is not None:
                            scram.append(cred)
                for client in _children(tree, f"{path}/clients"):
                    sub = f"{path}/clients/{client}"
                    q = _quotas(_config(tree, sub, problems), sub, problems, QUOTA_KEYS)
                    if q:
                        quotas[(("user", _name(raw)), ("client-id", _name(client)))] = q
            q = _quotas(conf, path, problems, _IP_QUOTAS if kind == "ips" else QUOTA_KEYS)
            if q:
                quotas[entity_key] = q
    acls = []
    stores = [("/kafka-acl", "LITERAL")] + [
        (f"/kafka-acl-extended/{p}", p.upper()) for p in _children(tree, "/kafka-acl-extended")
    ]
    for root, pattern in stores:
        for rtype in _children(tree, root):
            for name in _children(tree, f"{root}/{rtype}"):
                path = f"{root}/{rtype}/{name}"
                doc = _json(tree, path, problems)
                entries = doc.get("acls") if isinstance(doc, dict) else None
                if not isinstance(entries, list):
                    if doc is not None:
                        problems.append((path, 'no "acls" list'))
                    continue
                for e in entries:
                    try:
                        acl = ZkAcl(rtype, pattern, name, e["principal"], e["host"],
                                    e["operation"], e["permissionType"])  # fmt: skip
                        if ":" not in acl.principal:
                            problems.append((path, f"principal {acl.principal!r} is not "
                                                   "TYPE:NAME (User:alice)"))  # fmt: skip
                        elif acl not in acls:
                            acls.append(acl)
                    except (KeyError, TypeError):
                        problems.append((path, f"an ACL without principal, host, operation "
                                               f"or permissionType: {e!r}"))  # fmt: skip
    block_end = None
    if tree.get("/latest_producer_id_block"):
        doc = _json(tree, "/latest_producer_id_block", problems)
        try:
            block_end = int(doc["block_end"])
            if not 0 <= block_end < 2**63 - 1:
                raise ValueError(block_end)
        except (KeyError, TypeError, ValueError):
            problems.append(("/latest_producer_id_block", "no block_end number (64 bits)"))
    reassignments = {}
    if tree.get("/admin/reassign_partitions"):
        doc = _json(tree, "/admin/reassign_partitions", problems)
        for p in (doc or {}).get("partitions", []) if isinstance(doc, dict) else []:
            reassignments[(str(p.get("topic")), int(p.get("partition", -1)))] = tuple(
                p.get("replicas", [])
            )
    deleting = _children(tree, "/admin/delete_topics")
    features: dict[str, int] = {}
    if tree.get("/feature"):
        doc = _json(tree, "/feature", problems)
        for name, levels in ((doc or {}).get("features") or {}).items():
            if isinstance(levels, dict) and isinstance(levels.get("max_version_level"), int):
                features[name] = levels["max_version_level"]
    if problems:
        raise ZkLayoutError(problems)
    assert isinstance(cluster_id, str)
    return ZkMetadata(
        cluster_id, controller_id if isinstance(controller_id, int) else None,
        controller_epoch, brokers, topics, broker_configs, quotas, scram, acls, block_end,
        reassignments, deleting, features,
    )  # fmt: skip
