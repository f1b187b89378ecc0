"""Making file-system changes durable: a file's data needs an fsync of the file, and
its name (creating, renaming or removing it) an fsync of the directory holding it.
Without the second, a crash can undo a rename that was already acted on: a vote's
`quorum-state`, a new segment, a checkpoint."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from keeperless.storage.dir_failure import log_dir_failed

__all__ = ["fsync_dir", "fsync_file", "write_atomically"]


def fsync_dir(directory: Path) -> None:
    """Make the entries of ``directory`` (names created, renamed or removed) durable."""
    _fsync(directory, os.O_RDONLY | os.O_DIRECTORY)


def fsync_file(path: Path) -> None:
    """Make the data of the file at ``path`` durable (nothing if there is none)."""
    with contextlib.suppress(FileNotFoundError):
        _fsync(path, os.O_RDONLY)


def _fsync(path: Path, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes, sync: bool = True) -> None:
    """Replace ``path`` by ``data`` so that after a crash at any point it holds either
    the old content or the new, whole (write a temporary file, fsync it, rename it over
    ``path``, fsync the directory). A temporary file left by a crash is overwritten by
    the next write and never read. Without ``sync``, no fsync: whole after a process's
    crash, but a power loss may leave the old content, none or a torn file - for what
    its reader detects and rebuilds (a leader-epoch checkpoint on the produce path, as
    Kafka's since KAFKA-15046)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if sync:
            fsync_dir(path.parent)
    except OSError as e:
        raise log_dir_failed(path.parent, e) from None
