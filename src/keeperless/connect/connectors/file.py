"""Kafka's example file connectors (``connect-file``): ``FileStreamSourceConnector`` reads
lines appended to a file (source partition ``{"filename"}``, offset ``{"position"}`` in
bytes, as Kafka's), ``FileStreamSinkConnector`` appends each record's value as a line."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from keeperless.connect.api import (
    ConfigDef,
    ConfigKey,
    Connector,
    SinkTask,
    SourceTask,
    TaskContext,
)
from keeperless.connect.data import SinkRecord, SourceRecord

__all__ = ["FileStreamSinkConnector", "FileStreamSourceConnector"]

_STRING = {"type": "string", "optional": False}


class FileStreamSourceTask(SourceTask):
    def start(self, props: Mapping[str, str], context: TaskContext) -> None:
        self.path = props["file"]
        self.topic = props["topic"]
        self.batch = int(props.get("batch.size", "2000"))
        self.partition = {"filename": self.path}
        stored = context.offset(self.partition)
        self.position = int(stored["position"]) if stored else 0
        self.buffer = b""

    def poll(self) -> list[SourceRecord] | None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.position + len(self.buffer))
                self.buffer += f.read(1 << 20)
        except FileNotFoundError:
            time.sleep(0.2)
            return None
        out: list[SourceRecord] = []
        while b"\n" in self.buffer and len(out) < self.batch:
            line, _, self.buffer = self.buffer.partition(b"\n")
            self.position += len(line) + 1
            out.append(
                SourceRecord(
                    self.partition,
                    {"position": self.position},
                    self.topic,
                    None,
                    None,
                    _STRING,
                    line.decode(errors="replace"),
                )
            )
        if not out:
            time.sleep(0.1)
        return out


class FileStreamSourceConnector(Connector):
    kind = "source"
    class_name = "org.apache.kafka.connect.file.FileStreamSourceConnector"
    task_class = FileStreamSourceTask

    @classmethod
    def config_def(cls) -> ConfigDef:
        return ConfigDef(
            (
                ConfigKey(
                    "file", required=True, importance="HIGH", documentation="Source filename."
                ),
                ConfigKey(
                    "topic",
                    required=True,
                    importance="HIGH",
                    documentation="The topic to publish data to",
                ),
                ConfigKey(
                    "batch.size",
                    "INT",
                    "2000",
                    importance="LOW",
                    documentation="The maximum number of records the source task can read from the file each time it is polled",  # noqa: E501
                ),
            )
        )

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.props)]  # one file, one task, as Kafka's


class FileStreamSinkTask(SinkTask):
    def start(self, props: Mapping[str, str], context: TaskContext) -> None:
        self.f = open(props["file"], "ab")  # noqa: SIM115 - held for the task's life

    def put(self, records: list[SinkRecord]) -> None:
        for r in records:
            self.f.write(_text(r.value).encode() + b"\n")

    def flush(self, offsets: Mapping[tuple[str, int], int]) -> None:
        self.f.flush()
        os.fsync(self.f.fileno())

    def stop(self) -> None:
        self.f.close()


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


class FileStreamSinkConnector(Connector):
    kind = "sink"
    class_name = "org.apache.kafka.connect.file.FileStreamSinkConnector"
    task_class = FileStreamSinkTask
    config_keys: ClassVar[tuple[ConfigKey, ...]] = (
        ConfigKey("file", required=True, importance="HIGH", documentation="Destination filename."),
    )

    @classmethod
    def config_def(cls) -> ConfigDef:
        return ConfigDef(cls.config_keys)

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [
            dict(self.props) for _ in range(max_tasks)
        ]  # as Kafka's: the group splits the partitions
