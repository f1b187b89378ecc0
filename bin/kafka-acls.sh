#!/usr/bin/env bash
# Kafka's kafka-acls.sh, served by keeperless (keeperless acls).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$here/../.venv/bin/keeperless" ]; then
  KEEPERLESS_SCRIPT=kafka-acls.sh exec "$here/../.venv/bin/keeperless" acls "$@"
fi
KEEPERLESS_SCRIPT=kafka-acls.sh exec keeperless acls "$@"
