"""kill -9 during a produce stream loses nothing acknowledged; storage/config errors are
clear and exit non-zero."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.cluster import Node, keeperless, wait_until


def test_kill9_during_produce_keeps_every_acknowledged_message(node: Node) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    admin.create_topics([NewTopic("crash", 2, 1)])["crash"].result(15)
    acked: list[tuple[int, int, bytes]] = []
    stop = threading.Event()

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    def produce() -> None:
        p = Producer(
            {
                "bootstrap.servers": node.bootstrap,
                "acks": "all",
                "linger.ms": 1,
                "enable.idempotence": True,
                "message.timeout.ms": 3000,
                "reconnect.backoff.max.ms": 100,
            }
        )
        i = 0
        while not stop.is_set() and i < 200_000:
            try:
                p.produce("crash", value=b"m-%d" % i, on_delivery=on_delivery)
                i += 1
            except BufferError:
                p.poll(0.01)
            p.poll(0)
        p.flush(5)

    t = threading.Thread(target=produce)
    t.start()
    wait_until(lambda: len(acked) > 2000, 30, what="acknowledged messages")
    node.kill9()
    stop.set()
    t.join(30)
    assert not t.is_alive()
    node.start()

    c = Consumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": "crash-check",
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition("crash", p, 0) for p in (0, 1)])
    by_partition: dict[int, list[tuple[int, bytes]]] = {0: [], 1: []}
    ends = {p: c.get_watermark_offsets(TopicPartition("crash", p), timeout=10)[1] for p in (0, 1)}
    deadline = time.monotonic() + 60
    while sum(len(v) for v in by_partition.values()) < sum(ends.values()):
        assert time.monotonic() < deadline, "timed out reading back"
        m = c.poll(0.5)
        if m is not None and not m.error():
            by_partition[m.partition()].append((m.offset(), m.value()))
    c.close()
    for p, msgs in by_partition.items():
        assert [o for o, _ in msgs] == list(range(len(msgs))), f"offsets contiguous in {p}"
    stored = {(p, o): v for p, msgs in by_partition.items() for o, v in msgs}
    for p, o, v in acked:
        assert stored.get((p, o)) == v, f"acknowledged message at {p}/{o} is readable"


def _config(tmp: Path, node_id: int = 1, **extra: str) -> Path:
    cfg = tmp / f"node{node_id}.properties"
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": f"{node_id}@127.0.0.1:1",
        "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:1",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(tmp / "data"),
        **extra,
    }
    cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return cfg


def test_unformatted_directory_is_refused(tmp_path: Path) -> None:
    res = keeperless("server", "start", str(_config(tmp_path)))
    assert res.returncode != 0
    assert "is not formatted" in res.stderr
    assert "keeperless storage format" in res.stderr


def test_cluster_and_node_id_mismatches_are_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    cfg_a = _config(a)
    cfg_b = _config(b)
    for cfg in (cfg_a, cfg_b):
        cid = keeperless("storage", "random-uuid", check=True).stdout.strip()
        keeperless("storage", "format", "-t", cid, "-c", str(cfg), check=True)
    # node id mismatch: same directory, another node.id
    other = _config(a, node_id=2)
    res = keeperless("server", "start", str(other))
    assert res.returncode != 0
    assert "node.id=1" in res.stderr
    assert "node.id=2" in res.stderr
    # cluster id mismatch: two directories of different clusters
    mixed = _config(a, **{"log.dirs": f"{a / 'data'},{b / 'data'}"})
    res = keeperless("server", "start", str(mixed))
    assert res.returncode != 0
    assert "different clusters" in res.stderr
    # formatting twice without --ignore-formatted
    res = keeperless("storage", "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c", str(cfg_a))
    assert res.returncode != 0
    assert "already formatted" in res.stderr
    info = keeperless("storage", "info", "-c", str(cfg_a))
    assert info.returncode == 0
    assert "cluster.id=" in info.stdout


def test_bad_config_value_names_the_key(tmp_path: Path) -> None:
    res = keeperless("server", "start", str(_config(tmp_path, **{"num.partitions": "lots"})))
    assert res.returncode != 0
    assert "num.partitions" in res.stderr
    res = keeperless("server", "start", str(_config(tmp_path)), "--override", "bogus.key=1")
    assert res.returncode != 0
    assert "bogus.key" in res.stderr
    res = keeperless("storage", "format", "-t", "not-a-uuid", "-c", str(_config(tmp_path)))
    assert res.returncode != 0
    assert "cluster id" in res.stderr


def test_sample_config_starts_with_overrides(tmp_path: Path) -> None:
    """The README path: the shipped combined config, formatted and started."""
    node = Node(tmp_path)
    sample = Path(__file__).parents[2] / "config" / "server.properties"
    text = sample.read_text()
    text = text.replace("127.0.0.1:9092", f"127.0.0.1:{node.port}")
    text = text.replace("127.0.0.1:9093", f"127.0.0.1:{node.controller_port}")
    text = re.sub(r"^log\.dirs=.*$", f"log.dirs={node.data}", text, flags=re.M)
    node.config.write_text(text)
    node.format()
    node.start()
    try:
        p = Producer({"bootstrap.servers": node.bootstrap})
        p.produce("readme", value=b"hello")
        assert p.flush(15) == 0
        c = Consumer(
            {
                "bootstrap.servers": node.bootstrap,
                "group.id": "readme",
                "auto.offset.reset": "earliest",
            }
        )
        c.subscribe(["readme"])
        msg = wait_until(
            lambda: (lambda m: m if m is not None and not m.error() else None)(c.poll(0.5)),
            30,
            what="the README message",
        )
        assert msg.value() == b"hello"
        c.close()
        # the schemas every client uses were loaded by a thread, not by the event loop
        # at their first request (5-20 ms each)
        assert "common APIs ahead of their first use" in node.logs()
    finally:
        node.stop()
