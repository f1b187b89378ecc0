"""The open-file limit a node runs with: its soft limit raised to the hard one at start,
as the JVM does for Kafka (``-XX:+MaxFDLimit``, on by default on Linux). A broker keeps
a descriptor open per log segment and per connection; the usual soft limit of 1,024
would fail its log directory at a few hundred partitions."""

from __future__ import annotations

import logging
import resource

__all__ = ["raise_open_file_limit"]

log = logging.getLogger(__name__)


def raise_open_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; return the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as e:
        log.warning("Could not raise the open-file limit from %d to %d: %s", soft, hard, e)
        return soft
    log.info("Raised the open-file limit from %d to %d (the hard limit)", soft, hard)
    return hard
