#!/usr/bin/env bash
# Kafka's kafka-dump-log.sh, served by keeperless (keeperless dump-log).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-dump-log.sh exec "$here/../.venv/bin/keeperless" dump-log "$@"
fi
KEEPERLESS_SCRIPT=kafka-dump-log.sh exec keeperless dump-log "$@"
