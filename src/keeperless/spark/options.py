"""Spark Kafka source/sink options, parsed and validated without Spark or a cluster.

The option names, defaults and refusals follow Spark's built-in Kafka integration
(structured-streaming-kafka-integration), so a job written for ``format("kafka")``
needs only its format name changed.  Offsets are the Kafka source's JSON shape:
``{"topic": {"0": 23, "1": -1}}`` with -2 meaning earliest and -1 latest.
"""

from __future__ import annotations

import itertools
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]

# Java client keys Spark itself refuses: the source and sink manage them.
_REFUSED_SOURCE_KEYS = {
    "auto.offset.reset": "Set the source option 'startingOffsets' instead.",
    "key.deserializer": "Keys are always deserialized as byte arrays.",
    "value.deserializer": "Values are always deserialized as byte arrays.",
    "enable.auto.commit": "The source does not commit offsets to Kafka; "
    "Spark's checkpoint keeps them.",
    "interceptor.classes": "Interceptors are not supported.",
}
_REFUSED_SINK_KEYS = {
    "key.serializer": "Keys are always serialized as byte arrays or strings.",
    "value.serializer": "Values are always serialized as byte arrays or strings.",
    "interceptor.classes": "Interceptors are not supported.",
}
# Java client keys with no librdkafka equivalent; accepted and not passed on.
_JAVA_ONLY_KAFKA_KEYS = {
    "default.api.timeout.ms",
    "request.timeout.ms.config",
    "max.poll.records",
    "max.poll.interval.ms.config",
}


class OptionError(ValueError):
    """A source or sink option is missing, malformed or not allowed."""


@dataclass(frozen=True)
class Subscription:
    kind: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str = ""
    partitions: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.partitions)

    def describe(self) -> str:
        if self.kind == "subscribe":
            return "subscribe=" + ",".join(self.topics)
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern}"
        return "assign=" + format_offsets({tp: 0 for tp in self.partitions}, keys_only=True)


@dataclass(frozen=True)
class OffsetSpec:
    """``earliest``, ``latest``, per-partition offsets, or per-partition timestamps."""

    kind: Literal["earliest", "latest", "offsets", "timestamps", "timestamp"]
    offsets: Offsets = field(default_factory=dict)
    timestamp: int = 0


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    max_records_per_partition: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    fail_on_data_loss: bool
    include_headers: bool
    client_config: dict[str, str]
    poll_timeout_ms: int
    api_timeout_ms: int


@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None
    client_config: dict[str, str]
    api_timeout_ms: int


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    # Spark's options are case-insensitive; kafka.* keys keep their case after the prefix.
    return {k.lower(): v for k, v in options.items()}


def _bool(opts: dict[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise OptionError(f"Option '{key}' must be 'true' or 'false', got '{raw}'")


def _positive_int(opts: dict[str, str], key: str) -> int | None:
    raw = opts.get(key.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"Option '{key}' must be a positive integer, got '{raw}'") from None
    if value <= 0:
        raise OptionError(f"Option '{key}' must be a positive integer, got '{raw}'")
    return value


_TIME_UNITS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
               "d": 86_400_000}  # fmt: skip


def _duration_ms(opts: dict[str, str], key: str, default_ms: int) -> int:
    """Spark's time strings (maxTriggerDelay): "15m", "30s", "500ms", a bare number in ms."""
    raw = opts.get(key.lower())
    if raw is None:
        return default_ms
    text = raw.strip().lower()
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(number) :] or "ms"
    try:
        value = float(number)
    except ValueError:
        value = -1
    if unit not in _TIME_UNITS or value < 0:
        raise OptionError(
            f"Option '{key}' must be a duration such as 15m, 30s or 500ms, got '{raw}'"
        )
    return int(value * _TIME_UNITS[unit])


def client_config(options: Mapping[str, str], *, for_sink: bool) -> tuple[dict[str, str], int]:
    """The ``kafka.*`` options as librdkafka configuration, and the API timeout (ms)."""
    config: dict[str, str] = {}
    api_timeout_ms = 60_000
    for key, value in options.items():
        if not key.lower().startswith("kafka."):
            continue
        name = key[len("kafka.") :]
        if name == "bootstrap.servers":
            continue
        if name == "default.api.timeout.ms":
            try:
                api_timeout_ms = int(value)
            except ValueError:
                raise OptionError(
                    f"Option 'kafka.default.api.timeout.ms' must be an integer, got '{value}'"
                ) from None
            continue
        if name in _JAVA_ONLY_KAFKA_KEYS:
            continue
        refused = _REFUSED_SINK_KEYS if for_sink else _REFUSED_SOURCE_KEYS
        if name in refused:
            raise OptionError(f"Kafka option '{name}' is not supported. {refused[name]}")
        config[name] = value
    return config, api_timeout_ms


def bootstrap(options: Mapping[str, str]) -> str:
    for key, value in options.items():
        if key.lower() == "kafka.bootstrap.servers":
            if not value.strip():
                break
            return value
    raise OptionError(
        "Option 'kafka.bootstrap.servers' must be specified for configuring the Kafka consumer"
    )


def parse_subscription(opts: dict[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(given) != 1:
        named = ", ".join(given) if given else "none"
        raise OptionError(
            "Exactly one of the options 'subscribe', 'subscribePattern' or 'assign' "
            f"must be specified (given: {named})"
        )
    key = given[0]
    raw = opts[key]
    if key == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError(f"No topics to subscribe to in subscribe='{raw}'")
        return Subscription("subscribe", topics=topics)
    if key == "subscribepattern":
        if not raw.strip():
            raise OptionError("Pattern to subscribe is empty (subscribePattern='')")
        try:
            re.compile(raw)
        except re.error as e:
            raise OptionError(f"Invalid subscribePattern '{raw}': {e}") from None
        return Subscription("subscribePattern", pattern=raw)
    try:
        parsed = json.loads(raw)
        if not isinstance(parsed, dict):
            raise ValueError
        parts = tuple(
            (str(topic), int(p))
            for topic, ps in parsed.items()
            for p in ps
            if not isinstance(p, bool)
        )
    except (ValueError, TypeError):
        raise OptionError(
            f'Expected e.g. {{"topicA":[0,1],"topicB":[0,1]}} for \'assign\', got {raw}'
        ) from None
    if not parts:
        raise OptionError(f"No topic partitions to assign in assign={raw}")
    return Subscription("assign", partitions=parts)


def parse_offsets_json(raw: str, key: str) -> Offsets:
    try:
        parsed = json.loads(raw)
        if not isinstance(parsed, dict):
            raise ValueError
        out: Offsets = {}
        for topic, parts in parsed.items():
            if not isinstance(parts, dict):
                raise ValueError
            for p, off in parts.items():
                if isinstance(off, bool) or not isinstance(off, int):
                    raise ValueError
                out[(str(topic), int(p))] = off
    except (ValueError, TypeError):
        raise OptionError(
            f'Expected e.g. {{"topicA":{{"0":23,"1":-1}},"topicB":{{"0":-2}}}} '
            f"for '{key}', got {raw}"
        ) from None
    return out


def format_offsets(offsets: Mapping[TopicPartition, int], keys_only: bool = False) -> str:
    by_topic: dict[str, dict[str, int] | list[int]] = {}
    for (topic, p), off in sorted(offsets.items()):
        if keys_only:
            lst = by_topic.setdefault(topic, [])
            assert isinstance(lst, list)
            lst.append(p)
        else:
            d = by_topic.setdefault(topic, {})
            assert isinstance(d, dict)
            d[str(p)] = off
    return json.dumps(by_topic, separators=(",", ":"))


def to_checkpoint(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Offsets as Spark's checkpoint keeps them (the Kafka source's JSON shape)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, p), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(p)] = off
    return out


def from_checkpoint(raw: Mapping[str, Mapping[str, int]]) -> Offsets:
    return {(topic, int(p)): int(off) for topic, parts in raw.items() for p, off in parts.items()}


def _offset_spec(
    opts: dict[str, str], key: str, default: Literal["earliest", "latest"], *, streaming: bool
) -> OffsetSpec:
    raw = opts.get(key.lower())
    if raw is None:
        return OffsetSpec(default)
    word = raw.strip().lower()
    if word in ("earliest", "latest"):
        spec = OffsetSpec("earliest" if word == "earliest" else "latest")
    else:
        spec = OffsetSpec("offsets", offsets=parse_offsets_json(raw, key))
    if not streaming:
        if key == "startingOffsets" and (spec.kind == "latest" or LATEST in spec.offsets.values()):
            raise OptionError(
                f"Starting offset for batch queries can't be latest: startingOffsets={raw}"
            )
        if key == "endingOffsets" and (
            spec.kind == "earliest" or EARLIEST in spec.offsets.values()
        ):
            raise OptionError(
                f"Ending offset for batch queries can't be earliest: endingOffsets={raw}"
            )
    for tp, off in spec.offsets.items():
        if off < EARLIEST:
            raise OptionError(f"Invalid offset {off} for {tp[0]}-{tp[1]} in {key}={raw}")
    return spec


def _timestamp_spec(opts: dict[str, str], prefix: str) -> OffsetSpec | None:
    by_ts = opts.get(f"{prefix}offsetsbytimestamp")
    single = opts.get(f"{prefix}timestamp")
    if single is not None:
        try:
            return OffsetSpec("timestamp", timestamp=int(single))
        except ValueError:
            raise OptionError(
                f"Option '{prefix}Timestamp' must be a timestamp in ms, got '{single}'"
            ) from None
    if by_ts is not None:
        key = "startingOffsetsByTimestamp" if prefix == "starting" else "endingOffsetsByTimestamp"
        return OffsetSpec("timestamps", offsets=parse_offsets_json(by_ts, key))
    return None


def parse_source(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    opts = _lower(options)
    servers = bootstrap(options)
    subscription = parse_subscription(opts)
    if "endingoffsets" in opts and streaming:
        raise OptionError("Option 'endingOffsets' is not supported for streaming queries")
    starting = _timestamp_spec(opts, "starting") or _offset_spec(
        opts, "startingOffsets", "latest" if streaming else "earliest", streaming=streaming
    )
    ending = (_timestamp_spec(opts, "ending") if not streaming else None) or _offset_spec(
        opts, "endingOffsets", "latest", streaming=streaming
    )
    config, api_timeout_ms = client_config(options, for_sink=False)
    poll = _positive_int(opts, "kafkaConsumer.pollTimeoutMs")
    max_per_trigger = _positive_int(opts, "maxOffsetsPerTrigger")
    min_per_trigger = _positive_int(opts, "minOffsetsPerTrigger")
    if not streaming:  # Spark ignores the trigger limits for batch queries
        max_per_trigger = min_per_trigger = None
    if min_per_trigger and max_per_trigger and min_per_trigger > max_per_trigger:
        raise OptionError(
            f"The value of minOffsetPerTrigger({min_per_trigger}) is higher than the "
            f"maxOffsetsPerTrigger({max_per_trigger})."
        )
    return SourceOptions(
        bootstrap_servers=servers,
        subscription=subscription,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=max_per_trigger,
        min_partitions=_positive_int(opts, "minPartitions"),
        max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition"),
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=_duration_ms(opts, "maxTriggerDelay", 15 * 60_000),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        client_config=config,
        poll_timeout_ms=poll if poll is not None else 120_000,
        api_timeout_ms=api_timeout_ms,
    )


def parse_sink(options: Mapping[str, str]) -> SinkOptions:
    opts = _lower(options)
    servers = bootstrap(options)
    config, api_timeout_ms = client_config(options, for_sink=True)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise OptionError("Option 'topic' is empty")
    return SinkOptions(servers, topic, config, api_timeout_ms)


def consumer_group(options: Mapping[str, str]) -> str:
    opts = _lower(options)
    prefix = opts.get("groupidprefix", "spark-kafka-source")
    return f"{prefix}-{uuid.uuid4()}"


def rate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], limit: int
) -> Offsets:
    """Spread ``limit`` offsets over partitions in proportion to their backlog (as Spark does)."""
    sizes = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(sizes.values())
    if total <= limit:
        return dict(latest)
    out: Offsets = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        size = sizes[tp]
        share = limit * (size / total)
        step = int(-(-share // 1)) if share < 1 else int(share)
        out[tp] = min(end, begin + step)
    return out


def split_ranges(
    ranges: list[tuple[TopicPartition, int, int]],
    min_partitions: int | None,
    max_records: int | None,
) -> list[tuple[TopicPartition, int, int]]:
    """Spark's KafkaOffsetRangeCalculator: no range above ``maxRecordsPerPartition``
    records, then at least ``minPartitions`` ranges, the largest split the most (a
    range's share of the parts is its share of the records)."""

    def divide(
        tp: TopicPartition, start: int, end: int, parts: int
    ) -> list[tuple[TopicPartition, int, int]]:
        size = end - start
        cuts = [start + size * i // parts for i in range(parts)] + [end]
        return [(tp, a, b) for a, b in itertools.pairwise(cuts) if b > a]

    out = [r for r in ranges if r[2] > r[1]]
    if max_records is not None:
        out = [piece for tp, a, b in out
               for piece in divide(tp, a, b, -(-(b - a) // max_records))]  # fmt: skip
    if min_partitions is not None and min_partitions > len(out):
        total = sum(b - a for _, a, b in out)
        out = [piece for tp, a, b in out
               for piece in divide(tp, a, b, max(round((b - a) / total * min_partitions), 1))]  # fmt: skip  # noqa: E501
    return out
