"""`cluster unregister`, `log-dirs --describe` and `features describe`, as Kafka's tools."""

from __future__ import annotations

import json
from typing import Any, TextIO

from keeperless.metadata.features import release_for_level
from keeperless.tools.client import ToolError, call, parse_servers

__all__ = ["describe_features", "describe_log_dirs", "unregister_broker"]


def unregister_broker(bootstrap: str, broker_id: int, out: TextIO) -> int:
    servers = parse_servers(bootstrap, "--bootstrap-server")
    resp = call(servers, 64, 0, {"broker_id": broker_id}, timeout_s=40)
    if int(resp.error_code) != 0:
        raise ToolError(resp.error_message or resp.error_code.name)
    print(f"Broker {broker_id} is no longer registered.", file=out)
    return 0


def _brokers(servers: list[tuple[str, int]]) -> dict[int, tuple[str, int]]:
    md = call(
        servers,
        3,
        12,
        {
            "topics": [],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    return {b.node_id: (b.host, b.port) for b in md.brokers}


def describe_log_dirs(
    bootstrap: str, broker_list: str | None, topic_list: str | None, out: TextIO
) -> int:
    servers = parse_servers(bootstrap, "--bootstrap-server")
    brokers = _brokers(servers)
    wanted = sorted(brokers) if not broker_list else [int(b) for b in broker_list.split(",")]
    missing = [b for b in wanted if b not in brokers]
    if missing:
        raise ToolError(f"brokers {','.join(map(str, missing))} are not live in the cluster")
    topics = set(topic_list.split(",")) if topic_list else None
    print("Querying brokers for log directories information", file=out)
    result = []
    for b in wanted:
        resp = call([brokers[b]], 35, 4, {"topics": None})
        dirs = []
        for d in resp.results:
            dirs.append(
                {
                    "error": None if int(d.error_code) == 0 else d.error_code.name,
                    "logDir": d.log_dir,
                    "partitions": [
                        {
                            "isFuture": p.is_future_key,
                            "offsetLag": p.offset_lag,
                            "partition": f"{t.name}-{p.partition_index}",
                            "size": p.partition_size,
                        }
                        for t in d.topics
                        if topics is None or t.name in topics
                        for p in t.partitions
                    ],
                }
            )
        result.append({"broker": b, "logDirs": dirs})
    print(f"Received log directory information from brokers {','.join(map(str, wanted))}", file=out)
    print(json.dumps({"brokers": result, "version": 1}, separators=(",", ":")), file=out)
    return 0


def describe_features(servers: list[tuple[str, int]], out: TextIO) -> int:
    resp: Any = call(
        servers, 18, 3, {"client_software_name": "keeperless", "client_software_version": "tool"}
    )
    finalized = {f.name: f.max_version_level for f in resp.finalized_features}
    for f in sorted(resp.supported_features, key=lambda f: f.name):
        level = finalized.get(f.name)

        def name(v: int, feature: str = f.name) -> str:
            return release_for_level(v) if feature == "metadata.version" else str(v)

        print(
            f"Feature: {f.name}\tSupportedMinVersion: {name(f.min_version)}\t"
            f"SupportedMaxVersion: {name(f.max_version)}\tFinalizedVersionLevel: "
            f"{name(level) if level is not None else '-'}\tEpoch: "
            f"{resp.finalized_features_epoch}",
            file=out,
        )
    return 0
