"""The broker role: a metadata image built only from committed records, and the
partitions that image assigns to this node."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from keeperless.broker.controller_channel import ControllerChannel
from keeperless.broker.partitions import PartitionManager
from keeperless.metadata.image import TOPIC_RESOURCE, MetadataDelta, MetadataImage
from keeperless.metadata.topic_configs import TOPIC_CONFIG_DEFAULTS
from keeperless.storage.log import LogConfig

__all__ = ["Broker", "BrokerSettings"]

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    node_id: int
    cluster_id: str
    log_dir: Path
    endpoints: tuple[tuple[str, str, int], ...]
    rack: str | None
    log_defaults: LogConfig
    auto_create_topics: bool
    max_message_bytes: int
    offsets_topic_partitions: int
    offsets_topic_replication_factor: int
    static_configs: Mapping[str, str]


def _now_ms() -> int:
    return int(time.time() * 1000)


class Broker:
    def __init__(self, settings: BrokerSettings, controller: ControllerChannel) -> None:
        self.settings = settings
        self.node_id = settings.node_id
        self.controller = controller
        self.image = MetadataImage()
        self.partitions = PartitionManager(
            settings.node_id, settings.log_dir, settings.log_defaults
        )
        self.broker_epoch = -1
        self.fenced = True
        self.on_image: list[Callable[[MetadataImage], None]] = []
        self._produce_settings: dict[str, tuple[int, bool, int]] = {}
        self.metrics: Any = None  # runtime.metrics.Metrics when enabled
        self._image_waiters: list[tuple[Callable[[MetadataImage], bool], asyncio.Future[None]]] = []
        # local partitions whose assignment changed in the last published delta
        self.changed_partitions: list[tuple[str, int]] = []

    # -- metadata publisher -------------------------------------------------------------

    def on_committed(self, records: list[Any], last_offset: int) -> None:
        delta = MetadataDelta(self.image)
        for rec in records:
            delta.replay(rec)
        delta.offset = last_offset
        self._publish(delta)

    def load_snapshot(self, delta: MetadataDelta, new: MetadataImage) -> None:
        """Replace the image by a snapshot's (``delta`` from an empty image, already
        applied as ``new``): a broker that starts or fell behind the log start."""
        old = self.image
        delta.deleted_topics = {
            tid: t for tid, t in old.topics.items() if new.topics.get(tid) is None
        }
        self._publish(delta, new)

    def _publish(self, delta: MetadataDelta, new: MetadataImage | None = None) -> None:
        if new is None:
            new = delta.apply()
        self.image = new
        self._produce_settings.clear()
        now = _now_ms()
        for tid, topic in delta.deleted_topics.items():
            for p in topic.partitions:
                if self.partitions.get(topic.name, p) is not None:
                    log.info(
                        "[node %d] Deleting partition %s-%d (topic %s deleted)",
                        self.node_id,
                        topic.name,
                        p,
                        tid,
                    )
                    self.partitions.remove(topic.name, p)
        changed: list[tuple[str, int]] = []
        configs: dict[str, LogConfig] = {}
        for tid, p in sorted(delta.changed_partitions):
            found = new.topics.get(tid)
            info = found.partitions.get(p) if found is not None else None
            if found is None or info is None:
                continue
            name = found.name
            if self.node_id in info.replicas:
                cfg = configs.get(name)
                if cfg is None:
                    cfg = configs[name] = self.log_config(name)
                self.partitions.ensure(name, p, tid, info, cfg, now)
                changed.append((name, p))
            elif self.partitions.get(name, p) is not None:
                # reassigned away from this broker
                self.partitions.remove(name, p)
                changed.append((name, p))
        for rtype, name in delta.changed_configs:
            changed_topic = new.topic(name) if rtype == TOPIC_RESOURCE else None
            if changed_topic is None:
                continue
            cfg = self.log_config(name)
            for p in changed_topic.partitions:
                local = self.partitions.get(name, p)
                if local is not None:
                    local.log.config = cfg
        self.changed_partitions = changed
        for fn in self.on_image:
            fn(new)
        if self._image_waiters:
            waiting, self._image_waiters = self._image_waiters, []
            for pred, fut in waiting:
                if fut.done():
                    continue
                if pred(new):
                    fut.set_result(None)
                else:
                    self._image_waiters.append((pred, fut))

    async def wait_for(self, predicate: Callable[[MetadataImage], bool], timeout_s: float) -> bool:
        """Wait until the broker's image satisfies ``predicate`` (e.g. shows a topic that
        the controller just created); False on timeout."""
        if predicate(self.image):
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._image_waiters.append((predicate, fut))
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            return False
        return True

    def topic_config(self, name: str) -> dict[str, str]:
        out = dict(TOPIC_CONFIG_DEFAULTS)
        d = self.settings.log_defaults
        out.update(
            {
                "retention.ms": str(d.retention_ms),
                "retention.bytes": str(d.retention_bytes),
                "segment.bytes": str(d.segment_bytes),
                "segment.ms": str(d.segment_ms),
                "index.interval.bytes": str(d.index_interval_bytes),
                "flush.messages": str(d.flush_interval_messages),
                "max.message.bytes": str(self.settings.max_message_bytes),
                "min.insync.replicas": self.settings.static_configs["min.insync.replicas"],
            }
        )
        out.update(self.image.topic_config(name))
        return out

    def log_config(self, name: str) -> LogConfig:
        d = self.settings.log_defaults
        c = self.image.topic_config(name)

        def get(key: str, default: int) -> int:
            return int(c[key]) if key in c else default

        return LogConfig(
            segment_bytes=get("segment.bytes", d.segment_bytes),
            segment_ms=get("segment.ms", d.segment_ms),
            retention_ms=get("retention.ms", d.retention_ms),
            retention_bytes=get("retention.bytes", d.retention_bytes),
            index_interval_bytes=get("index.interval.bytes", d.index_interval_bytes),
            flush_interval_messages=get("flush.messages", d.flush_interval_messages),
        )

    def produce_settings(self, name: str) -> tuple[int, bool, int]:
        """(max.message.bytes, LogAppendTime?, min.insync.replicas) of a topic, cached
        until the next metadata change."""
        cached = self._produce_settings.get(name)
        if cached is None:
            c = self.image.topic_config(name)
            cached = (
                int(c.get("max.message.bytes", self.settings.max_message_bytes)),
                c.get("message.timestamp.type") == "LogAppendTime",
                int(
                    c.get(
                        "min.insync.replicas", self.settings.static_configs["min.insync.replicas"]
                    )
                ),
            )
            self._produce_settings[name] = cached
        return cached

    def enforce_retention(self) -> None:
        now = _now_ms()
        for p in list(self.partitions.partitions.values()):
            p.log.enforce_retention(now)

    def close(self) -> None:
        self.partitions.close()
