#!/usr/bin/env bash
# Kafka's kafka-share-groups.sh, served by keeperless (keeperless share-groups).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-share-groups.sh exec "$here/../.venv/bin/keeperless" share-groups "$@"
fi
KEEPERLESS_SCRIPT=kafka-share-groups.sh exec keeperless share-groups "$@"
