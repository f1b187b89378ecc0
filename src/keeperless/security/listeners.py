"""Listener security as Kafka configures it: each listener's protocol from
``listener.security.protocol.map`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), TLS from
PEM keys (``ssl.keystore.type=PEM``, ``ssl.keystore.location`` or
``ssl.keystore.certificate.chain`` + ``ssl.keystore.key``, ``ssl.truststore.*``,
``ssl.client.auth``), SASL mechanisms (``sasl.enabled.mechanisms``: PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512) with PLAIN's users in the listener's JAAS configuration.
Every key may be set for one listener as ``listener.name.<listener>.<key>`` (and a JAAS
configuration per mechanism as ``listener.name.<listener>.<mechanism>.sasl.jaas.config``).

Each connection has a Session (who, from where, on which listener), which the router
passes to the request handlers in each request's RequestContext.

The client side (``ClientSecurity``) is what nodes use toward each other
(inter.broker.listener.name, controller.listener.names): the same keys, and the
``sasl.mechanism.inter.broker.protocol``/``sasl.mechanism.controller.protocol``
mechanism with the username and password of the listener's JAAS configuration; the
connections themselves are net/client.py's."""

from __future__ import annotations

import logging
import re
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keeperless.metadata.update_modes import RECONFIGURABLE_SSL
from keeperless.protocol.session import ANONYMOUS, Session
from keeperless.security.sasl import Credential, parse_jaas

__all__ = [
    "ANONYMOUS",
    "ClientSecurity",
    "ListenerSecurity",
    "SecurityConfigError",
    "Session",
    "check_reconfiguration",
    "client_security",
    "listener_security",
    "reconfigure_listeners",
    "store_settings",
]

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

log = logging.getLogger(__name__)


class SecurityConfigError(ValueError):
    """A listener's security settings are missing or wrong; the message names the key."""


ScramLookup = Callable[[str, str], Credential | None]  # (mechanism, user)
TokenLookup = Callable[[str, str], tuple[Credential, str] | None]  # (mechanism, token id)


@dataclass(slots=True)
class ListenerSecurity:
    listener: str
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    mechanisms: tuple[str, ...] = ()
    plain_users: Mapping[str, str] = field(default_factory=dict)
    scram_lookup: ScramLookup | None = None
    # (mechanism, token id) -> a delegation token's credential and owner
    token_lookup: TokenLookup | None = None
    principal_rules: tuple[tuple[re.Pattern[str], str, str], ...] = ()
    reauth_ms: int = 0  # connections.max.reauth.ms (KIP-368)
    # the key and trust store settings the TLS context serving new connections was
    # built from, and that context: ``ssl_context`` (the one the listener was bound
    # with) hands each handshake to it (reconfigure())
    tls_settings: tuple[str | None, ...] = ()
    serving: ssl.SSLContext | None = None

    def _hand_over(self, ssl_object: Any, _server_name: str | None, bound: Any) -> None:
        """Every handshake (OpenSSL's server name callback runs with or without SNI):
        served with the listener's current context."""
        if self.serving is not None and self.serving is not bound:
            ssl_object.context = self.serving

    def reconfigure(self, raw: Mapping[str, str]) -> bool:
        """Reload the key and trust stores if ``raw`` (the file's keys under this
        broker's dynamic ones) changed them, as Kafka's SslFactory.reconfigure: new
        connections use them, open ones keep theirs. True if reloaded; a store that
        cannot be loaded raises SecurityConfigError and the old ones stay."""
        if self.ssl_context is None:
            return False
        settings = store_settings(raw, self.listener)
        if settings == self.tls_settings:
            return False
        self.serving = _ssl_context(raw, self.listener, server=True)
        self.tls_settings = settings
        return True

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def ssl_principal(self, ssl_object: ssl.SSLObject | None) -> str:
        """``User:<distinguished name>`` of a client certificate (Kafka's DEFAULT rule,
        or the first ``ssl.principal.mapping.rules`` rule that matches)."""
        cert = ssl_object.getpeercert() if ssl_object is not None else None
        if not cert:
            return ANONYMOUS
        rdns = []
        for rdn in reversed(cert.get("subject", ())):
            for attr in rdn:
                rdns.append(f"{_OID_SHORT.get(attr[0], attr[0])}={attr[1]}")
        dn = ",".join(rdns)
        for pattern, repl, case in self.principal_rules:
            m = pattern.fullmatch(dn)
            if m is not None:
                name = m.expand(repl)
                return "User:" + (
                    name.lower() if case == "L" else name.upper() if case == "U" else name
                )
        return "User:" + dn


_OID_SHORT = {
    "commonName": "CN",
    "organizationalUnitName": "OU",
    "organizationName": "O",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "countryName": "C",
    "domainComponent": "DC",
}


def store_settings(raw: Mapping[str, str], listener: str) -> tuple[str | None, ...]:
    """A listener's key and trust store settings (Kafka's reloadable SSL keys), its own
    value of each first: what a reload compares."""
    return tuple(_key(raw, listener, k) for k in sorted(RECONFIGURABLE_SSL))


def _key(raw: Mapping[str, str], listener: str, key: str) -> str | None:
    """A listener's value of ``key``: ``listener.name.<listener>.<key>`` first."""
    specific = raw.get(f"listener.name.{listener.lower()}.{key}")
    return specific if specific is not None else raw.get(key)


def _load_inline_chain(ctx: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """Inline PEM (ssl.keystore.certificate.chain and ssl.keystore.key): ssl loads keys
    from files only, so through a private temporary directory removed at once."""
    with tempfile.TemporaryDirectory() as d:
        cert_path, key_path = Path(d) / "chain.pem", Path(d) / "key.pem"
        cert_path.write_text(chain.replace("\\n", "\n"))
        key_path.touch(mode=0o600)
        key_path.write_text(key.replace("\\n", "\n"))
        ctx.load_cert_chain(cert_path, key_path, password)


# what an operator can do about the usual TLS failures
_TLS_HINTS = {
    "WRONG_VERSION_NUMBER": "a client speaking plaintext to this TLS listener?",
    "HTTP_REQUEST": "an HTTP client on this TLS listener",
    "TLSV1_ALERT_UNKNOWN_CA": "the client does not trust this node's certificate: "
    "check the client's truststore",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the client refused this node's certificate",
    "CERTIFICATE_VERIFY_FAILED": "the client's certificate is not trusted here: "
    "check ssl.truststore.* of the listener",
    "certificate has expired": "the client's certificate has expired",
    "certificate is not yet valid": "the client's certificate is not valid yet (clock?)",
    "UNSUPPORTED_PROTOCOL": "the client offers only TLS versions before 1.2",
    "PEER_DID_NOT_RETURN_A_CERTIFICATE": "ssl.client.auth=required and the client sent "
    "no certificate",
}


class _TlsFailures:
    """Failed TLS handshakes (an untrusted or missing client certificate, a plaintext
    client on a TLS port...) logged once per listener and reason every 10 s, with how
    many more there were: the event loop itself drops these failures silently. The
    client's address is not known at this layer (the TLS object sees bytes only)."""

    def __init__(self, listener: str) -> None:
        self.listener = listener
        self.last: dict[str, float] = {}
        self.hidden: dict[str, int] = {}

    def failed(self, e: ssl.SSLError) -> None:
        why = str(e.reason or e)
        detail = getattr(e, "verify_message", None)  # which check the certificate failed
        key = f"{why} {detail}"
        now = time.monotonic()
        if now - self.last.get(key, -1e9) < 10:
            self.hidden[key] = self.hidden.get(key, 0) + 1
            return
        n = self.hidden.pop(key, 0)
        self.last[key] = now
        hint = _TLS_HINTS.get(detail or "") or _TLS_HINTS.get(why)
        logging.getLogger(__name__).warning(
            "TLS handshake failed on listener %s: %s%s%s%s",
            self.listener,
            why,
            f" ({detail})" if detail else "",
            f": {hint}" if hint else "",
            f" ({n} more since the last such warning)" if n else "",
        )


def _logged_tls(listener: str) -> type[ssl.SSLObject]:
    """The TLS object of a server context: reports failed handshakes, including the
    client's alerts read after the server's part of a TLS 1.3 handshake."""
    failures = _TlsFailures(listener)

    class LoggedSSLObject(ssl.SSLObject):
        def do_handshake(self) -> None:
            try:
                super().do_handshake()
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                raise
            except ssl.SSLError as e:
                failures.failed(e)
                raise

        def read(self, len: int = 1024, buffer: Any = None) -> Any:
            try:
                return super().read(len, buffer)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, ssl.SSLZeroReturnError):
                raise
            except ssl.SSLError as e:
                if "ALERT" in (e.reason or ""):  # the client refused us (e.g. unknown CA)
                    failures.failed(e)
                raise

    return LoggedSSLObject


def _ssl_context(raw: Mapping[str, str], listener: str, server: bool) -> ssl.SSLContext:
    def get(k: str) -> str | None:
        return _key(raw, listener, k)

    where = f"listener {listener}"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    for typ_key in ("ssl.keystore.type", "ssl.truststore.type"):
        typ = (get(typ_key) or "PEM").upper()
        if typ != "PEM":
            raise SecurityConfigError(
                f"{typ_key}={typ} on {where}: only PEM key and trust stores are supported "
                "(convert a JKS or PKCS12 store to PEM)"
            )
    location = get("ssl.keystore.location")
    chain, key = get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
    password = get("ssl.key.password") or get("ssl.keystore.password")
    try:
        if chain and key:
            _load_inline_chain(ctx, chain, key, password)
        elif location:
            ctx.load_cert_chain(location, None, password)
        elif server:
            raise SecurityConfigError(
                f"{where} uses TLS but has no key: set ssl.keystore.location (a PEM file "
                "with the certificate chain and private key) or ssl.keystore.certificate.chain "
                "and ssl.keystore.key"
            )
    except (OSError, ssl.SSLError) as e:
        what = (
            "ssl.keystore.certificate.chain/ssl.keystore.key"
            if chain and key
            else f"ssl.keystore.location={location}"
        )
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise SecurityConfigError(f"Cannot load {what} of {where}: {reason}") from None
    trust_file, trust_pem = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    try:
        if trust_pem:
            ctx.load_verify_locations(cadata=trust_pem.replace("\\n", "\n"))
        elif trust_file:
            ctx.load_verify_locations(trust_file)
        elif not server:
            ctx.load_default_certs()
    except (OSError, ssl.SSLError) as e:
        what = (
            "ssl.truststore.certificates" if trust_pem else f"ssl.truststore.location={trust_file}"
        )
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise SecurityConfigError(f"Cannot load {what} of {where}: {reason}") from None
    if server:
        auth = (get("ssl.client.auth") or "none").lower()
        if auth not in ("none", "requested", "required"):
            raise SecurityConfigError(
                f"ssl.client.auth={auth} on {where}: expected none, requested or required"
            )
        ctx.verify_mode = {
            "none": ssl.CERT_NONE,
            "requested": ssl.CERT_OPTIONAL,
            "required": ssl.CERT_REQUIRED,
        }[auth]
        ctx.sslobject_class = _logged_tls(listener)
    else:
        ident = get("ssl.endpoint.identification.algorithm")
        ctx.check_hostname = ident is None or ident.lower() == "https"
    return ctx


def _principal_rules(
    raw: Mapping[str, str], listener: str
) -> tuple[tuple[re.Pattern[str], str, str], ...]:
    text = _key(raw, listener, "ssl.principal.mapping.rules") or "DEFAULT"
    out = []
    for rule in re.findall(r"RULE:((?:[^/\\]|\\.)*)/((?:[^/\\]|\\.)*)/([LU]?)|DEFAULT", text):
        if rule[0] == "" and rule[1] == "":
            continue
        try:
            pat = re.compile(rule[0])
        except re.error as e:
            raise SecurityConfigError(f"ssl.principal.mapping.rules: {e}") from None
        out.append((pat, re.sub(r"\$(\d)", r"\\\1", rule[1]), rule[2]))
    return tuple(out)


def _mechanisms(raw: Mapping[str, str], listener: str) -> tuple[str, ...]:
    text = _key(raw, listener, "sasl.enabled.mechanisms") or "GSSAPI"
    mechs = tuple(m.strip().upper() for m in text.split(",") if m.strip())
    for m in mechs:
        if m not in SUPPORTED_MECHANISMS:
            raise SecurityConfigError(
                f"sasl.enabled.mechanisms of listener {listener} has {m}, which is not "
                f"supported (supported: {', '.join(SUPPORTED_MECHANISMS)})"
            )
    return mechs


def _jaas(raw: Mapping[str, str], listener: str, mechanism: str) -> dict[str, str]:
    text = raw.get(f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config")
    if text is None:
        text = _key(raw, listener, "sasl.jaas.config")
    if text is None:
        return {}
    try:
        module, options = parse_jaas(text)
    except ValueError as e:
        raise SecurityConfigError(f"sasl.jaas.config of listener {listener}: {e}") from None
    if module not in _LOGIN_MODULES:
        raise SecurityConfigError(
            f"sasl.jaas.config of listener {listener}: unknown login module {module} "
            f"(supported: {', '.join(sorted(_LOGIN_MODULES))})"
        )
    return options


_LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule",
    "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def listener_security(
    raw: Mapping[str, str],
    listener: str,
    protocol: str,
    scram_lookup: ScramLookup | None,
    token_lookup: TokenLookup | None = None,
) -> ListenerSecurity:
    sec = ListenerSecurity(listener, protocol)
    if protocol in ("SSL", "SASL_SSL"):
        sec.ssl_context = sec.serving = _ssl_context(raw, listener, server=True)
        sec.tls_settings = store_settings(raw, listener)
        sec.ssl_context.sni_callback = sec._hand_over
        sec.principal_rules = _principal_rules(raw, listener)
    if sec.sasl:
        reauth = _key(raw, listener, "connections.max.reauth.ms") or "0"
        try:
            sec.reauth_ms = int(reauth)
        except ValueError:
            raise SecurityConfigError(
                f"connections.max.reauth.ms of listener {listener}: {reauth!r} is not a number"
            ) from None
        sec.mechanisms = _mechanisms(raw, listener)
        if "PLAIN" in sec.mechanisms:
            opts = _jaas(raw, listener, "PLAIN")
            sec.plain_users = {k[5:]: v for k, v in opts.items() if k.startswith("user_")}
            if not sec.plain_users:
                raise SecurityConfigError(
                    f"listener {listener} enables PLAIN but its sasl.jaas.config "
                    f"(listener.name.{listener.lower()}.plain.sasl.jaas.config) defines no "
                    'user_<name>="<password>"'
                )
        sec.scram_lookup = scram_lookup
        sec.token_lookup = token_lookup
    return sec


def reconfigure_listeners(
    node_id: int, listeners: Sequence[ListenerSecurity], raw: Mapping[str, str]
) -> None:
    """After this broker's dynamic configs changed: each TLS listener whose key or trust
    store settings changed reloads them, one log line each (an error, and the old stores
    kept, if they cannot be loaded)."""
    for sec in listeners:
        try:
            if sec.reconfigure(raw):
                log.info("[node %d] Listener %s reloaded its key and trust stores: new "
                         "connections use them", node_id, sec.listener)  # fmt: skip
        except SecurityConfigError as e:
            log.error("[node %d] Listener %s keeps its key and trust stores: %s", node_id,
                      sec.listener, e)  # fmt: skip


def check_reconfiguration(
    listeners: Sequence[ListenerSecurity], raw: Mapping[str, str]
) -> str | None:
    """Why ``raw`` would not load as some listener's new key or trust store (Kafka
    validates a per-broker SSL update on the broker it names before it is stored)."""
    for sec in listeners:
        if sec.ssl_context is None:
            continue
        try:
            _ssl_context(raw, sec.listener, server=True)
        except SecurityConfigError as e:
            return f"Validation of dynamic config update of SSLFactory failed: {e}"
    return None


# -- the client side: node to node ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = ""


def client_security(
    raw: Mapping[str, str], listener: str, protocol: str, mechanism_key: str
) -> ClientSecurity:
    """How this node connects to ``listener`` of its peers (the same keys as serving it)."""
    if protocol == "PLAINTEXT":
        return ClientSecurity()
    ctx = _ssl_context(raw, listener, server=False) if protocol.endswith("SSL") else None
    if not protocol.startswith("SASL_"):
        return ClientSecurity(protocol, ctx)
    mech = (raw.get(mechanism_key) or "GSSAPI").upper()
    if mech not in SUPPORTED_MECHANISMS:
        raise SecurityConfigError(
            f"{mechanism_key}={mech}: not supported (supported: {', '.join(SUPPORTED_MECHANISMS)})"
        )
    opts = _jaas(raw, listener, mech)
    if "username" not in opts or "password" not in opts:
        raise SecurityConfigError(
            f"the sasl.jaas.config for {mech} on listener {listener} needs username and "
            "password (what this node logs in to its peers with)"
        )
    return ClientSecurity(protocol, ctx, mech, opts["username"], opts["password"])


class AuthenticationError(OSError):
    """A peer refused this node's credentials."""
