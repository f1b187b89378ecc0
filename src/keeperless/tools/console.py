"""`console-producer` and `console-consumer`, as Kafka's scripts, over confluent-kafka."""

from __future__ import annotations

import re
import signal
import sys
import time
from typing import Any, TextIO

from keeperless.tools.client import ToolError
from keeperless.tools.rdkafka import Session

__all__ = ["run_consumer", "run_producer"]

NEVER_ASSIGNED_S = 30.0


def _offset(value: str) -> int:
    """--offset as Kafka's console consumer takes it: earliest, latest or a number."""
    v = value.strip().lower()
    if v == "earliest":
        return -2
    if v == "latest":
        return -1
    if v.isdigit():
        return int(v)
    raise ToolError(
        f"--offset {value!r}: the offset must be earliest, latest or a non-negative number"
    )


def _props(pairs: list[str] | None, flag: str) -> dict[str, str]:
    out = {}
    for p in pairs or ():
        k, sep, v = p.partition("=")
        if not sep or not k:
            raise ToolError(f"{flag} {p!r}: expected key=value")
        out[k] = v
    return out


def run_producer(args: Any, extra: dict[str, str], lines: TextIO) -> int:
    """One record per input line; `--property parse.key=true` splits key and value on
    `key.separator` (tab), `parse.headers=true` reads `k:v,k2:v2` before them."""
    from confluent_kafka import Producer

    props = _props(args.property, "--property")
    parse_key = props.get("parse.key", "false") == "true"
    parse_headers = props.get("parse.headers", "false") == "true"
    key_sep = props.get("key.separator", "\t")
    headers_delim = props.get("headers.delimiter", "\t")
    errors: list[str] = []
    session = Session(
        args.bootstrap_server, {**extra, **_props(args.producer_property, "--producer-property")}
    )
    session.admin()  # fail fast (one line) when no bootstrap server answers
    p = Producer(session.conf())

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err.str())

    for raw in lines:
        line = raw.rstrip("\n")
        headers: list[tuple[str, str | bytes | None]] = []
        if parse_headers:
            hpart, _, line = line.partition(headers_delim)
            for h in filter(None, hpart.split(props.get("headers.separator", ","))):
                hk, _, hv = h.partition(props.get("headers.key.separator", ":"))
                headers.append((hk, hv.encode()))
        key = None
        if parse_key:
            k, sep, v = line.partition(key_sep)
            if not sep:
                raise ToolError(f"No key separator found on line: {line!r}")
            key, line = k.encode(), v
        while True:
            try:
                p.produce(
                    args.topic,
                    value=line.encode(),
                    key=key,
                    headers=headers or None,
                    on_delivery=report,
                )
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    left = p.flush(30)
    if errors or left:
        raise ToolError(
            f"{len(errors) + left} record(s) not delivered: {errors[0] if errors else 'timed out'}"
        )
    return 0


DEFAULT_FORMATTERS = (
    "kafka.tools.DefaultMessageFormatter",
    "org.apache.kafka.tools.consumer.DefaultMessageFormatter",
)
_TRUE = "true"


def check_consumer_args(args: Any) -> None:
    """Kafka's console-consumer option rules, checked before connecting."""
    if (args.topic is None) == (args.include is None):
        raise ToolError("Exactly one of --include/--topic is required.")
    if args.include is not None:
        try:
            re.compile(args.include)
        except re.error as e:
            raise ToolError(
                f"--include {args.include!r} is not a valid regular expression: {e}"
            ) from None
        if args.partition is not None:
            raise ToolError("--partition applies to --topic, not to --include")
    if args.from_beginning and args.offset is not None:
        raise ToolError("Options from-beginning and offset cannot be specified together.")
    if args.offset is not None and args.partition is None:
        raise ToolError("The partition is required when offset is specified.")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise ToolError("--timeout-ms must not be negative")
    if args.formatter is not None and args.formatter not in DEFAULT_FORMATTERS:
        raise ToolError(
            f"--formatter {args.formatter} is not supported: only Kafka's default formatter "
            "is built in; choose what it prints with --property print.key=true, "
            "print.timestamp=true, print.partition=true, print.offset=true, print.headers=true, "
            "print.value=false, key.separator=..., line.separator=..."
        )
    if args.isolation_level not in (None, "read_committed", "read_uncommitted"):
        raise ToolError(
            f"--isolation-level {args.isolation_level!r}: expected read_committed or "
            "read_uncommitted"
        )


def _format(m: Any, props: dict[str, str]) -> str:
    """One record as Kafka's DefaultMessageFormatter prints it (without line.separator)."""
    sep = props.get("key.separator", "\t")
    null = props.get("null.literal", "null")
    parts = []
    if props.get("print.timestamp") == _TRUE:
        kind = {1: "CreateTime", 2: "LogAppendTime"}.get(m.timestamp()[0], "NoTimestamp")
        parts.append(f"{kind}:{m.timestamp()[1]}" if kind != "NoTimestamp" else kind)
    if props.get("print.partition") == _TRUE:
        parts.append(f"Partition:{m.partition()}")
    if props.get("print.offset") == _TRUE:
        parts.append(f"Offset:{m.offset()}")
    if props.get("print.headers") == _TRUE:
        hs: list[Any] = list(m.headers() or [])
        kv = props.get("headers.key.separator", ":")
        parts.append(
            props.get("headers.separator", ",").join(
                f"{k}{kv}{null if v is None else _text(v)}" for k, v in hs
            )
            or "NO_HEADERS"
        )
    if props.get("print.key") == _TRUE:
        k = m.key()
        parts.append(null if k is None else k.decode("utf-8", "replace"))
    if props.get("print.value", _TRUE) == _TRUE:
        v = m.value()
        parts.append(null if v is None else v.decode("utf-8", "replace"))
    return sep.join(parts)


def run_consumer(args: Any, extra: dict[str, str], out: TextIO) -> int:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    check_consumer_args(args)
    props = _props(args.property, "--property")
    line_sep = props.get("line.separator", "\n")
    group = args.group or f"console-consumer-{int(time.time() * 1000)}"
    session = Session(
        args.bootstrap_server, {**extra, **_props(args.consumer_property, "--consumer-property")}
    )
    settings: dict[str, Any] = {
        "group.id": group,
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "enable.auto.commit": bool(args.group),
        "client.id": "console-consumer",
    }
    if args.isolation_level:
        settings["isolation.level"] = args.isolation_level
    conf = session.conf(**settings)
    offset = -2 if args.from_beginning else -1
    if args.offset is not None:
        offset = _offset(args.offset)
    session.admin()  # fail fast (one line) when no bootstrap server answers
    c = Consumer(conf)
    # --timeout-ms counts from when there is something to read from: the assignment
    # (joining the group can take longer than the timeout itself); never assigned, the
    # consumer gives up after NEVER_ASSIGNED_S. With 0 it stops at the first empty poll.
    assigned = [args.partition is not None]
    if args.partition is not None:
        c.assign([TopicPartition(args.topic, args.partition, offset)])
    else:
        wanted = args.topic if args.topic is not None else "^" + args.include.lstrip("^")
        c.subscribe([wanted], on_assign=lambda _c, parts: assigned.__setitem__(0, True))
    seen = 0
    started = time.monotonic()
    timeout_s = None if args.timeout_ms is None else args.timeout_ms / 1000
    last_record = time.monotonic()
    # Ctrl-C and SIGTERM end the loop: the consumer closes (leaving its group) and the
    # count is printed, as Kafka's shutdown hook does - also when started in the
    # background by a shell, which starts it with SIGINT ignored
    stopping: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda signum, _frame: stopping.append(signum))
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        while (args.max_messages is None or seen < args.max_messages) and not stopping:
            m = c.poll(0.2 if timeout_s is None else min(0.2, max(timeout_s, 0.05)))
            now = time.monotonic()
            if m is None:
                if timeout_s is None:
                    continue
                if not assigned[0]:
                    last_record = now
                    if now - started > max(NEVER_ASSIGNED_S, timeout_s):
                        break
                elif now - last_record >= timeout_s:
                    break
                continue
            if m.error():
                raise KafkaException(m.error())
            last_record = now
            print(_format(m, props), end=line_sep, file=out, flush=True)
            seen += 1
    except KafkaException as e:
        raise ToolError(str(e.args[0].str() if e.args else e)) from None
    finally:
        c.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"Processed a total of {seen} messages", file=sys.stderr)
    return 0


def _text(v: Any) -> str:
    if v is None:
        return ""
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
