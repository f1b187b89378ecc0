#!/usr/bin/env bash
# Kafka's kafka-features.sh, served by keeperless (keeperless features).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-features.sh exec "$here/../.venv/bin/keeperless" features "$@"
fi
KEEPERLESS_SCRIPT=kafka-features.sh exec keeperless features "$@"
