"""The Prometheus endpoint shows the quorum's state, a failover and a fenced broker."""

from __future__ import annotations

import re
from pathlib import Path

from tests.integration.cluster import Cluster, describe_quorum, wait_until


def _value(page: str, name: str, labels: str = "") -> float | None:
    m = re.search(rf"^{re.escape(name + labels)} (\S+)$", page, re.M)
    return float(m.group(1)) if m else None


def test_metrics_follow_a_failover_and_a_fenced_broker(tmp_path: Path) -> None:
    c = Cluster(tmp_path, metrics=True)
    c.start()
    try:
        leader = c.leader()
        # the gauges follow the controller's image: both brokers unfenced shortly
        page = wait_until(
            lambda: (
                p
                if _value(
                    p := c.controllers[leader].scrape(), "kafka_controller_active_broker_count"
                )
                == 2.0
                else None
            ),
            20,
            what="two active brokers in the metrics",
        )
        assert _value(page, "kafka_raft_current_state", '{state="leader"}') == 1.0
        assert _value(page, "kafka_controller_active_controller_count") == 1.0
        # what the start made is frozen out of the collector's full scans: a gen 2
        # collection of it stalled the loop 16-21 ms several times a minute under load
        frozen = _value(page, "keeperless_gc_frozen_objects")
        assert frozen is not None
        assert frozen > 1000
        # every operation (the brokers' registrations, at least) waited its turn
        queued = _value(page, "kafka_controller_event_queue_time_ms_count")
        assert queued is not None
        assert queued >= 2
        epoch = _value(page, "kafka_raft_current_epoch")
        assert epoch is not None
        follower = next(i for i in c.controllers if i != leader)
        fpage = c.controllers[follower].scrape()
        assert _value(fpage, "kafka_raft_current_state", '{state="follower"}') == 1.0
        assert _value(fpage, "kafka_controller_active_controller_count") == 0.0

        c.controllers[leader].kill9()
        new = wait_until(
            lambda: (lambda lead: lead if lead != leader else None)(c.leader()),
            20,
            what="a new leader",
        )
        npage = wait_until(
            lambda: (
                p
                if _value(
                    p := c.controllers[new].scrape(), "kafka_raft_current_state", '{state="leader"}'
                )
                == 1.0
                else None
            ),
            20,
            what="the new leader's state gauge",
        )
        new_epoch = _value(npage, "kafka_raft_current_epoch")
        assert new_epoch is not None
        assert new_epoch > epoch
        assert "kafka_raft_election_latency_ms_count" in npage

        c.brokers[5].stop()  # a clean shutdown fences the broker at once
        wait_until(
            lambda: (
                _value(c.controllers[new].scrape(), "kafka_controller_fenced_broker_count") == 1.0
            ),
            20,
            what="the fenced broker count",
        )
        assert describe_quorum(c.controllers[new].port)["leader_id"] == new
    finally:
        c.stop()


# Kafka's KRaft monitoring metrics under the JMX exporter's names, by role
CONTROLLER = [
    "kafka_controller_kafkacontroller_activecontrollercount",
    "kafka_controller_kafkacontroller_newactivecontrollerscount",
    "kafka_controller_kafkacontroller_timedoutbrokerheartbeatcount",
    "kafka_controller_kafkacontroller_metadataerrorcount",
    "kafka_controller_kafkacontroller_lastappliedrecordoffset",
    "kafka_controller_kafkacontroller_lastcommittedrecordoffset",
    "kafka_controller_kafkacontroller_lastappliedrecordlagms",
    "kafka_server_raft_metrics_current_state",
    "kafka_server_raft_metrics_current_leader",
    "kafka_server_raft_metrics_current_epoch",
    "kafka_server_raft_metrics_high_watermark",
    "kafka_server_raft_metrics_log_end_offset",
    "kafka_server_raft_metrics_commit_rate",
]
IMAGE = [  # on every controller
    "kafka_controller_kafkacontroller_activebrokercount",
    "kafka_controller_kafkacontroller_fencedbrokercount",
    "kafka_controller_kafkacontroller_globaltopiccount",
    "kafka_controller_kafkacontroller_globalpartitioncount",
    "kafka_controller_kafkacontroller_offlinepartitionscount",
    "kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
]
ACTIVE = [
    *IMAGE,
    "kafka_controller_controllereventmanager_eventqueuetimems_count",
    "kafka_controller_controllereventmanager_eventqueueprocessingtimems_count",
]
BROKER = [
    "kafka_server_broker_metadata_metrics_last_applied_record_offset",
    "kafka_server_broker_metadata_metrics_last_applied_record_lag_ms",
    "kafka_server_broker_metadata_metrics_metadata_apply_error_count",
    "kafka_server_broker_metadata_metrics_metadata_load_error_count",
    "kafka_server_replicamanager_partitioncount",
    "kafka_server_replicamanager_leadercount",
    "kafka_server_replicamanager_underreplicatedpartitions",
    "kafka_server_replicamanager_underminisrpartitioncount",
    "kafka_server_raft_metrics_current_leader",
]


def test_kafkas_metric_names_through_a_failover(tmp_path: Path) -> None:
    """Every Kafka-named metric is scraped on the role that has it, and follows a
    failover: a new active controller (NewActiveControllersCount), the leader each node
    names, a broker that missed its session (TimedOutBrokerHeartbeatCount)."""
    c = Cluster(
        tmp_path,
        metrics=True,
        extra={"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"},
    )
    c.start()
    try:
        leader = c.leader()

        def scrape(node: object) -> str:
            return node.scrape()  # type: ignore[attr-defined,no-any-return]

        page = wait_until(
            lambda: (
                p
                if _value(p := scrape(c.controllers[leader]),
                          "kafka_controller_kafkacontroller_activebrokercount") == 2.0
                else None
            ),
            20,
            what="two active brokers",
        )  # fmt: skip
        for name in CONTROLLER + ACTIVE:
            assert _value(page, name) is not None, name
        assert _value(page, "kafka_controller_kafkacontroller_activecontrollercount") == 1.0
        assert _value(page, "kafka_server_raft_metrics_current_leader") == leader
        for b in c.brokers.values():
            bpage = scrape(b)
            for name in BROKER:
                assert _value(bpage, name) is not None, (b.node_id, name)
        follower = next(i for i in c.controllers if i != leader)
        fpage = scrape(c.controllers[follower])
        assert _value(fpage, "kafka_controller_kafkacontroller_activecontrollercount") == 0.0
        for name in IMAGE:  # a standby shows the cluster as the active controller does
            wait_until(
                lambda name=name: (
                    _value(scrape(c.controllers[follower]), name) == _value(page, name)
                ),
                10,
                what=f"{name} on a standby controller",
            )
        # the active controller dies: another takes over and says so
        c.controllers[leader].kill9()
        new = wait_until(lambda: (lambda lead: lead if lead != leader else None)(c.leader()), 20)
        npage = wait_until(
            lambda: (
                p
                if _value(p := scrape(c.controllers[new]),
                          "kafka_controller_kafkacontroller_activecontrollercount") == 1.0
                else None
            ),
            20,
        )  # fmt: skip
        assert _value(npage, "kafka_controller_kafkacontroller_newactivecontrollerscount") == 1.0
        for b in c.brokers.values():
            wait_until(
                lambda b=b: _value(scrape(b), "kafka_server_raft_metrics_current_leader") == new,
                20,
            )
        # a broker that stops heartbeating is fenced for it
        c.brokers[5].kill9()
        wait_until(
            lambda: (
                _value(
                    scrape(c.controllers[new]),
                    "kafka_controller_kafkacontroller_timedoutbrokerheartbeatcount",
                )
                == 1.0
            ),
            30,
        )
        assert (
            _value(scrape(c.controllers[new]), "kafka_controller_kafkacontroller_fencedbrokercount")
            == 1.0
        )
    finally:
        c.stop()


def test_topic_meters_and_isr_changes(tmp_path: Path) -> None:
    """Kafka's BrokerTopicMetrics (MessagesIn, BytesIn, BytesOut: all topics and per
    topic) and ReplicaManager IsrShrinks/IsrExpands under the JMX exporter's names; a
    broker-only node shows no controller histograms (they would always be 0)."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

    from tests.integration.cluster import keeperless

    c = Cluster(tmp_path, controllers=1, brokers=3, metrics=True,
                extra={"replica.lag.time.max.ms": "2000"})  # fmt: skip
    c.start()
    try:
        keeperless("topics", "--bootstrap-server", c.bootstrap, "--create", "--topic", "m",
                   "--partitions", "1", "--replication-factor", "3", check=True)  # fmt: skip
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        for i in range(10):
            p.produce("m", value=b"v%d" % i, partition=0)
        assert p.flush(30) == 0
        md = AdminClient({"bootstrap.servers": c.bootstrap}).list_topics("m", timeout=10)
        leader = c.brokers[md.topics["m"].partitions[0].leader]
        page = leader.scrape()
        assert _value(page, "kafka_server_brokertopicmetrics_messagesin_total", '{topic="m"}') == 10
        assert (_value(page, "kafka_server_brokertopicmetrics_messagesin_total") or 0) >= 10
        assert (_value(page, "kafka_server_brokertopicmetrics_bytesin_total", '{topic="m"}')
                or 0) > 0  # fmt: skip
        cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "meters",
                         "auto.offset.reset": "earliest"})  # fmt: skip
        cons.subscribe(["m"])
        got: list[bytes] = []

        def read() -> bool:
            m = cons.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
            return len(got) >= 10

        wait_until(read, 30, what="the records read")
        cons.close()

        # the group coordinators' runtime (group-coordinator-metrics): every broker
        # loaded the __consumer_offsets partitions it leads
        def loaded() -> bool:
            return sum(  # offsets.topic.num.partitions
                _value(b.scrape(), "kafka_server_group_coordinator_metrics_num_partitions",
                       '{state="active"}') or 0
                for b in c.brokers.values()
            ) == 3  # fmt: skip

        wait_until(loaded, 30, what="each __consumer_offsets partition loaded by its leader")
        out = _value(leader.scrape(), "kafka_server_brokertopicmetrics_bytesout_total",
                     '{topic="m"}')  # fmt: skip
        assert out is not None
        assert out > 0
        assert "kafka_controller_event_queue_time_ms" not in page
        assert "kafka_controller_event_queue_time_ms" in c.controllers[1].scrape()
        # a follower stops: the leader shrinks the ISR; it comes back: expands it
        follower = next(b for i, b in c.brokers.items() if b is not leader)
        follower.kill9()
        wait_until(
            lambda: (_value(leader.scrape(), "kafka_server_replicamanager_isrshrinks_total")
                     or 0) >= 1,
            30, what="an ISR shrink counted",
        )  # fmt: skip
        follower.start()
        wait_until(
            lambda: (_value(leader.scrape(), "kafka_server_replicamanager_isrexpands_total")
                     or 0) >= 1,
            60, what="an ISR expansion counted",
        )  # fmt: skip
    finally:
        c.stop()
