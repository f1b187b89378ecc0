"""Kafka's KRaft monitoring metrics under the Prometheus names that Kafka's JMX exporter
conventions give them (the Strimzi and Confluent rules: `kafka_<domain>_<type>_<name>`,
lower case, `-` as `_`), so that Kafka dashboards and alerts find them:

    kafka.controller:type=KafkaController,name=ActiveControllerCount
        -> kafka_controller_kafkacontroller_activecontrollercount
    kafka.server:type=raft-metrics,name=high-watermark
        -> kafka_server_raft_metrics_high_watermark
    kafka.server:type=broker-metadata-metrics,name=last-applied-record-lag-ms
        -> kafka_server_broker_metadata_metrics_last_applied_record_lag_ms

Read from the node's live state when scraped (the histograms of event queue times are
recorded in runtime/metrics.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client.core import GaugeMetricFamily

__all__ = ["KafkaJmxNames", "jmx_name"]


def jmx_name(domain: str, kind: str, name: str) -> str:
    """The exporter's name of a JMX bean attribute."""
    return "_".join(p.lower().replace("-", "_").replace(".", "_") for p in (domain, kind, name))


def _g(domain: str, kind: str, name: str, doc: str, value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(jmx_name(domain, kind, name), doc)
    g.add_metric([], value)
    return g


class KafkaJmxNames:
    def __init__(self, node: Any) -> None:
        self.node = node
        self._last_commit = (0, time.monotonic())  # for the commit rate

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from self._raft()
        if self.node.controller is not None:
            yield from self._controller()
        if self.node.broker is not None:
            yield from self._broker()

    def _raft(self) -> Iterator[GaugeMetricFamily]:
        node = self.node
        core = node.mlog.core
        raft = ("kafka.server", "raft-metrics")
        roles = {"leader": 2, "candidate": 3, "follower": 4, "unattached": 0, "resigned": 6}
        role = core.role.value.lower() if core.is_voter else "observer"
        yield _g(
            *raft, "current-state", "Raft state (0 unattached, 2 leader, ...)", roles.get(role, 5)
        )
        yield _g(*raft, "current-leader", "Id of the known leader, -1 if none", core.leader_id)
        yield _g(*raft, "current-epoch", "Current leader epoch", core.epoch)
        yield _g(*raft, "current-vote", "Voted-for id, -1 if none", core.state.voted_id)
        yield _g(*raft, "high-watermark", "High watermark of the metadata log", core.high_watermark)
        yield _g(*raft, "log-end-offset", "End offset of the metadata log", core.log_end_offset)
        committed = node.mlog.committed_offset
        last, at = self._last_commit
        now = time.monotonic()
        rate = max(committed - last, 0) / max(now - at, 1e-3)
        self._last_commit = (committed, now)
        yield _g(
            *raft,
            "commit-rate",
            "Metadata records committed per second since the last scrape",
            rate,
        )
        sid = node.mlog.raft_log.snapshot_id
        emitter = ("kafka.server", "SnapshotEmitter")
        if sid is not None:
            path = node.mlog.log_dir / f"{sid.end_offset:020d}-{sid.epoch:010d}.checkpoint"
            try:
                st = Path(path).stat()
            except OSError:
                st = None
            if st is not None:
                yield _g(
                    *emitter, "LatestSnapshotGeneratedBytes", "Latest snapshot size", st.st_size
                )
                yield _g(
                    *emitter,
                    "LatestSnapshotGeneratedAgeMs",
                    "Age of the latest snapshot",
                    (time.time() - st.st_mtime) * 1000,
                )
            yield _g(
                "kafka.server",
                "broker-metadata-metrics",
                "snapshot-lag-records",
                "Metadata records appended since the latest snapshot",
                max(core.log_end_offset - sid.end_offset, 0),
            )

    def _controller(self) -> Iterator[GaugeMetricFamily]:
        svc = self.node.controller
        kc = ("kafka.controller", "KafkaController")
        active = svc.is_active
        yield _g(*kc, "ActiveControllerCount", "1 on the active controller", 1 if active else 0)
        yield _g(
            *kc,
            "NewActiveControllersCount",
            "Times this node became active",
            svc.new_active_controllers,
        )
        yield _g(
            *kc,
            "TimedOutBrokerHeartbeatCount",
            "Brokers fenced for missing their session",
            svc.timed_out_heartbeats,
        )
        yield _g(
            *kc,
            "MetadataErrorCount",
            "Errors applying metadata records",
            self.node.mlog.metadata_errors,
        )
        image = svc.controller.image
        committed = svc.controller.committed
        yield _g(*kc, "LastAppliedRecordOffset", "Offset of the last record applied", image.offset)
        yield _g(
            *kc,
            "LastCommittedRecordOffset",
            "Offset of the last committed record",
            committed.offset,
        )
        yield _g(
            *kc,
            "LastAppliedRecordLagMs",
            "How far the applied state is behind the committed log",
            0
            if committed.offset >= self.node.mlog.committed_offset
            else svc.controller.session_timeout_ms,
        )
        # from the committed image, on every controller as Kafka's (a standby's dashboard
        # shows the cluster too)
        brokers = list(image.brokers.values())
        fenced = sum(1 for b in brokers if b.fenced)
        live = {b.broker_id for b in brokers if not b.fenced}
        parts = [p for t in image.topics.values() for p in t.partitions.values()]
        yield _g(*kc, "ActiveBrokerCount", "Unfenced brokers", len(brokers) - fenced)
        yield _g(*kc, "FencedBrokerCount", "Fenced brokers", fenced)
        yield _g(*kc, "GlobalTopicCount", "Topics", len(image.topics))
        yield _g(*kc, "GlobalPartitionCount", "Partitions", len(parts))
        yield _g(
            *kc,
            "OfflinePartitionsCount",
            "Partitions without a live leader",
            sum(1 for p in parts if p.leader not in live),
        )
        yield _g(
            *kc,
            "PreferredReplicaImbalanceCount",
            "Partitions not led by their preferred (first) replica",
            sum(1 for p in parts if p.replicas and p.leader != p.replicas[0]),
        )

    def _broker(self) -> Iterator[GaugeMetricFamily]:
        b = self.node.broker
        md = ("kafka.server", "broker-metadata-metrics")
        image = b.image
        yield _g(
            *md,
            "last-applied-record-offset",
            "Offset of the last metadata record applied",
            image.offset,
        )
        lag = max(self.node.mlog.committed_offset - image.offset, 0)
        yield _g(
            *md,
            "last-applied-record-lag-ms",
            "0 when the broker has applied everything committed, else its fetch timeout",
            0 if lag == 0 else self.node.mlog.core.config.fetch_timeout_ms,
        )
        yield _g(
            *md,
            "metadata-apply-error-count",
            "Errors applying metadata",
            self.node.mlog.metadata_errors,
        )
        yield _g(
            *md,
            "metadata-load-error-count",
            "Errors loading snapshots",
            self.node.mlog.snapshot_errors,
        )
        yield _g(
            "kafka.log",
            "LogManager",
            "OfflineLogDirectoryCount",
            "Log directories offline after an I/O error",
            len(b.partitions.offline_dirs),
        )
        rm = ("kafka.server", "ReplicaManager")
        mine = [p for p in b.partitions.partitions.values() if p.info is not None]
        led = [p for p in mine if p.info.leader == b.node_id]
        yield _g(*rm, "PartitionCount", "Hosted partitions", len(mine))
        yield _g(*rm, "LeaderCount", "Partitions led here", len(led))
        yield _g(
            *rm,
            "UnderReplicatedPartitions",
            "Led partitions whose ISR is smaller than their replica set",
            sum(1 for p in led if len(p.info.isr) < len(p.info.replicas)),
        )
        yield _g(
            *rm,
            "UnderMinIsrPartitionCount",
            "Led partitions with fewer in-sync replicas than min.insync.replicas",
            sum(1 for p in led if len(p.info.isr) < b.produce_settings(p.topic)[2]),
        )
