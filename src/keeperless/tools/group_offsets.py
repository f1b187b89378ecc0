"""The offset work of `consumer-groups`: which partitions --reset-offsets covers, the new
offset each reset option names, and --delete-offsets over the raw OffsetDelete API
(confluent-kafka has no call for it)."""

from __future__ import annotations

import datetime
import re
import time
from typing import Any

from keeperless.protocol.apis import ApiKey
from keeperless.tools.client import ToolError, call, parse_servers

__all__ = [
    "SPEC_FLAGS",
    "check_reset_args",
    "delete_group_offsets",
    "parse_duration",
    "parse_topic_scopes",
    "reset_spec",
]

SPEC_FLAGS = (
    "to_earliest",
    "to_latest",
    "to_current",
    "to_offset",
    "shift_by",
    "to_datetime",
    "by_duration",
)
_DURATION = re.compile(
    r"^(-)?P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE
)
_RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR
_MESSAGES = {
    "non_empty_group": "The group is not empty.",
    "group_id_not_found": "The group id does not exist.",
    "group_subscribed_to_topic": "The consumer group is actively subscribed to the topic.",
    "unknown_topic_or_partition": "This server does not host this topic-partition.",
    "invalid_group_id": "The configured groupId is invalid.",
}


def _given(args: Any, flag: str) -> bool:
    # (not ``in (None, False)``: 0 == False, and --to-offset 0 / --shift-by 0 are given)
    value = getattr(args, flag)
    return value is not None and value is not False


def check_reset_args(args: Any) -> None:
    if args.execute and args.dry_run:
        raise ToolError("Option --reset-offsets only accepts one of --execute and --dry-run")
    specs = [f for f in SPEC_FLAGS if _given(args, f)]
    names = ", ".join("--" + f.replace("_", "-") for f in SPEC_FLAGS)
    if len(specs) != 1:
        raise ToolError(f"Option --reset-offsets takes exactly one of these options: {names}")
    if bool(args.topic) == bool(args.all_topics):
        raise ToolError("Option --reset-offsets takes one of these options: --all-topics, --topic")
    if args.to_datetime is not None:
        parse_datetime(args.to_datetime)
    if args.by_duration is not None:
        parse_duration(args.by_duration)


def parse_topic_scopes(values: list[str]) -> dict[str, list[int] | None]:
    """--topic T (every partition: None) or --topic T:0,1,2."""
    out: dict[str, list[int] | None] = {}
    for value in values:
        topic, sep, parts = value.partition(":")
        if not topic:
            raise ToolError(f"--topic {value!r}: expected TOPIC or TOPIC:PARTITION[,PARTITION...]")
        if not sep:
            out[topic] = None
            continue
        try:
            nums = sorted({int(p) for p in parts.split(",") if p.strip()})
        except ValueError:
            raise ToolError(
                f"--topic {value!r}: partitions must be numbers, e.g. {topic}:0,1"
            ) from None
        if not nums:
            raise ToolError(f"--topic {value!r}: no partition after ':'")
        if topic in out and out[topic] is None:
            continue  # already every partition
        out[topic] = sorted({*(out.get(topic) or []), *nums})
    return out


def parse_datetime(value: str) -> int:
    """--to-datetime 'YYYY-MM-DDTHH:mm:SS.sss' (local time) or with a zone (Z, +hh:mm), as
    milliseconds since the epoch."""
    try:
        dt = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise ToolError(
            f"--to-datetime {value!r}: expected YYYY-MM-DDTHH:mm:SS.sss, optionally with a "
            "time zone such as Z or +01:00"
        ) from None
    return int(dt.timestamp() * 1000)


def parse_duration(value: str) -> int:
    """--by-duration PnDTnHnMnS (ISO-8601, as Java's Duration) in milliseconds."""
    m = _DURATION.match(value.strip())
    if not m or not any(m.group(i) for i in range(2, 6)):
        raise ToolError(f"--by-duration {value!r}: expected an ISO-8601 duration as PnDTnHnMnS")
    days, hours, minutes = (int(m.group(i) or 0) for i in (2, 3, 4))
    seconds = float(m.group(5) or 0)
    ms = int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)
    return -ms if m.group(1) else ms


def reset_spec(tool: Any, gid: str) -> dict[tuple[str, int], int]:
    """The new offset of every partition --reset-offsets covers for group ``gid``."""
    from confluent_kafka.admin import OffsetSpec as _OffsetSpec  # type: ignore[attr-defined]

    OffsetSpec: Any = _OffsetSpec

    args = tool.args
    committed: dict[tuple[str, int], int] = tool.committed(gid)
    if args.all_topics:
        tps = sorted(committed)
    else:
        scopes = parse_topic_scopes(args.topic)
        whole = [t for t, parts in scopes.items() if parts is None]
        known = tool.partitions_of(whole) if whole else {}
        tps = []
        for t, parts in scopes.items():
            for p in parts if parts is not None else known[t]:
                tps.append((t, p))
    if not tps:
        return {}
    earliest = tool.log_offsets(tps, OffsetSpec.earliest())
    latest = tool.log_offsets(tps, OffsetSpec.latest())
    missing = [f"{t}-{p}" for t, p in tps if (t, p) not in earliest or (t, p) not in latest]
    if missing:
        raise ToolError(f"could not get the log offsets of {', '.join(missing)}")

    def clamp(tp: tuple[str, int], offset: int) -> int:
        return int(max(earliest[tp], min(offset, latest[tp])))

    if args.to_earliest:
        return {tp: earliest[tp] for tp in tps}
    if args.to_latest:
        return {tp: latest[tp] for tp in tps}
    if args.to_current:
        return {tp: committed.get(tp, latest[tp]) for tp in tps}
    if args.to_offset is not None:
        return {tp: clamp(tp, int(args.to_offset)) for tp in tps}
    if args.shift_by is not None:
        lacking = [f"{t}-{p}" for t, p in tps if (t, p) not in committed]
        if lacking:
            raise ToolError(
                f"--shift-by: group '{gid}' has no committed offset for {', '.join(lacking)}"
            )
        return {tp: clamp(tp, committed[tp] + args.shift_by) for tp in tps}
    if args.to_datetime is not None:
        ts = parse_datetime(args.to_datetime)
    else:
        ts = int(time.time() * 1000) - parse_duration(args.by_duration)
    found = tool.log_offsets(tps, OffsetSpec.for_timestamp(ts))
    # no record at or after the time: the end of the log, as Kafka's tool
    return {tp: found[tp] if found.get(tp, -1) >= 0 else latest[tp] for tp in tps}


def _message(code: Any) -> str:
    name = getattr(code, "name", str(code))
    return _MESSAGES.get(name, name.upper())


def delete_group_offsets(
    bootstrap: str, gid: str, wanted: dict[str, list[int]], timeout_s: float = 30.0
) -> tuple[str | None, dict[tuple[str, int], str | None]]:
    """OffsetDelete at the group's coordinator: (the top-level error or None, the error of
    each partition or None)."""
    servers = parse_servers(bootstrap, "--bootstrap-server")
    deadline = time.monotonic() + timeout_s
    body = {
        "group_id": gid,
        "topics": [
            {"name": t, "partitions": [{"partition_index": p} for p in parts]}
            for t, parts in sorted(wanted.items())
        ],
    }
    while True:
        fc = call(servers, ApiKey.FIND_COORDINATOR, 3, {"key": gid, "key_type": 0})
        code = int(fc.error_code)
        if code == 0:
            resp = call([(fc.host, fc.port)], ApiKey.OFFSET_DELETE, 0, body)
            code = int(resp.error_code)
            if code not in _RETRIABLE:
                break
        elif code not in _RETRIABLE:
            raise ToolError(
                f"could not find the coordinator of group '{gid}': {_message(fc.error_code)}"
            )
        if time.monotonic() > deadline:
            raise ToolError(f"the coordinator of group '{gid}' did not answer in time")
        time.sleep(0.2)
    results: dict[tuple[str, int], str | None] = {}
    for t in resp.topics:
        for p in t.partitions:
            results[(t.name, p.partition_index)] = (
                None if int(p.error_code) == 0 else _message(p.error_code)
            )
    if code == 0:
        return None, results
    name = getattr(resp.error_code, "name", "")
    if name in ("group_subscribed_to_topic", "unknown_topic_or_partition"):
        return "Encountered some partition-level error, see the follow-up details.", results
    return _message(resp.error_code), results
