"""The server side of SASL as Kafka speaks it: PLAIN (RFC 4616) against the users of a
listener's JAAS configuration, and SCRAM-SHA-256/512 (RFC 5802, RFC 7677) against the
credentials of the metadata log (salt, StoredKey, ServerKey, iterations — never the
password). Each mechanism is a small state machine fed the client's tokens from
SaslAuthenticate; it answers the next server token, and when done the authenticated
user name. Failures raise SaslFailure with a message that names no secret.

Also Kafka's JAAS option syntax (``LoginModule required key="value" ...;``)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable

from keeperless.metadata.image import ScramCredential as Credential

# RFC 5802's client-first-message-bare (as Kafka's ScramMessages parses it): a user
# name, then a nonce of printable ASCII without commas, then extensions
_CLIENT_FIRST = re.compile(r"n=[^,]+,r=[\x21-\x2b\x2d-\x7e]+(,.*)?\Z", re.DOTALL)

__all__ = [
    "MECHANISM_CODES",
    "Credential",
    "PlainServer",
    "SaslClient",
    "SaslFailure",
    "ScramServer",
    "jaas_credentials",
    "parse_jaas",
    "scram_client_proof",
    "scram_salted_password",
]

# Kafka's ScramMechanism codes in UserScramCredentialRecord
MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
_HASH = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class SaslFailure(Exception):
    """Authentication failed; the message is safe to log and to send to the client."""


_JAAS_OPTION = re.compile(r'(\w[\w.\-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;]+))')


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """``org.apache...PlainLoginModule required username="a" user_a="x";`` -> (the login
    module's class name, its options). ValueError names what is malformed."""
    text = text.strip()
    if not text.endswith(";"):
        raise ValueError("JAAS config entry not terminated by semi-colon")
    m = re.match(r"([\w.$]+)\s+(required|requisite|sufficient|optional)\b(.*?);?\s*$", text, re.S)
    if m is None:
        raise ValueError(
            "expected '<LoginModule class> required key=\"value\" ...;' in a sasl.jaas.config"
        )
    options: dict[str, str] = {}
    rest = m.group(3)
    pos = 0
    for opt in _JAAS_OPTION.finditer(rest):
        if rest[pos : opt.start()].strip():
            raise ValueError(
                f"cannot read {rest[pos : opt.start()].strip()!r} in a sasl.jaas.config"
            )
        value = opt.group(2) if opt.group(2) is not None else opt.group(3)
        options[opt.group(1)] = re.sub(r"\\(.)", r"\1", value)
        pos = opt.end()
    if rest[pos:].strip().rstrip(";").strip():
        raise ValueError(f"cannot read {rest[pos:].strip()!r} in a sasl.jaas.config")
    return m.group(1), options


class PlainServer:
    """PLAIN: one token, ``authzid NUL user NUL password``."""

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users
        self.user: str | None = None

    def step(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslFailure("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, user_b, password_b = parts
        try:
            user, password = user_b.decode(), password_b.decode()
        except UnicodeDecodeError:
            raise SaslFailure("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise SaslFailure("Authentication failed: username not specified")
        if authzid and authzid != user_b:
            raise SaslFailure("Authentication failed: Client requested an authorization id "
                              "that is different from username")  # fmt: skip
        expected = self.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslFailure("Authentication failed: Invalid username or password")
        self.user = user
        return b""

    @property
    def done(self) -> bool:
        return self.user is not None

    @property
    def principal(self) -> str:
        return f"User:{self.user}"


def _attrs(msg: str) -> dict[str, str]:
    out = {}
    for part in msg.split(","):
        if len(part) < 2 or part[1] != "=":
            raise SaslFailure(f"Invalid SCRAM message attribute {part[:20]!r}")
        out[part[0]] = part[2:]
    return out


def _unescape_name(name: str) -> str:
    if re.search(r"=(?!2C|3D)", name):
        raise SaslFailure("Invalid SCRAM user name encoding")
    return name.replace("=2C", ",").replace("=3D", "=")


def scram_salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(_HASH[mechanism], password.encode(), salt, iterations)


def scram_client_proof(mechanism: str, salted: bytes, auth_message: bytes) -> tuple[bytes, bytes]:
    """(ClientProof, ServerSignature) for a salted password — the client's side, for
    tests and tools."""
    algo = _HASH[mechanism]
    client_key = hmac.new(salted, b"Client Key", algo).digest()
    stored = hashlib.new(algo, client_key).digest()
    signature = hmac.new(stored, auth_message, algo).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_key = hmac.new(salted, b"Server Key", algo).digest()
    return proof, hmac.new(server_key, auth_message, algo).digest()


class ScramServer:
    """SCRAM-SHA-256/512: client-first -> server-first, client-final -> server-final."""

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], Credential | None],
        token_lookup: Callable[[str], tuple[Credential, str] | None] | None = None,
    ) -> None:
        self.mechanism = mechanism
        self.algo = _HASH[mechanism]
        self.lookup = lookup
        # a delegation token's credential and owner, by token id (tokenauth=true)
        self.token_lookup = token_lookup
        self.user: str | None = None
        self.token_authenticated = False
        self._owner = ""
        self._token_owner = ""
        self._stage = 0
        self._first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._cred: Credential | None = None
        self._name = ""

    @property
    def done(self) -> bool:
        return self.user is not None

    @property
    def principal(self) -> str:
        """Who authenticated: the user, or a token's owner."""
        return self._owner or f"User:{self.user}"

    def step(self, token: bytes) -> bytes:
        try:
            msg = token.decode()
        except UnicodeDecodeError:
            raise SaslFailure("Invalid SCRAM message: not UTF-8") from None
        if self._stage == 0:
            return self._first(msg)
        if self._stage == 1:
            return self._final(msg)
        raise SaslFailure("Unexpected SCRAM message after authentication completed")

    def _first(self, msg: str) -> bytes:
        gs2, _, bare = msg.partition(",")
        authzid, _, bare = bare.partition(",")
        if gs2 not in ("n", "y") or not bare:
            raise SaslFailure("Invalid SCRAM client-first message (channel binding is not "
                              "supported)")  # fmt: skip
        if not _CLIENT_FIRST.match(bare):  # RFC 5802: n= then r=, a printable nonce
            raise SaslFailure("Invalid SCRAM client-first message: no user name or nonce")
        name, nonce, *more = bare.split(",")
        # Kafka's extensions after the nonce (key=value): tokenauth=true names a
        # delegation token (the token id as user name, its HMAC as password)
        extensions = {}
        for ext in more:
            key, sep, value = ext.partition("=")
            if not sep or not key:
                raise SaslFailure(f"Invalid SCRAM extension {ext[:20]!r}")
            extensions[key] = value
        self._name = _unescape_name(name[2:])
        if authzid and authzid[2:] != self._name:
            raise SaslFailure("Authentication failed: Client requested an authorization id "
                              "that is different from username")  # fmt: skip
        if extensions.get("tokenauth", "").lower() == "true":
            found = self.token_lookup(self._name) if self.token_lookup is not None else None
            self._cred = found[0] if found is not None else None
            self._token_owner = found[1] if found is not None else ""
            self.token_authenticated = True
        else:
            self._cred = self.lookup(self._name)
        self._first_bare = bare
        self._nonce = nonce[2:] + secrets.token_urlsafe(18)
        # an unknown user gets a well-formed challenge all the same (the failure comes
        # at the proof): the answer does not tell which users exist
        cred = self._cred
        salt = cred.salt if cred is not None else hashlib.sha256(self._name.encode()).digest()
        iterations = cred.iterations if cred is not None else 4096
        self._server_first = f"r={self._nonce},s={base64.b64encode(salt).decode()},i={iterations}"
        self._stage = 1
        return self._server_first.encode()

    def _final(self, msg: str) -> bytes:
        without_proof, sep, proof_b64 = msg.rpartition(",p=")
        if not sep:
            raise SaslFailure("Invalid SCRAM client-final message: no proof")
        attrs = _attrs(without_proof)
        if attrs.get("r") != self._nonce:
            raise SaslFailure("Invalid SCRAM client-final message: the nonce does not match")
        auth = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        cred = self._cred
        self._stage = 2
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise SaslFailure("Invalid SCRAM client-final message: bad proof") from None
        if cred is None:
            raise SaslFailure(f"Authentication failed during authentication due to invalid "
                              f"credentials with SASL mechanism {self.mechanism}")  # fmt: skip
        signature = hmac.new(cred.stored_key, auth, self.algo).digest()
        if len(proof) != len(signature):
            raise SaslFailure("Invalid SCRAM client-final message: bad proof length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.algo, client_key).digest(), cred.stored_key):
            raise SaslFailure(f"Authentication failed during authentication due to invalid "
                              f"credentials with SASL mechanism {self.mechanism}")  # fmt: skip
        self.user = self._name
        if self.token_authenticated:
            self._owner = self._token_owner
        server_sig = hmac.new(cred.server_key, auth, self.algo).digest()
        return f"v={base64.b64encode(server_sig).decode()}".encode()


class SaslClient:
    """The client side of PLAIN and SCRAM, without I/O: ``first()`` is the first token
    to send; ``step(answer)`` takes the server's answer and gives the next token, or
    None once logged in (SaslFailure if a SCRAM server's signature does not match).
    Nodes (to their peers) and the tools drive it over their own connections."""

    def __init__(
        self, mechanism: str, username: str, password: str, *, tokenauth: bool = False
    ) -> None:
        self.mechanism = mechanism
        self.username = username
        self.password = password
        name = username.replace("=", "=3D").replace(",", "=2C")
        # tokenauth: a delegation token (its id as user name, its base64 HMAC as
        # password), Kafka's SCRAM extension
        ext = ",tokenauth=true" if tokenauth else ""
        self._first_bare = f"n={name},r={secrets.token_urlsafe(18)}{ext}"
        self._signature = b""
        self._stage = 0

    def first(self) -> bytes:
        if self.mechanism == "PLAIN":
            return b"\0" + self.username.encode() + b"\0" + self.password.encode()
        return f"n,,{self._first_bare}".encode()

    def step(self, answer: bytes) -> bytes | None:
        self._stage += 1
        if self.mechanism == "PLAIN" or self._stage > 2:
            return None
        if self._stage == 2:
            if answer.decode(errors="replace") != f"v={base64.b64encode(self._signature).decode()}":
                raise SaslFailure("the server's SCRAM signature does not match")
            return None
        server_first = answer.decode()
        attrs = dict(p.split("=", 1) for p in server_first.split(","))
        salted = scram_salted_password(
            self.mechanism, self.password, base64.b64decode(attrs["s"]), int(attrs["i"])
        )
        without_proof = f"c=biws,r={attrs['r']}"
        auth = f"{self._first_bare},{server_first},{without_proof}".encode()
        proof, self._signature = scram_client_proof(self.mechanism, salted, auth)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def jaas_credentials(text: str) -> tuple[str, str]:
    """The username and password of a client's sasl.jaas.config (ValueError names
    what is wrong)."""
    _module, options = parse_jaas(text)
    if "username" not in options or "password" not in options:
        raise ValueError("a client's sasl.jaas.config needs username and password")
    return options["username"], options["password"]
