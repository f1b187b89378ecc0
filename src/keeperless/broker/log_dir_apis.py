"""DescribeLogDirs and AlterReplicaLogDirs: a broker's log directories (KIP-113, with
KIP-858's several directories), what each holds, and moving a replica between them."""

from __future__ import annotations

import os
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.broker.partition_manager import LogDir
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader, response_class

__all__ = ["LogDirApis"]


class LogDirApis:
    broker: Broker

    async def describe_log_dirs(self, header: RequestHeader, req: Any) -> Any:
        """Every log directory: its partitions (and the future replicas being moved into
        it, ``is_future_key``) with their sizes; an offline one with KAFKA_STORAGE_ERROR."""
        wanted = (
            None if req.topics is None else {(t.topic, p) for t in req.topics for p in t.partitions}
        )
        pm = self.broker.partitions
        moves = self.broker.log_dir_moves.moves
        results = []
        for ld in pm.dirs:
            by_topic: dict[str, list[dict[str, Any]]] = {}
            if ld.online:
                for key, part in sorted(pm.partitions.items()):
                    if pm.dir_of.get(key) is not ld or (wanted is not None and key not in wanted):
                        continue
                    by_topic.setdefault(key[0], []).append(
                        {
                            "partition_index": key[1],
                            "partition_size": part.log.size_bytes,
                            "offset_lag": 0,
                            "is_future_key": False,
                        }
                    )
                for key, move in sorted(moves.items()):
                    if move.dest is not ld or move.future is None:
                        continue
                    if wanted is not None and key not in wanted:
                        continue
                    by_topic.setdefault(key[0], []).append(
                        {
                            "partition_index": key[1],
                            "partition_size": move.future.log.size_bytes,
                            "offset_lag": move.lag,
                            "is_future_key": True,
                        }
                    )
            total, usable = _space(ld) if ld.online else (-1, -1)
            results.append(
                {
                    "error_code": ErrorCode.none if ld.online else ErrorCode.kafka_storage_error,
                    "log_dir": str(ld.path.resolve()),
                    "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                    "total_bytes": total,
                    "usable_bytes": usable,
                }
            )
        return build(
            response_class(ApiKey.DESCRIBE_LOG_DIRS, header.api_version),
            {"throttle_time": 0, "error_code": ErrorCode.none, "results": results},
        )

    async def alter_replica_log_dirs(self, header: RequestHeader, req: Any) -> Any:
        """Move replicas between this broker's log directories: a path that is not one
        of them is LOG_DIR_NOT_FOUND, an offline one KAFKA_STORAGE_ERROR, a partition not
        hosted here (yet) REPLICA_NOT_AVAILABLE - it is created in that directory when
        it arrives - as Kafka answers."""
        pm = self.broker.partitions
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for d in req.dirs:
            dest = _dir_named(pm.dirs, d.path)
            for t in d.topics:
                for idx in t.partitions:
                    if dest is None:
                        err = ErrorCode.log_dir_not_found
                    else:
                        err = self.broker.log_dir_moves.request(t.name, idx, dest)
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


def _space(ld: LogDir) -> tuple[int, int]:
    try:
        st = os.statvfs(ld.path)
    except OSError:
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def _dir_named(dirs: list[LogDir], path: str) -> LogDir | None:
    """The log directory an operator's path names (compared as absolute paths)."""
    want = os.path.normpath(os.path.abspath(path))
    for ld in dirs:
        if want in (os.path.normpath(os.path.abspath(ld.path)), str(ld.path.resolve())):
            return ld
    return None
