"""The Connect worker's pure parts: its configuration, the group protocol and assignor,
the replay of the internal topics, converters and connector config validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from keeperless.connect import state as st
from keeperless.connect.config import ConfigException, load_worker_config, worker_config
from keeperless.connect.data import DataException, converter
from keeperless.connect.plugins import PluginError, connector_class, validate
from keeperless.connect.protocol import (
    Assignment,
    WorkerState,
    assign,
    decode_assignment,
    decode_metadata,
    encode_assignment,
    encode_metadata,
)

SAMPLE = Path(__file__).parents[3] / "config" / "connect-distributed.properties"
MINIMAL = {
    "group.id": "g", "config.storage.topic": "c", "offset.storage.topic": "o",
    "status.storage.topic": "s", "key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
}  # fmt: skip


def test_sample_config_loads_with_kafkas_defaults() -> None:
    cfg = load_worker_config(SAMPLE)
    assert cfg.group_id == "connect-cluster"
    assert cfg["offset.storage.partitions"] == 25
    assert cfg["status.storage.partitions"] == 5
    assert cfg.rest_listener() == ("http", "", 8083)
    assert not cfg.exactly_once
    assert cfg.converter_config("value.converter") == {"schemas.enable": "true"}


@pytest.mark.parametrize("missing", sorted(MINIMAL))
def test_required_keys_are_named(missing: str) -> None:
    raw = {k: v for k, v in MINIMAL.items() if k != missing}
    with pytest.raises(ConfigException, match=f'Missing required configuration "{missing}"'):
        worker_config(raw)


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("offset.storage.partitions", "0", "positive"),
        ("config.storage.replication.factor", "0", "-1"),
        ("session.timeout.ms", "soon", "Not a number"),
        ("exactly.once.source.support", "maybe", "DISABLED, ENABLED, PREPARING"),
        ("topic.creation.enable", "yes", "true or false"),
    ],
)
def test_bad_values_are_refused(key: str, value: str, words: str) -> None:
    with pytest.raises(ConfigException, match=words):
        worker_config({**MINIMAL, key: value})


def test_group_protocol_round_trips() -> None:
    ws = WorkerState("http://w1:8083/", 42)
    assert decode_metadata(encode_metadata(ws)) == ws
    a = Assignment(0, "m1", "http://w1:8083/", 42, ("c1",), (("c1", 0), ("c2", 3)))
    back = decode_assignment(encode_assignment(a))
    assert back.connectors == ("c1",)
    assert sorted(back.tasks) == [("c1", 0), ("c2", 3)]
    assert (back.leader, back.leader_url, back.config_offset) == ("m1", "http://w1:8083/", 42)


def test_eager_assignor_spreads_connectors_then_tasks_over_every_member() -> None:
    members = {m: WorkerState(f"http://{m}/", 5) for m in ("b", "a", "c")}
    tasks = [("x", i) for i in range(4)] + [("y", 0)]
    plan = assign("a", members, 5, ["x", "y"], tasks)
    assert set(plan) == {"a", "b", "c"}
    got = sorted(t for p in plan.values() for t in p.tasks)
    assert got == sorted(tasks)  # each task exactly once
    assert sorted(c for p in plan.values() for c in p.connectors) == ["x", "y"]
    loads = sorted(len(p.tasks) + len(p.connectors) for p in plan.values())
    assert loads[-1] - loads[0] <= 1
    assert all(p.leader == "a" and p.leader_url == "http://a/" for p in plan.values())


def test_config_topic_replay_applies_tasks_only_at_their_commit() -> None:
    s = st.ConfigState()
    off = iter(range(100))

    def put(rec: tuple[str, bytes | None]) -> None:
        s.apply(next(off), rec[0], rec[1])

    put(st.target_state_record("c", "STARTED"))
    put(st.connector_config_record("c", {"connector.class": "X"}))
    put(st.task_config_record("c", 0, {"a": "1"}))
    put(st.task_config_record("c", 1, {"a": "2"}))
    assert s.all_tasks() == []  # not committed yet
    put(st.commit_record("c", 2))
    assert s.all_tasks() == [("c", 0), ("c", 1)]
    put(st.task_config_record("c", 0, {"a": "3"}))
    put(st.commit_record("c", 2))  # task 1 missing in this generation: ignored, as Kafka
    assert s.tasks["c"] == [{"a": "1"}, {"a": "2"}]
    put(st.target_state_record("c", "STOPPED"))
    assert s.target("c") == "STOPPED"
    _key, value = st.target_state_record("c", "STOPPED")
    assert json.loads(value or b"") == {"state": "PAUSED", "state.v2": "STOPPED"}
    put(st.connector_config_record("c", None))
    assert s.connectors == {}
    assert s.all_tasks() == []
    assert s.target("c") == "STARTED"
    assert s.offset == 8


def test_offsets_replay_by_connector_and_partition() -> None:
    o = st.OffsetState()
    o.apply(st.offset_key("c", {"file": "a", "n": 1}), b'{"pos": 3}')
    o.apply(st.offset_key("c", {"n": 1, "file": "a"}), b'{"pos": 5}')  # key order ignored
    o.apply(b"not json", b"{}")
    assert o.get("c", {"file": "a", "n": 1}) == {"pos": 5}
    o.apply(st.offset_key("c", {"file": "a", "n": 1}), None)
    assert o.of("c") == []


def test_json_converter_with_and_without_schemas() -> None:
    schema = {"type": "struct", "optional": False, "fields": [
        {"field": "id", "type": "int32", "optional": False},
        {"field": "blob", "type": "bytes", "optional": True}]}  # fmt: skip
    value = {"id": 7, "blob": b"\x00\x01"}
    with_schema = converter("org.apache.kafka.connect.json.JsonConverter", {}, setting="v")
    data = with_schema.from_connect(schema, value)
    assert json.loads(data or b"") == {"schema": schema, "payload": {"id": 7, "blob": "AAE="}}
    assert with_schema.to_connect(data) == (schema, value)
    plain = converter(
        "org.apache.kafka.connect.json.JsonConverter", {"schemas.enable": "false"}, setting="v"
    )
    assert plain.from_connect(schema, value) == b'{"id":7,"blob":"AAE="}'
    with pytest.raises(DataException, match="set schemas.enable=false"):
        with_schema.to_connect(b'{"id": 7}')
    s = converter("org.apache.kafka.connect.storage.StringConverter", {}, setting="v")
    assert s.from_connect(None, "héllo") == "héllo".encode()
    with pytest.raises(DataException, match="could not be found"):
        converter("com.example.Avro", {}, setting="value.converter")


def test_connector_aliases_and_validation() -> None:
    full = "org.apache.kafka.connect.file.FileStreamSourceConnector"
    for alias in (full, "FileStreamSourceConnector", "FileStreamSource"):
        assert connector_class(alias).class_name == full
    with pytest.raises(PluginError, match="which name matches Nope"):
        connector_class("Nope")
    infos = validate({"name": "n", "connector.class": "FileStreamSink", "file": "/f",
                      "topics": "a", "topics.regex": "b.*"})  # fmt: skip
    assert infos["error_count"] == 2
    assert any("mutually exclusive" in e for c in infos["configs"] for e in c["value"]["errors"])


def test_parquet_sink_skips_records_already_in_its_files(tmp_path: Path) -> None:
    """A restarted task is handed records again from the last committed offset; those in
    a file already (a partial file written at a flush) are not written twice."""
    import pyarrow.parquet as pq

    from keeperless.connect.api import TaskContext
    from keeperless.connect.connectors.parquet import ParquetSinkTask
    from keeperless.connect.data import SinkRecord

    def records(lo: int, hi: int) -> list[SinkRecord]:
        return [SinkRecord("t", 0, o, None, None, None, {"n": o}) for o in range(lo, hi)]

    props = {"parquet.dir": str(tmp_path), "flush.size": "100", "rotate.interval.ms": "600000"}
    first = ParquetSinkTask()
    first.start(props, TaskContext("c", 0))
    first.put(records(0, 150))
    first.flush({})  # files [0..99] and the partial [100..149]
    again = ParquetSinkTask()  # after a crash: the consumer had committed offset 100
    again.start(props, TaskContext("c", 0))
    again.put(records(100, 260))
    again.flush({})
    offsets = sorted(o for f in tmp_path.rglob("*.parquet")
                     for o in pq.read_table(f).column("kafka_offset").to_pylist())  # fmt: skip
    assert offsets == list(range(260))
    names = sorted(f.name for f in tmp_path.rglob("*.parquet"))
    assert names[0] == "t+0+00000000000000000000+00000000000000000099.parquet"
    assert pq.read_table(tmp_path / "t" / "partition=0" / names[0]).to_pylist()[5]["n"] == 5


def test_topic_log_thread_outlives_a_failed_end_offsets_query() -> None:
    """A worker stayed out of its group after a broker restart: the end-offsets query
    timed out with an exception the reading thread did not catch, the thread died, and
    every later read_to_end() waited for ever."""
    import asyncio

    from keeperless.connect.topic_log import TopicLog

    async def scenario() -> None:
        conf = {"bootstrap.servers": "127.0.0.1:1", "log_level": 0}
        tl = TopicLog(conf, "t", lambda *a: None, "test")
        calls = []

        def ends() -> dict[int, int]:
            calls.append(1)
            if len(calls) == 1:
                raise TimeoutError("no answer within 15 s")
            return {}

        tl._ends = ends  # type: ignore[method-assign]
        tl._thread.start()
        try:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(tl.read_to_end(), 10)
            await asyncio.wait_for(tl.read_to_end(), 10)  # the thread still serves
        finally:
            tl._stop.set()
            tl._thread.join(5)

    asyncio.run(scenario())


def test_postgres_types_as_debeziums_defaults() -> None:
    """Arrays as Connect arrays, interval as MicroDuration, money as Decimal(scale 2):
    a new user found them as plain strings."""
    import decimal

    from keeperless.connect.connectors.postgres.types import column_type

    ints = column_type(1007, -1)  # int4[]
    assert ints.schema == {"type": "array", "items": {"type": "int32", "optional": True}}
    assert ints.convert("{1,NULL,3}") == [1, None, 3]
    texts = column_type(1009, -1)  # text[]
    assert texts.convert('{plain,"a b","q\\"uote",NULL,"NULL"}') == [
        "plain",
        "a b",
        'q"uote',
        None,
        "NULL",
    ]
    assert texts.convert("{}") == []
    interval = column_type(1186, -1)
    assert interval.schema["name"] == "io.debezium.time.MicroDuration"
    assert interval.convert("1 day 02:00:00") == (26 * 3600) * 1_000_000
    assert interval.convert("-00:00:01.5") == -1_500_000
    assert interval.convert("1 mon") == round(365.25 / 12 * 86_400e6)
    money = column_type(790, -1)
    assert money.schema["parameters"] == {"scale": "2"}
    unscaled = int.from_bytes(money.convert("$1,234.56"), "big", signed=True)
    assert decimal.Decimal(unscaled).scaleb(-2) == decimal.Decimal("1234.56")
    assert int.from_bytes(money.convert("-$0.50"), "big", signed=True) == -50


def test_file_source_reads_past_its_chunk_size_with_lines_across_chunks(tmp_path: Path) -> None:
    """The source reads 1 MiB a poll: a 4 MiB file, its lines straddling the chunks, comes
    out whole and in order, and the stored position resumes exactly."""
    from keeperless.connect.api import TaskContext
    from keeperless.connect.connectors.file import FileStreamSourceTask

    path = tmp_path / "big.txt"
    lines = [f"{i:07d}-" + "x" * (i % 251) for i in range(30_000)]
    path.write_text("".join(line + "\n" for line in lines))
    assert path.stat().st_size > 3 * (1 << 20)
    task = FileStreamSourceTask()
    task.start({"file": str(path), "topic": "t", "batch.size": "5000"}, TaskContext("c", 0))
    got: list[str] = []
    last: dict[str, int] = {}
    for _ in range(100):
        for r in task.poll() or []:
            got.append(r.value)
            last = r.source_offset
        if len(got) >= 20_000:
            break
    assert got == lines[: len(got)]
    resumed = FileStreamSourceTask()
    ctx = TaskContext("c", 0, lambda parts: {"p": last})
    resumed.start({"file": str(path), "topic": "t"}, ctx)
    rest: list[str] = []
    while len(got) + len(rest) < len(lines):
        rest += [r.value for r in resumed.poll() or []]
    assert got + rest == lines
