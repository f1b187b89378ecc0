#!/usr/bin/env bash
# Kafka's kafka-consumer-groups.sh, served by keeperless (keeperless consumer-groups).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-consumer-groups.sh exec "$here/../.venv/bin/keeperless" consumer-groups "$@"
fi
KEEPERLESS_SCRIPT=kafka-consumer-groups.sh exec keeperless consumer-groups "$@"
