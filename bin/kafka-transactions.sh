#!/usr/bin/env bash
# Kafka's kafka-transactions.sh, served by keeperless (keeperless transactions).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-transactions.sh exec "$here/../.venv/bin/keeperless" transactions "$@"
fi
KEEPERLESS_SCRIPT=kafka-transactions.sh exec keeperless transactions "$@"
