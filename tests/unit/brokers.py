"""A broker object without a process (no listeners, no controller), for unit tests of
what it does with the metadata it is given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from keeperless.broker.broker import Broker, BrokerSettings
from keeperless.storage.log import LogConfig


def make_broker(
    tmp_path: Path,
    *,
    static: dict[str, str] | None = None,
    offsets_rf: int = 1,
    caught_up: bool = True,
) -> Broker:
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
        offsets_topic_replication_factor=offsets_rf,
        static_configs=static if static is not None else {"min.insync.replicas": "1"},
    )
    controller: Any = None
    b = Broker(settings, controller)
    if caught_up:
        b.catch_up_to(-1)  # publishes from the first record on
    return b
