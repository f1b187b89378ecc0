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
