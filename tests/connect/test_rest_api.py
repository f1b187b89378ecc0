"""The worker's REST API, driven as Kafka Connect's user guide describes it, through
``requests`` and ``curl``; its state in the three internal topics with Kafka Connect's
record keys; bad input answered with Kafka Connect's error JSON."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from confluent_kafka import Consumer, TopicPartition

from tests.connect.worker import Worker
from tests.integration.cluster import Node, wait_until
from tests.integration.conftest import running


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    yield from running(Node(tmp_path_factory.mktemp("connect-node")))


@pytest.fixture
def worker(node: Node, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Worker]:
    w = Worker(tmp_path / "worker", node.bootstrap, group=f"g-{request.node.name[:40]}")
    w.start()
    try:
        yield w
    finally:
        w.stop()


def read_topic(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """Every record of ``topic``, from the beginning to its end, in offset order."""
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[tuple[int, int, bytes | None, bytes | None]] = []
        pos = dict.fromkeys(parts, 0)

        def done() -> bool:
            for m in c.consume(500, 0.5):
                if m.error() is None:
                    out.append((m.partition() or 0, m.offset() or 0, m.key(), m.value()))
                    pos[m.partition() or 0] = (m.offset() or 0) + 1
            return all(pos[p] >= ends[p] for p in parts)

        wait_until(done, 30, what=f"reading {topic} to its end")
        return [(k, v) for _, _, k, v in sorted(out)]
    finally:
        c.close()


def source(path: Path, topic: str, **more: str) -> dict[str, Any]:
    return {"connector.class": "FileStreamSource", "file": str(path), "topic": topic, **more}


def test_lifecycle_with_requests(worker: Worker, tmp_path: Path, node: Node) -> None:
    src = tmp_path / "in.txt"
    src.write_text("one\ntwo\n")
    w = worker
    assert w.call("GET", "/").json()["version"].startswith("4.")
    assert w.call("GET", "/connectors").json() == []

    r = w.call("POST", "/connectors", {"name": "files", "config": source(src, "t-life")})
    assert r.status_code == 201, r.text
    assert r.headers["Location"] == "/connectors/files"
    assert r.json()["type"] == "source"
    again = w.call("POST", "/connectors", {"name": "files", "config": source(src, "t-life")})
    assert again.status_code == 409
    assert again.json() == {"error_code": 409, "message": "Connector files already exists"}

    st = w.wait_state("files", "RUNNING", tasks=1)
    assert st["type"] == "source"
    assert st["connector"]["worker_id"] == w.url.split("//")[1]
    assert w.call("GET", "/connectors").json() == ["files"]
    expanded = w.call("GET", "/connectors", expand="status").json()
    assert expanded["files"]["status"]["connector"]["state"] == "RUNNING"
    info = w.call("GET", "/connectors/files").json()
    assert info["tasks"] == [{"connector": "files", "task": 0}]
    assert w.call("GET", "/connectors/files/config").json()["name"] == "files"
    tasks = w.call("GET", "/connectors/files/tasks").json()
    assert tasks[0]["id"] == {"connector": "files", "task": 0}
    assert tasks[0]["config"]["file"] == str(src)
    assert w.call("GET", "/connectors/files/tasks/0/status").json()["state"] == "RUNNING"
    assert w.call("GET", "/connectors/files/tasks/7/status").status_code == 404

    # the records arrive, the topic is tracked, the offset is stored
    wait_until(lambda: len(read_topic(node.bootstrap, "t-life")) == 2, 30, what="two lines")
    assert w.call("GET", "/connectors/files/topics").json() == {"files": {"topics": ["t-life"]}}
    wait_until(lambda: w.call("GET", "/connectors/files/offsets").json()["offsets"], 30,
               what="the source offset stored")  # fmt: skip
    assert w.call("GET", "/connectors/files/offsets").json() == {
        "offsets": [{"partition": {"filename": str(src)}, "offset": {"position": 8}}]
    }

    # pause and resume: 202, the connector and its task follow
    assert w.call("PUT", "/connectors/files/pause").status_code == 202
    w.wait_state("files", "PAUSED", tasks=1)
    assert w.call("PUT", "/connectors/files/resume").status_code == 202
    w.wait_state("files", "RUNNING", tasks=1)

    # PUT and PATCH of the configuration
    r = w.call("PUT", "/connectors/files/config", source(src, "t-life", **{"batch.size": "10"}))
    assert r.status_code == 200, r.text
    assert r.json()["config"]["batch.size"] == "10"
    r = w.call("PATCH", "/connectors/files/config", {"batch.size": None, "tasks.max": "1"})
    assert r.status_code == 200, r.text
    assert "batch.size" not in r.json()["config"]
    created = w.call("PUT", "/connectors/other/config", source(src, "t-other"))
    assert created.status_code == 201

    # restarts: 204 for the connector alone, 202 with the states for includeTasks
    assert w.call("POST", "/connectors/files/restart").status_code == 204
    r = w.call("POST", "/connectors/files/restart", includeTasks="true")
    assert r.status_code == 202
    assert r.json()["connector"]["state"] == "RESTARTING"
    r = w.call("POST", "/connectors/files/tasks/0/restart")
    assert r.status_code == 204, r.text
    w.wait_state("files", "RUNNING", tasks=1)

    # offsets change only while stopped (KIP-875)
    r = w.call("DELETE", "/connectors/files/offsets")
    assert r.status_code == 400
    assert "must be in the STOPPED state" in r.json()["message"]
    assert w.call("PUT", "/connectors/files/stop").status_code == 202
    w.wait_state("files", "STOPPED", tasks=0)
    body = {"offsets": [{"partition": {"filename": str(src)}, "offset": {"position": 4}}]}
    r = w.call("PATCH", "/connectors/files/offsets", body)
    assert r.status_code == 200, r.text
    assert "altered successfully" in r.json()["message"]
    assert w.call("GET", "/connectors/files/offsets").json()["offsets"][0]["offset"] == {
        "position": 4
    }
    # resumed, it rereads from byte 4: "two" a second time
    assert w.call("PUT", "/connectors/files/resume").status_code == 202
    w.wait_state("files", "RUNNING", tasks=1)
    wait_until(lambda: len(read_topic(node.bootstrap, "t-life")) == 3, 30, what="the reread line")
    assert (
        read_topic(node.bootstrap, "t-life")[-1][1]
        == b'{"schema":{"type":"string","optional":false},"payload":"two"}'
    )

    assert w.call("PUT", "/connectors/files/topics/reset").status_code == 202
    assert w.call("GET", "/connectors/files/topics").json() == {"files": {"topics": []}}

    assert w.call("PUT", "/connectors/files/stop").status_code == 202
    w.wait_state("files", "STOPPED", tasks=0)
    r = w.call("DELETE", "/connectors/files/offsets")
    assert r.status_code == 200
    assert "reset successfully" in r.json()["message"]
    assert w.call("GET", "/connectors/files/offsets").json() == {"offsets": []}

    assert w.call("DELETE", "/connectors/files").status_code == 204
    gone = w.call("GET", "/connectors/files")
    assert gone.status_code == 404
    assert gone.json() == {"error_code": 404, "message": "Connector files not found"}
    assert w.call("GET", "/connectors").json() == ["other"]


def test_state_in_kafka_connects_record_keys(worker: Worker, tmp_path: Path, node: Node) -> None:
    src = tmp_path / "in.txt"
    src.write_text("x\n")
    w = worker
    assert w.call("POST", "/connectors", {"name": "k", "config": source(src, "t-keys")}).ok
    w.wait_state("k", "RUNNING", tasks=1)
    wait_until(lambda: w.call("GET", "/connectors/k/offsets").json()["offsets"], 30,
               what="the offset stored")  # fmt: skip
    assert w.call("PUT", "/connectors/k/pause").status_code == 202
    w.wait_state("k", "PAUSED", tasks=1)
    group = w.config.read_text().split("group.id=")[1].split()[0]

    configs = read_topic(node.bootstrap, f"{group}-configs")
    keys = [k.decode() for k, _ in configs if k]
    assert {"target-state-k", "connector-k", "task-k-0", "commit-k"} <= set(keys)
    assert keys.index("task-k-0") < keys.index("commit-k")
    values = {k.decode(): json.loads(v) for k, v in configs if k and v}
    assert values["connector-k"]["properties"]["file"] == str(src)
    assert values["commit-k"] == {"tasks": 1}
    assert values["target-state-k"] == {"state": "PAUSED", "state.v2": "PAUSED"}

    statuses = {
        k.decode(): json.loads(v)
        for k, v in read_topic(node.bootstrap, f"{group}-status")
        if k and v
    }
    assert statuses["status-connector-k"]["state"] == "PAUSED"
    assert statuses["status-task-k-0"]["worker_id"] == w.url.split("//")[1]
    assert set(statuses["status-task-k-0"]) == {"state", "trace", "worker_id", "generation"}
    assert statuses["status-topic-t-keys:connector-k"]["topic"]["name"] == "t-keys"

    offsets = [
        (json.loads(k), json.loads(v))
        for k, v in read_topic(node.bootstrap, f"{group}-offsets")
        if k and v
    ]
    assert offsets[-1] == (["k", {"filename": str(src)}], {"position": 2})


def test_curl_as_in_the_document(worker: Worker, tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("")
    doc = {"name": "curl-made", "config": source(src, "t-curl")}

    def curl(*args: str) -> tuple[int, str]:
        out = subprocess.run(
            ["curl", "-s", "-o", "-", "-w", "\n%{http_code}", *args],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        body, _, code = out.stdout.rpartition("\n")
        return int(code), body

    code, body = curl("-X", "POST", "-H", "Accept:application/json", "-H",
                      "Content-Type:application/json", f"{worker.url}/connectors/",
                      "-d", json.dumps(doc))  # fmt: skip
    assert code == 201, body
    worker.wait_state("curl-made", "RUNNING", tasks=1)
    code, body = curl(f"{worker.url}/connectors/curl-made/status")
    assert json.loads(body)["connector"]["state"] == "RUNNING"
    code, body = curl("-X", "PUT", f"{worker.url}/connectors/curl-made/pause")
    assert code == 202
    code, body = curl("-X", "DELETE", f"{worker.url}/connectors/curl-made")
    assert code == 204
    code, body = curl(f"{worker.url}/connector-plugins")
    classes = {p["class"]: p["type"] for p in json.loads(body)}
    assert classes["org.apache.kafka.connect.file.FileStreamSourceConnector"] == "source"
    assert classes["org.apache.kafka.connect.file.FileStreamSinkConnector"] == "sink"


def test_bad_input_is_answered_in_kafka_connects_words(worker: Worker, tmp_path: Path) -> None:
    w = worker
    r = w.call("POST", "/connectors", None)
    assert r.status_code == 400
    r = requests_raw(w, "POST", "/connectors", "{not json")
    assert r.status_code == 400
    form = requests.post(w.url + "/connectors", data='{"name": "f", "config": {}}', timeout=30,
                         headers={"Content-Type": "application/x-www-form-urlencoded"})  # fmt: skip
    assert form.status_code == 415
    assert form.json() == {"error_code": 415, "message": "HTTP 415 Unsupported Media Type"}
    assert r.json()["error_code"] == 400
    assert "JSON" in r.json()["message"]

    r = w.call(
        "POST", "/connectors", {"name": "x", "config": {"connector.class": "com.example.Nope"}}
    )
    assert r.status_code == 400
    assert (
        "Failed to find any class that implements Connector and which name matches com.example.Nope"
        in r.json()["message"]
    )

    r = w.call("POST", "/connectors", {"name": "x", "config": {"topic": "t"}})
    assert r.status_code == 400
    assert "contains no connector type" in r.json()["message"]

    r = w.call(
        "POST",
        "/connectors",
        {"name": "x", "config": {"connector.class": "FileStreamSource", "tasks.max": "zero"}},
    )
    assert r.status_code == 400
    msg = r.json()["message"]
    assert msg.startswith(
        "Connector configuration is invalid and contains the following 3 error(s):"
    )
    assert 'Missing required configuration "file" which has no default value.' in msg
    assert "Invalid value zero for configuration tasks.max" in msg

    r = w.call(
        "POST",
        "/connectors",
        {"name": "s", "config": {"connector.class": "FileStreamSink", "file": str(tmp_path / "o")}},
    )
    assert r.status_code == 400
    assert "Must configure one of topics or topics.regex" in r.json()["message"]

    r = w.call("POST", "/connectors", {"name": "smt", "config": {
        "connector.class": "FileStreamSource", "file": "/f", "topic": "t",
        "transforms": "a", "transforms.a.type": "com.nope.Transform"}})  # fmt: skip
    assert r.status_code == 400
    assert "Single Message Transforms and predicates are not supported" in r.json()["message"]

    r = w.call("PUT", "/connectors/a/config", {"name": "b", "connector.class": "FileStreamSource"})
    assert r.status_code == 400
    assert (
        r.json()["message"]
        == "Connector name configuration (b) doesn't match connector name in the URL (a)"
    )

    for method, path in (("GET", "/connectors/nope"), ("GET", "/connectors/nope/status"),
                         ("PUT", "/connectors/nope/pause"), ("DELETE", "/connectors/nope"),
                         ("GET", "/connectors/nope/offsets")):  # fmt: skip
        r = w.call(method, path)
        assert r.status_code == 404, (method, path, r.text)
        assert r.json() == {"error_code": 404, "message": "Connector nope not found"}

    validate = w.call("PUT", "/connector-plugins/FileStreamSourceConnector/config/validate",
                      {"connector.class": "FileStreamSourceConnector", "topic": "t"})  # fmt: skip
    assert validate.status_code == 200
    body = validate.json()
    assert body["name"] == "org.apache.kafka.connect.file.FileStreamSourceConnector"
    assert body["error_count"] == 2  # file, and name (required, as Kafka's ConnectorConfig)
    by_name = {c["value"]["name"]: c for c in body["configs"]}
    assert by_name["name"]["value"]["errors"]
    assert by_name["file"]["value"]["errors"] == [
        'Missing required configuration "file" which has no default value.'
    ]
    assert by_name["file"]["definition"]["required"] is True
    assert w.call("PUT", "/connector-plugins/Nope/config/validate", {}).status_code == 404
    # a worker still runs connectors after every refusal
    assert w.call("GET", "/connectors").status_code == 200


def requests_raw(w: Worker, method: str, path: str, data: str) -> Any:
    import requests

    return requests.request(method, w.url + path, data=data, timeout=30,
                            headers={"Content-Type": "application/json"})  # fmt: skip


def test_failed_task_reports_its_trace_and_others_keep_running(
    worker: Worker, tmp_path: Path
) -> None:
    w = worker
    good = tmp_path / "good.txt"
    good.write_text("ok\n")
    assert w.call("POST", "/connectors", {"name": "good", "config": source(good, "t-good")}).ok
    # a sink whose file is a directory cannot open it: its task fails
    bad = {"connector.class": "FileStreamSink", "file": str(tmp_path), "topics": "t-good"}
    assert w.call("POST", "/connectors", {"name": "bad", "config": bad}).ok

    def failed() -> bool:
        ts = w.status("bad").get("tasks", [])
        return bool(ts) and ts[0]["state"] == "FAILED"

    wait_until(failed, 60, what=f"the bad task FAILED: {w.status('bad')}")
    trace = w.status("bad")["tasks"][0]["trace"]
    assert "IsADirectoryError" in trace
    assert w.status("good")["tasks"][0]["state"] == "RUNNING"
    r = w.call("POST", "/connectors/bad/restart", includeTasks="true", onlyFailed="true")
    assert r.status_code == 202
    assert r.json()["tasks"][0]["state"] == "RESTARTING"
    assert r.json()["connector"]["state"] == "RUNNING"  # only failed ones restart


def test_sink_error_tolerance_and_dead_letter_queue(
    worker: Worker, tmp_path: Path, node: Node
) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": node.bootstrap})
    good = b'{"schema":{"type":"string","optional":false},"payload":"%s"}'
    for value in (good % b"one", b"not json at all", good % b"two"):
        p.produce("mixed", value)
    assert p.flush(10) == 0
    out = tmp_path / "sink.txt"
    cfg = {"connector.class": "FileStreamSink", "file": str(out), "topics": "mixed",
           "errors.tolerance": "all", "errors.deadletterqueue.topic.name": "mixed-dlq",
           "errors.deadletterqueue.topic.replication.factor": "1",
           "errors.deadletterqueue.context.headers.enable": "true"}  # fmt: skip
    assert (
        worker.call("POST", "/connectors", {"name": "tolerant", "config": cfg}).status_code == 201
    )
    wait_until(lambda: out.exists() and out.read_text() == "one\ntwo\n", 60,
               what="the two readable records in the file")  # fmt: skip
    wait_until(lambda: len(read_topic(node.bootstrap, "mixed-dlq")) == 1, 60, what="the DLQ")
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "dlq"})
    c.assign([TopicPartition("mixed-dlq", 0, 0)])
    [m] = [m for m in c.consume(5, 10) if m.error() is None]
    c.close()
    assert m.value() == b"not json at all"
    headers = dict(m.headers() or [])
    assert headers["__connect.errors.topic"] == b"mixed"
    assert headers["__connect.errors.offset"] == b"1"
    assert (
        b"Converting byte[] to Kafka Connect data failed"
        in headers["__connect.errors.exception.message"]
    )
    assert worker.status("tolerant")["tasks"][0]["state"] == "RUNNING"
