"""A small blocking Kafka client for the operator tools: one request, one response, over
PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL as --command-config says (``configure``):
security.protocol, ssl.truststore.location or ssl.ca.location (PEM), sasl.mechanism
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) with sasl.jaas.config or sasl.username and
sasl.password; a delegation token with tokenauth="true" in sasl.jaas.config."""

from __future__ import annotations

import socket
import ssl
import struct
import types
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import (
    decode_response,
    encode_request,
    leading_error_code,
    request_class,
)
from keeperless.security.sasl import SaslClient, SaslFailure, parse_jaas
from keeperless.tools.errors import ToolError
from keeperless.tools.rdkafka import jaas_login

__all__ = [
    "QUIET",
    "Security",
    "ToolError",
    "call",
    "configure",
    "exception_class",
    "parse_servers",
    "recv_exact",
    "refusal",
    "security_of",
]

# librdkafka in the tools: errors only on stderr (no informational chatter such as
# "BGQUEUE ... Purging" when an admin client is destroyed); --command-config may override
QUIET = {"log_level": 3}


def parse_servers(value: str, flag: str) -> list[tuple[str, int]]:
    out = []
    for item in value.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not port.isdigit():
            raise ToolError(f"{flag} {value!r}: expected host:port[,host:port...]")
        out.append((host.strip("[]") or "127.0.0.1", int(port)))
    return out


@dataclass(slots=True)
class Security:
    protocol: str = "PLAINTEXT"
    context: ssl.SSLContext | None = None
    mechanism: str = ""
    username: str = ""
    password: str = ""
    tokenauth: bool = False  # a delegation token (tokenauth="true" in sasl.jaas.config)


_SEC = Security()


def configure(props: dict[str, str], source: str) -> None:
    """The tool's connection security, from its --command-config properties."""
    global _SEC
    _SEC = security_of(props, source)


def security_of(props: dict[str, str], source: str) -> Security:
    """Connection security from client properties (for a caller that passes it to
    ``call`` itself rather than configuring the tool's)."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise ToolError(f"{source}: unknown security.protocol {protocol}")
    sec = Security(protocol)
    if protocol.endswith("SSL"):
        ctx = ssl.create_default_context()
        ca = props.get("ssl.truststore.location") or props.get("ssl.ca.location")
        try:
            if ca:
                ctx.load_verify_locations(ca)
            cert = props.get("ssl.keystore.location") or props.get("ssl.certificate.location")
            if cert:
                ctx.load_cert_chain(cert, props.get("ssl.key.location"),
                                    props.get("ssl.key.password"))  # fmt: skip
        except (OSError, ssl.SSLError) as e:
            raise ToolError(f"{source}: cannot load the TLS keys: {e}") from None
        ident = props.get("ssl.endpoint.identification.algorithm", "https")
        ctx.check_hostname = ident.lower() == "https"
        sec.context = ctx
    if protocol.startswith("SASL_"):
        sec.mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
        if sec.mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise ToolError(f"{source}: sasl.mechanism {sec.mechanism} is not supported")
        sec.username, sec.password = jaas_login(props, source)
        jaas = props.get("sasl.jaas.config")
        if jaas:
            try:
                options = parse_jaas(jaas)[1]
            except ValueError as e:
                raise ToolError(f"{source}: sasl.jaas.config: {e}") from None
            sec.tokenauth = options.get("tokenauth", "").lower() == "true"
        if not sec.username:
            raise ToolError(f"{source}: SASL needs sasl.jaas.config (username, password) "
                            "or sasl.username and sasl.password")  # fmt: skip
    return sec


def _exchange(s: socket.socket, api_key: int, version: int, body: dict[str, Any]) -> Any:
    req = build(request_class(api_key, version), body)
    s.sendall(encode_request(api_key, version, 1, "keeperless-tool", req))
    size = struct.unpack(">i", recv_exact(s, 4))[0]
    return decode_response(memoryview(recv_exact(s, size)), api_key, version)[1]


def _login(s: socket.socket, sec: Security) -> None:
    hs = _exchange(s, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": sec.mechanism})
    if hs.error_code:
        raise OSError(f"the server does not enable SASL mechanism {sec.mechanism}")

    def auth(token: bytes) -> bytes:
        resp = _exchange(s, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
        if resp.error_code:
            raise OSError(resp.error_message or "SASL authentication failed")
        return bytes(resp.auth_bytes)

    client = SaslClient(sec.mechanism, sec.username, sec.password, tokenauth=sec.tokenauth)
    token: bytes | None = client.first()
    while token is not None:
        try:
            token = client.step(auth(token))
        except SaslFailure as e:
            raise OSError(str(e)) from None


def _connect(host: str, port: int, timeout_s: float, sec: Security | None = None) -> socket.socket:
    sec = sec or _SEC
    s = socket.create_connection((host, port), timeout=timeout_s)
    try:
        if sec.context is not None:
            s = sec.context.wrap_socket(s, server_hostname=host)
        if sec.mechanism:
            _login(s, sec)
    except BaseException:
        s.close()
        raise
    return s


def call(
    servers: list[tuple[str, int]],
    api_key: int,
    version: int,
    body: dict[str, Any],
    timeout_s: float = 10.0,
    *,
    error_first: bool = False,
    security: Security | None = None,
) -> Any:
    """Send the request to the first server that answers; raise ToolError naming every
    server tried if none does. ``error_first``: a response whose body starts with its
    error code, read from there when the rest cannot be decoded (Kafka answers a refused
    delegation token request with -1 timestamps, which kio's reader refuses)."""
    req = build(request_class(api_key, version), body)
    frame = encode_request(api_key, version, 1, "keeperless-tool", req)
    errors = []
    timed_out = []
    for host, port in servers:
        try:
            with _connect(host, port, timeout_s, security) as s:
                s.sendall(frame)
                size = struct.unpack(">i", recv_exact(s, 4))[0]
                answer = memoryview(recv_exact(s, size))
                try:
                    _, resp = decode_response(answer, api_key, version)
                except Exception:
                    if not error_first:
                        raise
                    return _error_only(answer, api_key, version)
                return resp
        except (OSError, struct.error) as e:
            if isinstance(e, TimeoutError):
                timed_out.append(f"{host}:{port}")
            errors.append(
                f"{host}:{port} ({e.strerror or e})"
                if isinstance(e, OSError)
                else f"{host}:{port} ({e})"
            )
    if timed_out and len(timed_out) == len(errors):  # reached, but no answer in time
        raise ToolError(
            "org.apache.kafka.common.errors.TimeoutException: no answer from "
            f"{', '.join(timed_out)} within {timeout_s * 1000:.0f} ms"
        )
    raise ToolError("could not reach " + ", ".join(errors))


def _error_only(frame: memoryview, api_key: int, version: int) -> Any:
    """The error code of a response that begins with it (after the response header:
    the correlation id, and an empty tag buffer when the response is flexible)."""
    code = leading_error_code(frame, api_key, version)
    if code == 0:
        raise ToolError(f"cannot decode the response to API {api_key} v{version}")
    return types.SimpleNamespace(error_code=code)


def recv_exact(s: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from ``s`` (OSError if the peer closes first)."""
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed by the server")
        buf += chunk
    return bytes(buf)


# Kafka's exception classes whose names do not follow from the error's
_EXCEPTIONS = {
    "KAFKA_STORAGE_ERROR": "KafkaStorageException",
    "UNKNOWN_SERVER_ERROR": "UnknownServerException",
    "CLUSTER_AUTHORIZATION_FAILED": "ClusterAuthorizationException",
    "TOPIC_AUTHORIZATION_FAILED": "TopicAuthorizationException",
    "NOT_LEADER_OR_FOLLOWER": "NotLeaderOrFollowerException",
}


def exception_class(code: int) -> str:
    """The Java class name Kafka's tools print for an error (its Errors enum), e.g.
    org.apache.kafka.common.errors.KafkaStorageException."""
    name = ErrorCode(code).name.upper()
    simple = _EXCEPTIONS.get(name) or "".join(w.title() for w in name.split("_")) + "Exception"
    return f"org.apache.kafka.common.errors.{simple}"


def refusal(code: int) -> str:
    """A whole request's error as a tool says it: its name, and for a cluster
    authorization failure what the principal lacks."""
    name = ErrorCode(code).name.upper()
    if code == ErrorCode.cluster_authorization_failed:
        return f"{name} (DESCRIBE on the cluster is needed)"
    return name
