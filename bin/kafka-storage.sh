#!/usr/bin/env bash
# Kafka's kafka-storage.sh, served by keeperless (keeperless storage).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-storage.sh exec "$here/../.venv/bin/keeperless" storage "$@"
fi
KEEPERLESS_SCRIPT=kafka-storage.sh exec keeperless storage "$@"
