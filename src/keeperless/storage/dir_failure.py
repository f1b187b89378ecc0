"""A log directory that cannot be written (full disk, I/O error, read-only remount) has
failed: as in Kafka, nothing more may be written to it, and a node whose only log
directory failed stops (Kafka halts the broker when all its log directories are
offline). Writing on after a failed or short write would leave torn bytes in the middle
of a log; stopping leaves them at the end, where recovery cuts them at the next start.

The storage layer reports failures here; the server installs the handler that stops the
node. Without one (tools, tests) a failure is only raised as ``LogDirFailure``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

__all__ = ["LogDirFailure", "log_dir_failed", "set_failure_handler"]

_handler: Callable[[Path, OSError], None] | None = None


class LogDirFailure(OSError):
    """A write to a log directory failed; the directory is not written to again."""


def set_failure_handler(fn: Callable[[Path, OSError], None] | None) -> None:
    global _handler
    _handler = fn


def log_dir_failed(directory: Path, error: OSError) -> LogDirFailure:
    """Report ``error`` in ``directory`` to the handler (which may stop the process) and
    return the exception for the caller to raise."""
    if isinstance(error, LogDirFailure):
        return error
    failure = LogDirFailure(error.errno, f"log directory {directory} failed: {error}")
    if _handler is not None:
        _handler(directory, error)
    return failure
