#!/usr/bin/env bash
# Kafka's kafka-leader-election.sh, served by keeperless (keeperless leader-election).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-leader-election.sh exec "$here/../.venv/bin/keeperless" leader-election "$@"
fi
KEEPERLESS_SCRIPT=kafka-leader-election.sh exec keeperless leader-election "$@"
