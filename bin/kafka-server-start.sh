#!/usr/bin/env bash
# Kafka's kafka-server-start.sh, served by keeperless (keeperless server start).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-server-start.sh exec "$here/../.venv/bin/keeperless" server start "$@"
fi
KEEPERLESS_SCRIPT=kafka-server-start.sh exec keeperless server start "$@"
