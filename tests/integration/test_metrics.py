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
