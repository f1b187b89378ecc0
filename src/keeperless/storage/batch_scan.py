"""Reading a file of record batches from one position to another, whatever their sizes.

Segments, cleaned segments and tools read batches through ``BatchScan``: it reads the
file in windows of ``SCAN_WINDOW_BYTES``, re-reads from a batch's start when the batch
straddles a window's end (and reads a batch larger than a window whole), and stops at
the first batch that is not whole and valid, saying why in ``stop``:

- an *incomplete* batch is one the file ends inside (its header or its body cut short):
  what a write interrupted by a crash or a power cut leaves, and only ever at the end;
- a *corrupt* batch has a header no valid batch has, or fails its CRC-32C.

A window boundary is never a reason to stop: that confusion cut every active segment
at its first 8 MiB on restart (issue 23).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from keeperless.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    crc_problem,
    header_problem,
    read_header,
)

__all__ = ["SCAN_WINDOW_BYTES", "BatchScan", "ScanStop"]

SCAN_WINDOW_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ScanStop:
    """Where and why a scan stopped. ``reason`` is empty at a clean end (the last batch
    ends exactly at the end); ``incomplete`` when the file ends inside a batch."""

    position: int
    reason: str = ""
    incomplete: bool = False

    @property
    def clean(self) -> bool:
        return not self.reason


class BatchScan:
    """Iterate ``(position, header, batch bytes)`` over ``[start, end)`` of ``fd``.

    ``verify_crc=False`` checks headers only (and reads only the headers' windows, not
    a large batch's body); the batch bytes are then empty unless ``with_data``."""

    def __init__(
        self,
        fd: int,
        start: int,
        end: int,
        *,
        verify_crc: bool,
        with_data: bool = False,
        window_bytes: int = SCAN_WINDOW_BYTES,
    ) -> None:
        if window_bytes < BATCH_HEADER_SIZE:
            raise ValueError(f"window_bytes {window_bytes} is smaller than a batch header")
        self.fd = fd
        self.start = start
        self.end = end
        self.verify_crc = verify_crc
        self.with_data = with_data or verify_crc
        self.window_bytes = window_bytes
        self.stop: ScanStop | None = None  # set once the iteration has ended

    def __iter__(self) -> Iterator[tuple[int, BatchHeader, memoryview]]:
        pos = self.start
        end = self.end
        window = memoryview(b"")
        window_pos = pos  # the file position of window[0]
        empty = memoryview(b"")
        while pos < end:
            off = pos - window_pos
            if len(window) - off < BATCH_HEADER_SIZE:
                window = self._read(pos, min(self.window_bytes, end - pos))
                window_pos, off = pos, 0
                if len(window) < BATCH_HEADER_SIZE:
                    self.stop = ScanStop(
                        pos,
                        f"incomplete batch header ({len(window)} of {BATCH_HEADER_SIZE} "
                        "bytes before the end of the file)",
                        incomplete=True,
                    )
                    return
            h = read_header(window, off)
            problem = header_problem(h)
            if problem is not None:
                zeros = not any(window[off : off + BATCH_HEADER_SIZE])
                if zeros:  # what some filesystems leave of blocks never written
                    problem = "zero bytes where a batch header should be"
                self.stop = ScanStop(pos, problem, incomplete=zeros)
                return
            if pos + h.size > end:
                self.stop = ScanStop(
                    pos,
                    f"incomplete batch ({end - pos} of {h.size} bytes before the end of the file)",
                    incomplete=True,
                )
                return
            data = empty
            if self.with_data:
                if off + h.size > len(window):
                    # the batch straddles the window: read again from its start
                    window = self._read(pos, max(h.size, min(self.window_bytes, end - pos)))
                    window_pos, off = pos, 0
                    if len(window) < h.size:  # the file shrank under us
                        self.stop = ScanStop(
                            pos,
                            f"incomplete batch ({len(window)} of {h.size} bytes readable)",
                            incomplete=True,
                        )
                        return
                data = window[off : off + h.size]
                if self.verify_crc and (problem := crc_problem(data, h)) is not None:
                    self.stop = ScanStop(pos, problem)
                    return
            yield pos, h, data
            pos += h.size
        self.stop = ScanStop(pos)

    def _read(self, pos: int, n: int) -> memoryview:
        return memoryview(os.pread(self.fd, n, pos))
