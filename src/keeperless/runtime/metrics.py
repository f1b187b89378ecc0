"""Prometheus metrics, opt-in with `metrics.http.listener=HOST:PORT`: Kafka's KRaft,
controller and broker metric names in Prometheus form (`kafka_raft_high_watermark`,
`kafka_controller_active_controller_count`, ...). Gauges are read from live state when
scraped; only counters and latencies are recorded as things happen."""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["Metrics"]

log = logging.getLogger(__name__)

LAG_PROBE_S = 0.01  # the event-loop lag probe's timer
_LATENCY_BUCKETS_MS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


class _LiveCollector(Collector):
    def __init__(self, read: Callable[[], Iterator[Metric]]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        try:
            yield from self.read()
        except Exception:  # a scrape must never break the node
            log.exception("metrics collection failed")


def _gauge(name: str, doc: str, value: float, **labels: str) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc, labels=list(labels))
    g.add_metric(list(labels.values()), value)
    return g


class _Both:
    """One observation, two names (ours and the JMX exporter's)."""

    def __init__(self, *histograms: Histogram) -> None:
        self.histograms = histograms

    def observe(self, value: float) -> None:
        for h in self.histograms:
            h.observe(value)


class Metrics:
    """All of a node's metrics, in one registry served over HTTP."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self.registry = CollectorRegistry()
        r = self.registry
        self.commit_latency = Histogram(
            "kafka_raft_commit_latency_ms",
            "Time from append to commit of a metadata batch",
            registry=r,
            buckets=_LATENCY_BUCKETS_MS,
        )
        self.election_latency = Histogram(
            "kafka_raft_election_latency_ms",
            "Time from starting an election to leading",
            registry=r,
            buckets=_LATENCY_BUCKETS_MS,
        )
        self.append_records = Counter(
            "kafka_raft_append_records", "Records appended by the leader", registry=r
        )
        self.fetch_records = Counter(
            "kafka_raft_fetch_records", "Records fetched from the leader", registry=r
        )
        # a broker-only node has no controller: no always-zero controller histograms
        ctl = r if getattr(node, "controller", None) is not None else None
        self.event_queue_time = _Both(
            Histogram(
                "kafka_controller_event_queue_time_ms",
                "Time a controller operation waited",
                registry=ctl,
                buckets=_LATENCY_BUCKETS_MS,
            ),
            Histogram(
                "kafka_controller_controllereventmanager_eventqueuetimems",
                "Time a controller operation waited for its turn (Kafka's EventQueueTimeMs)",
                registry=ctl,
                buckets=_LATENCY_BUCKETS_MS,
            ),
        )
        self.event_processing_time = Histogram(
            "kafka_controller_controllereventmanager_eventqueueprocessingtimems",
            "Time a controller operation took to run (Kafka's EventQueueProcessingTimeMs)",
            buckets=_LATENCY_BUCKETS_MS,
            registry=ctl,
        )
        self.requests = Counter(
            "kafka_network_requests", "Requests handled", ["request"], registry=r
        )
        self.request_errors = Counter(
            "kafka_network_request_errors",
            "Requests that failed or closed the connection",
            ["request"],
            registry=r,
        )
        self.request_latency = Histogram(
            "kafka_network_request_latency_ms",
            "Request handling time",
            ["request"],
            registry=r,
            buckets=_LATENCY_BUCKETS_MS,
        )
        self.bytes_in = Counter(
            "kafka_server_brokertopicmetrics_bytes_in", "Record bytes produced", registry=r
        )
        self.bytes_out = Counter(
            "kafka_server_brokertopicmetrics_bytes_out", "Record bytes fetched", registry=r
        )
        self.loop_lag = Histogram(
            "keeperless_event_loop_lag_ms",
            "How late a 10 ms timer fires on the node's event loop (a stalled loop misses "
            "heartbeats)",
            registry=r,
            buckets=(0.5, 1, 2, 3, 5, 7.5, 10, 12.5, 15, 20, 30, 50, 100, 250, 1000),
        )
        self.gc_pause = Histogram(
            "keeperless_gc_pause_ms",
            "How long each garbage collection held the process, by generation",
            ["generation"],
            registry=r,
            buckets=(1, 5, 10, 20, 50, 100, 250, 500, 1000, 2000, 5000, 10000),
        )
        # per topic, and Kafka's replica manager meters (read at scrape time)
        self.topics_in: dict[str, list[int]] = {}  # topic -> [messages, bytes]
        self.topics_out: dict[str, int] = {}
        self.isr_shrinks = 0
        self.isr_expands = 0
        r.register(_LiveCollector(self._live))
        r.register(_LiveCollector(self._meters))
        from keeperless.runtime.kafka_metrics import KafkaJmxNames

        r.register(_LiveCollector(KafkaJmxNames(node).collect))

    # -- Kafka's BrokerTopicMetrics and ReplicaManager meters -------------------------

    def produced(self, topic: str, messages: int, nbytes: int) -> None:
        c = self.topics_in.setdefault(topic, [0, 0])
        c[0] += messages
        c[1] += nbytes

    def fetched(self, topics: list[tuple[Any, list[Any]]], image: Any) -> None:
        """The record bytes of a fetch response, per topic (named by id from v13)."""
        for key, parts in topics:
            if isinstance(key, str):
                name = key
            else:
                t = image.topics.get(key)
                if t is None:
                    continue
                name = t.name
            n = 0
            for fp in parts:
                rec = fp.records
                n += 0 if rec is None else len(rec) if isinstance(rec, bytes) else rec.length
            if n:
                self.topics_out[name] = self.topics_out.get(name, 0) + n

    def isr_changed(self, delta: int) -> None:
        if delta < 0:
            self.isr_shrinks += 1
        elif delta > 0:
            self.isr_expands += 1

    def _meters(self) -> Iterator[Metric]:
        """Kafka's meters as the JMX exporter's rules name their counts (Strimzi's:
        BrokerTopicMetrics MessagesInPerSec -> ..._messagesin_total, all topics without a
        label and each topic with one; ReplicaManager IsrShrinksPerSec ->
        kafka_server_replicamanager_isrshrinks_total)."""
        families = {
            "messagesin": ("Messages appended", {t: c[0] for t, c in self.topics_in.items()}),
            "bytesin": ("Record bytes appended", {t: c[1] for t, c in self.topics_in.items()}),
            "bytesout": ("Record bytes sent in fetch responses", dict(self.topics_out)),
        }
        for name, (doc, by_topic) in families.items():
            m = Metric(f"kafka_server_brokertopicmetrics_{name}", doc, "counter")
            m.add_sample(m.name + "_total", {}, float(sum(by_topic.values())))
            for topic, v in sorted(by_topic.items()):
                m.add_sample(m.name + "_total", {"topic": topic}, float(v))
            yield m
        for name, v in (("isrshrinks", self.isr_shrinks), ("isrexpands", self.isr_expands)):
            m = Metric(f"kafka_server_replicamanager_{name}", f"ISR {name[3:]}", "counter")
            m.add_sample(m.name + "_total", {}, float(v))
            yield m

    async def watch_loop_lag(self) -> None:
        """Sample the event loop's lag every 10 ms (100 samples a second: fine enough to
        see a 10 ms stall, cheap enough to leave on)."""
        import asyncio

        loop = asyncio.get_running_loop()
        while True:
            t0 = loop.time()
            await asyncio.sleep(LAG_PROBE_S)
            self.loop_lag.observe(max(loop.time() - t0 - LAG_PROBE_S, 0.0) * 1000)

    def serve(self, host: str, port: int) -> None:
        start_http_server(port, host, registry=self.registry)
        log.info(
            "[node %d] Serving Prometheus metrics on http://%s:%d/metrics",
            self.node.node_id,
            host,
            port,
        )

    # -- gauges read at scrape time -----------------------------------------------------

    def _live(self) -> Iterator[Metric]:
        node = self.node
        core = node.mlog.core
        state = GaugeMetricFamily(
            "kafka_raft_current_state", "1 for the node's current Raft state", labels=["state"]
        )
        role = core.role.value.lower() if core.is_voter else "observer"
        for name in (
            "unattached",
            "prospective",
            "candidate",
            "leader",
            "follower",
            "resigned",
            "observer",
        ):
            state.add_metric([name], 1.0 if name == role else 0.0)
        yield state
        yield _gauge(
            "kafka_raft_current_leader", "Id of the known leader, -1 if none", core.leader_id
        )
        frozen = gc.get_freeze_count()
        what = "Objects kept out of the garbage collector's full scans (gc.freeze)"
        yield _gauge("keeperless_gc_frozen_objects", what, frozen)
        yield _gauge("kafka_raft_current_epoch", "Current leader epoch", core.epoch)
        yield _gauge(
            "kafka_raft_current_vote", "Voted-for id in this epoch, -1 if none", core.state.voted_id
        )
        yield _gauge(
            "kafka_raft_high_watermark", "High watermark of the metadata log", core.high_watermark
        )
        yield _gauge(
            "kafka_raft_log_end_offset", "End offset of the metadata log", core.log_end_offset
        )
        sid = node.mlog.raft_log.snapshot_id
        if sid is not None:
            path = node.mlog.log_dir / f"{sid.end_offset:020d}-{sid.epoch:010d}.checkpoint"
            try:
                st = Path(path).stat()
                yield _gauge(
                    "kafka_server_snapshot_size_bytes", "Latest metadata snapshot", st.st_size
                )
                yield _gauge(
                    "kafka_server_snapshot_age_ms",
                    "Age of the latest snapshot",
                    (time.time() - st.st_mtime) * 1000,
                )
            except OSError:
                pass
        if node.controller is not None:
            yield from self._controller(node)
        if node.broker is not None:
            yield from self._broker(node)

    def _controller(self, node: Any) -> Iterator[GaugeMetricFamily]:
        svc = node.controller
        image = svc.controller.image
        active = svc.is_active
        yield _gauge(
            "kafka_controller_active_controller_count",
            "1 on the active controller",
            1 if active else 0,
        )
        if not active:
            return
        brokers = list(image.brokers.values())
        fenced = sum(1 for b in brokers if b.fenced)
        yield _gauge("kafka_controller_fenced_broker_count", "Fenced brokers", fenced)
        yield _gauge(
            "kafka_controller_active_broker_count", "Unfenced brokers", len(brokers) - fenced
        )
        yield _gauge("kafka_controller_global_topic_count", "Topics", len(image.topics))
        parts = [p for t in image.topics.values() for p in t.partitions.values()]
        yield _gauge("kafka_controller_global_partition_count", "Partitions", len(parts))
        live = {b.broker_id for b in brokers if not b.fenced}
        yield _gauge(
            "kafka_controller_offline_partitions_count",
            "Partitions without a live leader",
            sum(1 for p in parts if p.leader not in live),
        )
        yield _gauge(
            "kafka_controller_last_applied_record_offset",
            "Offset of the last record applied",
            image.offset,
        )
        yield _gauge(
            "kafka_controller_last_committed_record_offset",
            "Offset of the last committed record",
            svc.controller.committed.offset,
        )
        yield _gauge(
            "kafka_controller_last_applied_record_lag_ms",
            "How far the applied state is behind (0 when caught up)",
            0
            if svc.controller.committed.offset >= node.mlog.committed_offset
            else node.mlog.core.config.fetch_timeout_ms,
        )

    def _broker(self, node: Any) -> Iterator[Metric]:
        b = node.broker
        yield _gauge(
            "kafka_server_replicamanager_under_replicated_partitions",
            "Led partitions whose ISR is smaller than their replica set",
            sum(
                1
                for p in b.partitions.partitions.values()
                if p.info is not None
                and p.info.leader == b.node_id
                and len(p.info.isr) < len(p.info.replicas)
            ),
        )
        yield _gauge(
            "kafka_server_replicamanager_partition_count",
            "Hosted partitions",
            len(b.partitions.partitions),
        )
        yield _gauge(
            "kafka_server_broker_fenced", "1 while this broker is fenced", 1 if b.fenced else 0
        )
        if getattr(node, "groups", None) is not None:
            yield from _runtime("group_coordinator_metrics", node.groups.runtime)
        if getattr(node, "shares", None) is not None:
            yield from _runtime("share_coordinator_metrics", node.shares.coordinator.runtime)


def _runtime(group: str, runtime: Any) -> Iterator[Metric]:
    """A coordinator runtime's metrics, as Kafka's CoordinatorRuntimeMetrics names them in
    its metric group (group-coordinator-metrics, share-coordinator-metrics) through the
    JMX exporter."""
    st, prefix = runtime.stats, f"kafka_server_{group}_"
    yield _gauge(prefix + "num_partitions", "Shards loaded here", len(runtime.shards()),
                 state="active")  # fmt: skip
    yield _gauge(prefix + "partition_load_time_max", "Longest shard load (ms)", st.load_ms_max)
    yield _gauge(prefix + "partition_load_time_avg", "Mean shard load (ms)",
                 st.load_ms_total / st.loads if st.loads else 0.0)  # fmt: skip
    yield _gauge(prefix + "event_queue_size",
                 "Writes appended, waiting for the in-sync replicas", st.inflight)  # fmt: skip
    m = Metric(prefix + "event_processing_time_ms", "Writes: rule, append, replicas, replay",
               "summary")  # fmt: skip
    m.add_sample(m.name + "_count", {}, float(st.writes))
    m.add_sample(m.name + "_sum", {}, st.write_ms_total)
    yield m
    yield _gauge(prefix + "event_processing_time_ms_max", "Longest write (ms)", st.write_ms_max)
    m = Metric(prefix + "failed_writes", "Writes not committed (the shard read again)", "counter")
    m.add_sample(m.name + "_total", {}, float(st.failed_writes))
    yield m
