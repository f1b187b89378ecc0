#!/usr/bin/env bash
# Kafka's connect-distributed.sh, served by keeperless (keeperless connect-distributed).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=connect-distributed.sh exec "$here/../.venv/bin/keeperless" connect-distributed "$@"
fi
KEEPERLESS_SCRIPT=connect-distributed.sh exec keeperless connect-distributed "$@"
