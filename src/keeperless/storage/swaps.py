"""What a crash left of a cleaning in a partition's directory, finished or undone
before the log opens (Kafka's recovery rules for ``.cleaned`` and ``.swap`` files)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from keeperless.storage.batch_scan import BatchScan
from keeperless.storage.durable import fsync_dir
from keeperless.storage.producer_files import TXN_INDEX_SUFFIX
from keeperless.storage.segment import segment_name

__all__ = ["finish_swaps"]

log = logging.getLogger("keeperless.storage.log")


def finish_swaps(directory: Path) -> None:
    """What a crash left of a cleaning (Kafka's recovery rules): a ``.swap`` is a
    whole cleaned segment, renamed into place, and the segments it replaced (those
    starting within its offsets) go; a ``.cleaned`` may be half written, and is
    deleted. The old segments or the cleaned one, never part of either. The group's
    merged transaction index (``.txnindex.swap``) goes into place with its segment;
    without a segment's swap it is a cleaning that never landed, and goes."""
    changed = False
    halves = sorted(directory.glob("*.cleaned"))  # (segments and their indexes)
    for half in halves:
        half.unlink()
        changed = True
    if halves:
        log.info(
            "Partition log %s: dropped %d file(s) of a cleaning that did not finish",
            directory.name,
            len(halves),
        )
    swaps = sorted(directory.glob("*.log.swap"))
    bases = {int(p.name[:20]) for p in swaps}
    for index in sorted(directory.glob(f"*{TXN_INDEX_SUFFIX}.swap")):
        if int(index.name[:20]) not in bases:
            index.unlink()  # the segment's swap never began
            changed = True
    for swap in swaps:
        base = int(swap.name[:20])
        fd = os.open(swap, os.O_RDONLY)
        try:
            end = base
            for _, h, _ in BatchScan(fd, 0, os.fstat(fd).st_size, verify_crc=False):
                end = h.last_offset + 1
        finally:
            os.close(fd)
        replaced = [
            int(p.name[:20])
            for p in directory.glob("*.log")
            if p.name[:20].isdigit() and base < int(p.name[:20]) < end
        ]
        for other in replaced:
            for suffix in (".log", ".index", ".timeindex", TXN_INDEX_SUFFIX):
                (directory / segment_name(other, suffix)).unlink(missing_ok=True)
        for suffix in (".index", ".timeindex"):  # the replaced segment's: rebuilt
            (directory / segment_name(base, suffix)).unlink(missing_ok=True)
        index = directory / segment_name(base, TXN_INDEX_SUFFIX + ".swap")
        if index.exists():
            os.replace(index, directory / segment_name(base, TXN_INDEX_SUFFIX))
        os.replace(swap, directory / segment_name(base, ".log"))
        log.info("Partition log %s: finished the swap of cleaned %s (for %d segment(s))",
                 directory.name, swap.name, 1 + len(replaced))  # fmt: skip
        changed = True
    if changed:
        fsync_dir(directory)
