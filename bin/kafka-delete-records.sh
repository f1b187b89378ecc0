#!/usr/bin/env bash
# Kafka's kafka-delete-records.sh, served by keeperless (keeperless delete-records).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-delete-records.sh exec "$here/../.venv/bin/keeperless" delete-records "$@"
fi
KEEPERLESS_SCRIPT=kafka-delete-records.sh exec keeperless delete-records "$@"
