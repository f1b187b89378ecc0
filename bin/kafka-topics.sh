#!/usr/bin/env bash
# Kafka's kafka-topics.sh, served by keeperless (keeperless topics).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-topics.sh exec "$here/../.venv/bin/keeperless" topics "$@"
fi
KEEPERLESS_SCRIPT=kafka-topics.sh exec keeperless topics "$@"
