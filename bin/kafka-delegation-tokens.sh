#!/usr/bin/env bash
# Kafka's kafka-delegation-tokens.sh, served by keeperless (keeperless delegation-tokens).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-delegation-tokens.sh exec "$here/../.venv/bin/keeperless" delegation-tokens "$@"
fi
KEEPERLESS_SCRIPT=kafka-delegation-tokens.sh exec keeperless delegation-tokens "$@"
