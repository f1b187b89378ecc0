#!/usr/bin/env bash
# Kafka's kafka-configs.sh, served by keeperless (keeperless configs).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-configs.sh exec "$here/../.venv/bin/keeperless" configs "$@"
fi
KEEPERLESS_SCRIPT=kafka-configs.sh exec keeperless configs "$@"
