#!/usr/bin/env bash
# Kafka's kafka-server-start.sh, served by keeperless (keeperless server start).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  exec "$here/../.venv/bin/keeperless" server start "$@"
fi
exec keeperless server start "$@"
