"""The fault harness's security workload (issue 17): every broker also listens with
SASL_PLAINTEXT (SCRAM-SHA-256, users created at format time with --add-scram) and the
StandardAuthorizer on. The PLAINTEXT listener's ANONYMOUS principal is a super user (the
other workloads and the nodes themselves use it); on the secured listener:

- ``writer`` (WRITE on the topic) produces numbered records, acks=all: each
  acknowledged one must be in the topic at the end;
- ``mallory`` (no ACL) tries to produce to and read the same topic throughout: nothing
  of hers may ever be acknowledged, stored or delivered;
- ``writer`` with a wrong password tries too: never logged in, nothing stored;
- at the end ``reader`` (READ on the topic and its group) reads every acknowledged
  record back through the secured listener;
- ``writer`` creates delegation tokens and expires some at once, and logs in with them
  (SCRAM with tokenauth=true): at the end every acknowledged token that was not expired
  logs in on every broker and is described, and no acknowledged expiry is undone.

So credentials and ACLs held in the metadata log keep being enforced by every broker
across kills, partitions, controller failovers and upgrades."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.chaos.history import History

__all__ = ["NODE_CONFIG", "SECURE_PORT", "SECURE_TOPIC", "SecureWorkload", "scram_users"]

SECURE_PORT = 9094
SECURE_TOPIC = "chaos-secure"
SECURE_GROUP = "chaos-secure-g"
_PASSWORDS = {"writer": "writer-pw", "reader": "reader-pw", "mallory": "mallory-pw"}
_quiet = logging.getLogger("chaos.librdkafka")

Anomaly = dict[str, Any]


def scram_users() -> list[str]:
    """``storage format`` arguments creating the workload's users."""
    out = []
    for user, pw in _PASSWORDS.items():
        out += ["--add-scram", f"SCRAM-SHA-256=[name={user},password={pw}]"]
    return out


# what every node adds to its configuration: the authorizer everywhere (controllers
# authorize forwarded requests); brokers also listen on SECURE (cluster.py)
NODE_CONFIG = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
    "allow.everyone.if.no.acl.found": "false",
    "sasl.enabled.mechanisms": "SCRAM-SHA-256",
    "inter.broker.listener.name": "PLAINTEXT",
    "delegation.token.secret.key": "chaos-token-key",
}


# answers to an ExpireDelegationToken after which the token may be expired or not:
# REQUEST_TIMED_OUT and NOT_CONTROLLER (it may still commit), and DELEGATION_TOKEN_NOT_FOUND
# (a request resent after its first attempt committed - by the tool's client to the next
# server after a timeout, or by a broker to the next controller after a failover, as
# Kafka's forwarding does - finds the token its first attempt removed; seed 4621)
_UNKNOWN_OUTCOME = frozenset({7, 41, 62})


class SecureWorkload:
    def __init__(self, bootstrap: str, secure_bootstrap: str, history: History,
                 stop: threading.Event) -> None:  # fmt: skip
        self.bootstrap = bootstrap
        self.secure_bootstrap = secure_bootstrap
        self.history = history
        self.stop = stop
        self.acked: list[str] = []
        self.intruder_acked: list[str] = []  # must stay empty
        self.intruder_read: list[str] = []  # must stay empty
        self.intruder_refusals = 0
        self.refusal_codes: set[str] = set()
        self.tokens: dict[str, str] = {}  # acknowledged token id -> base64 hmac
        self.expired: dict[str, str] = {}  # acknowledged immediate expiries
        # expiries whose answer never came (a timeout in a fault): done or not
        self.maybe_expired: set[str] = set()
        self.token_logins = {"ok": 0, "refused": 0}
        self.token_errors: set[str] = set()

    def _conf(self, user: str | None, password: str | None = None) -> dict[str, Any]:
        conf: dict[str, Any] = {"logger": _quiet, "log_level": 0}
        if user is None:
            return {**conf, "bootstrap.servers": self.bootstrap}
        return {**conf, "bootstrap.servers": self.secure_bootstrap,
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": user,
                "sasl.password": password or _PASSWORDS[user]}  # fmt: skip

    def setup(self) -> None:
        admin = AdminClient(self._conf(None))
        conf = {"min.insync.replicas": "2"}
        admin.create_topics([NewTopic(SECURE_TOPIC, 2, 3, config=conf)])[SECURE_TOPIC].result(30)
        allow, lit = AclPermissionType.ALLOW, ResourcePatternType.LITERAL
        bindings = [
            AclBinding(ResourceType.TOPIC, SECURE_TOPIC, lit, "User:writer", "*",
                       AclOperation.WRITE, allow),
            AclBinding(ResourceType.TOPIC, SECURE_TOPIC, lit, "User:reader", "*",
                       AclOperation.READ, allow),
            AclBinding(ResourceType.GROUP, SECURE_GROUP, lit, "User:reader", "*",
                       AclOperation.READ, allow),
        ]  # fmt: skip
        for f in admin.create_acls(bindings).values():
            f.result(30)

    def targets(self) -> list[tuple[str, Any]]:
        return [("secure-writer", self._write), ("secure-intruder", self._intrude),
                ("secure-tokens", self._tokens)]  # fmt: skip

    def _servers(self) -> list[tuple[str, int]]:
        from keeperless.tools.client import parse_servers

        return parse_servers(self.secure_bootstrap, "secure bootstrap")

    def _token_security(self, token_id: str | None = None, mac: str | None = None) -> Any:
        from keeperless.tools.client import security_of

        props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                 "sasl.username": token_id or "writer",
                 "sasl.password": mac or _PASSWORDS["writer"]}  # fmt: skip
        sec = security_of(props, "chaos")
        sec.tokenauth = token_id is not None
        return sec

    def _token_call(self, api: int, version: int, body: dict[str, Any],
                    servers: list[tuple[str, int]] | None = None,
                    sec: Any = None) -> Any:  # fmt: skip
        from keeperless.tools.client import call

        return call(servers or self._servers(), api, version, body, timeout_s=10,
                    error_first=True, security=sec or self._token_security())  # fmt: skip

    def _login_with(self, token_id: str, mac: str, server: tuple[str, int]) -> bool:
        from keeperless.tools.errors import ToolError

        try:
            self._token_call(3, 12, {"topics": [], "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False},
                             [server], self._token_security(token_id, mac))  # fmt: skip
        except ToolError as e:
            if "Authentication failed" in str(e):
                return False
            raise
        return True

    def _tokens(self, every_s: float = 1.0, max_ops: int = 300) -> None:
        """Create tokens, expire some at once, log in with live ones, throughout."""
        import base64
        import random

        from keeperless.tools.errors import ToolError

        rng = random.Random(17)
        for _ in range(max_ops):
            if self.stop.is_set():
                return
            try:
                live = sorted(set(self.tokens) - set(self.expired) - self.maybe_expired)
                if len(live) < 3 or rng.random() < 0.5:
                    resp = self._token_call(38, 3, {"renewers": [], "max_lifetime": -1,
                                                    "owner_principal_type": None,
                                                    "owner_principal_name": None})  # fmt: skip
                    if resp.error_code == 0:
                        self.tokens[resp.token_id] = base64.b64encode(resp.hmac).decode()
                    else:
                        self.token_errors.add(f"create:{resp.error_code}")
                elif rng.random() < 0.3:
                    tid = rng.choice(live)
                    mac = self.tokens[tid]
                    self.maybe_expired.add(tid)  # until the answer says
                    resp = self._token_call(40, 2, {"hmac": base64.b64decode(mac),
                                                    "expiry_time_period": -1})  # fmt: skip
                    self.expire_answered(tid, mac, int(resp.error_code))
                else:
                    tid = rng.choice(live)
                    ok = self._login_with(tid, self.tokens[tid], rng.choice(self._servers()))
                    self.token_logins["ok" if ok else "refused"] += 1
            except (ToolError, OSError) as e:  # a node down, a failover: tried again later
                self.token_errors.add(type(e).__name__)
            time.sleep(every_s)

    def expire_answered(self, tid: str, mac: str, code: int) -> None:
        """An ExpireDelegationToken's answer: done, refused, or - timed out, or no longer
        the controller - an unknown outcome (the controller may still commit it; seed
        4615 took a timed-out expiry for a refusal and reported the token lost)."""
        if code in _UNKNOWN_OUTCOME:
            self.token_errors.add(f"expire:{code}")
            return  # stays maybe expired
        self.maybe_expired.discard(tid)
        if code == 0:
            self.expired[tid] = mac
        else:
            self.token_errors.add(f"expire:{code}")

    def check_tokens(self, timeout_s: float = 60.0) -> tuple[list[Anomaly], dict[str, Any]]:
        """Every acknowledged live token logs in on every broker and is described; no
        acknowledged immediate expiry is undone."""
        from keeperless.tools.errors import ToolError

        anomalies: list[Anomaly] = []
        live = {t: m for t, m in self.tokens.items()
                if t not in self.expired and t not in self.maybe_expired}  # fmt: skip
        deadline = time.monotonic() + timeout_s
        for server in self._servers():
            for tid, mac in live.items():
                ok = False
                while True:  # each token tried at least once, past the deadline too
                    try:
                        ok = self._login_with(tid, mac, server)
                    except (ToolError, OSError):
                        ok = False
                    if ok or time.monotonic() >= deadline:
                        break
                    time.sleep(0.5)
                if not ok:
                    anomalies.append({"kind": "token-lost", "token": tid, "broker": server})
            for tid, mac in self.expired.items():
                # a broker still applying the metadata may take it a moment longer
                until = time.monotonic() + 10
                accepted = True
                while accepted and time.monotonic() < until:
                    try:
                        accepted = self._login_with(tid, mac, server)
                    except (ToolError, OSError):
                        accepted = False  # not reachable: nothing to say here
                    if accepted:
                        time.sleep(0.5)
                if accepted:
                    anomalies.append({"kind": "token-resurrected", "token": tid,
                                      "broker": server})  # fmt: skip
        listed: set[str] | None = None
        with contextlib.suppress(ToolError, OSError):
            resp = self._token_call(41, 3, {"owners": None})
            listed = {t.token_id for t in resp.tokens}
        if listed is None:
            listed = set()
            self.token_errors.add("describe at the end")
        elif set(live) - listed:
            anomalies.append({"kind": "token-not-described",
                              "missing": sorted(set(live) - listed)[:10]})  # fmt: skip
        if set(self.expired) & listed:
            anomalies.append({"kind": "token-resurrected",
                              "described": sorted(set(self.expired) & listed)[:10]})  # fmt: skip
        stats = {"created": len(self.tokens), "expired": len(self.expired),
                 "maybe_expired": len(self.maybe_expired),
                 "logins": dict(self.token_logins),
                 "errors": sorted(self.token_errors)}  # fmt: skip
        return anomalies, stats

    def _write(self, rate_per_s: float = 10.0, max_records: int = 2000) -> None:
        p = Producer({**self._conf("writer"), "acks": "all", "enable.idempotence": True,
                      "message.timeout.ms": 20_000})  # fmt: skip

        def done(err: Any, msg: Any) -> None:
            if err is None:
                self.acked.append(msg.value().decode())

        seq = 0
        while not self.stop.is_set() and seq < max_records:
            with contextlib.suppress(BufferError):
                p.produce(SECURE_TOPIC, value=f"w-{seq}".encode(), on_delivery=done)
            seq += 1
            p.poll(0)
            time.sleep(1.0 / rate_per_s)
        p.flush(30)

    def _intrude(self) -> None:
        """mallory (no ACL) and the writer's name with a wrong password, throughout."""
        mallory = Producer({**self._conf("mallory"), "message.timeout.ms": 3000,
                            "retries": 0})  # fmt: skip
        impostor = Producer({**self._conf("writer", "wrong-pw"), "message.timeout.ms": 3000})
        reader = Consumer({**self._conf("mallory"), "group.id": "mallory-g",
                           "enable.auto.commit": False})  # fmt: skip
        reader.assign([TopicPartition(SECURE_TOPIC, p, 0) for p in range(2)])

        def done(err: Any, msg: Any) -> None:
            if err is None:
                self.intruder_acked.append(msg.value().decode())
            else:
                self.intruder_refusals += 1
                self.refusal_codes.add(err.name())

        seq = 0
        try:
            while not self.stop.is_set():
                for who, p in (("mallory", mallory), ("impostor", impostor)):
                    try:
                        p.produce(SECURE_TOPIC, value=f"{who}-{seq}".encode(), on_delivery=done)
                    except BufferError:
                        pass
                    except KafkaException as e:  # refused before sending: known unauthorized
                        self.intruder_refusals += 1
                        self.refusal_codes.add(e.args[0].name())
                    p.poll(0)
                seq += 1
                for m in reader.consume(10, 0.5):
                    if m.error() is None:
                        self.intruder_read.append(m.value().decode())
                    elif m.error().code() != KafkaError._PARTITION_EOF:
                        self.refusal_codes.add(m.error().name())
        finally:
            for p in (mallory, impostor):
                p.flush(5)
            reader.close()

    def check(self, timeout_s: float = 60.0) -> tuple[list[Anomaly], dict[str, Any]]:
        """Read the topic back as ``reader`` through the secured listener."""
        got: set[str] = set()
        c = Consumer({**self._conf("reader"), "group.id": SECURE_GROUP,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
        want = set(self.acked)
        errors: set[str] = set()
        try:
            c.subscribe([SECURE_TOPIC])
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and not want <= got:
                for m in c.consume(500, 0.5):
                    if m.error() is None:
                        got.add(m.value().decode())
                    else:
                        errors.add(m.error().name())
        finally:
            c.close()
        anomalies: list[Anomaly] = []
        lost = sorted(want - got)
        if lost:
            anomalies.append({"kind": "secure-lost", "count": len(lost), "some": lost[:10],
                              "reader_errors": sorted(errors)})  # fmt: skip
        foreign = sorted(v for v in got if not v.startswith("w-"))
        if foreign or self.intruder_acked or self.intruder_read:
            anomalies.append({"kind": "acl-bypass", "stored": foreign[:10],
                              "acknowledged": self.intruder_acked[:10],
                              "read": self.intruder_read[:10]})  # fmt: skip
        token_anomalies, token_stats = self.check_tokens()
        anomalies += token_anomalies
        stats = {"acked": len(self.acked), "read_back": len(got & want),
                 "intruder_refusals": self.intruder_refusals,
                 "refusals": sorted(self.refusal_codes), "tokens": token_stats}  # fmt: skip
        return anomalies, stats
