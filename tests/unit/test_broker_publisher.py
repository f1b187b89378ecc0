"""The broker's metadata publisher: partitions follow the image, configs reach the logs."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from keeperless.broker.broker import Broker, BrokerSettings
from keeperless.metadata import _records_gen as r
from keeperless.metadata.image import TOPIC_RESOURCE
from keeperless.storage.log import LogConfig


def _broker(tmp_path: Path) -> Broker:
    settings = BrokerSettings(
        node_id=1,
        cluster_id="c",
        log_dir=tmp_path,
        endpoints=(("PLAINTEXT", "127.0.0.1", 9092),),
        rack=None,
        log_defaults=LogConfig(),
        auto_create_topics=False,
        max_message_bytes=1_048_588,
        offsets_topic_partitions=1,
        offsets_topic_replication_factor=1,
        static_configs={"min.insync.replicas": "1"},
    )
    controller: Any = None
    return Broker(settings, controller)


def test_partitions_and_topic_configs_follow_the_image(tmp_path: Path) -> None:
    b = _broker(tmp_path)
    tid = uuid.uuid4()
    b.on_committed(
        [
            r.TopicRecord(name="t", topic_id=tid),
            *(
                r.PartitionRecord(
                    partition_id=p, topic_id=tid, replicas=(1, 2), isr=(1, 2), leader=1
                )
                for p in range(3)
            ),
        ],
        5,
    )
    assert sorted(b.partitions.partitions) == [("t", 0), ("t", 1), ("t", 2)]
    assert b.changed_partitions == [("t", 0), ("t", 1), ("t", 2)]
    # a dynamic topic config reaches the partitions' logs
    b.on_committed(
        [
            r.ConfigRecord(
                resource_type=TOPIC_RESOURCE, resource_name="t", name="retention.ms", value="1234"
            )
        ],
        6,
    )
    assert all(p.log.config.retention_ms == 1234 for p in b.partitions.partitions.values())
    # one partition moves to other brokers: its local copy goes, the others stay untouched
    b.on_committed(
        [
            r.PartitionChangeRecord(
                partition_id=1, topic_id=tid, replicas=(2, 3), isr=(2,), leader=2
            )
        ],
        7,
    )
    assert sorted(b.partitions.partitions) == [("t", 0), ("t", 2)]
    assert b.changed_partitions == [("t", 1)]
    b.close()
