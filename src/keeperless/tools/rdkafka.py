"""confluent-kafka (librdkafka) clients for the operator tools, quiet and failing fast.

librdkafka logs every failed connection on stderr and retries unreachable bootstrap
servers until an operation times out (30 s of noise, then a traceback). The tools route
its log to a logger that keeps it out of the operator's way, and watch its error
callback: when every bootstrap server has failed before any answered, the tool stops at
once with one line naming each server and why (refused, unknown host, TLS handshake).
A single node being down is not the tool's failure while another answers.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from keeperless.security.sasl import jaas_credentials
from keeperless.tools.errors import ToolError

__all__ = [
    "TIMEOUT_S",
    "Session",
    "describe_unreachable",
    "jaas_login",
    "kafka_error_text",
    "librdkafka_config",
]

TIMEOUT_S = 30.0
ALL_BROKERS_DOWN = -187
_AFTER = re.compile(r"\s*\(after \d+ms in state [A-Z_]+\)(:.*)?$")


class _Swallow(logging.Handler):
    """Keeps librdkafka's log lines (the last few, for a failure message) off stderr."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines = [*self.lines[-49:], record.getMessage()]


def kafka_error_text(exc: BaseException) -> str:
    """A confluent_kafka KafkaException (or KafkaError) as one line."""
    err = exc.args[0] if exc.args else exc
    text = err.str() if hasattr(err, "str") else str(err)
    return str(text)


def _broker_reason(text: str) -> tuple[str, str]:
    """('host:port', reason) out of a librdkafka transport error such as
    '127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused
    (after 0ms in state CONNECT)'."""
    name, _, rest = text.partition(": ")
    name = name.split("://", 1)[-1].split("/", 1)[0]
    rest = _AFTER.sub("", rest)
    m = re.match(r"Connect to \S+ failed: (.*)$", rest)
    if m:
        rest = m.group(1)
    m = re.match(r"Failed to resolve '[^']*': (.*)$", rest)
    if m:
        rest = m.group(1)
    return name, rest.strip() or "no answer"


def describe_unreachable(bootstrap: str, reasons: dict[str, str]) -> str:
    servers = [s.strip() for s in bootstrap.split(",") if s.strip()]
    parts = [f"{s} ({reasons.get(s, 'no answer')})" for s in servers]
    extra = [f"{s} ({r})" for s, r in reasons.items() if s not in servers]
    return "could not reach " + ", ".join(parts + extra)


def jaas_login(props: dict[str, str], source: str) -> tuple[str, str]:
    """The username and password a tool logs in with: sasl.username/sasl.password
    (librdkafka's keys) or those of sasl.jaas.config (Java's); empty when neither."""
    user, password = props.get("sasl.username", ""), props.get("sasl.password", "")
    jaas = props.get("sasl.jaas.config")
    if jaas and not (user and password):
        try:
            user, password = jaas_credentials(jaas)
        except ValueError as e:
            raise ToolError(f"{source}: sasl.jaas.config: {e}") from None
    return user, password


def librdkafka_config(props: dict[str, str]) -> dict[str, str]:
    """A --command-config written for Kafka's Java tools, in librdkafka's words:
    ssl.truststore.location (PEM) is ssl.ca.location, a PEM ssl.keystore.location is
    ssl.certificate.location + ssl.key.location, sasl.jaas.config's username and
    password are sasl.username and sasl.password; store types and passwords of JKS
    stores are dropped."""
    out = dict(props)
    if "ssl.truststore.location" in out:
        out.setdefault("ssl.ca.location", out.pop("ssl.truststore.location"))
    if "ssl.keystore.location" in out:
        store = out.pop("ssl.keystore.location")
        out.setdefault("ssl.certificate.location", store)
        out.setdefault("ssl.key.location", store)
    for key in ("ssl.truststore.type", "ssl.keystore.type", "ssl.truststore.password",
                "ssl.keystore.password"):  # fmt: skip
        out.pop(key, None)
    if "sasl.jaas.config" in out:
        out["sasl.username"], out["sasl.password"] = jaas_login(out, "--command-config")
        del out["sasl.jaas.config"]
    return out


class Session:
    """The configuration and failure watch shared by the clients of one tool run."""

    def __init__(self, bootstrap: str, extra: dict[str, str]) -> None:
        self.bootstrap = bootstrap
        self.extra = librdkafka_config(extra)
        self.reasons: dict[str, str] = {}
        self.all_down = False
        self.reached = False
        self._handler = _Swallow()
        self.logger = logging.getLogger(f"keeperless.tools.rdkafka.{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self._handler)

    def _on_error(self, err: Any) -> None:
        code = err.code()
        if code == ALL_BROKERS_DOWN:
            self.all_down = True
            return
        text = err.str()
        if "/" in text.split(": ", 1)[0].split("://", 1)[-1]:  # about one connection
            name, reason = _broker_reason(text)
            self.reasons[name] = reason
        elif err.fatal():
            raise ToolError(text)

    def conf(self, **more: Any) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "logger": self.logger,
            "error_cb": self._on_error,
            "log_level": 3,
            **more,
            **self.extra,
        }

    def check(self) -> None:
        """Raise ToolError if nothing was ever reached and every server has failed."""
        if self.all_down and not self.reached:
            raise ToolError(describe_unreachable(self.bootstrap, self.reasons))

    def wait(self, client: Any, fut: Any, timeout: float = TIMEOUT_S) -> Any:
        """The result of an admin future, serving the client's callbacks meanwhile."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + timeout
        while not fut.done():
            client.poll(0.05)
            self.check()
            if time.monotonic() > deadline:
                raise ToolError(self._timed_out())
        try:
            res = fut.result(0)
        except KafkaException as e:
            raise ToolError(kafka_error_text(e)) from None
        self.reached = True
        return res

    def _timed_out(self) -> str:
        if not self.reached:
            return describe_unreachable(self.bootstrap, self.reasons) + " within the timeout"
        return "timed out waiting for the cluster to answer"

    def admin(self) -> Any:
        """An AdminClient, once the cluster has answered (DescribeCluster)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self.conf())
        self.wait(admin, admin.describe_cluster(request_timeout=TIMEOUT_S))
        return admin
