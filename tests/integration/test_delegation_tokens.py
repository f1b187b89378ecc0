"""Delegation tokens (KIP-48) with Kafka's tool, kafka-delegation-tokens.sh, and SCRAM
authentication with a token (the tokenauth=true extension; no Python Kafka client sends
it, so the project's own SCRAM client logs in with it): create, authenticate as the
token's owner, renew by a renewer, refusals for others, expire later and at once,
refused after expiry, removed by the controller's sweep, kept across a restart, and a
token of a deleted user stops working."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import ROOT, Node, free_port, keeperless, wait_until

SCRIPT = str(ROOT / "bin" / "kafka-delegation-tokens.sh")
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule required"
USERS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}


class TokenCluster:
    def __init__(self, node: Node, sasl_port: int, work: Path) -> None:
        self.node = node
        self.sasl = f"127.0.0.1:{sasl_port}"
        self.work = work

    def props(self, user: str, password: str | None = None, token: bool = False) -> Path:
        """A --command-config logging in as ``user`` (a token id when ``token``)."""
        path = self.work / f"{user[:12]}-{'token' if token else 'user'}.properties"
        extra = ' tokenauth="true"' if token else ""
        path.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
            f'sasl.jaas.config={SCRAM} username="{user}" '
            f'password="{password or USERS[user]}"{extra};\n'
        )
        return path

    def tool(self, config: Path, *args: str, server: str | None = None) -> Any:
        return subprocess.run(
            [SCRIPT, "--bootstrap-server", server or self.sasl, "--command-config", str(config),
             *args],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenCluster]:
    work = tmp_path_factory.mktemp("tokens")
    probe = Node(work)  # for its ports
    sasl = free_port()
    extra = {
        "controller.quorum.voters": f"1@127.0.0.1:{probe.controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{probe.port},"
        f"CONTROLLER://127.0.0.1:{probe.controller_port},SASL://127.0.0.1:{sasl}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{probe.port},SASL://127.0.0.1:{sasl}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
        "SASL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": "User:ANONYMOUS;User:admin",
        "delegation.token.secret.key": "a-key-every-node-shares",
        "delegation.token.expiry.check.interval.ms": "1000",
    }
    node = Node(work, extra=extra)
    node.port, node.controller_port = probe.port, probe.controller_port
    cid = keeperless("storage", "random-uuid", check=True).stdout.strip()
    scram = []
    for user, pw in [*USERS.items(), ("admin", "admin-pw")]:
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            scram += ["--add-scram", f"{mech}=[name={user},password={pw}]"]
    keeperless("storage", "format", "-t", cid, "-c", str(node.config), *scram, check=True)
    node.start()
    try:
        yield TokenCluster(node, sasl, work)
    finally:
        node.stop()


def _created(out: str) -> tuple[str, str]:
    """(token id, hmac) from the tool's --create output."""
    tid = re.search(r"Created delegation token with tokenId : (\S+)", out)
    assert tid is not None, out
    row = [line for line in out.splitlines() if line.startswith(tid.group(1) + " ")]
    assert row, out
    return tid.group(1), row[0].split()[1]


def _metadata_as(t: TokenCluster, config: Path) -> list[str]:
    """The topics a Metadata request lists for whoever ``config`` logs in as, through
    the project's own client (which sends tokenauth=true)."""
    from keeperless.cli.main import _command_config
    from keeperless.tools import client

    sec = client.security_of(_command_config(str(config)), "test")
    host, port = t.sasl.split(":")
    resp = client.call([(host, int(port))], 3, 12, {"topics": None,
                       "allow_auto_topic_creation": False,
                       "include_topic_authorized_operations": False}, security=sec)  # fmt: skip
    return sorted(x.name for x in resp.topics if x.error_code == 0)


def _logs_in(t: TokenCluster, config: Path) -> bool:
    from keeperless.tools.errors import ToolError

    try:
        _metadata_as(t, config)
    except ToolError as e:
        why = str(e)
    else:
        return True
    assert "Authentication failed" in why, why
    return False


def test_create_authenticate_renew_expire(tokens: TokenCluster) -> None:
    t = tokens
    alice, bob, carol = t.props("alice"), t.props("bob"), t.props("carol")
    created = t.tool(alice, "--create", "--max-life-time-period", "-1",
                     "--renewer-principal", "User:bob")  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert created.stdout.startswith(
        "Calling create token operation with renewers :[User:bob] , max-life-time-period :-1"
    )
    assert "TOKENID" in created.stdout
    assert "User:alice" in created.stdout
    assert "[User:bob]" in created.stdout
    tid, mac = _created(created.stdout)

    # the token logs in as its owner: a topic only alice may see is listed
    topic = "only-alice"
    keeperless("topics", "--bootstrap-server", t.node.bootstrap, "--create", "--topic", topic,
               check=True)  # fmt: skip
    keeperless("acls", "--bootstrap-server", t.node.bootstrap, "--add", "--allow-principal",
               "User:alice", "--operation", "Describe", "--topic", topic, check=True)  # fmt: skip
    as_token = t.props(tid, mac, token=True)
    assert topic in _metadata_as(t, as_token)
    assert topic in _metadata_as(t, alice)
    assert topic not in _metadata_as(t, carol)
    # a token cannot be used to manage tokens (Kafka's allowTokenRequests)
    by_token = t.tool(as_token, "--describe")
    assert by_token.returncode == 1
    assert "not allowed on PLAINTEXT/1-way SSL channels and on delegation token" in (
        by_token.stderr
    )
    # the token id as a user name without tokenauth: no such user
    assert not _logs_in(t, t.props(tid, mac))

    described = t.tool(alice, "--describe")
    assert described.returncode == 0, described.stderr
    assert "Calling describe token operation for current user." in described.stdout
    assert "Total number of tokens : 1" in described.stdout
    assert mac in described.stdout
    assert "Total number of tokens : 1" in t.tool(bob, "--describe").stdout  # a renewer
    assert "Total number of tokens : 0" in t.tool(carol, "--describe").stdout
    owned = t.tool(carol, "--describe", "--owner-principal", "User:alice")
    assert "Total number of tokens : 0" in owned.stdout  # carol may not see alice's
    assert (
        "Total number of tokens : 1"
        in t.tool(
            t.props("admin", "admin-pw"), "--describe", "--owner-principal", "User:alice"
        ).stdout
    )  # a super user may

    renewed = t.tool(bob, "--renew", "--hmac", mac, "--renew-time-period", "-1")
    assert renewed.returncode == 0, renewed.stderr
    assert "Completed renew operation. New expiry date : " in renewed.stdout
    refused = t.tool(carol, "--renew", "--hmac", mac, "--renew-time-period", "-1")
    assert refused.returncode == 1
    assert "Specified Principal is not valid Owner/Renewer." in refused.stderr

    expired = t.tool(alice, "--expire", "--hmac", mac, "--expiry-time-period", "1500")
    assert expired.returncode == 0, expired.stderr
    assert "Completed expire operation. New expiry date : " in expired.stdout
    assert _logs_in(t, as_token)
    wait_until(lambda: not _logs_in(t, as_token), timeout=15, what="the token to expire")
    # ... and the controller removes it (delegation.token.expiry.check.interval.ms)
    wait_until(
        lambda: "Total number of tokens : 0" in t.tool(alice, "--describe").stdout,
        timeout=15,
        what="the expired token to be removed",
    )
    gone = t.tool(alice, "--renew", "--hmac", mac, "--renew-time-period", "-1")
    assert "Delegation Token is not found on server." in gone.stderr


def test_expire_at_once_and_tokens_outlive_a_restart(tokens: TokenCluster) -> None:
    t = tokens
    alice = t.props("alice")
    first = _created(t.tool(alice, "--create", "--max-life-time-period", "-1").stdout)
    second = _created(t.tool(alice, "--create", "--max-life-time-period", "600000").stdout)
    now = t.tool(alice, "--expire", "--hmac", first[1], "--expiry-time-period", "-1")
    assert now.returncode == 0, now.stderr
    assert not _logs_in(t, t.props(first[0], first[1], token=True))
    # one line each for the operator (a fault-harness report could not be explained
    # without them)
    logs = t.node.logs()
    assert f"Created delegation token {first[0]} for User:alice" in logs
    assert f"Expired delegation token {first[0]} of User:alice" in logs
    t.node.restart()  # the tokens live in the metadata log
    assert _logs_in(t, t.props(second[0], second[1], token=True))
    listed = t.tool(alice, "--describe").stdout
    assert second[0] in listed
    assert first[0] not in listed
    # the metadata shell shows the token's information, never its HMAC
    shell = keeperless("metadata-shell", "--bootstrap-controller",
                       f"127.0.0.1:{t.node.controller_port}", "--", "cat",
                       f"/delegationToken/{second[0]}")  # fmt: skip
    assert shell.returncode == 0, shell.stderr
    shell = shell.stdout
    assert '"owner": "User:alice"' in shell.replace('"Owner"', '"owner"'), shell
    assert second[1] not in shell
    t.tool(alice, "--expire", "--hmac", second[1], "--expiry-time-period", "-1")


def test_a_token_of_a_deleted_user_stops_working(tokens: TokenCluster) -> None:
    t = tokens
    bob_token = _created(t.tool(t.props("bob"), "--create", "--max-life-time-period", "-1").stdout)
    as_token = t.props(bob_token[0], bob_token[1], token=True)
    assert _logs_in(t, as_token)
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        keeperless("configs", "--bootstrap-server", t.node.bootstrap, "--alter",
                   "--delete-config", mech, "--entity-type", "users", "--entity-name", "bob",
                   check=True)  # fmt: skip
    assert not _logs_in(t, as_token)


def test_refusals_of_the_tool_and_the_channel(tokens: TokenCluster) -> None:
    t = tokens
    alice = t.props("alice")
    plain = t.work / "plain.properties"
    plain.write_text("security.protocol=PLAINTEXT\n")
    plaintext = t.tool(plain, "--create", "--max-life-time-period", "-1",
                       server=t.node.bootstrap)  # fmt: skip
    assert plaintext.returncode == 1
    assert "not allowed on PLAINTEXT/1-way SSL channels" in plaintext.stderr
    bad_type = t.tool(alice, "--create", "--max-life-time-period", "-1",
                      "--renewer-principal", "Group:x")  # fmt: skip
    assert "Supplied principalType is not supported." in bad_type.stderr
    for args, why in (
        (["--create"], 'Missing required argument "[max-life-time-period]"'),
        (["--renew", "--hmac", "x"], 'Missing required argument "[renew-time-period]"'),
        (["--describe", "--create"], "exactly one action"),
        (["--describe", "--hmac", "x"], "can't be used with option"),
    ):
        r = t.tool(alice, *args)
        assert r.returncode == 1
        assert why in r.stderr, (args, r.stderr)
    no_config = subprocess.run([SCRIPT, "--bootstrap-server", t.sasl, "--describe"],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
    assert 'Missing required argument "[command-config]"' in no_config.stderr
