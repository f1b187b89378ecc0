#!/usr/bin/env bash
# Kafka's kafka-server-stop.sh, served by keeperless (keeperless server stop).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-server-stop.sh exec "$here/../.venv/bin/keeperless" server stop "$@"
fi
KEEPERLESS_SCRIPT=kafka-server-stop.sh exec keeperless server stop "$@"
