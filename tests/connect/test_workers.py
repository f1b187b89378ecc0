"""Several workers in one group share connectors and tasks; a worker killed -9 loses its
work to the others; a non-leader forwards configuration changes to the leader; with
exactly-once source support a worker killed mid-stream leaves every line written once."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.connect.worker import Worker
from tests.integration.cluster import Node, wait_until
from tests.integration.conftest import running


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    yield from running(Node(tmp_path_factory.mktemp("connect-group-node")))


def lines_in(bootstrap: str, topic: str, committed: bool = True) -> list[str]:
    """Every line written to ``topic`` (the payload of the JSON converter's envelope)."""
    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "checker", "enable.auto.commit": False,
        "isolation.level": "read_committed" if committed else "read_uncommitted",
    })  # fmt: skip
    try:
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None:
            return []
        parts = list(md.partitions)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for m in c.consume(1000, 0.3):
                if m.error() is None and m.value():
                    out.append(json.loads(m.value() or b"")["payload"])
            pos = {
                tp.partition: tp.offset
                for tp in c.position([TopicPartition(topic, p) for p in parts])
            }
            if all(pos[p] >= ends[p] or ends[p] == 0 for p in parts):
                break
        return out
    finally:
        c.close()


def leader_of(workers: list[Worker]) -> Worker:
    def latest(w: Worker) -> tuple[int, bool]:
        found = re.findall(r"generation (\d+), (leader|member)", w.logs())
        return (int(found[-1][0]), found[-1][1] == "leader") if found else (-1, False)

    return max(workers, key=lambda w: latest(w))


def test_workers_share_work_and_survive_a_kill(node: Node, tmp_path: Path) -> None:
    w1 = Worker(tmp_path / "w1", node.bootstrap, group="shared")
    w2 = Worker(tmp_path / "w2", node.bootstrap, group="shared")
    w1.start()
    w2.start()
    try:
        wait_until(lambda: "member" in w1.logs() + w2.logs(), 30, what="a two-worker group")
        leader = leader_of([w1, w2])
        other = w2 if leader is w1 else w1
        files = {f"src{i}": tmp_path / f"in{i}.txt" for i in range(4)}
        for name, path in files.items():
            path.write_text("".join(f"{name}-{j}\n" for j in range(50)))
            cfg = {"connector.class": "FileStreamSource", "file": str(path), "topic": "shared-t"}
            # sent to the worker that is not the leader: forwarded, answered as the leader does
            r = other.call("POST", "/connectors", {"name": name, "config": cfg})
            assert r.status_code == 201, r.text
        for name in files:
            other.wait_state(name, "RUNNING", tasks=1)

        def owners(via: Worker) -> set[str]:
            found = set()
            for name in files:
                st = via.status(name)
                found.add(st["connector"]["worker_id"])
                found.update(t["worker_id"] for t in st["tasks"])
            return found

        assert owners(w1) == {w1.url.split("//")[1], w2.url.split("//")[1]}
        victim, survivor = w1, w2
        victim.kill9()
        for path in files.values():  # written while one worker is dead
            with path.open("a") as f:
                f.writelines(f"{path.stem}-late-{j}\n" for j in range(20))

        def all_on_survivor() -> bool:
            return owners(survivor) == {survivor.url.split("//")[1]} and all(
                survivor.status(n)["tasks"][0]["state"] == "RUNNING" for n in files
            )

        wait_until(all_on_survivor, 60, what=f"the survivor running everything: {owners(survivor)}")
        want = {f"{n}-{j}" for n in files for j in range(50)}
        want |= {f"in{i}-late-{j}" for i in range(4) for j in range(20)}
        wait_until(lambda: want <= set(lines_in(node.bootstrap, "shared-t")), 60,
                   what="every line, those written after the kill included")  # fmt: skip
        # the survivor alone still serves the API; a deletion is still possible
        assert survivor.call("DELETE", "/connectors/src0").status_code == 204
    finally:
        w1.stop()
        w2.stop()


def test_exactly_once_source_survives_kill_9(node: Node, tmp_path: Path) -> None:
    w = Worker(tmp_path / "eos", node.bootstrap, group="eos",
               extra={"exactly.once.source.support": "enabled"})  # fmt: skip
    path = tmp_path / "feed.txt"
    path.write_text("")
    total = 3000
    stop = threading.Event()

    def feed() -> None:
        with path.open("a") as f:
            for i in range(total):
                if stop.is_set():
                    return
                f.write(f"eos-{i}\n")
                if i % 100 == 99:
                    f.flush()
                    time.sleep(0.05)

    w.start()
    feeder = threading.Thread(target=feed)
    try:
        cfg = {"connector.class": "FileStreamSource", "file": str(path), "topic": "eos-t",
               "batch.size": "50"}  # fmt: skip
        assert w.call("POST", "/connectors", {"name": "eos", "config": cfg}).status_code == 201
        w.wait_state("eos", "RUNNING", tasks=1)
        feeder.start()
        wait_until(lambda: len(lines_in(node.bootstrap, "eos-t")) > 300, 60, what="a stream")
        w.kill9()
        w.start()
        feeder.join(120)
        want = [f"eos-{i}" for i in range(total)]
        wait_until(lambda: len(lines_in(node.bootstrap, "eos-t")) >= total, 120,
                   what="every line after the restart")  # fmt: skip
        got = lines_in(node.bootstrap, "eos-t")
        dups = [line for line, n in Counter(got).items() if n > 1]
        assert not dups, f"{len(dups)} lines written twice under exactly-once: {dups[:5]}"
        assert got == want  # one partition: in file order too
    finally:
        stop.set()
        w.stop()


def test_worker_rides_out_broker_restarts(node: Node, tmp_path: Path) -> None:
    """The group's coordinator restarting (its groups are not persisted yet: the worker
    rejoins at generation 1) must not leave a worker outside its group: connectors created
    afterwards still run, and the running ones resume."""
    w = Worker(tmp_path / "w", node.bootstrap, group="rides-out")
    w.start()
    try:
        src = tmp_path / "in.txt"
        src.write_text("before\n")
        cfg = {"connector.class": "FileStreamSource", "file": str(src), "topic": "rides-t"}
        assert w.call("POST", "/connectors", {"name": "one", "config": cfg}).status_code == 201
        w.wait_state("one", "RUNNING", tasks=1)
        for _ in range(2):
            node.kill9()
            time.sleep(1)
            node.start()
        with src.open("a") as f:
            f.write("after\n")
        cfg2 = dict(cfg, file=str(tmp_path / "other.txt"))
        r = w.call("PUT", "/connectors/two/config", cfg2)
        assert r.status_code in (200, 201), r.text
        w.wait_state("two", "RUNNING", tasks=1, timeout=90)
        w.wait_state("one", "RUNNING", tasks=1, timeout=90)
        wait_until(lambda: {"before", "after"} <= set(lines_in(node.bootstrap, "rides-t")), 60,
                   what="the line written after the restarts")  # fmt: skip
    finally:
        w.stop()
