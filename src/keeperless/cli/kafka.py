"""Kafka's command names (`kafka-topics.sh`, ...) as entry points of the `keeperless`
tools, so that runbooks and scripts written for Kafka run unchanged. The same commands
are in the repository's `bin/` directory."""

from __future__ import annotations

import sys
from collections.abc import Callable

from keeperless.cli.main import main

__all__ = ["COMMANDS", "entry"]

# Kafka's script -> the keeperless tool (and the words it starts with)
COMMANDS: dict[str, tuple[str, ...]] = {
    "kafka-storage.sh": ("storage",),
    "kafka-server-start.sh": ("server", "start"),
    "kafka-server-stop.sh": ("server", "stop"),
    "kafka-topics.sh": ("topics",),
    "kafka-configs.sh": ("configs",),
    "kafka-console-producer.sh": ("console-producer",),
    "kafka-console-consumer.sh": ("console-consumer",),
    "kafka-consumer-groups.sh": ("consumer-groups",),
    "kafka-metadata-quorum.sh": ("metadata-quorum",),
    "kafka-metadata-shell.sh": ("metadata-shell",),
    "kafka-dump-log.sh": ("dump-log",),
    "kafka-cluster.sh": ("cluster",),
    "kafka-features.sh": ("features",),
    "kafka-leader-election.sh": ("leader-election",),
    "kafka-log-dirs.sh": ("log-dirs",),
}


def run(script: str, argv: list[str]) -> int:
    return main([*COMMANDS[script], *argv])


def entry(script: str) -> Callable[[], None]:
    def go() -> None:
        sys.exit(run(script, sys.argv[1:]))

    return go


storage = entry("kafka-storage.sh")
server_start = entry("kafka-server-start.sh")
server_stop = entry("kafka-server-stop.sh")
topics = entry("kafka-topics.sh")
configs = entry("kafka-configs.sh")
console_producer = entry("kafka-console-producer.sh")
console_consumer = entry("kafka-console-consumer.sh")
consumer_groups = entry("kafka-consumer-groups.sh")
metadata_quorum = entry("kafka-metadata-quorum.sh")
metadata_shell = entry("kafka-metadata-shell.sh")
dump_log = entry("kafka-dump-log.sh")
cluster = entry("kafka-cluster.sh")
features = entry("kafka-features.sh")
leader_election = entry("kafka-leader-election.sh")
log_dirs = entry("kafka-log-dirs.sh")


if __name__ == "__main__":  # python -m keeperless.cli.kafka kafka-topics.sh ...
    sys.exit(run(sys.argv[1], sys.argv[2:]))
