"""One declaration per API: the table in protocol/apis.py, the handler registry that
refuses a second registration, and no bare integer API keys anywhere in the source."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from keeperless.protocol.apis import APIS, BROKER_APIS, CONTROLLER_APIS, ApiKey, Listener
from keeperless.server.registry import ApiRegistry, RegistryError

SRC = Path(__file__).resolve().parents[3] / "src" / "keeperless"


async def _h(header: Any, req: Any) -> Any:
    return None


def test_the_table_names_every_api_as_kafka_does() -> None:
    assert ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS.title == "DescribeUserScramCredentials"
    assert ApiKey(18) is ApiKey.API_VERSIONS
    assert ApiKey.API_VERSIONS.title == "ApiVersions"
    assert set(BROKER_APIS) | set(CONTROLLER_APIS) == set(APIS)
    assert all(isinstance(k, ApiKey) for k in APIS)


def test_a_second_registration_of_an_api_is_refused_naming_both_owners() -> None:
    reg = ApiRegistry(Listener.BROKER)
    reg.register("group coordinator", {ApiKey.FIND_COORDINATOR: _h})
    with pytest.raises(RegistryError, match="FindCoordinator.*group coordinator.*txn"):
        reg.register("txn", {ApiKey.FIND_COORDINATOR: _h})


def test_an_api_not_served_on_the_listener_is_refused() -> None:
    with pytest.raises(RegistryError, match="Vote .52.*broker listener"):
        ApiRegistry(Listener.BROKER).register("raft", {ApiKey.VOTE: _h})
    with pytest.raises(RegistryError, match="ShareFetch"):
        ApiRegistry(Listener.CONTROLLER).register("raft", {ApiKey.SHARE_FETCH: _h})


def test_an_api_the_table_serves_without_a_handler_stops_the_node() -> None:
    reg = ApiRegistry(Listener.CONTROLLER)
    reg.register("raft", {ApiKey.VOTE: _h})
    with pytest.raises(RegistryError, match="no handler .* for .*BeginQuorumEpoch"):
        reg.complete()
    # the SASL APIs are the connection's and need no handler
    full = {k: _h for k in CONTROLLER_APIS if k not in (17, 36, ApiKey.VOTE)}
    reg.register("the rest", full)
    assert set(reg.complete()) == set(CONTROLLER_APIS) - {17, 36}


# functions taking an API key, and the position of that argument
_KEYED = {
    "response_class": 0,
    "request_class": 0,
    "_request_class": 0,
    "load_request_schema": 0,
    "load_response_schema": 0,
    "encode_request": 0,
    "decode_response": 1,
    "RequestHeader": 0,
    "_rpc": 0,
    "request_to_message": 0,
    "response_to_message": 0,
    "call": 1,
    "_call": 1,
    "request": 2,
    "send": 0,
    "_exchange": 1,
}


def _is_int(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return True
    return isinstance(node, ast.Tuple | ast.Set | ast.List) and any(_is_int(e) for e in node.elts)


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _bare_keys(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            pos = _KEYED.get(_name(node.func))
            if pos is not None and len(node.args) > pos and _is_int(node.args[pos]):
                found.append((node.lineno, f"{_name(node.func)}(<int>)"))
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_name(s) == "api_key" for s in sides) and any(_is_int(s) for s in sides):
                found.append((node.lineno, "api_key compared with an int"))
        elif isinstance(node, ast.FunctionDef) and node.name == "handlers":
            for sub in ast.walk(node):
                if isinstance(sub, ast.Dict) and any(
                    k is not None and _is_int(k) for k in sub.keys
                ):
                    found.append((sub.lineno, "handlers() keyed by int"))
    return found


def test_no_bare_integer_api_keys_in_the_source() -> None:
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "apis.py" and path.parent.name == "protocol":
            continue
        for line, what in _bare_keys(ast.parse(path.read_text(), str(path))):
            bad.append(f"{path.relative_to(SRC)}:{line}: {what}")
    assert not bad, "use ApiKey.<NAME>:\n" + "\n".join(bad)


def test_the_bare_key_check_can_fail() -> None:
    code = (
        "def handlers(self):\n    return {10: self.f}\n"
        "response_class(18, 0)\nif h.api_key == 17: pass\n"
    )
    assert len(_bare_keys(ast.parse(code))) == 3


def test_handlers_get_a_request_context_with_the_sender() -> None:
    """Kafka's RequestContext: the router hands each handler the header and the
    connection's session; nothing is read from context variables."""
    import asyncio

    from kio.index import load_request_schema
    from kio.schema.errors import ErrorCode

    from keeperless.protocol.build import build, build_filled
    from keeperless.protocol.context import RequestContext, listener_of, session_of
    from keeperless.protocol.framing import encode_request, response_class
    from keeperless.protocol.session import Session
    from keeperless.runtime.connection import RequestRouter

    seen: list[Any] = []

    async def describe_cluster(ctx: Any, req: Any) -> Any:
        seen.append(ctx)
        cls = response_class(ApiKey.DESCRIBE_CLUSTER, ctx.api_version)
        return build_filled(cls, {"error_code": ErrorCode.none})

    router = RequestRouter(1, {ApiKey.DESCRIBE_CLUSTER: (0, 1)},
                           {ApiKey.DESCRIBE_CLUSTER: describe_cluster}, lambda e: {})  # fmt: skip
    body = build(load_request_schema(60, 1), {"include_cluster_authorized_operations": False,
                                               "endpoint_type": 1})  # fmt: skip
    frame = memoryview(encode_request(60, 1, 9, "cli", body)[4:])
    alice = Session("SASL_SSL", "SASL_SSL", "192.0.2.4", "User:alice", True)
    out, throttle = asyncio.run(router.handle(frame, alice))
    assert out is not None
    assert throttle == 0
    [ctx] = seen
    assert isinstance(ctx, RequestContext)
    assert (ctx.api_key, ctx.api_version, ctx.correlation_id, ctx.client_id) == (60, 1, 9, "cli")
    assert session_of(ctx) is alice
    assert ctx.principal == "User:alice"
    assert listener_of(ctx) == "SASL_SSL"


def test_no_context_variables_carry_request_state() -> None:
    uses = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if "ContextVar" in p.read_text()]
    assert not uses
