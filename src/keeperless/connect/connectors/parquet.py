"""A sink connector writing topics to Parquet files, exactly once.

Files are ``<parquet.dir>/<topic>/partition=<p>/<topic>+<p>+<start offset>.parquet``
(the naming of Confluent's storage sinks: the offsets a file holds are in its name), each
written to a temporary name, synced, then renamed into place. At start the task reads the
names to learn where each partition's files end, and skips records before that: a record
delivered again after a crash (its file renamed, the consumer's offset not yet committed)
is never written twice.

A struct value (a Debezium envelope, a JSON object) becomes columns; anything else is the
``value`` column. Every row also has ``kafka_topic``, ``kafka_partition``,
``kafka_offset``, ``kafka_timestamp`` and ``kafka_key`` (JSON).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from keeperless.connect.api import (
    ConfigDef,
    ConfigKey,
    Connector,
    SinkTask,
    TaskContext,
    at_least_one,
)
from keeperless.connect.data import SinkRecord
from keeperless.storage.durable import fsync_dir

__all__ = ["ParquetSinkConnector"]

_NAME = re.compile(r"^(?P<topic>.+)\+(?P<partition>\d+)\+(?P<start>\d+)\+(?P<end>\d+)\.parquet$")


class ParquetSinkTask(SinkTask):
    def start(self, props: Mapping[str, str], context: TaskContext) -> None:
        self.root = Path(props["parquet.dir"])
        self.flush_size = int(props.get("flush.size", "1000"))
        self.rotate_s = int(props.get("rotate.interval.ms", "10000")) / 1000
        self.buffers: dict[tuple[str, int], list[SinkRecord]] = {}
        self.opened: dict[tuple[str, int], float] = {}
        self.next_offset: dict[tuple[str, int], int] = {}

    def _written_up_to(self, topic: str, partition: int) -> int:
        """The offset after the last one in this partition's files."""
        key = (topic, partition)
        # read again before each new file: the partition may have been another task's
        # since (a rebalance of the connector's consumer group)
        if not self.buffers.get(key):
            end = 0
            folder = self.root / topic / f"partition={partition}"
            if folder.exists():
                for f in folder.iterdir():
                    m = _NAME.match(f.name)
                    if m and m["topic"] == topic and int(m["partition"]) == partition:
                        end = max(end, int(m["end"]) + 1)
            self.next_offset[key] = end
        return self.next_offset[key]

    def put(self, records: list[SinkRecord]) -> None:
        now = time.monotonic()
        for r in records:
            key = (r.topic, r.partition)
            if r.offset < self._written_up_to(r.topic, r.partition):
                continue  # in a file already: delivered again after a restart
            self.buffers.setdefault(key, []).append(r)
            self.opened.setdefault(key, now)
            self.next_offset[key] = r.offset + 1
            if len(self.buffers[key]) >= self.flush_size:
                self._write(key)
        for key, since in list(self.opened.items()):
            if now - since >= self.rotate_s and self.buffers.get(key):
                self._write(key)

    def flush(self, offsets: Mapping[tuple[str, int], int]) -> None:
        for key in list(self.buffers):
            if self.buffers[key]:
                self._write(key)

    def _write(self, key: tuple[str, int]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        records = self.buffers.pop(key)
        self.opened.pop(key, None)
        topic, partition = key
        rows = [_row(r) for r in records]
        folder = self.root / topic / f"partition={partition}"
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{topic}+{partition}+{records[0].offset:020d}+{records[-1].offset:020d}.parquet"
        tmp = folder / f".{name}.tmp"
        pq.write_table(pa.Table.from_pylist(rows), tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, folder / name)
        fsync_dir(folder)


def _column(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, default=str)
    return value


def _row(r: SinkRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kafka_topic": r.topic, "kafka_partition": r.partition, "kafka_offset": r.offset,
        "kafka_timestamp": r.timestamp,
        "kafka_key": None if r.key is None else json.dumps(r.key, sort_keys=True, default=str),
    }  # fmt: skip
    if isinstance(r.value, dict):
        for k, v in r.value.items():
            out[k] = _column(v)
    else:
        out["value"] = _column(r.value)
    return out


class ParquetSinkConnector(Connector):
    kind = "sink"
    class_name = "keeperless.connect.parquet.ParquetSinkConnector"
    task_class = ParquetSinkTask

    @classmethod
    def config_def(cls) -> ConfigDef:
        return ConfigDef((
            ConfigKey("parquet.dir", required=True, importance="HIGH", group="Parquet",
                      documentation="The directory the Parquet files are written under"),
            ConfigKey("flush.size", "INT", "1000", importance="HIGH", group="Parquet",
                      check=at_least_one, documentation="Records per file"),
            ConfigKey("rotate.interval.ms", "LONG", "10000", importance="MEDIUM",
                      group="Parquet", check=at_least_one,
                      documentation="A file is written at the latest this long after its first record"),  # noqa: E501
        ))  # fmt: skip

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.props) for _ in range(max_tasks)]
