"""Issue 17: encrypted and authenticated listeners with real clients — TLS with PEM keys
(client certificates named by their distinguished name), SASL/PLAIN against the
listener's JAAS users, SASL/SCRAM-SHA-256/512 against credentials bootstrapped with
`storage format --add-scram`; wrong passwords, unknown users and untrusted certificates
refused."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import Node, free_port, kafka_request, keeperless

PASSWORD = "alice-secret"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}", cwd=d)  # fmt: skip


def _signed(d: Path, name: str, ca: str, subj: str, san: str | None = None) -> None:
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
             f"{name}.csr", "-subj", subj, cwd=d)  # fmt: skip
    ext = d / f"{name}.ext"
    ext.write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", str(ext),
             cwd=d)  # fmt: skip


def _expired(d: Path, name: str, ca: str, subj: str) -> None:
    """A certificate of ``ca`` that expired in 2020 (openssl ca takes explicit dates)."""
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
             f"{name}.csr", "-subj", subj, cwd=d)  # fmt: skip
    (d / "index.txt").write_text("")
    (d / "serial").write_text("01\n")
    (d / "ca.cnf").write_text(
        "[ca]\ndefault_ca = CA_default\n[CA_default]\ndir = .\ndatabase = index.txt\n"
        "new_certs_dir = .\nserial = serial\ndefault_md = sha256\npolicy = any\n"
        "[any]\ncommonName = supplied\n"
    )
    _openssl("ca", "-batch", "-config", "ca.cnf", "-cert", f"{ca}.pem", "-keyfile", f"{ca}.key",
             "-in", f"{name}.csr", "-out", f"{name}.pem", "-startdate", "20200101000000Z",
             "-enddate", "20200102000000Z", "-notext", cwd=d)  # fmt: skip


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    _ca(d, "ca")
    _ca(d, "rogue")
    _signed(d, "server", "ca", "/CN=localhost", "IP:127.0.0.1,DNS:localhost")
    _signed(d, "client", "ca", "/O=Example/OU=Data/CN=alice")
    _signed(d, "mallory", "rogue", "/CN=mallory")
    _expired(d, "old", "ca", "/CN=old")
    # Kafka's PEM key store: the certificate chain and the key in one file
    (d / "server-store.pem").write_text(
        (d / "server.pem").read_text() + (d / "server.key").read_text()
    )
    return d


class Secure:
    def __init__(self, node: Node, ports: dict[str, int], certs: Path) -> None:
        self.node = node
        self.ports = ports
        self.certs = certs

    def conf(self, listener: str, **extra: Any) -> dict[str, Any]:
        c: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{self.ports[listener]}"}
        protocol = {"SASLPLAIN": "SASL_PLAINTEXT", "TLS": "SSL", "SASLTLS": "SASL_SSL"}[listener]
        c["security.protocol"] = protocol
        if "SSL" in protocol:
            c["ssl.ca.location"] = str(self.certs / "ca.pem")
        c.update(extra)
        return c


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[Secure]:
    ports = {"SASLPLAIN": free_port(), "TLS": free_port(), "SASLTLS": free_port()}
    work = tmp_path_factory.mktemp("secure")
    probe = Node(work)  # for its ports
    plain_users = f'user_admin="admin-secret" user_alice="{PASSWORD}"'
    jaas = "org.apache.kafka.common.security.plain.PlainLoginModule required " + plain_users + ";"
    extra = {
        "listeners": f"PLAINTEXT://127.0.0.1:{probe.port},CONTROLLER://127.0.0.1:{probe.controller_port},"
        f"SASLPLAIN://127.0.0.1:{ports['SASLPLAIN']},TLS://127.0.0.1:{ports['TLS']},"
        f"SASLTLS://127.0.0.1:{ports['SASLTLS']}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{probe.port},"
        f"SASLPLAIN://127.0.0.1:{ports['SASLPLAIN']},TLS://127.0.0.1:{ports['TLS']},"
        f"SASLTLS://127.0.0.1:{ports['SASLTLS']}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
        "SASLPLAIN:SASL_PLAINTEXT,TLS:SSL,SASLTLS:SASL_SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.saslplain.plain.sasl.jaas.config": jaas,
        "listener.name.sasltls.plain.sasl.jaas.config": jaas,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs / "server-store.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs / "ca.pem"),
        "listener.name.tls.ssl.client.auth": "required",
        # KIP-368: logins on this listener last 2 s; clients log in again to go on
        "listener.name.saslplain.connections.max.reauth.ms": "2000",
    }
    node = Node(work, extra=extra)
    node.port, node.controller_port = probe.port, probe.controller_port
    cid = keeperless("storage", "random-uuid", check=True).stdout.strip()
    keeperless("storage", "format", "-t", cid, "-c", str(node.config),
               "--add-scram", f"SCRAM-SHA-256=[name=alice,password={PASSWORD}]",
               "--add-scram", f"SCRAM-SHA-512=[name=alice,password={PASSWORD}]",
               check=True)  # fmt: skip
    node.start()
    try:
        yield Secure(node, ports, certs)
    finally:
        node.stop()


def _roundtrip(conf: dict[str, Any]) -> None:
    """Create a topic, produce a record, read it back, all over ``conf``."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"s-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer(conf)
    p.produce(topic, value=b"secret payload")
    assert p.flush(30) == 0
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    try:
        for _ in range(60):
            m = c.poll(1)
            if m is not None and m.error() is None:
                assert m.value() == b"secret payload"
                return
        raise AssertionError("nothing consumed")
    finally:
        c.close()


def _refused(conf: dict[str, Any]) -> str:
    """The error a client is told when the listener refuses it (and that it never got
    metadata)."""
    from confluent_kafka import KafkaException, Producer

    errors: list[str] = []
    p = Producer({**conf, "error_cb": lambda e: errors.append(str(e))})
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    assert errors, "the client was told of no error"
    with pytest.raises(KafkaException):
        p.list_topics(timeout=2)
    return " ".join(errors)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_plaintext_and_sasl_ssl_with_confluent_kafka(secure: Secure, mechanism: str) -> None:
    for listener in ("SASLPLAIN", "SASLTLS"):
        creds = {"sasl.mechanism": mechanism, "sasl.username": "alice", "sasl.password": PASSWORD}
        _roundtrip(secure.conf(listener, **creds))


def test_wrong_passwords_and_unknown_users_are_refused(secure: Secure) -> None:
    for mechanism in ("PLAIN", "SCRAM-SHA-256"):
        bad = _refused(secure.conf("SASLPLAIN", **{"sasl.mechanism": mechanism,
                                                   "sasl.username": "alice",
                                                   "sasl.password": "wrong"}))  # fmt: skip
        assert "Authentication failed" in bad, bad
        nobody = _refused(secure.conf("SASLPLAIN", **{"sasl.mechanism": mechanism,
                                                      "sasl.username": "nobody",
                                                      "sasl.password": "x"}))  # fmt: skip
        assert "Authentication failed" in nobody, nobody
    logs = secure.node.logs()
    assert "wrong" not in logs  # no secret in the log
    assert "Authentication failed" in logs


def test_tls_with_client_certificates(secure: Secure) -> None:
    certs = secure.certs
    good = secure.conf("TLS", **{"ssl.certificate.location": str(certs / "client.pem"),
                                 "ssl.key.location": str(certs / "client.key")})  # fmt: skip
    _roundtrip(good)
    # a certificate of another CA, and none at all (ssl.client.auth=required)
    rogue = secure.conf("TLS", **{"ssl.certificate.location": str(certs / "mallory.pem"),
                                  "ssl.key.location": str(certs / "mallory.key")})  # fmt: skip
    _refused(rogue)
    _refused(secure.conf("TLS"))
    # a certificate of the right CA that has expired
    expired = secure.conf("TLS", **{"ssl.certificate.location": str(certs / "old.pem"),
                                    "ssl.key.location": str(certs / "old.key")})  # fmt: skip
    _refused(expired)
    # a client that does not trust the server's CA refuses the broker
    untrusting = secure.conf("SASLTLS", **{"ssl.ca.location": str(certs / "rogue.pem"),
                                           "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                                           "sasl.password": PASSWORD})  # fmt: skip
    _refused(untrusting)
    # the node says why (the event loop alone drops failed handshakes silently)
    logs = secure.node.logs()
    assert "TLS handshake failed on listener TLS: CERTIFICATE_VERIFY_FAILED" in logs
    assert "check ssl.truststore.* of the listener" in logs
    assert "(certificate has expired): the client's certificate has expired" in logs
    # each reason its own line, even within the 10 s of another's
    assert "TLS handshake failed on listener TLS: PEER_DID_NOT_RETURN_A_CERTIFICATE" in logs
    assert "TLS handshake failed on listener SASLTLS: TLSV1_ALERT_UNKNOWN_CA" in logs


def test_other_clients_over_sasl_and_tls(secure: Secure) -> None:
    """kafka-python with SCRAM-SHA-512 over SASL_SSL, aiokafka with PLAIN over
    SASL_PLAINTEXT."""
    import asyncio
    import ssl

    from kafka import KafkaProducer

    ctx = ssl.create_default_context(cafile=str(secure.certs / "ca.pem"))
    kp = KafkaProducer(bootstrap_servers=f"127.0.0.1:{secure.ports['SASLTLS']}",
                       security_protocol="SASL_SSL", ssl_context=ctx,
                       sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                       sasl_plain_password=PASSWORD)  # fmt: skip
    topic = f"k-{uuid.uuid4().hex[:8]}"
    kp.send(topic, b"from kafka-python").get(30)
    kp.close()

    async def aio() -> None:
        from aiokafka import AIOKafkaConsumer

        c = AIOKafkaConsumer(topic, bootstrap_servers=f"127.0.0.1:{secure.ports['SASLPLAIN']}",
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             sasl_plain_username="alice", sasl_plain_password=PASSWORD,
                             auto_offset_reset="earliest")  # fmt: skip
        await c.start()
        try:
            m = await asyncio.wait_for(c.getone(), 30)
            assert m.value == b"from kafka-python"
        finally:
            await c.stop()

    asyncio.run(aio())


def test_requests_before_authentication_close_the_connection(secure: Secure) -> None:
    """On a SASL listener only ApiVersions, SaslHandshake and SaslAuthenticate are taken
    before authentication: a Metadata request closes the connection, unanswered."""
    from tests.integration.cluster import kafka_request

    port = secure.ports["SASLPLAIN"]
    assert kafka_request(port, 18, 3, {"client_software_name": "t",
                                       "client_software_version": "1"}).error_code == 0  # fmt: skip
    body = {"topics": None, "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}  # fmt: skip
    with pytest.raises((OSError, EOFError, ConnectionError, ValueError)):
        kafka_request(port, 3, 12, body, timeout=5)
    hs = kafka_request(port, 17, 1, {"mechanism": "GSSAPI"})
    assert hs.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
    assert sorted(hs.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def test_a_secured_cluster_with_no_plaintext_listener(tmp_path: Path, certs: Path) -> None:
    """3 controllers + 2 brokers, every listener SASL_SSL: controllers authenticate each
    other and the brokers with PLAIN (JAAS users), brokers replicate to each other with
    SCRAM-SHA-512 credentials that `storage format --add-scram` bootstrapped, and a client
    writes with acks=all to a topic whose min.insync.replicas needs both brokers."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.integration.cluster import wait_until

    ctl_ports = {i: free_port() for i in (1, 2, 3)}
    broker_ports = {i: free_port() for i in (4, 5)}
    voters = ",".join(f"{i}@localhost:{p}" for i, p in ctl_ports.items())
    plain = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
             'username="admin" password="admin-secret" user_admin="admin-secret";')  # fmt: skip
    scram = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
             'username="admin" password="admin-secret";')  # fmt: skip
    common = {
        "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:SASL_SSL,BROKER:SASL_SSL",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": plain,
        "ssl.keystore.location": str(certs / "server-store.pem"),
        "ssl.truststore.location": str(certs / "ca.pem"),
    }
    nodes: list[Node] = []
    for i, port in ctl_ports.items():
        n = Node(tmp_path / f"c{i}", i)
        props = {**common, "process.roles": "controller", "node.id": str(i),
                 "listeners": f"CONTROLLER://localhost:{port}",
                 "log.dirs": str(n.data)}  # fmt: skip
        n.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        nodes.append(n)
    for i, port in broker_ports.items():
        n = Node(tmp_path / f"b{i}", i)
        props = {**common, "process.roles": "broker", "node.id": str(i),
                 "listeners": f"BROKER://localhost:{port}",
                 "advertised.listeners": f"BROKER://localhost:{port}",
                 "inter.broker.listener.name": "BROKER",
                 "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                 "listener.name.broker.sasl.enabled.mechanisms": "SCRAM-SHA-512",
                 "listener.name.broker.scram-sha-512.sasl.jaas.config": scram,
                 "log.dirs": str(n.data), "offsets.topic.replication.factor": "2",
                 "offsets.topic.num.partitions": "3"}  # fmt: skip
        n.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        nodes.append(n)
    assert "PLAINTEXT" not in "".join(n.config.read_text() for n in nodes)
    cid = keeperless("storage", "random-uuid", check=True).stdout.strip()
    for n in nodes:
        keeperless("storage", "format", "-t", cid, "-c", str(n.config),
                   "--add-scram", "SCRAM-SHA-512=[name=admin,password=admin-secret]",
                   "--add-scram", f"SCRAM-SHA-512=[name=alice,password={PASSWORD}]",
                   check=True)  # fmt: skip
    for n in nodes:
        n.start_background()
    try:
        conf = {"bootstrap.servers": ",".join(f"localhost:{p}" for p in broker_ports.values()),
                "security.protocol": "SASL_SSL", "ssl.ca.location": str(certs / "ca.pem"),
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                "sasl.password": PASSWORD}  # fmt: skip
        admin = AdminClient(conf)

        def both_brokers() -> bool:
            for n in nodes:
                if n.proc is not None and n.proc.poll() is not None:
                    raise AssertionError(f"node {n.node_id} exited:\n{n.logs()[-3000:]}")
            try:
                return len(admin.list_topics(timeout=2).brokers) == 2
            except Exception:
                return False

        wait_until(both_brokers, 60, what="both brokers registered and reachable over SASL_SSL")
        topic = "secured"
        admin.create_topics([NewTopic(topic, 2, 2, config={"min.insync.replicas": "2"})])[
            topic
        ].result(30)
        p = Producer({**conf, "acks": "all"})
        for i in range(20):
            p.produce(topic, value=b"v%d" % i)
        assert p.flush(60) == 0
        delivered: list[Any] = []
        p.produce(topic, value=b"last", on_delivery=lambda e, m: delivered.append(e))
        p.flush(30)
        assert delivered == [None]  # both brokers in the ISR: replication over SASL_SSL
        # broker 4's certificate renewed while it runs: its listener serves it, and its
        # own connections to its peers (the inter-broker listener) take it too
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        _signed(certs, "renewed-4", "ca", "/CN=renewed-4", "DNS:localhost")
        store = certs / "renewed-4-store.pem"
        store.write_text((certs / "renewed-4.pem").read_text()
                         + (certs / "renewed-4.key").read_text())  # fmt: skip
        entry = ConfigEntry("listener.name.broker.ssl.keystore.location", str(store),
                            incremental_operation=AlterConfigOpType.SET)  # fmt: skip
        res = admin.incremental_alter_configs(
            [ConfigResource("broker", "4", incremental_configs=[entry])]
        )
        for fut in res.values():
            fut.result(30)
        broker4 = next(n for n in nodes if n.node_id == 4)
        wait_until(
            lambda: (
                "Connections to peers use the reloaded key and trust stores of "
                "listener BROKER" in broker4.logs()
            ),
            20,
            what="the peers' stores reloaded",
        )
        assert "Listener BROKER reloaded its key and trust stores" in broker4.logs()
        delivered.clear()
        p.produce(topic, value=b"after", on_delivery=lambda e, m: delivered.append(e))
        p.flush(30)
        assert delivered == [None]
    finally:
        for n in nodes:
            n.stop()


def test_tools_over_sasl_ssl_add_a_scram_user(secure: Secure, tmp_path: Path) -> None:
    """kafka-configs.sh with a --command-config for SASL_SSL adds a user's SCRAM
    credential (as Kafka's runbooks do on a secured cluster); the user can then log in.
    kafka-acls.sh and kafka-transactions.sh work over it too."""
    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_SSL\n"
        f"ssl.truststore.location={secure.certs / 'ca.pem'}\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{PASSWORD}";\n'
    )
    server = f"127.0.0.1:{secure.ports['SASLTLS']}"
    base = ["--bootstrap-server", server, "--command-config", str(props)]
    keeperless("configs", *base, "--alter", "--add-config", "SCRAM-SHA-256=[password=bob-pw]",
               "--entity-type", "users", "--entity-name", "bob", check=True)  # fmt: skip
    described = keeperless("configs", *base, "--describe", "--entity-type", "users",
                           "--entity-name", "bob", check=True).stdout  # fmt: skip
    assert "SCRAM-SHA-256=iterations=" in described
    bob = {"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bob", "sasl.password": "bob-pw"}
    _roundtrip(secure.conf("SASLPLAIN", **bob))
    listed = keeperless("transactions", *base, "list", check=True).stdout
    assert listed.splitlines()[0].split()[0] == "TransactionalId"
    # no authorizer on this cluster: Kafka's tool fails with SecurityDisabledException
    acls = keeperless("acls", *base, "--list")
    assert acls.returncode == 1
    assert "SECURITY_DISABLED: No Authorizer is configured." in acls.stdout + acls.stderr
    # no delegation.token.secret.key on this cluster: tokens are disabled
    token = keeperless("delegation-tokens", *base, "--describe")
    assert token.returncode == 1
    assert "Delegation Token feature is not enabled." in token.stderr, token.stderr
    for bad_config, why in (("SCRAM-SHA-256=[password=]", "a password is required"),
                            ("SCRAM-SHA-1=[password=x]", "unknown SCRAM mechanism")):  # fmt: skip
        refused = keeperless("configs", *base, "--alter", "--add-config", bad_config,
                             "--entity-type", "users", "--entity-name", "eve")  # fmt: skip
        assert refused.returncode != 0
        assert why in refused.stderr, refused.stderr
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(props.read_text().replace(PASSWORD, "nope"))
    bad = keeperless("configs", "--bootstrap-server", server, "--command-config", str(wrong),
                     "--describe", "--entity-type", "users")  # fmt: skip
    assert bad.returncode != 0
    assert "Authentication failed" in bad.stderr, bad.stderr


def test_sessions_expire_and_clients_log_in_again(secure: Secure) -> None:
    """connections.max.reauth.ms (KIP-368): a connection that goes on past its session
    without a new login is closed; librdkafka logs in again on the same connection and
    keeps producing."""

    from confluent_kafka import Producer

    from keeperless.protocol.framing import encode_request
    from keeperless.tools import client

    client.configure({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                      "sasl.username": "alice", "sasl.password": PASSWORD}, "test")  # fmt: skip
    try:
        s = client._connect("127.0.0.1", secure.ports["SASLPLAIN"], 5)
    finally:
        client.configure({}, "test")
    with s:
        time.sleep(2.5)
        from kio.index import load_request_schema

        from keeperless.protocol.build import build_filled

        s.sendall(encode_request(3, 12, 1, "t", build_filled(load_request_schema(3, 12), {})))
        s.settimeout(5)
        try:
            answer = s.recv(4)
        except (ConnectionResetError, BrokenPipeError):
            answer = b""
        assert answer == b"", "an expired session was served"
    delivered: list[Any] = []
    scram = {"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": PASSWORD}
    p = Producer(secure.conf("SASLPLAIN", **scram))
    topic = f"r-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    while time.monotonic() - t0 < 6:  # three sessions' worth
        p.produce(topic, value=b"v", on_delivery=lambda e, m: delivered.append(e))
        p.poll(0.2)
    p.flush(30)
    assert delivered
    assert all(e is None for e in delivered), {str(e) for e in delivered if e is not None}


def _served_cert(secure: Secure, listener: str) -> str:
    """The common name of the certificate a new TLS connection to ``listener`` gets."""
    import socket
    import ssl

    ctx = ssl.create_default_context(cafile=str(secure.certs / "ca.pem"))
    ctx.load_cert_chain(secure.certs / "client.pem", secure.certs / "client.key")
    raw = socket.create_connection(("127.0.0.1", secure.ports[listener]), timeout=5)
    with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        cert = s.getpeercert()
    return dict(x[0] for x in cert["subject"])["commonName"]


def test_a_listeners_key_store_is_replaced_while_it_runs(secure: Secure) -> None:
    """Kafka's DynamicListenerConfig: `kafka-configs.sh --entity-type brokers
    --entity-name 1 --alter --add-config listener.name.tls.ssl.keystore.location=...`
    reloads one listener's key store (a certificate renewed before it expires): new
    connections get the new certificate, the other listeners keep theirs; a key store
    that does not load is refused and nothing changes; deleting the key goes back to the
    file's."""
    d = secure.certs
    _signed(d, "renewed", "ca", "/CN=renewed", "IP:127.0.0.1,DNS:localhost")
    store = d / "renewed-store.pem"
    store.write_text((d / "renewed.pem").read_text() + (d / "renewed.key").read_text())
    bs = ["--bootstrap-server", secure.node.bootstrap]
    broker = ["--entity-type", "brokers", "--entity-name", "1"]
    key = "listener.name.tls.ssl.keystore.location"
    assert _served_cert(secure, "TLS") == "localhost"
    keeperless("configs", *bs, *broker, "--alter", "--add-config", f"{key}={store}", check=True)
    deadline = time.monotonic() + 20
    while _served_cert(secure, "TLS") != "renewed":
        assert time.monotonic() < deadline, "the listener kept its old certificate"
        time.sleep(0.2)
    assert _served_cert(secure, "SASLTLS") == "localhost"  # another listener: unchanged
    described = keeperless("configs", *bs, *broker, "--describe", check=True).stdout
    assert f"{key}={store}" in described
    assert "Listener TLS reloaded its key and trust stores" in secure.node.logs()
    bad = keeperless("configs", *bs, *broker, "--alter", "--add-config",
                     f"{key}={d / 'no-such-store.pem'}")  # fmt: skip
    assert bad.returncode != 0
    assert "ssl.keystore.location" in bad.stdout + bad.stderr
    # the same through kafka-python (IncrementalAlterConfigs) and the legacy AlterConfigs
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=secure.node.bootstrap)
    try:
        resp: Any = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1", configs={
            key: str(d / "no-such-store.pem")})])  # fmt: skip
    finally:
        admin.close()
    assert "Validation of dynamic config update of SSLFactory failed" in str(resp), resp
    legacy = kafka_request(secure.node.port, 33, 2, {"resources": [
        {"resource_type": 4, "resource_name": "1",
         "configs": [{"name": key, "value": str(d / "no-such-store.pem")}]}],
        "validate_only": False})  # fmt: skip
    (refused,) = legacy.responses
    assert refused.error_code == 40, refused  # INVALID_CONFIG
    assert "no-such-store.pem" in (refused.error_message or "")
    assert _served_cert(secure, "TLS") == "renewed"
    # kept in the metadata: a restarted broker serves the renewed certificate again
    secure.node.stop()
    secure.node.start()
    deadline = time.monotonic() + 30
    while _served_cert(secure, "TLS") != "renewed":
        assert time.monotonic() < deadline, "the restarted broker lost the dynamic key store"
        time.sleep(0.2)
    default = keeperless("configs", *bs, "--entity-type", "brokers", "--entity-default",
                         "--alter", "--add-config", f"{key}={store}")  # fmt: skip
    assert default.returncode != 0
    assert "broker id must be specified" in default.stdout + default.stderr
    keeperless("configs", *bs, *broker, "--alter", "--delete-config", key, check=True)
    deadline = time.monotonic() + 20
    while _served_cert(secure, "TLS") != "localhost":
        assert time.monotonic() < deadline, "the file's key store did not come back"
        time.sleep(0.2)
