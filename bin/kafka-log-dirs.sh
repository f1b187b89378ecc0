#!/usr/bin/env bash
# Kafka's kafka-log-dirs.sh, served by keeperless (keeperless log-dirs).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-log-dirs.sh exec "$here/../.venv/bin/keeperless" log-dirs "$@"
fi
KEEPERLESS_SCRIPT=kafka-log-dirs.sh exec keeperless log-dirs "$@"
