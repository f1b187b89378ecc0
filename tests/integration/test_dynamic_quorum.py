"""A dynamic controller quorum (KIP-853) on real processes: formatted --standalone,
grown by add-controller, shrunk by remove-controller (the active controller too), with
Kafka's tool commands and answers, while a broker keeps serving."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import Node, free_port, keeperless, wait_until


def _controller(workdir: Path, node_id: int, bootstrap: list[int], port: int) -> Node:
    n = Node(workdir / f"controller-{node_id}", node_id)
    n.port = n.controller_port = port
    props = {
        "process.roles": "controller",
        "node.id": str(node_id),
        "controller.listener.names": "CONTROLLER",
        "listeners": f"CONTROLLER://127.0.0.1:{port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
        "controller.quorum.bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p in bootstrap),
        "controller.quorum.election.timeout.ms": "500",
        "controller.quorum.fetch.timeout.ms": "1000",
        "controller.quorum.request.timeout.ms": "1000",
        "log.dirs": str(n.data),
    }
    n.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return n


def _broker(workdir: Path, node_id: int, bootstrap: list[int]) -> Node:
    n = Node(workdir / f"broker-{node_id}", node_id)
    props = {
        "process.roles": "broker",
        "node.id": str(node_id),
        "controller.listener.names": "CONTROLLER",
        "listeners": f"PLAINTEXT://127.0.0.1:{n.port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{n.port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "controller.quorum.bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p in bootstrap),
        "controller.quorum.request.timeout.ms": "1000",
        "log.dirs": str(n.data),
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "0",
    }
    n.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return n


def _directory_id(n: Node) -> str:
    """The directory id its metadata directory was formatted with."""
    meta = (n.data / "meta.properties").read_text().splitlines()
    return next(ln.split("=", 1)[1] for ln in meta if ln.startswith("directory.id="))


def _format(n: Node, cid: str, *flags: str) -> Any:
    res = keeperless("storage", "format", "-t", cid, "-c", str(n.config), *flags)
    assert res.returncode == 0, res.stderr
    return res


def _status(port: int) -> dict[str, str]:
    res = keeperless(
        "metadata-quorum", "--bootstrap-controller", f"127.0.0.1:{port}", "describe", "--status"
    )
    assert res.returncode == 0, res.stderr
    return {k.strip(): v.strip() for k, v in (ln.split(":", 1) for ln in res.stdout.splitlines())}


def _voters(port: int) -> list[dict[str, Any]]:
    return list(json.loads(_status(port)["CurrentVoters"]))


def _add(port: int, n: Node, via: tuple[str, ...] = ()) -> str:
    """add-controller, again while the new controller is still catching up; ``via``
    other connection flags (--bootstrap-server: a broker forwards it)."""
    out: list[str] = []
    flags = via or ("--bootstrap-controller", f"127.0.0.1:{port}")

    def added() -> bool:
        res = keeperless(
            "metadata-quorum", *flags, "add-controller", "--command-config", str(n.config),
        )  # fmt: skip
        out[:] = [res.stdout + res.stderr]
        return res.returncode == 0

    wait_until(added, 60, interval=0.5, what=f"controller {n.node_id} to be added")
    return out[0]


def _raw_add(port: int, voter: int, directory: str, listeners: list[tuple[str, int]]) -> Any:
    """An AddRaftVoter request as it is, to the controller at ``port``."""
    from keeperless.protocol.apis import ApiKey
    from keeperless.storage.meta_properties import uuid_from_kafka
    from keeperless.tools.client import call

    body = {
        "cluster_id": None, "timeout": 10_000, "voter_id": voter,
        "voter_directory_id": uuid_from_kafka(directory),
        "listeners": [{"name": n, "host": "127.0.0.1", "port": p} for n, p in listeners],
    }  # fmt: skip
    return call([("127.0.0.1", port)], ApiKey.ADD_RAFT_VOTER, 0, body, timeout_s=20)


def _produce_and_count(broker: Node, topic: str, values: list[str]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for v in values:
        p.produce(topic, v.encode())
    assert p.flush(30) == 0


def _read(broker: Node, topic: str, want: int) -> list[str]:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}-{free_port()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    c.subscribe([topic])
    got: list[str] = []

    def more() -> bool:
        got.extend(m.value().decode() for m in c.consume(100, 0.5) if not m.error())
        return len(got) >= want

    try:
        wait_until(more, 60, what="the records")
    finally:
        c.close()
    return got


@pytest.fixture
def grown(tmp_path: Path):  # type: ignore[no-untyped-def]
    ports = [free_port() for _ in range(3)]
    cs = [_controller(tmp_path, i + 1, ports[:1] if i == 0 else ports, ports[i]) for i in range(3)]
    broker = _broker(tmp_path, 4, ports)
    cid = keeperless("storage", "random-uuid", check=True).stdout.strip()
    res = _format(cs[0], cid, "--standalone")
    assert "Formatting" in res.stdout
    for c in cs[1:]:
        _format(c, cid, "--no-initial-controllers")
    _format(broker, cid)
    started: list[Node] = []
    try:
        cs[0].start()
        started.append(cs[0])
        broker.start()
        started.append(broker)
        yield cs, broker, ports
    finally:
        for n in [broker, *cs]:
            n.stop()


def test_grow_one_controller_to_three_then_remove_the_active_one(grown) -> None:  # type: ignore[no-untyped-def]
    cs, broker, ports = grown
    first = _voters(ports[0])
    assert [v["id"] for v in first] == [1]
    assert first[0]["endpoints"] == [f"CONTROLLER://127.0.0.1:{ports[0]}"]
    dir1 = first[0]["directoryId"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", dir1)
    _produce_and_count(broker, "grow", [f"a{i}" for i in range(10)])
    # two controllers formatted to join, started: observers until added
    for c in cs[1:]:
        c.start()
    wait_until(lambda: "2" in _status(ports[0])["CurrentObservers"], 30, what="an observer")
    assert [v["id"] for v in _voters(ports[0])] == [1]
    # as Kafka's leader, it asks a new voter for its ApiVersions where the request says
    # it listens first: a wrong port, or no listener of the quorum's, is refused
    for listeners, code, words in (
        ([("CONTROLLER", free_port())], "request_timed_out", "is not ready to receive requests"),
        ([("OTHER", ports[1])], "invalid_request", "do not contain a listener for CONTROLLER"),
    ):
        resp = _raw_add(ports[0], 2, _directory_id(cs[1]), listeners)
        assert resp.error_code.name == code, resp
        assert words in resp.error_message
    assert [v["id"] for v in _voters(ports[0])] == [1]
    out = _add(ports[0], cs[1])
    assert out.startswith("Added controller 2 with directory id ")
    assert out.rstrip().endswith(f"and endpoints: CONTROLLER://127.0.0.1:{ports[1]}")
    _add(ports[0], cs[2])
    voters = _voters(ports[1])
    assert [v["id"] for v in voters] == [1, 2, 3]
    assert len({v["directoryId"] for v in voters}) == 3
    # a second add of a voter: Kafka's DUPLICATE_VOTER
    dup = keeperless("metadata-quorum", "--bootstrap-controller", f"127.0.0.1:{ports[0]}",
                     "add-controller", "--command-config", str(cs[1].config))  # fmt: skip
    assert dup.returncode != 0
    assert "DUPLICATE_VOTER" in dup.stderr + dup.stdout
    # remove the active controller: the two others carry on, the broker keeps serving
    leader = int(_status(ports[1])["LeaderId"])
    d = next(v["directoryId"] for v in voters if v["id"] == leader)
    other = next(p for i, p in enumerate(ports) if i + 1 != leader)
    res = keeperless("metadata-quorum", "--bootstrap-controller", f"127.0.0.1:{other}",
                     "remove-controller", "--controller-id", str(leader),
                     "--controller-directory-id", d)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"Removed  KRaft controller {leader} with directory id {d}"
    wait_until(lambda: int(_status(other)["LeaderId"]) not in (leader, -1), 30, what="a new leader")
    assert sorted(v["id"] for v in _voters(other)) == sorted({1, 2, 3} - {leader})
    _produce_and_count(broker, "grow", [f"b{i}" for i in range(10)])
    got = _read(broker, "grow", 20)
    assert sorted(got) == sorted([f"a{i}" for i in range(10)] + [f"b{i}" for i in range(10)])
    # the removed controller goes on as an observer
    wait_until(lambda: str(leader) in _status(other)["CurrentObservers"], 30, what="an observer")


def test_format_flags_and_bad_input(tmp_path: Path) -> None:
    ports = [free_port() for _ in range(2)]
    c = _controller(tmp_path, 1, ports, ports[0])
    cid = keeperless("storage", "random-uuid", check=True).stdout.strip()
    res = keeperless("storage", "format", "-t", cid, "-c", str(c.config))
    assert res.returncode != 0
    assert (
        "Because controller.quorum.voters is not set on this controller, you must specify one "
        "of the following: --standalone, --initial-controllers, or --no-initial-controllers."
    ) in res.stderr
    bad = keeperless("storage", "format", "-t", cid, "-c", str(c.config),
                     "--initial-controllers", "1@127.0.0.1:9093")  # fmt: skip
    assert bad.returncode != 0
    assert "No colon following port could be found" in bad.stderr
    for spec, words in ((f"1@127.0.0.1:{ports[0]}:AAAAAAAAAAAAAAAAAAAAAA", "it is reserved"),
                        ("", "No @ found in dynamic voter string")):  # fmt: skip
        bad = keeperless("storage", "format", "-t", cid, "-c", str(c.config),
                         "--initial-controllers", spec)  # fmt: skip
        assert bad.returncode != 0
        assert words in bad.stderr, bad.stderr
    assert not c.data.exists()
    dir_id = keeperless("storage", "random-uuid", check=True).stdout.strip()
    ok = keeperless(
        "storage",
        "format",
        "-t",
        cid,
        "-c",
        str(c.config),
        "--initial-controllers",
        f"1@127.0.0.1:{ports[0]}:{dir_id},2@127.0.0.1:{ports[1]}:"
        + keeperless("storage", "random-uuid", check=True).stdout.strip()
        + ",",
    )  # fmt: skip (a trailing comma, as Kafka's parser takes it)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[0] == (
        f"Formatting dynamic metadata voter directory {c.data} with metadata.version 4.2-IV0."
    )
    # the metadata directory is the voter's: its directory id is the one given
    assert f"directory.id={dir_id}" in (c.data / "meta.properties").read_text()
    assert (c.data / "__cluster_metadata-0" / "00000000000000000000-0000000000.checkpoint").exists()
    rm = keeperless("metadata-quorum", "--bootstrap-controller", f"127.0.0.1:{ports[0]}",
                    "remove-controller", "--controller-id", "-1", "-d", dir_id)  # fmt: skip
    assert rm.returncode != 0
    assert "Invalid negative --controller-id: -1" in rm.stderr


def test_replace_a_controller_whose_disk_was_wiped(tmp_path: Path) -> None:
    """Three controllers formatted with --initial-controllers; one loses its disk and
    is formatted again (a new directory id): it comes back as an observer, not as the
    voter it was; the old voter is removed and the new disk added."""
    ports = [free_port() for _ in range(3)]
    cs = [_controller(tmp_path, i + 1, ports, ports[i]) for i in range(3)]
    broker = _broker(tmp_path, 4, ports)
    cid = keeperless("storage", "random-uuid", check=True).stdout.strip()
    dirs = [keeperless("storage", "random-uuid", check=True).stdout.strip() for _ in cs]
    initial = ",".join(f"{i + 1}@127.0.0.1:{ports[i]}:{dirs[i]}" for i in range(3))
    for c in cs:
        _format(c, cid, "--initial-controllers", initial)
    _format(broker, cid)
    try:
        for c in cs:
            c.start_background()
        for c in cs:
            c.wait_listening()
        broker.start()
        voters = _voters(ports[0])
        assert [(v["id"], v["directoryId"]) for v in voters] == [(i + 1, dirs[i]) for i in range(3)]
        _produce_and_count(broker, "wiped", [f"a{i}" for i in range(10)])
        # controller 3's disk dies: a new, empty one is formatted to join
        victim = cs[2]
        victim.stop()
        shutil.rmtree(victim.data)
        _format(victim, cid, "--no-initial-controllers")
        new_dir = _directory_id(victim)
        assert new_dir != dirs[2]
        victim.start()

        def observed() -> bool:
            obs = json.loads(_status(ports[0])["CurrentObservers"])
            return any(o["id"] == 3 and o["directoryId"] == new_dir for o in obs)

        wait_until(observed, 30, what="the new disk as an observer")
        # still the old voter: the new disk must not vote in its place
        assert (3, dirs[2]) in [(v["id"], v["directoryId"]) for v in _voters(ports[0])]
        res = keeperless("metadata-quorum", "--bootstrap-controller", f"127.0.0.1:{ports[0]}",
                         "remove-controller", "--controller-id", "3",
                         "--controller-directory-id", new_dir)  # fmt: skip
        assert res.returncode != 0  # not the voter's directory: Kafka's VOTER_NOT_FOUND
        assert "VOTER_NOT_FOUND" in res.stderr
        res = keeperless("metadata-quorum", "--bootstrap-controller", f"127.0.0.1:{ports[0]}",
                         "remove-controller", "--controller-id", "3",
                         "--controller-directory-id", dirs[2])  # fmt: skip
        assert res.returncode == 0, res.stderr
        _add(ports[0], victim)
        voters = _voters(ports[0])
        assert [(v["id"], v["directoryId"]) for v in voters] == [
            (1, dirs[0]),
            (2, dirs[1]),
            (3, new_dir),
        ]
        _produce_and_count(broker, "wiped", [f"b{i}" for i in range(10)])
        assert len(_read(broker, "wiped", 20)) == 20
        # operators' views: the metadata shell's voter set, dump-log's control records
        shell = keeperless("metadata-shell", "--directory", str(cs[0].data),
                           "cat", "/metadataQuorum/voters")  # fmt: skip
        assert shell.returncode == 0, shell.stderr
        view = json.loads(shell.stdout)
        assert view["kraftVersion"] == 1
        assert [(v["id"], v["directoryId"]) for v in view["voters"]] == [
            (1, dirs[0]),
            (2, dirs[1]),
            (3, new_dir),
        ]
        live = keeperless("metadata-shell", "--bootstrap-controller", f"127.0.0.1:{ports[1]}",
                          "cat", "/metadataQuorum/voters")  # fmt: skip
        assert [v["id"] for v in json.loads(live.stdout)["voters"]] == [1, 2, 3], live.stderr
        seg = cs[0].data / "__cluster_metadata-0" / "00000000000000000000.log"
        dump = keeperless("dump-log", "--cluster-metadata-decoder", "--files", str(seg))
        assert "KRAFT_VOTERS" in dump.stdout, dump.stdout[-2000:]
    finally:
        for n in [broker, *cs]:
            n.stop()


def test_upgrade_a_static_quorum_to_kraft_version_1_then_add_a_fourth(tmp_path: Path) -> None:
    """kafka-features upgrade --feature kraft.version=1 turns a static quorum (voters from
    controller.quorum.voters) dynamic: the voters get their directory ids, and a fourth
    controller can then be added."""
    from tests.integration.cluster import Cluster

    c = Cluster(tmp_path, controllers=3, brokers=1)
    c.start()
    try:
        bs = ["--bootstrap-server", c.bootstrap]
        port1 = c.controllers[1].port
        assert [v["id"] for v in _voters(port1)] == [1, 2, 3]
        desc = keeperless("features", "describe", *bs).stdout
        assert not re.search(r"Feature: kraft.version\s.*FinalizedVersionLevel: 1", desc), desc
        fourth = _controller(tmp_path, 9, [n.port for n in c.controllers.values()], free_port())
        cid = (c.controllers[1].data / "meta.properties").read_text().split("cluster.id=")[1]
        _format(fourth, cid.split()[0], "--no-initial-controllers")
        fourth.start()
        refused = keeperless("metadata-quorum", "--bootstrap-controller", f"127.0.0.1:{port1}",
                             "add-controller", "--command-config", str(fourth.config))  # fmt: skip
        assert refused.returncode != 0
        assert "kraft.version feature is 0" in refused.stderr
        up = keeperless("features", "upgrade", *bs, "--feature", "kraft.version=1")
        assert up.returncode == 0, up.stdout + up.stderr
        voters = _voters(port1)
        assert [v["id"] for v in voters] == [1, 2, 3]
        assert all(re.fullmatch(r"[A-Za-z0-9_-]{22}", v["directoryId"]) for v in voters)
        desc = keeperless("features", "describe", *bs).stdout
        assert re.search(r"Feature: kraft.version\s.*FinalizedVersionLevel: 1", desc), desc
        down = keeperless("features", "downgrade", *bs, "--feature", "kraft.version=0")
        assert down.returncode != 0
        assert "Downgrading kraft.version is not supported" in down.stdout + down.stderr
        # through the broker, which forwards it to the active controller (as Kafka's)
        assert "Added controller 9" in _add(port1, fourth, via=tuple(bs))
        assert [v["id"] for v in _voters(port1)] == [1, 2, 3, 9]
        # the quorum is dynamic across restarts too (the record is in the log)
        c.controllers[2].restart()
        c.controllers[2].wait_listening()
        assert [v["id"] for v in _voters(c.controllers[2].port)] == [1, 2, 3, 9]
        _produce_and_count(c.brokers[4], "after-upgrade", [f"v{i}" for i in range(20)])
        assert len(_read(c.brokers[4], "after-upgrade", 20)) == 20
        gone = keeperless("metadata-quorum", *bs, "remove-controller", "--controller-id", "9",
                          "--controller-directory-id", _directory_id(fourth))  # fmt: skip
        assert gone.returncode == 0, gone.stderr
        assert [v["id"] for v in _voters(port1)] == [1, 2, 3]
        fourth.stop()
    finally:
        c.stop()


def test_controllers_join_by_themselves_with_auto_join(tmp_path: Path) -> None:
    """controller.quorum.auto.join.enable: controllers formatted to join become voters by
    themselves; one whose disk is replaced removes its old voter and joins again."""
    ports = [free_port() for _ in range(3)]
    cs = [_controller(tmp_path, i + 1, ports[:1] if i == 0 else ports, ports[i]) for i in range(3)]
    for c in cs[1:]:
        c.config.write_text(c.config.read_text() + "controller.quorum.auto.join.enable=true\n")
    cid = keeperless("storage", "random-uuid", check=True).stdout.strip()
    _format(cs[0], cid, "--standalone")
    for c in cs[1:]:
        _format(c, cid, "--no-initial-controllers")
    try:
        for c in cs:
            c.start()
        wait_until(lambda: [v["id"] for v in _voters(ports[0])] == [1, 2, 3], 60, what="auto-join")
        victim = cs[2]
        victim.stop()
        shutil.rmtree(victim.data)
        _format(victim, cid, "--no-initial-controllers")
        new_dir = _directory_id(victim)
        victim.start()

        def rejoined() -> bool:
            return (3, new_dir) in [(v["id"], v["directoryId"]) for v in _voters(ports[0])]

        wait_until(rejoined, 60, what="the new disk to replace the old voter")
        assert [v["id"] for v in _voters(ports[0])] == [1, 2, 3]
        assert "auto.join.enable: asked leader" in victim.logs()
    finally:
        for c in cs:
            c.stop()


def test_grow_one_to_five_and_shrink_to_three_while_clients_work(tmp_path: Path) -> None:
    """1 -> 3 -> 5 controllers and back to 3 (the active one among those removed) while
    a producer writes with acks=all and topics are created: every acknowledged record
    is read back and every created topic exists."""
    import threading

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    ports = [free_port() for _ in range(5)]
    cs = [_controller(tmp_path, i + 1, ports[:1] if i == 0 else ports, ports[i]) for i in range(5)]
    broker = _broker(tmp_path, 9, ports)
    cid = keeperless("storage", "random-uuid", check=True).stdout.strip()
    _format(cs[0], cid, "--standalone")
    for c in cs[1:]:
        _format(c, cid, "--no-initial-controllers")
    _format(broker, cid)
    acked: list[str] = []
    topics: list[str] = []
    stop = threading.Event()
    errors: list[str] = []

    def work() -> None:
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})

        def done(err: Any, msg: Any) -> None:
            if err is None:
                acked.append(msg.value().decode())

        for i in range(100_000):  # bounded; stopped by the test long before
            if stop.is_set():
                break
            p.produce("load", f"v{i}".encode(), on_delivery=done)
            p.poll(0)
            if i % 200 == 0:
                name = f"created-{i}"
                try:
                    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
                    topics.append(name)
                except Exception as e:  # an unknown outcome is not counted
                    errors.append(repr(e))
            else:
                stop.wait(0.002)
        p.flush(60)

    try:
        cs[0].start()
        broker.start()
        for c in cs[1:]:
            c.start()
        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        for c in cs[1:3]:
            _add(ports[0], c)
        assert [v["id"] for v in _voters(ports[0])] == [1, 2, 3]
        for c in cs[3:]:
            _add(ports[0], c)
        voters = _voters(ports[1])
        assert [v["id"] for v in voters] == [1, 2, 3, 4, 5]
        leader = int(_status(ports[1])["LeaderId"])
        gone = [leader, next(v["id"] for v in voters if v["id"] != leader)]
        ask = next(p for i, p in enumerate(ports) if i + 1 not in gone)
        for node in gone:
            d = next(v["directoryId"] for v in voters if v["id"] == node)
            res = keeperless("metadata-quorum", "--bootstrap-controller", f"127.0.0.1:{ask}",
                             "remove-controller", "--controller-id", str(node),
                             "--controller-directory-id", d)  # fmt: skip
            assert res.returncode == 0, res.stderr
        left = sorted({1, 2, 3, 4, 5} - set(gone))
        wait_until(lambda: [v["id"] for v in _voters(ask)] == left, 30, what="three voters")
        wait_until(lambda: len(topics) >= 3 and len(acked) >= 500, 60, what="work done")
        stop.set()
        worker.join(90)
        assert not worker.is_alive()
        got = _read(broker, "load", len(acked))
        assert set(acked) <= set(got), f"{len(set(acked) - set(got))} acknowledged records lost"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        listed = set(admin.list_topics(timeout=30).topics)
        assert set(topics) <= listed
    finally:
        stop.set()
        for n in [broker, *cs]:
            n.stop()


def test_a_controller_that_moves_updates_its_endpoints(tmp_path: Path) -> None:
    """A voter restarted on another port (a new address, a DNS change) updates its
    endpoints in the voter set (UpdateRaftVoter), so the others reach it there: with
    another voter down, the quorum still elects a leader."""
    ports = [free_port() for _ in range(3)]
    cs = [_controller(tmp_path, i + 1, ports, ports[i]) for i in range(3)]
    cid = keeperless("storage", "random-uuid", check=True).stdout.strip()
    dirs = [keeperless("storage", "random-uuid", check=True).stdout.strip() for _ in cs]
    initial = ",".join(f"{i + 1}@127.0.0.1:{ports[i]}:{dirs[i]}" for i in range(3))
    for c in cs:
        _format(c, cid, "--initial-controllers", initial)
    try:
        for c in cs:
            c.start_background()
        for c in cs:
            c.wait_listening()
        wait_until(lambda: int(_status(ports[0])["LeaderId"]) > 0, 30, what="a leader")
        leader = int(_status(ports[0])["LeaderId"])
        mover = next(c for c in cs if c.node_id != leader)
        mover.stop()
        new_port = free_port()
        text = mover.config.read_text().replace(
            f"CONTROLLER://127.0.0.1:{mover.port}", f"CONTROLLER://127.0.0.1:{new_port}"
        )
        mover.config.write_text(text)
        mover.port = mover.controller_port = new_port
        mover.start()
        want = [f"CONTROLLER://127.0.0.1:{new_port}"]

        def moved() -> bool:
            return any(
                v["id"] == mover.node_id and v.get("endpoints") == want
                for v in _voters(ports[leader - 1])
            )

        wait_until(moved, 30, what="the new endpoints in the voter set")
        # the third voter down: the leader and the moved one are the majority
        third = next(c for c in cs if c.node_id not in (leader, mover.node_id))
        third.stop()
        others = [c for c in cs if c is not third]
        for c in others:
            c.restart()
        wait_until(
            lambda: int(_status(mover.port)["LeaderId"]) in (leader, mover.node_id),
            60,
            what="a leader elected with the moved voter's vote",
        )
    finally:
        for c in cs:
            c.stop()
