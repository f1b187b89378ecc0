"""The sample configs make the README's topologies right (issue 14): each topology is
started from its sample files as written, but for ports (chosen at run time) and data
directories, and serves a consumer group."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.cluster import ROOT, Node, free_port, keeperless

TOPOLOGIES = {
    "single": ["server.properties"],
    "3+2": [
        "cluster-3+2/controller-1.properties",
        "cluster-3+2/controller-2.properties",
        "cluster-3+2/controller-3.properties",
        "cluster-3+2/broker-4.properties",
        "cluster-3+2/broker-5.properties",
    ],
    "combined-3": [
        "combined-3/node-1.properties",
        "combined-3/node-2.properties",
        "combined-3/node-3.properties",
    ],
}


def _nodes(tmp_path: Path, files: list[str]) -> list[Node]:
    """The sample files with every port mapped to a free one (the same mapping in every
    file, so voters and listeners still agree) and log.dirs under ``tmp_path``."""
    texts = [(ROOT / "config" / f).read_text() for f in files]
    ports = sorted({int(p) for t in texts for p in re.findall(r":(\d{4,5})\b", t)})
    mapping = {p: free_port() for p in ports}
    nodes = []
    for f, text in zip(files, texts, strict=True):
        text = re.sub(r":(\d{4,5})\b", lambda m: f":{mapping[int(m.group(1))]}", text)
        name = Path(f).stem
        text = re.sub(r"^log\.dirs=.*$", f"log.dirs={tmp_path / name / 'data'}", text, flags=re.M)
        node_id = int(re.search(r"^node\.id=(\d+)$", text, re.M).group(1))  # type: ignore[union-attr]
        n = Node(tmp_path / name, node_id)
        n.config.write_text(text)
        listener = re.search(r"^listeners=(.*)$", text, re.M).group(1)  # type: ignore[union-attr]
        broker = [x for x in listener.split(",") if not x.startswith("CONTROLLER")]
        n.port = int((broker or listener.split(","))[0].rsplit(":", 1)[1])
        n.broker = bool(broker)  # type: ignore[attr-defined]
        nodes.append(n)
    return nodes


@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
def test_a_sample_topology_serves_a_consumer_group(tmp_path: Path, topology: str) -> None:
    nodes = _nodes(tmp_path, TOPOLOGIES[topology])
    brokers = [n for n in nodes if n.broker]  # type: ignore[attr-defined]
    cid = keeperless("storage", "random-uuid", check=True).stdout.strip()
    for n in nodes:
        n.format(cid)
    try:
        for n in nodes:
            n.start_background()
        for n in nodes:
            n.wait_listening(60)
        bootstrap = ",".join(b.bootstrap for b in brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        # no replication factor named: the controllers' default.replication.factor
        admin.create_topics([NewTopic("samples", 2)])["samples"].result(30)
        rf = {1: 1, 2: 2, 3: 3}[len(brokers)]
        md = admin.list_topics("samples", timeout=10).topics["samples"]
        assert all(len(p.replicas) == rf for p in md.partitions.values())
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(20):
            p.produce("samples", value=b"%d" % i)
        assert p.flush(30) == 0
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "samples-g",
                "auto.offset.reset": "earliest",
            }
        )
        c.subscribe(["samples"])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 20 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(int(m.value()))
        c.commit(asynchronous=False)
        c.close()
        assert sorted(got) == list(range(20))
    finally:
        for n in reversed(nodes):
            n.stop()
