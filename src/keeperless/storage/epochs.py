"""A partition's leader-epoch cache: the first offset written in each leader epoch.

Kept beside the log in ``leader-epoch-checkpoint`` (Kafka's file: a version line, a
count line, then ``epoch start-offset`` lines) and rewritten, via a temporary file and a
rename, when an epoch begins or the log is truncated. A new epoch's first append writes
it without an fsync (two fsyncs held the event loop 5-13 ms at the first produce of each
leadership, as Kafka's did before KAFKA-15046); ``flush`` makes it durable when the log
sets a recovery point (a roll, a clean stop), and the batches recovered past that point
re-assign their epochs at the next start. A torn file is rebuilt from the log.

Leaders answer "where does epoch E end?" from it, so that a follower finds the point
where its log diverged in one round trip (KIP-595 / KIP-320 style).
"""

from __future__ import annotations

from pathlib import Path

from keeperless.storage.durable import write_atomically

__all__ = ["UNDEFINED", "LeaderEpochCache"]

UNDEFINED = (-1, -1)
FILE_NAME = "leader-epoch-checkpoint"


class LeaderEpochCache:
    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE_NAME
        self.entries: list[tuple[int, int]] = []  # (epoch, start offset), increasing
        self.loaded = False  # False: none, or torn - the caller rebuilds it from the log
        self._unsynced = False
        if self.path.exists():
            read = self._read()
            self.entries = read or []
            self.loaded = read is not None

    def _read(self) -> list[tuple[int, int]] | None:
        lines = self.path.read_text().split("\n")
        try:
            if lines[0] != "0":
                return None
            count = int(lines[1])
            out = []
            for line in lines[2 : 2 + count]:
                epoch, start = line.split()
                out.append((int(epoch), int(start)))
        except (IndexError, ValueError):
            return None  # a torn checkpoint
        return out if len(out) == count else None

    def _write(self, sync: bool = True) -> None:
        body = "0\n" + f"{len(self.entries)}\n" + "".join(f"{e} {o}\n" for e, o in self.entries)
        write_atomically(self.path, body.encode(), sync=sync)
        self._unsynced = not sync

    def flush(self) -> None:
        """Make what ``assign`` wrote durable (before a recovery point is set)."""
        if self._unsynced:
            self._write()

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int, persist: bool = True) -> bool:
        """Note that ``epoch`` began at ``start_offset``, as Kafka's cache does: a new
        epoch, or the same epoch starting earlier, replaces every entry it contradicts
        (an epoch at least as new, or one starting at or after it) - so that the cache
        always says what the log holds (a batch of an older epoch appended after a
        leadership that wrote nothing left an entry no batch had: a follower asking about
        that older epoch was sent back to its start for ever). True if it changed."""
        if epoch < 0 or start_offset < 0:
            return False
        if self.entries:
            last_epoch, last_start = self.entries[-1]
            if epoch == last_epoch and start_offset >= last_start:
                return False
        while self.entries and (
            self.entries[-1][0] >= epoch or self.entries[-1][1] >= start_offset
        ):
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        if persist:
            self._write(sync=False)
        return True

    def begin_leadership(self, epoch: int, log_end_offset: int) -> None:
        """This replica leads from ``epoch`` on, its log ending at ``log_end_offset``.
        Held at once; written at the next ``flush`` (a new leadership happens at once
        for every partition a starting broker leads, and a crash losing it loses
        nothing: the next leadership begins an epoch of its own)."""
        if self.assign(epoch, log_end_offset, persist=False):
            self._unsynced = True

    def truncate_from_end(self, end_offset: int) -> None:
        """The log now ends at ``end_offset``: forget epochs that began at or after it."""
        kept = [(e, o) for e, o in self.entries if o < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._write()

    def clear(self) -> None:
        self.entries = []
        self._write()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's answer to "where does ``epoch`` end?": (the largest epoch <= it held
        here, the start of the next epoch, or the log end for the latest); for an epoch
        older than any held, (that epoch, where the oldest held one starts); UNDEFINED for
        an undefined epoch or an empty cache."""
        if epoch < 0 or not self.entries:
            return UNDEFINED
        if epoch == self.entries[-1][0]:
            return epoch, log_end_offset
        higher = next((i for i, (e, _) in enumerate(self.entries) if e > epoch), None)
        if higher is None:
            return self.entries[-1][0], log_end_offset
        if higher == 0:
            return epoch, self.entries[0][1]
        return self.entries[higher - 1][0], self.entries[higher][1]

    def relocate(self, directory: Path) -> None:
        """Its partition's directory was renamed to ``directory``."""
        self.path = directory / FILE_NAME

    def save(self) -> None:
        self._write()
