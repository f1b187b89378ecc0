"""Encrypted and authenticated listeners (issue 17) beside plaintext, in the same run,
on one node with four listeners: PLAINTEXT (the baseline), SSL, SASL_PLAINTEXT and
SASL_SSL (SCRAM-SHA-512). For each, confluent-kafka produces --messages records of
--size bytes (acks=all) and a consumer reads them all back; plus the time to open a
connection and authenticate (ApiVersions + handshake + metadata), as new clients do.

    python bench/security.py [--messages 200000] [--size 200]

Prints a table and writes bench/results/security-<time>.json (its short form runs in
make test).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.integration.cluster import Node, free_port, keeperless  # noqa: E402
from tests.integration.test_security import _ca, _signed  # noqa: E402

from bench._report import write_result  # noqa: E402

PASSWORD = "bench-secret"


def start(work: Path) -> tuple[Node, dict[str, dict[str, Any]]]:
    certs = work / "certs"
    certs.mkdir()
    _ca(certs, "ca")
    _signed(certs, "server", "ca", "/CN=localhost", "IP:127.0.0.1,DNS:localhost")
    store = certs / "server-store.pem"
    store.write_text((certs / "server.pem").read_text() + (certs / "server.key").read_text())
    probe = Node(work / "node")
    ports = {name: free_port() for name in ("TLS", "SASLPLAIN", "SASLTLS")}
    listeners = [f"PLAINTEXT://127.0.0.1:{probe.port}",
                 f"CONTROLLER://127.0.0.1:{probe.controller_port}",
                 *(f"{n}://127.0.0.1:{p}" for n, p in ports.items())]  # fmt: skip
    extra = {
        "listeners": ",".join(listeners),
        "advertised.listeners": ",".join(x for x in listeners if "CONTROLLER" not in x),
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,TLS:SSL,"
        "SASLPLAIN:SASL_PLAINTEXT,SASLTLS:SASL_SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "ssl.keystore.location": str(store),
        "ssl.truststore.location": str(certs / "ca.pem"),
    }
    node = Node(work / "node", extra=extra)
    node.port, node.controller_port = probe.port, probe.controller_port
    cid = keeperless("storage", "random-uuid", check=True).stdout.strip()
    keeperless("storage", "format", "-t", cid, "-c", str(node.config), "--add-scram",
               f"SCRAM-SHA-512=[name=bench,password={PASSWORD}]", check=True)  # fmt: skip
    node.start()
    sasl = {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bench",
            "sasl.password": PASSWORD}  # fmt: skip
    tls = {"ssl.ca.location": str(certs / "ca.pem")}
    confs = {
        "PLAINTEXT (baseline)": {"bootstrap.servers": node.bootstrap},
        "SSL": {"bootstrap.servers": f"127.0.0.1:{ports['TLS']}", "security.protocol": "SSL",
                **tls},
        "SASL_PLAINTEXT (SCRAM)": {"bootstrap.servers": f"127.0.0.1:{ports['SASLPLAIN']}",
                                   "security.protocol": "SASL_PLAINTEXT", **sasl},
        "SASL_SSL (SCRAM)": {"bootstrap.servers": f"127.0.0.1:{ports['SASLTLS']}",
                             "security.protocol": "SASL_SSL", **tls, **sasl},
    }  # fmt: skip
    return node, confs


def run(conf: dict[str, Any], messages: int, size: int) -> dict[str, float]:
    topic = f"b-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    value = b"x" * size
    p = Producer({**conf, "acks": "all", "linger.ms": 5})
    t0 = time.perf_counter()
    for _ in range(messages):  # bounded
        while True:
            try:
                p.produce(topic, value=value)
                break
            except BufferError:
                p.poll(0.01)
    unsent = p.flush(120)
    produce_s = time.perf_counter() - t0
    # librdkafka 2.x postpones a fetch by fetch.queue.backoff.ms (1 s) when its local
    # queue holds queued.min.messages: a fetcher faster than this loop (plaintext) then
    # idles while TLS's slower one never trips it - the listener's speed measured
    # inverted (found measuring: sub-ms fetch round trips on every listener)
    c = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest",
                  "fetch.queue.backoff.ms": 10})  # fmt: skip
    c.subscribe([topic])
    got = 0
    t0 = 0.0  # from the first record: the group's join is not the listener's cost
    deadline = time.perf_counter() + 120
    while got < messages and time.perf_counter() < deadline:
        for m in c.consume(1000, 1.0):
            if m.error() is None:
                if got == 0:
                    t0 = time.perf_counter()
                got += 1
    consume_s = max(time.perf_counter() - t0, 1e-6)
    c.close()
    t0 = time.perf_counter()
    for _ in range(20):  # new clients: connect, authenticate, fetch metadata
        AdminClient(conf).list_topics(timeout=10)
    connect_ms = (time.perf_counter() - t0) / 20 * 1000
    mb = messages * size / 1e6
    return {"produce_msgs_per_s": round(messages / produce_s),
            "produce_mb_per_s": round(mb / produce_s, 1),
            "consume_msgs_per_s": round(got / consume_s), "consumed": got, "unsent": unsent,
            "consume_mb_per_s": round(got * size / 1e6 / consume_s, 1),
            "new_client_ms": round(connect_ms, 1)}  # fmt: skip


def measure(messages: int, size: int) -> dict[str, Any]:
    """Each listener's rates on one node serving all four."""
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        node, confs = start(Path(tmp))
        try:
            for name, conf in confs.items():
                results[name] = run(conf, messages, size)
        finally:
            node.stop()
    return {"messages": messages, "size": size, "listeners": results}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=200)
    args = ap.parse_args(argv)
    out = measure(args.messages, args.size)
    results = out["listeners"]
    base = results["PLAINTEXT (baseline)"]
    print(f"{'listener':<24} {'produce msg/s':>14} {'MB/s':>6} {'vs plain':>9} "
          f"{'consume msg/s':>14} {'MB/s':>6} {'vs plain':>9} {'new client':>11}")  # fmt: skip
    for name, r in results.items():
        print(f"{name:<24} {r['produce_msgs_per_s']:>14,} {r['produce_mb_per_s']:>6} "
              f"{r['produce_msgs_per_s'] / base['produce_msgs_per_s']:>8.2f}x "
              f"{r['consume_msgs_per_s']:>14,} {r['consume_mb_per_s']:>6} "
              f"{r['consume_msgs_per_s'] / base['consume_msgs_per_s']:>8.2f}x "
              f"{r['new_client_ms']:>8} ms")  # fmt: skip
    write_result("security", out)


if __name__ == "__main__":
    main()
