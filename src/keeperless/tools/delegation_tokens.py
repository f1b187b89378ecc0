"""`delegation-tokens`: Kafka's kafka-delegation-tokens.sh over CreateDelegationToken,
RenewDelegationToken, ExpireDelegationToken and DescribeDelegationToken (KIP-48):
--create, --renew, --expire, --describe, with --command-config naming the secured
connection (tokens are managed over SASL or two-way TLS only), printed as Kafka's tool
prints them."""

from __future__ import annotations

import base64
import binascii
import datetime
from typing import Any, TextIO

from kio.schema.errors import ErrorCode

from keeperless.protocol.apis import ApiKey
from keeperless.tools.client import call
from keeperless.tools.errors import ToolError

__all__ = ["check_token_args", "run_delegation_tokens"]

# Kafka's Errors messages, which its tool prints
_MESSAGES = {
    ErrorCode.delegation_token_auth_disabled: "Delegation Token feature is not enabled.",
    ErrorCode.delegation_token_not_found: "Delegation Token is not found on server.",
    ErrorCode.delegation_token_owner_mismatch: "Specified Principal is not valid Owner/Renewer.",
    ErrorCode.delegation_token_request_not_allowed: (
        "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels and on "
        "delegation token authenticated channels."
    ),
    ErrorCode.delegation_token_authorization_failed: "Delegation Token authorization failed.",
    ErrorCode.delegation_token_expired: "Delegation Token is expired.",
    ErrorCode.invalid_principal_type: "Supplied principalType is not supported.",
}
_ACTIONS = ("create", "renew", "expire", "describe")
# the flags each action needs, and those it refuses (Kafka's checkArgs)
_REQUIRED = {
    "create": ("max_life_time_period",),
    "renew": ("hmac", "renew_time_period"),
    "expire": ("hmac", "expiry_time_period"),
    "describe": (),
}
_INVALID = {
    "create": ("hmac", "renew_time_period", "expiry_time_period"),
    "renew": ("renewer_principal", "max_life_time_period", "expiry_time_period",
              "owner_principal"),
    "expire": ("max_life_time_period", "renew_time_period", "owner_principal"),
    "describe": ("renew_time_period", "max_life_time_period", "hmac", "expiry_time_period"),
}  # fmt: skip


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_token_args(args: Any) -> str:
    """The one action asked for; ToolError naming what is missing or out of place."""
    actions = [a for a in _ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        raise ToolError("Command must include exactly one action: --create, --renew, --expire "
                        "or --describe")  # fmt: skip
    action = actions[0]
    for name in ("bootstrap_server", "command_config", *_REQUIRED[action]):
        if getattr(args, name, None) is None:
            raise ToolError(f'Missing required argument "[{name.replace("_", "-")}]"')
    for name in _INVALID[action]:
        if getattr(args, name, None):
            raise ToolError(f"Option \"[{action}]\" can't be used with option "
                            f"\"[{name.replace('_', '-')}]\"")  # fmt: skip
    return action


def _principals(values: list[str] | None, flag: str) -> list[tuple[str, str]]:
    out = []
    for value in values or ():
        kind, sep, name = value.strip().partition(":")
        if not sep or not kind or not name:
            raise ToolError(f"{flag} {value!r}: expected principalType:name (User:alice)")
        out.append((kind, name))
    return out


def _hmac(value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ToolError(f"--hmac {value!r}: not base64") from None


def _date(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%dT%H:%M")


def _ms(value: Any) -> int:
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return int(value)


def _check(resp: Any) -> None:
    code = ErrorCode(resp.error_code)
    if code != ErrorCode.none:
        raise ToolError(_MESSAGES.get(code, code.name.upper()))


def _print_tokens(out: TextIO, tokens: list[dict[str, Any]]) -> None:
    row = "\n{:<15} {:<30} {:<15} {:<15} {:<25} {:<15} {:<15} {:<15}\n"
    out.write(row.format("TOKENID", "HMAC", "OWNER", "REQUESTER", "RENEWERS", "ISSUEDATE",
                         "EXPIRYDATE", "MAXDATE"))  # fmt: skip
    for t in tokens:
        out.write(row.format(t["token_id"], t["hmac"], t["owner"], t["requester"],
                             "[" + ", ".join(t["renewers"]) + "]", _date(t["issue"]),
                             _date(t["expiry"]), _date(t["max"])))  # fmt: skip


def run_delegation_tokens(args: Any, servers: list[tuple[str, int]], out: TextIO) -> int:
    action = check_token_args(args)
    if action == "create":
        renewers = _principals(args.renewer_principal, "--renewer-principal")
        owners = _principals(args.owner_principal, "--owner-principal")
        shown = "[" + ", ".join(f"{k}:{n}" for k, n in renewers) + "]"
        out.write(f"Calling create token operation with renewers :{shown} , "
                  f"max-life-time-period :{args.max_life_time_period}\n")  # fmt: skip
        body: dict[str, Any] = {
            "renewers": [{"principal_type": k, "principal_name": n} for k, n in renewers],
            "max_lifetime": args.max_life_time_period,
            "owner_principal_type": owners[0][0] if owners else None,
            "owner_principal_name": owners[0][1] if owners else None,
        }
        resp = call(servers, ApiKey.CREATE_DELEGATION_TOKEN, 3, body, error_first=True)
        _check(resp)
        out.write(f"Created delegation token with tokenId : {resp.token_id}\n")
        _print_tokens(out, [{
            "token_id": resp.token_id,
            "hmac": base64.b64encode(bytes(resp.hmac)).decode(),
            "owner": f"{resp.principal_type}:{resp.principal_name}",
            "requester": f"{resp.token_requester_principal_type}:"
                         f"{resp.token_requester_principal_name}",
            "renewers": [f"{k}:{n}" for k, n in renewers],
            "issue": _ms(resp.issue_timestamp),
            "expiry": _ms(resp.expiry_timestamp),
            "max": _ms(resp.max_timestamp),
        }])  # fmt: skip
        return 0
    if action in ("renew", "expire"):
        period = args.renew_time_period if action == "renew" else args.expiry_time_period
        word = "renew-time-period" if action == "renew" else "expire-time-period"
        out.write(f"Calling {action} token operation with hmac :{args.hmac} , {word} :{period}\n")
        api = ApiKey.RENEW_DELEGATION_TOKEN if action == "renew" else ApiKey.EXPIRE_DELEGATION_TOKEN
        field = "renew_period" if action == "renew" else "expiry_time_period"
        resp = call(servers, api, 2, {"hmac": _hmac(args.hmac), field: period}, error_first=True)
        _check(resp)
        out.write(f"Completed {action} operation. New expiry date : "
                  f"{_date(_ms(resp.expiry_timestamp))}\n")  # fmt: skip
        return 0
    owners = _principals(args.owner_principal, "--owner-principal")
    if owners:
        shown = "[" + ", ".join(f"{k}:{n}" for k, n in owners) + "]"
        out.write(f"Calling describe token operation for owners: {shown}\n")
    else:
        out.write("Calling describe token operation for current user.\n")
    req = {
        "owners": [{"principal_type": k, "principal_name": n} for k, n in owners]
        if owners
        else None
    }
    resp = call(servers, ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, req)
    _check(resp)
    out.write(f"Total number of tokens : {len(resp.tokens)}")
    _print_tokens(out, [{
        "token_id": t.token_id,
        "hmac": base64.b64encode(bytes(t.hmac)).decode(),
        "owner": f"{t.principal_type}:{t.principal_name}",
        "requester": f"{t.token_requester_principal_type}:{t.token_requester_principal_name}",
        "renewers": [f"{x.principal_type}:{x.principal_name}" for x in t.renewers],
        "issue": t.issue_timestamp,
        "expiry": t.expiry_timestamp,
        "max": t.max_timestamp,
    } for t in resp.tokens])  # fmt: skip
    return 0
