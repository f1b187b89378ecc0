"""CPU-heavy work on a frozen object graph, in a forked child at a lower CPU priority.

A metadata snapshot at a million partitions is seconds of CPU encoding an image that no
longer changes (images are immutable). Kafka writes it on a thread of its own, beside the
threads that answer the quorum; one Python process cannot do that (the GIL), and on the
event loop, even in slices, it takes the CPU that replication and heartbeats need while a
big change (a controlled shutdown, a broker's failure) is being written. A forked child
sees the image as it was at the fork (copy-on-write), runs below the node's priority, so
the node's own work goes first on a busy machine, and hands its results (byte strings,
each framed by its length) back through a pipe. What is alive at the fork is frozen out of
the parent's full garbage collections first (runtime/gc_pauses.py), so that they do not
write to every page the child shares.

The child closes every inherited descriptor but its pipe (a socket kept open by it would
outlive the node's close of it), dies with its parent (PR_SET_PDEATHSIG), never runs the
parent's event loop, logging or exit hooks, and leaves with os._exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import os
import signal
import struct
import threading
import warnings
from collections.abc import Callable, Sequence

from keeperless.runtime import gc_pauses

__all__ = ["ChildFailedError", "run_forked"]

_PR_SET_PDEATHSIG = 1
_LENGTH = struct.Struct(">Q")  # each result's length, before it


class ChildFailedError(RuntimeError):
    """The child did not hand back its result (it failed, or was killed)."""


def _die_with_parent(parent: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(3)


def _child(fn: Callable[[], Sequence[bytes]], w: int, nice: int, parent: int) -> None:
    """In the child: never returns."""
    code = 1
    try:
        os.closerange(3, w)
        os.closerange(w + 1, os.sysconf("SC_OPEN_MAX"))
        _die_with_parent(parent)
        gc.disable()  # a full collection would touch (and so copy) every page
        if nice:
            os.nice(nice)
        for part in fn():
            _write_all(w, memoryview(_LENGTH.pack(len(part))))
            _write_all(w, memoryview(part))
        code = 0
    except BaseException:  # (the exit code is the report)
        code = 1
    finally:
        os._exit(code)


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view) :]


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _read_exact(fd: int, n: int) -> bytes | None:
    """``n`` bytes, or None at the end of the pipe before them."""
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _read_all(fd: int) -> list[bytes]:
    """The results up to the end of the pipe, then closes it (its reader owns it: closed
    while a read waits in the thread, its number could be reused by a socket the read
    drains). A result cut short (the child died writing it) is dropped."""
    try:
        parts = []
        while (head := _read_exact(fd, _LENGTH.size)) is not None:
            part = _read_exact(fd, _LENGTH.unpack(head)[0])
            if part is None:
                break
            parts.append(part)
        return parts
    finally:
        os.close(fd)


async def run_forked(
    fn: Callable[[], Sequence[bytes]],
    *,
    nice: int = 19,
    started: Callable[[int], None] | None = None,
) -> list[bytes]:
    """``fn()`` computed in a forked child whose priority is ``nice`` below this process's
    (19: only what nothing else wants); the byte strings it returns. ``started`` gets the
    child's pid (to kill it at a close). Raises ChildFailedError if the child fails or is
    killed; cancelled, it kills the child."""
    parent = os.getpid()
    gc_pauses.freeze_before_fork()
    r, w = os.pipe()
    with warnings.catch_warnings():
        # (Python 3.12 warns of fork in a threaded process: the child only runs ``fn``
        # on data no other thread changes, then _exit)
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        _child(fn, w, nice, parent)
    os.close(w)
    if started is not None:
        started(pid)
    loop = asyncio.get_running_loop()
    reaped = False
    try:
        try:
            reading = loop.run_in_executor(None, _read_all, r)
        except BaseException:
            os.close(r)  # (never handed to the reader)
            raise
        data = await reading
        _, status = await loop.run_in_executor(None, os.waitpid, pid, 0)
        reaped = True
    finally:
        if not reaped:  # cancelled or failed while the child runs: end it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            # reaped by a thread: this coroutine is being cancelled and cannot wait
            threading.Thread(target=_reap, args=(pid,), daemon=True).start()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        raise ChildFailedError(f"the child process {pid} failed ({how})")
    return data
