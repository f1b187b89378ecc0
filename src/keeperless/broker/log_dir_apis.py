"""DescribeLogDirs and AlterReplicaLogDirs on a broker with one log directory."""

from __future__ import annotations

import os
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader, response_class

__all__ = ["LogDirApis"]


class LogDirApis:
    broker: Broker

    async def describe_log_dirs(self, header: RequestHeader, req: Any) -> Any:
        wanted = (
            None if req.topics is None else {(t.topic, p) for t in req.topics for p in t.partitions}
        )
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, idx), part in sorted(self.broker.partitions.partitions.items()):
            if wanted is not None and (topic, idx) not in wanted:
                continue
            by_topic.setdefault(topic, []).append(
                {
                    "partition_index": idx,
                    "partition_size": part.log.size_bytes,
                    "offset_lag": 0,
                    "is_future_key": False,
                }
            )
        log_dir = self.broker.settings.log_dir.resolve()
        try:
            st = os.statvfs(log_dir)
            total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        except OSError:
            total = usable = -1
        return build(
            response_class(ApiKey.DESCRIBE_LOG_DIRS, header.api_version),
            {
                "throttle_time": 0,
                "error_code": ErrorCode.none,
                "results": [
                    {
                        "error_code": ErrorCode.none,
                        "log_dir": str(log_dir),
                        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                        "total_bytes": total,
                        "usable_bytes": usable,
                    }
                ],
            },
        )

    async def alter_replica_log_dirs(self, header: RequestHeader, req: Any) -> Any:
        """Move replicas between this broker's log directories. It keeps every partition
        in its one log directory: asking for that one is done at once, another path is
        LOG_DIR_NOT_FOUND, a partition not hosted here REPLICA_NOT_AVAILABLE."""
        here = self.broker.settings.log_dir
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for d in req.dirs:
            same = _same_dir(d.path, here)
            for t in d.topics:
                for idx in t.partitions:
                    if not same:
                        err = ErrorCode.log_dir_not_found
                    elif self.broker.partitions.get(t.name, idx) is None:
                        err = ErrorCode.replica_not_available
                    else:
                        err = ErrorCode.none
                    by_topic.setdefault(t.name, []).append(
                        {"partition_index": idx, "error_code": err}
                    )
        return build(
            response_class(ApiKey.ALTER_REPLICA_LOG_DIRS, header.api_version),
            {
                "throttle_time": 0,
                "results": [{"topic_name": n, "partitions": ps} for n, ps in by_topic.items()],
            },
        )


def _same_dir(path: str, log_dir: os.PathLike[str]) -> bool:
    """Whether an operator's path names this broker's log directory (a string check)."""
    return os.path.normpath(os.path.abspath(path)) == os.path.normpath(os.path.abspath(log_dir))
