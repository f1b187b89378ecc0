#!/usr/bin/env bash
# Kafka's kafka-metadata-quorum.sh, served by keeperless (keeperless metadata-quorum).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  exec "$here/../.venv/bin/keeperless" metadata-quorum "$@"
fi
exec keeperless metadata-quorum "$@"
