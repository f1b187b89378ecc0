#!/usr/bin/env bash
# Kafka's kafka-log-dirs.sh, served by keeperless (keeperless log-dirs).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  exec "$here/../.venv/bin/keeperless" log-dirs "$@"
fi
exec keeperless log-dirs "$@"
