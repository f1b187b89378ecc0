#!/usr/bin/env bash
# Kafka's kafka-reassign-partitions.sh, served by keeperless (keeperless reassign-partitions).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-reassign-partitions.sh exec "$here/../.venv/bin/keeperless" reassign-partitions "$@"
fi
KEEPERLESS_SCRIPT=kafka-reassign-partitions.sh exec keeperless reassign-partitions "$@"
