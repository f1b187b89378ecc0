#!/usr/bin/env bash
# Kafka's kafka-metadata-quorum.sh, served by keeperless (keeperless metadata-quorum).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-metadata-quorum.sh exec "$here/../.venv/bin/keeperless" metadata-quorum "$@"
fi
KEEPERLESS_SCRIPT=kafka-metadata-quorum.sh exec keeperless metadata-quorum "$@"
