"""Kafka-style node configuration: `server.properties` parsing and validation.

Keys, defaults and meanings follow Apache Kafka's broker configuration. A key we do
not know is an error naming it; a Kafka key that keeperless accepts but does not act
on (thread counts, socket buffers...) is listed in ``ACCEPTED_KAFKA_KEYS`` so that an
operator's existing file works unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keeperless._properties import PropertiesError, parse_properties
from keeperless.metadata.config_catalog import BROKER_CONFIGS
from keeperless.metadata.config_def import ConfigType, ConfigValueError
from keeperless.metadata.features import metadata_version_for_release
from keeperless.security.listeners import SecurityConfigError, listener_security

__all__ = [
    "ConfigError",
    "Endpoint",
    "NodeConfig",
    "Voter",
    "load_config",
    "parse_properties",
]


class ConfigError(ValueError):
    """A configuration key is missing, unknown or has an invalid value."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    listener: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class Voter:
    node_id: int
    host: str
    port: int


_CONVERT: dict[ConfigType, Callable[[str], Any]] = {
    ConfigType.INT: int,
    ConfigType.SHORT: int,
    ConfigType.LONG: int,
    ConfigType.DOUBLE: float,
    ConfigType.BOOLEAN: lambda v: v.lower() == "true",
}


def _typed(key: str, raw: str) -> Any:
    """A key whose catalog definition says all: its type and its validator."""
    d = BROKER_CONFIGS[key]
    try:
        d.validate(raw)
    except ConfigValueError as e:
        raise ConfigError(str(e)) from None
    return _CONVERT.get(d.type, str)(raw.strip())


def _release(key: str, raw: str) -> str:
    """A Kafka release name (3.6, 3.6-IV2): one this build knows."""
    try:
        metadata_version_for_release(raw.strip())
    except ValueError as e:
        raise ConfigError(f"Invalid value {raw!r} for configuration {key}: {e}") from None
    return raw.strip()


def _str(key: str, raw: str) -> str:
    return raw.strip()


def _list(key: str, raw: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in raw.split(",") if p.strip())


def _roles(key: str, raw: str) -> tuple[str, ...]:
    roles = _list(key, raw)
    if not roles:
        raise ConfigError(f"Invalid value {raw!r} for {key}: expected broker, controller or both")
    for r in roles:
        if r not in ("broker", "controller"):
            raise ConfigError(
                f"Invalid value {raw!r} for {key}: unknown role {r!r} "
                "(expected broker, controller or both)"
            )
    if len(set(roles)) != len(roles):
        raise ConfigError(f"Invalid value {raw!r} for {key}: a role is listed twice")
    return roles


_LISTENER_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)://(\[[^\]]*\]|[^:/]*):(\d+)$")


def _listeners(key: str, raw: str) -> tuple[Endpoint, ...]:
    out: list[Endpoint] = []
    for item in _list(key, raw):
        m = _LISTENER_RE.match(item)
        if m is None:
            raise ConfigError(
                f"Invalid value {item!r} for {key}: expected NAME://host:port, "
                "e.g. PLAINTEXT://127.0.0.1:9092"
            )
        port = int(m.group(3))
        if port > 65535:
            raise ConfigError(f"Invalid value {item!r} for {key}: port {port} is out of range")
        out.append(Endpoint(m.group(1).upper(), m.group(2).strip("[]"), port))
    names = [e.listener for e in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"Invalid value {raw!r} for {key}: a listener name is used twice")
    return tuple(out)


_VOTER_RE = re.compile(r"^(\d+)@(\[[^\]]*\]|[^:]+):(\d+)$")


def _voters(key: str, raw: str) -> tuple[Voter, ...]:
    out: list[Voter] = []
    for item in _list(key, raw):
        m = _VOTER_RE.match(item)
        if m is None:
            raise ConfigError(
                f"Invalid value {item!r} for {key}: expected id@host:port, e.g. 1@127.0.0.1:9093"
            )
        out.append(Voter(int(m.group(1)), m.group(2).strip("[]"), int(m.group(3))))
    return tuple(out)


def _http_listener(key: str, raw: str) -> tuple[str, int]:
    v = raw.strip().removeprefix("http://").rstrip("/")
    host, sep, port = v.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(
            f"Invalid value {raw!r} for {key}: expected host:port, e.g. 127.0.0.1:9100"
        )
    return host.strip("[]") or "0.0.0.0", int(port)


RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def _replica_selector(key: str, raw: str) -> str | None:
    """replica.selector.class (KIP-392): unset, or Kafka's rack-aware selector."""
    raw = raw.strip()
    if not raw:
        return None
    if raw != RACK_AWARE_SELECTOR:
        raise ConfigError(
            f"Invalid value {raw!r} for {key}: the replica selector available is "
            f"{RACK_AWARE_SELECTOR} (consumers fetch from a replica in their client.rack)"
        )
    return raw


def _assignors(key: str, raw: str) -> list[str]:
    """group.consumer.assignors: Kafka's names, or its class names for them."""
    known = {
        "uniform": "uniform",
        "range": "range",
        "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
        "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
    }
    out = []
    for item in _list(key, raw):
        if item not in known:
            raise ConfigError(
                f"Invalid value {item!r} for {key}: the assignors are uniform and range"
            )
        out.append(known[item])
    if not out:
        raise ConfigError(f"{key} must name at least one assignor")
    return out


_AUTHORIZERS = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
)


def _authorizer(key: str, raw: str) -> str | None:
    name = raw.strip()
    if not name:
        return None
    if name == _AUTHORIZERS[1]:
        raise ConfigError(
            f"{key}={name} is ZooKeeper's authorizer; a KRaft cluster uses {_AUTHORIZERS[0]}"
        )
    if name != _AUTHORIZERS[0]:
        raise ConfigError(f"Invalid value {name!r} for {key}: the authorizer is {_AUTHORIZERS[0]}")
    return name


def _super_users(key: str, raw: str) -> list[str]:
    """Kafka separates super users with semicolons: User:alice;User:bob."""
    out = [u.strip() for u in raw.split(";") if u.strip()]
    for u in out:
        if ":" not in u:
            raise ConfigError(f"Invalid value {u!r} for {key}: expected PrincipalType:name")
    return out


def _protocol_map(key: str, raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in _list(key, raw):
        name, sep, proto = item.partition(":")
        if not sep or not name or not proto:
            raise ConfigError(f"Invalid value {item!r} for {key}: expected LISTENER:PROTOCOL")
        proto = proto.strip().upper()
        if proto not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ConfigError(f"Invalid value {item!r} for {key}: unknown protocol {proto!r}")
        out[name.strip().upper()] = proto
    return out


# key -> its parser (and validator). The default, type and documentation of every key
# are the catalog's (metadata/config_catalog.py): each config key is defined once.
_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "process.roles": _roles,
    "node.id": _typed,
    "controller.quorum.voters": _voters,
    "controller.quorum.bootstrap.servers": _list,
    "listeners": _listeners,
    "advertised.listeners": _listeners,
    "controller.listener.names": _list,
    "listener.security.protocol.map": _protocol_map,
    "inter.broker.listener.name": _str,
    "log.dirs": _list,
    "log.dir": _list,
    "metadata.log.dir": _str,
    "num.partitions": _typed,
    "default.replication.factor": _typed,
    "auto.create.topics.enable": _typed,
    "log.segment.bytes": _typed,
    "log.roll.ms": _typed,
    "log.roll.hours": _typed,
    "log.retention.ms": _typed,
    "log.retention.minutes": _typed,
    "log.retention.hours": _typed,
    "log.retention.bytes": _typed,
    "log.retention.check.interval.ms": _typed,
    "log.index.interval.bytes": _typed,
    "log.flush.interval.messages": _typed,
    "min.insync.replicas": _typed,
    "offsets.topic.replication.factor": _typed,
    "offsets.topic.num.partitions": _typed,
    "transaction.state.log.num.partitions": _typed,
    "transaction.state.log.replication.factor": _typed,
    "transaction.state.log.min.isr": _typed,
    "transaction.state.log.segment.bytes": _typed,
    "transaction.max.timeout.ms": _typed,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": _typed,
    "transactional.id.expiration.ms": _typed,
    "transaction.partition.verification.enable": _typed,
    "transaction.remove.expired.transaction.cleanup.interval.ms": _typed,
    "producer.id.expiration.ms": _typed,
    "producer.id.expiration.check.interval.ms": _typed,
    "replica.high.watermark.checkpoint.interval.ms": _typed,
    "message.max.bytes": _typed,
    "group.initial.rebalance.delay.ms": _typed,
    "group.min.session.timeout.ms": _typed,
    "group.max.session.timeout.ms": _typed,
    "offsets.commit.timeout.ms": _typed,
    "group.consumer.heartbeat.interval.ms": _typed,
    "group.consumer.session.timeout.ms": _typed,
    "group.share.heartbeat.interval.ms": _typed,
    "group.share.session.timeout.ms": _typed,
    "group.share.record.lock.duration.ms": _typed,
    "group.share.min.record.lock.duration.ms": _typed,
    "group.share.max.record.lock.duration.ms": _typed,
    "group.share.delivery.count.limit": _typed,
    "group.share.partition.max.record.locks": _typed,
    "share.coordinator.state.topic.num.partitions": _typed,
    "share.coordinator.state.topic.replication.factor": _typed,
    "share.coordinator.state.topic.min.isr": _typed,
    "share.coordinator.state.topic.segment.bytes": _typed,
    "share.coordinator.snapshot.update.records.per.snapshot": _typed,
    "share.coordinator.write.timeout.ms": _typed,
    "share.coordinator.state.topic.prune.interval.ms": _typed,
    "share.coordinator.cold.partition.snapshot.interval.ms": _typed,
    "group.consumer.assignors": _assignors,
    "broker.rack": _str,
    "socket.request.max.bytes": _typed,
    "authorizer.class.name": _authorizer,
    "super.users": _super_users,
    "allow.everyone.if.no.acl.found": _typed,
    "auto.leader.rebalance.enable": _typed,
    "leader.imbalance.check.interval.seconds": _typed,
    "delegation.token.secret.key": _str,
    "zookeeper.metadata.migration.enable": _typed,
    "inter.broker.protocol.version": _release,
    "zookeeper.connect": _str,
    "delegation.token.max.lifetime.ms": _typed,
    "delegation.token.expiry.time.ms": _typed,
    "delegation.token.expiry.check.interval.ms": _typed,
    "replica.selector.class": _replica_selector,
    "controller.quorum.election.timeout.ms": _typed,
    "controller.quorum.fetch.timeout.ms": _typed,
    "controller.quorum.auto.join.enable": _typed,
    "controller.quorum.election.backoff.max.ms": _typed,
    "controller.quorum.request.timeout.ms": _typed,
    "controller.quorum.append.linger.ms": _typed,
    "broker.session.timeout.ms": _typed,
    "broker.heartbeat.interval.ms": _typed,
    "metadata.log.max.record.bytes.between.snapshots": _typed,
    "metadata.log.max.snapshot.interval.ms": _typed,
    "metadata.log.segment.bytes": _typed,
    "metrics.http.listener": _http_listener,
    "replica.lag.time.max.ms": _typed,
    "replica.fetch.wait.max.ms": _typed,
    "replica.fetch.max.bytes": _typed,
    "replica.fetch.response.max.bytes": _typed,
    "replica.fetch.backoff.ms": _typed,
    "log.cleaner.enable": _typed,
    "log.cleaner.threads": _typed,
    "log.cleaner.dedupe.buffer.size": _typed,
    "log.cleaner.io.max.bytes.per.second": _typed,
    "log.cleaner.backoff.ms": _typed,
    "log.cleaner.delete.retention.ms": _typed,
    "log.cleaner.min.compaction.lag.ms": _typed,
    "log.cleaner.max.compaction.lag.ms": _typed,
    "log.cleaner.min.cleanable.ratio": _typed,
}

# Kafka keys that an existing server.properties may carry and that keeperless accepts
# without acting on them (yet). Anything else unknown is an error.
ACCEPTED_KAFKA_KEYS = frozenset(
    {
        "num.network.threads",
        "num.io.threads",
        "socket.send.buffer.bytes",
        "socket.receive.buffer.bytes",
        "num.recovery.threads.per.data.dir",
        "share.coordinator.state.topic.replication.factor",
        "share.coordinator.state.topic.min.isr",
        "log.flush.interval.ms",
        "delete.topic.enable",
        "compression.type",
        "num.replica.fetchers",
        "unclean.leader.election.enable",
        # security: read per listener by security/listeners.py (listener.name.<l>.<key>
        # overrides are accepted too, see _accepted)
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
        "ssl.client.auth",
        "ssl.principal.mapping.rules",
        "ssl.endpoint.identification.algorithm",
        "ssl.enabled.protocols",
        "ssl.protocol",
        "ssl.cipher.suites",
        "sasl.enabled.mechanisms",
        "sasl.jaas.config",
        "sasl.mechanism.inter.broker.protocol",
        "sasl.mechanism.controller.protocol",
        "security.inter.broker.protocol",
        "connections.max.reauth.ms",
        "early.start.listeners",
    }
)


def _accepted(key: str) -> bool:
    return key in ACCEPTED_KAFKA_KEYS or (key.startswith("listener.name.") and key.count(".") >= 3)


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """A validated node configuration. ``values`` holds every key, defaults included."""

    values: Mapping[str, Any]
    # the keys set in the file and overrides, as written (DescribeConfigs' static values)
    raw: Mapping[str, str] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @property
    def node_id(self) -> int:
        return int(self.values["node.id"])

    @property
    def roles(self) -> tuple[str, ...]:
        roles: tuple[str, ...] = self.values["process.roles"]
        return roles

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def log_dirs(self) -> tuple[Path, ...]:
        dirs = self.values["log.dirs"] or self.values["log.dir"]
        return tuple(Path(d) for d in dirs)

    @property
    def metadata_log_dir(self) -> Path:
        explicit = self.values["metadata.log.dir"]
        return Path(explicit) if explicit else self.log_dirs[0]

    @property
    def all_log_dirs(self) -> tuple[Path, ...]:
        dirs = list(self.log_dirs)
        if self.metadata_log_dir not in dirs:
            dirs.append(self.metadata_log_dir)
        return tuple(dirs)

    @property
    def listeners(self) -> tuple[Endpoint, ...]:
        eps: tuple[Endpoint, ...] = self.values["listeners"]
        return eps

    @property
    def inter_broker_listener(self) -> str:
        """inter.broker.listener.name; else, as Kafka, the listener named after
        security.inter.broker.protocol (PLAINTEXT) — or the first broker listener."""
        named = self.values["inter.broker.listener.name"]
        if named:
            return str(named).upper()
        proto = self.raw.get("security.inter.broker.protocol", "PLAINTEXT").upper()
        names = [e.listener for e in self.broker_listeners]
        return proto if proto in names or not names else names[0]

    def protocol_of(self, listener: str) -> str:
        """The security protocol of a listener (listener.security.protocol.map)."""
        protos: dict[str, str] = self.values["listener.security.protocol.map"]
        return protos.get(listener, "PLAINTEXT")

    @property
    def controller_listener_names(self) -> tuple[str, ...]:
        return tuple(n.upper() for n in self.values["controller.listener.names"] or ())

    @property
    def broker_listeners(self) -> tuple[Endpoint, ...]:
        ctl = set(self.controller_listener_names)
        return tuple(e for e in self.listeners if e.listener not in ctl)

    @property
    def advertised_broker_listeners(self) -> tuple[Endpoint, ...]:
        adv: tuple[Endpoint, ...] | None = self.values["advertised.listeners"]
        by_name = {e.listener: e for e in (adv or ())}
        out = []
        for e in self.broker_listeners:
            a = by_name.get(e.listener, e)
            out.append(Endpoint(a.listener, a.host or "127.0.0.1", a.port or e.port))
        return tuple(out)

    @property
    def voters(self) -> tuple[Voter, ...]:
        voters: tuple[Voter, ...] = self.values["controller.quorum.voters"]
        return voters

    @property
    def advertised_controller_endpoint(self) -> Endpoint | None:
        """Where voters reach this controller (Kafka's effectiveAdvertisedControllerListeners):
        its controller listener as advertised.listeners names it, else as it listens."""
        ep = self.controller_endpoint
        adv: tuple[Endpoint, ...] = self.values["advertised.listeners"] or ()
        for a in adv:
            if ep is not None and a.listener == ep.listener:
                return Endpoint(a.listener, a.host or ep.host, a.port or ep.port)
        return ep

    @property
    def controller_endpoint(self) -> Endpoint | None:
        names = set(self.controller_listener_names)
        for e in self.listeners:
            if e.listener in names:
                return e
        return None

    @property
    def retention_ms(self) -> int:
        v = self.values
        if v["log.retention.ms"] is not None:
            return int(v["log.retention.ms"])
        if v["log.retention.minutes"] is not None:
            return int(v["log.retention.minutes"]) * 60_000
        return int(v["log.retention.hours"]) * 3_600_000

    @property
    def segment_ms(self) -> int:
        v = self.values
        if v["log.roll.ms"] is not None:
            return int(v["log.roll.ms"])
        return int(v["log.roll.hours"]) * 3_600_000


def load_config(
    path: Path | str | None = None,
    overrides: Iterable[str] = (),
    properties: Mapping[str, str] | None = None,
) -> NodeConfig:
    """Read a server.properties file (or a mapping), apply ``key=value`` overrides and
    validate every key. Raises ConfigError naming the offending key."""
    raw: dict[str, str] = {}
    if path is not None:
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as e:
            raise ConfigError(f"Cannot read configuration file {p}: {e.strerror}") from None
        try:
            raw.update(parse_properties(text, str(p)))
        except PropertiesError as e:
            raise ConfigError(str(e)) from None
    if properties:
        raw.update(properties)
    for ov in overrides:
        key, sep, value = ov.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"Invalid --override {ov!r}: expected key=value")
        raw[key.strip()] = value
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _PARSERS:
            values[key] = _PARSERS[key](key, value)
        elif key in BROKER_CONFIGS:  # read through its topic synonyms, or shown only
            values[key] = _typed(key, value)
        elif not _accepted(key):
            raise ConfigError(f"Unknown configuration key {key!r}")
    for key, parser in _PARSERS.items():
        if key not in values:
            default = BROKER_CONFIGS[key].default
            values[key] = None if default is None else parser(key, default)
    _validate(values)
    config = NodeConfig(values, {k: v.strip() for k, v in raw.items()})
    named = values["inter.broker.listener.name"]
    if named and "broker" in values["process.roles"]:
        names = [e.listener for e in config.broker_listeners]
        if str(named).upper() not in names:
            raise ConfigError(
                f"inter.broker.listener.name {named} is not one of the broker listeners "
                f"({','.join(names)})"
            )
    ctl = config.controller_listener_names
    mech = config.raw.get("sasl.mechanism.controller.protocol", "").upper()
    sasl_ctl = bool(ctl) and config.protocol_of(ctl[0]).startswith("SASL_")
    if "controller" in values["process.roles"] and sasl_ctl and mech.startswith("SCRAM"):
        raise ConfigError(
            f"sasl.mechanism.controller.protocol={mech}: controllers cannot log in to each "
            "other with SCRAM (its credentials are in the metadata log they have yet to "
            "agree on); use PLAIN or SSL on the controller listener"
        )
    for ep in config.listeners:
        try:
            listener_security(config.raw, ep.listener, config.protocol_of(ep.listener), None)
        except SecurityConfigError as e:
            raise ConfigError(str(e)) from None
    return config


def _validate(v: dict[str, Any]) -> None:
    lock, lo, hi = (v[f"group.share.{k}record.lock.duration.ms"] for k in ("", "min.", "max."))
    if lock < lo:  # Kafka's ShareGroupConfig checks
        raise ConfigError("group.share.record.lock.duration.ms must be greater than or equal "
                          "to group.share.min.record.lock.duration.ms")  # fmt: skip
    if lock > hi:
        raise ConfigError("group.share.record.lock.duration.ms must be less than or equal to "
                          "group.share.max.record.lock.duration.ms")  # fmt: skip
    if v["process.roles"] is None:
        raise ConfigError("Missing required configuration process.roles (broker, controller)")
    if v["node.id"] is None:
        raise ConfigError("Missing required configuration node.id")
    roles = v["process.roles"]
    ctl_names = v["controller.listener.names"]
    if not ctl_names:
        raise ConfigError("Missing required configuration controller.listener.names")
    if not v["controller.quorum.voters"] and not v["controller.quorum.bootstrap.servers"]:
        raise ConfigError(
            "Missing configuration controller.quorum.voters "
            "(or controller.quorum.bootstrap.servers)"
        )
    names = {e.listener for e in v["listeners"]}
    ctl_upper = [n.upper() for n in ctl_names]
    if "controller" in roles and not any(n in names for n in ctl_upper):
        raise ConfigError(
            f"controller.listener.names {','.join(ctl_names)} names no listener in listeners; "
            "a controller needs one"
        )
    if "broker" in roles and not [e for e in v["listeners"] if e.listener not in ctl_upper]:
        raise ConfigError("listeners has no broker listener (all are controller listeners)")
    if "controller" in roles and v["controller.quorum.voters"]:
        ids = [vt.node_id for vt in v["controller.quorum.voters"]]
        if v["node.id"] not in ids:
            raise ConfigError(
                f"node.id {v['node.id']} is a controller but is not in controller.quorum.voters "
                f"({','.join(map(str, ids))})"
            )
    # (a controller listener in advertised.listeners is the controller's advertised
    # endpoint, as in Kafka 4's own config/server.properties; brokers never advertise it)
    adv = v["advertised.listeners"] or ()
    unknown = [e.listener for e in adv if e.listener not in names]
    if unknown:
        raise ConfigError(
            f"advertised.listeners names {unknown[0]}, which is not one of listeners "
            f"({','.join(sorted(names))})"
        )
    if any(e.host in ("0.0.0.0", "::") for e in adv):
        raise ConfigError(
            "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0; use a "
            "routable host name or address"
        )
    protos = v["listener.security.protocol.map"]
    for e in v["listeners"]:
        proto = protos.get(e.listener, e.listener if e.listener == "PLAINTEXT" else None)
        if proto is None:
            raise ConfigError(
                f"listener {e.listener} has no entry in listener.security.protocol.map"
            )
    if v["default.replication.factor"] < 1:
        raise ConfigError("default.replication.factor must be at least 1")
