#!/usr/bin/env bash
# Kafka's kafka-metadata-shell.sh, served by keeperless (keeperless metadata-shell).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-metadata-shell.sh exec "$here/../.venv/bin/keeperless" metadata-shell "$@"
fi
KEEPERLESS_SCRIPT=kafka-metadata-shell.sh exec keeperless metadata-shell "$@"
