"""kafka-configs.sh for --entity-type users / clients: client quotas
(DescribeClientQuotas / AlterClientQuotas) and users' SCRAM credentials
(DescribeUserScramCredentials / AlterUserScramCredentials, the salted password computed
here as Kafka's tool does: the password never leaves the machine)."""

from __future__ import annotations

import hashlib
import os
from typing import Any, TextIO

from keeperless.protocol.apis import ApiKey
from keeperless.tools.client import call
from keeperless.tools.configs_entities import DEFAULT, Entity
from keeperless.tools.errors import ToolError

__all__ = ["alter_user_or_client", "describe_users_or_clients"]

SCRAM = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
SCRAM_NAMES = {code: name for name, (code, _) in SCRAM.items()}
DEFAULT_ITERATIONS = 4096
QUOTA_TYPES = {"users": "user", "clients": "client-id"}
NOT_CONTROLLER = 41
RESOURCE_NOT_FOUND = 91


def _describe_entity(entity: list[tuple[str, str | None]]) -> str:
    """user-principal 'alice', client-id 'c1' / the default user-principal."""
    words = {"user": "user-principal", "client-id": "client-id"}
    return ", ".join(
        f"{words.get(t, t)} '{n}'" if n is not None else f"the default {words.get(t, t)}"
        for t, n in sorted(entity, key=lambda e: e[0] != "user")
    )


def _number(v: float) -> str:
    return repr(float(v))


def describe_users_or_clients(
    servers: list[tuple[str, int]], entities: list[Entity], controller: bool, out: TextIO
) -> int:
    if controller:
        raise ToolError(
            "describing user and client quotas through --bootstrap-controller is not "
            "supported: use --bootstrap-server"
        )
    components = []
    for etype, name in entities:
        if name is None:
            components.append({"entity_type": QUOTA_TYPES[etype], "match_type": 2, "match": None})
        elif name == DEFAULT:
            components.append({"entity_type": QUOTA_TYPES[etype], "match_type": 1, "match": None})
        else:
            components.append({"entity_type": QUOTA_TYPES[etype], "match_type": 0, "match": name})
    resp = call(
        servers, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": components, "strict": True}
    )
    if int(resp.error_code) != 0:
        raise ToolError(resp.error_message or resp.error_code.name)
    rows = []
    for e in resp.entries or ():
        entity = [(x.entity_type, x.entity_name) for x in e.entity]
        values = ", ".join(
            f"{v.key}={_number(v.value)}" for v in sorted(e.values, key=lambda v: v.key)
        )
        rows.append((_describe_entity(entity), values))
    for who, values in sorted(rows):
        print(f"Quota configs for {who} are {values}", file=out)
    if [t for t, _ in entities] == ["users"] and entities[0][1] != DEFAULT:
        _describe_scram(servers, entities[0][1], out)
    return 0


def _describe_scram(servers: list[tuple[str, int]], user: str | None, out: TextIO) -> None:
    resp = call(
        servers,
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
        0,
        {"users": None if user is None else [{"name": user}]},
    )
    if int(resp.error_code) != 0:
        raise ToolError(resp.error_message or resp.error_code.name)
    for r in sorted(resp.results, key=lambda r: r.user):
        if int(r.error_code) == RESOURCE_NOT_FOUND:
            continue
        if int(r.error_code) != 0:
            raise ToolError(r.error_message or r.error_code.name)
        creds = ", ".join(
            f"{SCRAM_NAMES.get(int(c.mechanism), c.mechanism)}=iterations={c.iterations}"
            for c in sorted(r.credential_infos, key=lambda c: int(c.mechanism))
        )
        print(f"SCRAM credential configs for user-principal '{r.user}' are {creds}", file=out)


def _scram_upsertion(user: str, mechanism: str, value: str) -> dict[str, Any]:
    """SCRAM-SHA-256=[iterations=8192,password=secret] (the brackets already removed)."""
    fields: dict[str, str] = {}
    for part in value.split(","):
        k, sep, v = part.partition("=")
        if not sep:
            raise ToolError(f"--add-config {mechanism}: expected [iterations=N,]password=PASSWORD")
        fields[k.strip()] = v
    if not fields.get("password"):
        raise ToolError(f"--add-config {mechanism}: a password is required (password=...)")
    unknown = set(fields) - {"password", "iterations"}
    if unknown:
        raise ToolError(f"--add-config {mechanism}: unknown field {sorted(unknown)[0]!r}")
    try:
        iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
    except ValueError:
        raise ToolError(f"--add-config {mechanism}: iterations must be a number") from None
    code, algo = SCRAM[mechanism]
    salt = os.urandom(32)
    salted = hashlib.pbkdf2_hmac(algo, fields["password"].encode(), salt, iterations)
    return {
        "name": user,
        "mechanism": code,
        "iterations": iterations,
        "salt": salt,
        "salted_password": salted,
    }


def _call_active(servers: list[tuple[str, int]], api_key: int, body: dict[str, Any]) -> Any:
    """To a broker, or to each controller until the active one answers."""
    resp: Any = None
    for server in servers:
        resp = call(
            [server], api_key, 1 if api_key == ApiKey.ALTER_CLIENT_QUOTAS else 0, body, timeout_s=40
        )
        results = getattr(resp, "entries", None) or getattr(resp, "results", None) or ()
        if not any(int(r.error_code) == NOT_CONTROLLER for r in results):
            return resp
    return resp


def alter_user_or_client(
    servers: list[tuple[str, int]],
    entities: list[Entity],
    adds: dict[str, str],
    deletes: list[str],
    out: TextIO,
) -> int:
    for k in [*adds, *deletes]:
        if k.upper().startswith("SCRAM-") and k not in SCRAM:
            raise ToolError(f"--add-config {k}: unknown SCRAM mechanism (SCRAM-SHA-256, "
                            "SCRAM-SHA-512)")  # fmt: skip
    scram_adds = {k: v for k, v in adds.items() if k in SCRAM}
    scram_deletes = [k for k in deletes if k in SCRAM]
    quota_adds = {k: v for k, v in adds.items() if k not in SCRAM}
    quota_deletes = [k for k in deletes if k not in SCRAM]
    one_user = len(entities) == 1 and entities[0][0] == "users"
    if (scram_adds or scram_deletes) and not (one_user and entities[0][1] not in (None, DEFAULT)):
        raise ToolError("SCRAM credentials belong to one named user (--entity-type users)")
    if quota_adds or quota_deletes:
        ops = []
        for k, v in quota_adds.items():
            try:
                ops.append({"key": k, "value": float(v), "remove": False})
            except ValueError:
                raise ToolError(f"--add-config {k}={v}: a quota is a number") from None
        ops += [{"key": k, "value": 0.0, "remove": True} for k in quota_deletes]
        entity = [
            {"entity_type": QUOTA_TYPES[t], "entity_name": None if n == DEFAULT else n}
            for t, n in entities
        ]
        resp = _call_active(
            servers, 49, {"entries": [{"entity": entity, "ops": ops}], "validate_only": False}
        )
        for e in resp.entries:
            if int(e.error_code) != 0:
                raise ToolError(e.error_message or e.error_code.name)
    if scram_adds or scram_deletes:
        user = str(entities[0][1])
        body = {
            "deletions": [{"name": user, "mechanism": SCRAM[k][0]} for k in scram_deletes],
            "upsertions": [_scram_upsertion(user, k, v) for k, v in scram_adds.items()],
        }
        resp = _call_active(servers, 51, body)
        for r in resp.results:
            if int(r.error_code) != 0:
                raise ToolError(r.error_message or r.error_code.name)
    if len(entities) == 1 and entities[0][1] == DEFAULT:
        print(f"Completed updating default config for {entities[0][0]} in the cluster.", file=out)
    else:
        who = ", ".join(
            f"{t[:-1]} {n}" if n != DEFAULT else f"default {t[:-1]}" for t, n in entities
        )
        print(f"Completed updating config for {who}.", file=out)
    return 0
