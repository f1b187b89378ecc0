"""Kafka's per-log-directory offset checkpoint files (`log-start-offset-checkpoint`,
and the same format for the others): a version line `0`, a count line, then one
`<topic> <partition> <offset>` line per partition. Written whole or not at all."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from keeperless.storage.durable import write_atomically

__all__ = [
    "LOG_START_OFFSET_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "read_offset_checkpoint",
    "write_offset_checkpoint",
]

LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"  # the high watermarks

log = logging.getLogger(__name__)


class MalformedCheckpoint(ValueError):
    pass


def _parse(text: str) -> dict[tuple[str, int], int]:
    lines = text.splitlines()
    if len(lines) < 2 or lines[0].strip() != "0":
        raise MalformedCheckpoint("expected version 0 on the first line")
    try:
        count = int(lines[1])
    except ValueError:
        raise MalformedCheckpoint(f"bad entry count {lines[1]!r}") from None
    entries = [ln for ln in lines[2:] if ln.strip()]
    if len(entries) != count:
        raise MalformedCheckpoint(f"{len(entries)} entries, the header says {count}")
    out: dict[tuple[str, int], int] = {}
    for ln in entries:
        parts = ln.split()
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].lstrip("-").isdigit():
            raise MalformedCheckpoint(f"malformed line {ln!r}")
        out[(parts[0], int(parts[1]))] = int(parts[2])
    return out


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """The entries of ``path``; none if it does not exist. A malformed file (it is
    written atomically, so only damage from outside makes one) is reported and ignored:
    the offsets it held are lost, and with them only the deletion it recorded."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        return _parse(text)
    except MalformedCheckpoint as e:
        log.error("Ignoring %s: %s", path, e)
        return {}


def write_offset_checkpoint(path: Path, entries: Mapping[tuple[str, int], int]) -> None:
    body = "".join(f"{t} {p} {o}\n" for (t, p), o in sorted(entries.items()))
    write_atomically(path, f"0\n{len(entries)}\n{body}".encode())
