"""Kafka's command names (`kafka-topics.sh`, ...) as entry points of the `keeperless`
tools, so that runbooks and scripts written for Kafka run unchanged. The same commands
are in the repository's `bin/` directory."""

from __future__ import annotations

import sys
from collections.abc import Callable

from keeperless.cli.main import main
from keeperless.cli.parser import COMMANDS

__all__ = ["COMMANDS", "entry"]


def run(script: str, argv: list[str]) -> int:
    from keeperless.cli.parser import as_script

    as_script(script)  # errors point to the script's own help (kafka-topics.sh --help)
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
share_groups = entry("kafka-share-groups.sh")
metadata_quorum = entry("kafka-metadata-quorum.sh")
metadata_shell = entry("kafka-metadata-shell.sh")
dump_log = entry("kafka-dump-log.sh")
cluster = entry("kafka-cluster.sh")
features = entry("kafka-features.sh")
leader_election = entry("kafka-leader-election.sh")
log_dirs = entry("kafka-log-dirs.sh")
delete_records = entry("kafka-delete-records.sh")
transactions = entry("kafka-transactions.sh")
acls = entry("kafka-acls.sh")
delegation_tokens = entry("kafka-delegation-tokens.sh")
reassign_partitions = entry("kafka-reassign-partitions.sh")

connect_distributed = entry("connect-distributed.sh")

if __name__ == "__main__":  # python -m keeperless.cli.kafka kafka-topics.sh ...
    sys.exit(run(sys.argv[1], sys.argv[2:]))
