"""The Grafana dashboard in docs/ only uses metric names the nodes export."""

from __future__ import annotations

import json
import re
from pathlib import Path

from keeperless.runtime.kafka_metrics import jmx_name

ROOT = Path(__file__).resolve().parents[3]
RUNTIME = ROOT / "src" / "keeperless" / "runtime"
KINDS = (
    ("kafka.controller", "KafkaController"),
    ("kafka.controller", "ControllerEventManager"),
    ("kafka.server", "raft-metrics"),
    ("kafka.server", "broker-metadata-metrics"),
    ("kafka.server", "ReplicaManager"),
    ("kafka.server", "SnapshotEmitter"),
)


def _exported() -> set[str]:
    """Names spelled out in metrics.py, and those kafka_metrics.py builds from a
    (domain, type) pair and an attribute."""
    metrics = (RUNTIME / "metrics.py").read_text()
    kafka = (RUNTIME / "kafka_metrics.py").read_text()
    names = set(re.findall(r'"([a-z][a-z0-9_]+)"', metrics + kafka))
    attrs = set(re.findall(r'"([A-Za-z][\w-]*)"', kafka))
    names |= {jmx_name(d, k, a) for d, k in KINDS for a in attrs}
    return names


def test_every_dashboard_metric_is_exported() -> None:
    dash = json.loads((ROOT / "docs" / "grafana-keeperless.json").read_text())
    used = set()
    for p in dash["panels"]:
        for t in p["targets"]:
            for m in re.findall(r"\b((?:kafka|keeperless)_[a-z0-9_]+)", t["expr"]):
                used.add(re.sub(r"_(bucket|count|sum|total)$", "", m))
    exported = _exported()
    assert len(used) > 10
    assert sorted(used - exported) == []
    assert "kafka_controller_kafkacontroller_nosuchthing" not in exported
