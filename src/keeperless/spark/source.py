"""``format("keeperless")``: PySpark Python data source for Kafka-protocol topics.

Same options and columns as Spark's built-in Kafka source and sink; see
``keeperless.spark.options``.  Register it once per session::

    from keeperless.spark import register
    register(spark)
    spark.readStream.format("keeperless").option("kafka.bootstrap.servers", ...)
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from keeperless.spark.kafka import (
    DATA_LOSS_HINT,
    ClusterView,
    KafkaSourceError,
    read_range,
    write_batches,
)
from keeperless.spark.options import (
    Offsets,
    OptionError,
    SinkOptions,
    SourceOptions,
    TopicPartition,
    consumer_group,
    from_checkpoint,
    parse_sink,
    parse_source,
    rate_limit,
    split_ranges,
    to_checkpoint,
)

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def read_schema(include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


class OffsetRange(InputPartition):
    topic: str
    partition: int
    start: int
    end: int

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


@dataclass
class WriteCount(WriterCommitMessage):
    rows: int


def _ranges(start: Offsets, end: Offsets, opts: SourceOptions) -> list[OffsetRange]:
    whole = [((t, p), start[(t, p)], off) for (t, p), off in sorted(end.items())]
    pieces = split_ranges(whole, opts.min_partitions, opts.max_records_per_partition)
    return [OffsetRange(tp[0], tp[1], a, b) for tp, a, b in pieces]


def _same_type(a: DataType, b: DataType) -> bool:
    """Spark's DataType.sameType: equal but for nullability (and the case of names)."""
    if isinstance(a, ArrayType) and isinstance(b, ArrayType):
        return _same_type(a.elementType, b.elementType)
    if isinstance(a, StructType) and isinstance(b, StructType):
        return len(a.fields) == len(b.fields) and all(
            x.name.lower() == y.name.lower() and _same_type(x.dataType, y.dataType)
            for x, y in zip(a.fields, b.fields, strict=True)
        )
    return a == b


class KeeperlessDataSource(DataSource):
    """Kafka-protocol topics as a Spark source and sink (format name ``keeperless``)."""

    @classmethod
    def name(cls) -> str:
        return "keeperless"

    def _include_headers(self) -> bool:
        return str(self.options.get("includeheaders", "false")).strip().lower() == "true"

    def schema(self) -> StructType:
        return read_schema(self._include_headers())

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(parse_source(self.options, streaming=False), dict(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(parse_source(self.options, streaming=True), dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if overwrite:
            raise OptionError(save_mode_refusal("Overwrite"))
        return BatchWriter(_validated_sink(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return StreamWriter(_validated_sink(self.options, schema))


class _Reader:
    """What the batch and streaming readers share: options and the executor-side read."""

    def __init__(self, opts: SourceOptions, raw: dict[str, str]):
        self.opts = opts
        self.group_id = consumer_group(raw)
        self.timestamp_strategy = raw.get("startingoffsetsbytimestampstrategy", "error").lower()
        if self.timestamp_strategy not in ("error", "latest"):
            raise OptionError(
                "Option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
                f"got '{self.timestamp_strategy}'"
            )
        self._view: ClusterView | None = None

    @property
    def view(self) -> ClusterView:
        if self._view is None:
            self._view = ClusterView(
                self.opts.bootstrap_servers, self.opts.client_config, self.opts.api_timeout_ms
            )
        return self._view

    def __getstate__(self) -> dict[str, Any]:
        # executors get a copy without the driver's client
        state = dict(self.__dict__)
        state["_view"] = None
        return state

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            return iter(())  # nothing to read: Spark hands one empty partition
        return read_range(
            self.opts,
            self.group_id,
            partition.topic,
            partition.partition,
            partition.start,
            partition.end,
        )

    def _start(self, tps: Sequence[TopicPartition]) -> Offsets:
        return self.view.resolve(
            self.opts.starting,
            tps,
            what="startingOffsets",
            fail_on_data_loss=self.opts.fail_on_data_loss,
            by_timestamp_strategy=self.timestamp_strategy,
        )


class BatchReader(_Reader, DataSourceReader):
    def partitions(self) -> Sequence[InputPartition]:
        tps = self.view.partitions(self.opts.subscription, require_topics=True)
        start = self._start(tps)
        end = self.view.resolve(self.opts.ending, tps, what="endingOffsets", fail_on_data_loss=True)
        for tp in tps:
            if start[tp] > end[tp]:
                raise KafkaSourceError(
                    f"Starting offset {start[tp]} of {tp[0]}-{tp[1]} is after its ending "
                    f"offset {end[tp]} (startingOffsets must not be after endingOffsets)"
                )
        return _ranges(start, end, self.opts)


class StreamReader(_Reader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions, raw: dict[str, str]):
        super().__init__(opts, raw)
        self._target: Offsets | None = None
        self._last_batch_s = time.monotonic()  # for minOffsetsPerTrigger's maxTriggerDelay

    def _current(self) -> list[TopicPartition]:
        return self.view.partitions(self.opts.subscription, require_topics=False)

    def initialOffset(self) -> dict[str, dict[str, int]]:
        return to_checkpoint(self._start(self._current()))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self._current()
        self._target = self.view.latest(tps)

    def _with_new_partitions(self, start: Offsets, tps: Sequence[TopicPartition]) -> Offsets:
        """``start`` plus partitions discovered since (they begin at earliest, as in Spark)."""
        new = [tp for tp in tps if tp not in start]
        full = dict(start)
        full.update(self.view.earliest(new))
        return full

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, dict[str, int]]:
        begin = from_checkpoint(start)
        tps = self._current()
        gone = [tp for tp in begin if tp not in tps]
        if gone and self.opts.fail_on_data_loss:
            raise KafkaSourceError(
                f"Partitions {', '.join(f'{t}-{p}' for t, p in gone)} are gone. {DATA_LOSS_HINT}"
            )
        if self._target is not None:
            tps = [tp for tp in tps if tp in self._target]
        begin = {tp: off for tp, off in begin.items() if tp in tps}
        full = self._with_new_partitions(begin, tps)
        latest = self.view.latest(tps)
        if self._target is not None:
            latest = {tp: min(off, self._target[tp]) for tp, off in latest.items()}
        for tp, off in latest.items():
            if off < full[tp]:
                # the partition was truncated or recreated below what was read
                if self.opts.fail_on_data_loss:
                    raise KafkaSourceError(
                        f"{tp[0]}-{tp[1]}'s offset was changed from {full[tp]} to {off}. "
                        f"{DATA_LOSS_HINT}"
                    )
                full[tp] = off
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(full, latest, limit.max_rows)
        end = {tp: max(full[tp], latest[tp]) for tp in tps}
        least = self.opts.min_offsets_per_trigger
        if least is not None and self._target is None:
            waited_ms = (time.monotonic() - self._last_batch_s) * 1000
            if (
                sum(end[tp] - full[tp] for tp in tps) < least
                and waited_ms < self.opts.max_trigger_delay_ms
            ):
                return to_checkpoint(begin)  # not enough yet: no batch this trigger, as Spark
        if end != full:
            self._last_batch_s = time.monotonic()
        return to_checkpoint(end)

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:
        return to_checkpoint(self.view.latest(self._current()))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        end_offsets = from_checkpoint(end)
        begin = self._with_new_partitions(from_checkpoint(start), list(end_offsets))
        behind = [tp for tp, off in end_offsets.items() if off < begin[tp]]
        if behind:
            # recreated or truncated below what was read (only with failOnDataLoss=false,
            # latestOffset refuses otherwise): read what the partition holds now
            lows = self.view.earliest(behind)
            begin.update({tp: min(lows[tp], end_offsets[tp]) for tp in behind})
        return _ranges(begin, end_offsets, self.opts)

    def commit(self, end: dict[str, Any]) -> None:
        pass  # offsets live in Spark's checkpoint only

    def stop(self) -> None:
        if self._view is not None:
            self._view.close()


def _validated_sink(options: Any, schema: StructType) -> SinkOptions:
    opts = parse_sink(options)
    types: dict[str, DataType] = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in types:
        raise OptionError("Required attribute 'value' not found")
    if not isinstance(types["value"], StringType | BinaryType):
        raise OptionError(
            f"value attribute type must be a StringType or BinaryType, got {types['value']}"
        )
    if "key" in types and not isinstance(types["key"], StringType | BinaryType):
        raise OptionError(
            f"key attribute type must be a StringType or BinaryType, got {types['key']}"
        )
    if opts.topic is None:
        if "topic" not in types:
            raise OptionError(
                "topic option required when no 'topic' attribute is present. "
                "Use the topic option for setting a topic."
            )
        if not isinstance(types["topic"], StringType):
            raise OptionError(f"Topic type must be a StringType, got {types['topic']}")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise OptionError(
            f"partition attribute type must be an IntegerType, got {types['partition']}"
        )
    if "headers" in types and not _same_type(types["headers"], HEADERS_TYPE):
        raise OptionError(
            "headers attribute type must be array<struct<key:string,value:binary>>, "
            f"got {types['headers'].simpleString()}"
        )
    return opts


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions):
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteCount:
        return WriteCount(write_batches(self.opts, iterator))


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions):
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteCount:
        return WriteCount(write_batches(self.opts, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # each task flushed and was acknowledged before it returned

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # Kafka sinks are at-least-once: written messages stay


def save_mode_refusal(mode: str) -> str:
    """Spark's Kafka sink's words for a save mode it does not allow."""
    return (
        f"Save mode {mode} is not allowed for Kafka. Allowed save modes are Append and "
        "ErrorIfExists (default)."
    )
