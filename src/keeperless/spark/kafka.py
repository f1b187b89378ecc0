"""The Kafka client side of the Spark source and sink (confluent-kafka).

Driver side: which partitions a subscription covers and where their offsets are.
Executor side: read one partition's offset range as Arrow record batches, and write
Arrow record batches as messages.  Nothing here commits offsets to Kafka: a query's
progress lives only in Spark's checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec as KOffsetSpec

from keeperless.metadata.admin import INTERNAL_TOPICS
from keeperless.spark.options import (
    EARLIEST,
    LATEST,
    Offsets,
    OffsetSpec,
    SinkOptions,
    SourceOptions,
    Subscription,
    TopicPartition,
    format_offsets,
)

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
ROWS_PER_BATCH = 8192
_OUT_OF_RANGE = (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)

# confluent-kafka's timestamp types -> Kafka's TimestampType ids, as Spark's column shows them
_TIMESTAMP_TYPE_IDS = {0: -1, 1: 0, 2: 1}


class KafkaSourceError(RuntimeError):
    """The cluster refused or could not answer what the query needs."""


DATA_LOSS_HINT = (
    "Some data may have been lost because they are not available in Kafka any more; "
    "either the data was aged out by Kafka or the topic may have been deleted before all "
    "the data in the topic was processed. If you want your streaming query to continue "
    'on such cases, set the source option "failOnDataLoss" to "false".'
)


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


class ClusterView:
    """Driver-side metadata and offsets through one AdminClient, opened on first use."""

    def __init__(self, bootstrap_servers: str, config: Mapping[str, str], timeout_ms: int):
        self.bootstrap_servers = bootstrap_servers
        self.config = dict(config)
        self.timeout = timeout_ms / 1000.0
        self._admin: AdminClient | None = None

    def _client(self) -> AdminClient:
        if self._admin is None:
            conf: dict[str, Any] = dict(self.config)
            conf["bootstrap.servers"] = self.bootstrap_servers
            try:
                self._admin = AdminClient(conf)
            except KafkaException as e:
                raise KafkaSourceError(f"Invalid Kafka client configuration: {e}") from None
        return self._admin

    def close(self) -> None:
        self._admin = None

    def topics(self) -> dict[str, int]:
        """Topic name -> partition count."""
        try:
            md = self._client().list_topics(timeout=self.timeout)
        except KafkaException as e:
            raise KafkaSourceError(
                f"Cannot reach the Kafka cluster at kafka.bootstrap.servers="
                f"{self.bootstrap_servers} within {int(self.timeout * 1000)} ms "
                f"(kafka.default.api.timeout.ms): {e.args[0]}"
            ) from None
        return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}

    def partitions(self, sub: Subscription, *, require_topics: bool) -> list[TopicPartition]:
        topics = self.topics()
        if sub.kind == "assign":
            missing = [f"{t}-{p}" for t, p in sub.partitions if t not in topics or p >= topics[t]]
            if missing:
                raise KafkaSourceError(
                    "UNKNOWN_TOPIC_OR_PARTITION: assigned partitions do not exist: "
                    + ", ".join(missing)
                )
            return sorted(set(sub.partitions))
        if sub.kind == "subscribe":
            missing = [t for t in sub.topics if t not in topics]
            if missing and require_topics:
                raise KafkaSourceError(
                    "UNKNOWN_TOPIC_OR_PARTITION: topic(s) do not exist: " + ", ".join(missing)
                )
            names = [t for t in sub.topics if t in topics]
        else:
            # the Java consumer leaves internal topics out of pattern subscriptions
            names = [t for t in topics if t not in INTERNAL_TOPICS and sub.matches(t)]
        return sorted((t, p) for t in names for p in range(topics[t]))

    def _list_offsets(self, specs: Mapping[TopicPartition, KOffsetSpec]) -> Offsets:
        if not specs:
            return {}
        req = {KTopicPartition(t, p): s for (t, p), s in specs.items()}
        try:
            futures = self._client().list_offsets(req, request_timeout=self.timeout)
            return {
                (tp.topic, tp.partition): f.result(timeout=self.timeout + 5).offset
                for tp, f in futures.items()
            }
        except KafkaException as e:
            raise KafkaSourceError(
                f"Cannot list offsets of {format_offsets(dict.fromkeys(specs, 0), True)} at "
                f"{self.bootstrap_servers}: {e.args[0]}"
            ) from None

    def earliest(self, tps: Sequence[TopicPartition]) -> Offsets:
        return self._list_offsets({tp: KOffsetSpec.earliest() for tp in tps})  # type: ignore[no-untyped-call]

    def latest(self, tps: Sequence[TopicPartition]) -> Offsets:
        return self._list_offsets({tp: KOffsetSpec.latest() for tp in tps})  # type: ignore[no-untyped-call]

    def for_times(self, wanted: Mapping[TopicPartition, int]) -> Offsets:
        return self._list_offsets({tp: KOffsetSpec.for_timestamp(ts) for tp, ts in wanted.items()})

    def resolve(
        self,
        spec: OffsetSpec,
        tps: Sequence[TopicPartition],
        *,
        what: str,
        fail_on_data_loss: bool,
        by_timestamp_strategy: str = "error",
    ) -> Offsets:
        """Concrete offsets for ``tps`` from an earliest/latest/JSON/timestamp spec."""
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind in ("timestamps", "timestamp"):
            if spec.kind == "timestamps":
                if set(spec.offsets) != set(tps):
                    raise KafkaSourceError(_must_cover(what + "ByTimestamp", spec.offsets, tps))
                wanted = dict(spec.offsets)
            else:
                wanted = dict.fromkeys(tps, spec.timestamp)
            found = self.for_times(wanted)
            no_match = [tp for tp, off in found.items() if off < 0]
            if no_match:
                if what == "startingOffsets" and by_timestamp_strategy == "error":
                    raise KafkaSourceError(
                        f"No offset matched the timestamp given in {what}ByTimestamp for "
                        f"{', '.join(f'{t}-{p}' for t, p in no_match)}; set "
                        "startingOffsetsByTimestampStrategy=latest to start at the latest "
                        "offset instead"
                    )
                latest = self.latest(no_match)
                found.update(latest)
            return found
        if set(spec.offsets) != set(tps):
            raise KafkaSourceError(_must_cover(what, spec.offsets, tps))
        out = dict(spec.offsets)
        earliest_needed = [tp for tp, off in out.items() if off == EARLIEST or off >= 0]
        latest_needed = [tp for tp, off in out.items() if off == LATEST or off >= 0]
        lows = self.earliest(earliest_needed)
        highs = self.latest(latest_needed)
        for tp, off in out.items():
            if off == EARLIEST:
                out[tp] = lows[tp]
            elif off == LATEST:
                out[tp] = highs[tp]
            elif off < lows[tp]:
                if fail_on_data_loss:
                    raise KafkaSourceError(
                        f"Offset {off} given for {tp[0]}-{tp[1]} in {what} is before the "
                        f"earliest available offset {lows[tp]}. {DATA_LOSS_HINT}"
                    )
                out[tp] = lows[tp]
            elif off > highs[tp]:
                if fail_on_data_loss:
                    # Spark: "Beginning offset ... is after the ending offset ..." (batch),
                    # a data-loss failure (streaming); never a bare assertion
                    raise KafkaSourceError(
                        f"Offset {off} given for {tp[0]}-{tp[1]} in {what} is after the "
                        f"latest offset {highs[tp]} of that partition: you either provided an "
                        f"invalid offset, or the topic was deleted and recreated. {DATA_LOSS_HINT}"
                    )
                out[tp] = highs[tp]
        return out


def _must_cover(
    what: str, given: Mapping[TopicPartition, int], tps: Sequence[TopicPartition]
) -> str:
    return (
        f"If {what} contains specific offsets, you must specify all TopicPartitions.\n"
        f"Use -1 for latest, -2 for earliest.\n"
        f"Specified: {sorted(f'{t}-{p}' for t, p in given)} "
        f"Assigned: {sorted(f'{t}-{p}' for t, p in tps)}"
    )


def read_range(
    opts: SourceOptions,
    group_id: str,
    topic: str,
    partition: int,
    start: int,
    end: int,
) -> Iterator[pa.RecordBatch]:
    """Messages [start, end) of one partition as Arrow record batches."""
    schema = arrow_schema(opts.include_headers)
    conf: dict[str, Any] = dict(opts.client_config)
    conf.update(
        {
            "bootstrap.servers": opts.bootstrap_servers,
            "group.id": conf.get("group.id", group_id),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
        }
    )
    consumer = Consumer(conf)
    try:
        consumer.assign([KTopicPartition(topic, partition, start)])
        cols: dict[str, list[Any]] = {name: [] for name in schema.names}
        position = start
        last_progress = time.monotonic()
        while position < end:
            msgs = consumer.consume(num_messages=min(ROWS_PER_BATCH, end - position), timeout=0.5)
            if not msgs:
                if time.monotonic() - last_progress > opts.poll_timeout_ms / 1000.0:
                    raise KafkaSourceError(
                        f"Cannot fetch records in [{position}, {end}) of {topic}-{partition} "
                        f"within kafkaConsumer.pollTimeoutMs={opts.poll_timeout_ms}"
                    )
                continue
            last_progress = time.monotonic()
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        eof = m.offset()
                        if eof is not None and eof >= end:
                            position = end
                        elif eof is not None and eof < end:
                            # the partition ends before the planned range does
                            _data_loss(
                                opts,
                                f"{topic}-{partition} ends at offset {eof} but offsets up to "
                                f"{end} were planned",
                            )
                            position = end
                        continue
                    if err.code() in (
                        KafkaError._AUTO_OFFSET_RESET,
                        KafkaError.OFFSET_OUT_OF_RANGE,
                    ):
                        _data_loss(opts, f"Cannot fetch offset {position} of {topic}-{partition}")
                        consumer.assign([KTopicPartition(topic, partition, -2)])
                        continue
                    raise KafkaSourceError(f"Error reading {topic}-{partition}: {err.str()}")
                off = m.offset()
                assert off is not None
                if off >= end:
                    position = end
                    break
                ts_type, ts = m.timestamp()
                cols["key"].append(m.key())
                cols["value"].append(m.value())
                cols["topic"].append(topic)
                cols["partition"].append(partition)
                cols["offset"].append(off)
                cols["timestamp"].append(ts * 1000 if ts_type else None)
                cols["timestampType"].append(_TIMESTAMP_TYPE_IDS.get(ts_type, -1))
                if opts.include_headers:
                    hs: list[tuple[str, bytes | None]] = list(m.headers() or ())  # type: ignore[arg-type]
                    cols["headers"].append([{"key": k, "value": v} for k, v in hs])
                position = off + 1
            if len(cols["offset"]) >= ROWS_PER_BATCH or (position >= end and cols["offset"]):
                yield pa.RecordBatch.from_pydict(cols, schema=schema)
                cols = {name: [] for name in schema.names}
    finally:
        consumer.close()


def _data_loss(opts: SourceOptions, what: str) -> None:
    if opts.fail_on_data_loss:
        raise KafkaSourceError(f"{what}. {DATA_LOSS_HINT}")


def _as_bytes(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    return bytes(v)


def write_batches(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """Produce every row; returns the count.  Raises on the first delivery failure."""
    conf: dict[str, Any] = dict(opts.client_config)
    conf["bootstrap.servers"] = opts.bootstrap_servers
    conf.setdefault("linger.ms", 5)
    producer = Producer(conf)
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None and len(errors) < 10:
            errors.append(f"{msg.topic()}: {err.str()}")

    count = 0
    for batch in batches:
        names = set(batch.schema.names)
        values = batch.column("value").to_pylist()
        keys = batch.column("key").to_pylist() if "key" in names else None
        topics = batch.column("topic").to_pylist() if "topic" in names else None
        parts = batch.column("partition").to_pylist() if "partition" in names else None
        headers = batch.column("headers").to_pylist() if "headers" in names else None
        for i, value in enumerate(values):
            topic = opts.topic or (topics[i] if topics else None)
            if topic is None:
                raise KafkaSourceError(
                    "null topic present in the data. Use the topic option for setting a "
                    "default topic."
                )
            kwargs: dict[str, Any] = {"value": _as_bytes(value), "on_delivery": on_delivery}
            if keys is not None:
                kwargs["key"] = _as_bytes(keys[i])
            if parts is not None and parts[i] is not None:
                kwargs["partition"] = parts[i]
            if headers is not None and headers[i]:
                kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.05)
            count += 1
            if errors:
                break
        producer.poll(0)
        if errors:
            break
    remaining = producer.flush(opts.api_timeout_ms / 1000.0)
    if errors:
        raise KafkaSourceError("Failed to write to Kafka: " + "; ".join(errors))
    if remaining:
        raise KafkaSourceError(
            f"{remaining} messages were not acknowledged by {opts.bootstrap_servers} within "
            f"kafka.default.api.timeout.ms={opts.api_timeout_ms}"
        )
    return count
