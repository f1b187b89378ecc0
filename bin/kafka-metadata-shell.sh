#!/usr/bin/env bash
# Kafka's kafka-metadata-shell.sh, served by keeperless (keeperless metadata-shell).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  exec "$here/../.venv/bin/keeperless" metadata-shell "$@"
fi
exec keeperless metadata-shell "$@"
