#!/usr/bin/env bash
# Kafka's kafka-console-consumer.sh, served by keeperless (keeperless console-consumer).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-console-consumer.sh exec "$here/../.venv/bin/keeperless" console-consumer "$@"
fi
KEEPERLESS_SCRIPT=kafka-console-consumer.sh exec keeperless console-consumer "$@"
