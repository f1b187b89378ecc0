#!/usr/bin/env bash
# Kafka's kafka-cluster.sh, served by keeperless (keeperless cluster).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-cluster.sh exec "$here/../.venv/bin/keeperless" cluster "$@"
fi
KEEPERLESS_SCRIPT=kafka-cluster.sh exec keeperless cluster "$@"
