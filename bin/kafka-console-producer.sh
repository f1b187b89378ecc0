#!/usr/bin/env bash
# Kafka's kafka-console-producer.sh, served by keeperless (keeperless console-producer).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-console-producer.sh exec "$here/../.venv/bin/keeperless" console-producer "$@"
fi
KEEPERLESS_SCRIPT=kafka-console-producer.sh exec keeperless console-producer "$@"
