"""Metadata snapshots are encoded in a forked child below the node's priority
(runtime/forked.py): what it hands back, what it may not keep, and that it never
outlives what started it."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from keeperless.metadata import _records_gen as r
from keeperless.metadata.image import MetadataDelta, MetadataImage
from keeperless.runtime.forked import ChildFailedError, run_forked
from keeperless.runtime.metadata_log import MetadataLog, image_of_snapshot

ROOT = Path(__file__).resolve().parents[3]


def _gone(pid: int) -> bool:
    """Exited (a zombie no one reaped counts: it runs nothing)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status


def _wait_gone(pid: int, what: str) -> None:
    deadline = time.monotonic() + 10
    while not _gone(pid):
        assert time.monotonic() < deadline, f"{what}: process {pid} still runs"
        time.sleep(0.02)


async def _gone_soon(pid: int, what: str) -> None:
    """(Inside the loop: asyncio.run's end waits for the reading thread, so for the
    child's own end, which would hide a child left running.)"""
    deadline = time.monotonic() + 10
    while not _gone(pid):
        assert time.monotonic() < deadline, f"{what}: process {pid} still runs"
        await asyncio.sleep(0.02)


def test_the_child_hands_back_what_it_computed_from_the_state_at_the_fork() -> None:
    state = [b"x" * (3 << 20)]  # more than a pipe holds: the parent must read as it writes

    def changed_after_the_fork(pid: int) -> None:
        state[0] = b"changed"

    async def go() -> list[bytes]:
        parts = [state[0] + b"!", b"", b"y" * 5]  # (each framed: an empty one too)
        return await run_forked(lambda: parts, started=changed_after_the_fork)

    assert asyncio.run(go()) == [b"x" * (3 << 20) + b"!", b"", b"yyyyy"]
    assert state == [b"changed"]


def test_the_child_runs_below_the_parents_priority() -> None:
    ours = os.nice(0)
    got = asyncio.run(run_forked(lambda: [str(os.nice(0)).encode()], nice=10))
    assert int(got[0]) == min(ours + 10, 19)
    got = asyncio.run(run_forked(lambda: [str(os.nice(0)).encode()]))
    assert int(got[0]) == 19  # (by default: only what nothing else wants)


def test_the_child_keeps_no_descriptor_of_the_parent() -> None:
    """A socket the node closes must not stay open in the child (its peer would not
    see the close)."""
    a, b = socket.socketpair()
    try:
        fd = a.fileno()

        def check() -> list[bytes]:
            try:
                os.fstat(fd)
            except OSError:
                return [b"closed"]
            return [b"open"]

        assert asyncio.run(run_forked(check)) == [b"closed"]
        os.fstat(fd)  # (the parent's is untouched)
    finally:
        a.close()
        b.close()


def test_a_failing_or_killed_child_is_an_error() -> None:
    def fails() -> list[bytes]:
        raise ValueError("no")

    with pytest.raises(ChildFailedError, match="exit code 1"):
        asyncio.run(run_forked(fails))

    async def killed() -> list[bytes]:
        return await run_forked(
            lambda: time.sleep(60) or [], started=lambda pid: os.kill(pid, signal.SIGKILL)
        )

    with pytest.raises(ChildFailedError, match="killed by signal 9"):
        asyncio.run(killed())


def test_a_cancelled_wait_kills_the_child() -> None:
    pids: list[int] = []

    async def go() -> None:
        forked = asyncio.Event()

        def started(pid: int) -> None:
            pids.append(pid)
            forked.set()

        task = asyncio.create_task(run_forked(lambda: time.sleep(60) or [], started=started))
        await asyncio.wait_for(forked.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await _gone_soon(pids[0], "after the cancel")

    asyncio.run(go())


def test_the_child_dies_with_its_parent() -> None:
    """A node killed -9 leaves no snapshot child behind (it would keep its CPU and its
    copy of the memory, and write to a pipe no one reads)."""
    script = textwrap.dedent(
        """
        import asyncio, time
        from keeperless.runtime.forked import run_forked
        def started(pid):
            print(pid, flush=True)
        asyncio.run(run_forked(lambda: time.sleep(60) or [], started=started))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert not _gone(child)
        parent.kill()
        parent.wait(10)
        _wait_gone(child, "after its parent was killed")
    finally:
        parent.kill()
        parent.wait(10)


def _image(topics: int) -> MetadataImage:
    delta = MetadataDelta(MetadataImage())
    delta.replay(r.FeatureLevelRecord(name="metadata.version", feature_level=21))
    for i in range(topics):
        tid = uuid.UUID(int=i + 1000)
        delta.replay(r.TopicRecord(name=f"t{i}", topic_id=tid))
        delta.replay(
            r.PartitionRecord(partition_id=0, topic_id=tid, replicas=[1], isr=[1], leader=1)
        )
    delta.offset = 10
    return delta.apply()


def _leader(tmp_path: Path) -> MetadataLog:
    mlog = MetadataLog(1, (1,), tmp_path, send=lambda _: None, snapshot_every_bytes=1)
    mlog.start()
    mlog.core.tick(mlog.core.next_deadline())
    mlog._process()
    mlog.core.tick(mlog.core.next_deadline())
    mlog._process()
    assert mlog.core.is_leader
    return mlog


def test_a_running_node_writes_its_snapshot_through_the_child(tmp_path: Path) -> None:
    image = _image(50)
    pids: list[int] = []

    async def go() -> None:
        mlog = _leader(tmp_path)
        mlog.snapshot_source = lambda: image
        real = mlog._snapshot_child_started
        mlog._snapshot_child_started = lambda pid: (pids.append(pid), real(pid))[1]  # type: ignore[method-assign]
        last = mlog.propose([r.TopicRecord(name="x", topic_id=uuid.uuid4())])
        await mlog.wait_committed(last)
        deadline = time.monotonic() + 20
        while (sid := mlog.raft_log.snapshot_id) is None or sid.end_offset == 0:
            assert time.monotonic() < deadline, "no snapshot written"
            await asyncio.sleep(0.02)
        data = mlog.raft_log.snapshot_data()
        _, loaded = image_of_snapshot(data, sid)
        assert sorted(t.name for t in loaded.topics.values()) == sorted(
            t.name for t in image.topics.values()
        )
        assert mlog.snapshot_errors == 0
        # the child's encoded batches are kept, for the next child to reuse
        kept = mlog._snapshot_writer._topics
        assert {tid: t for tid, (t, _) in kept.items()} == dict(image.topics)
        mlog.close()

    asyncio.run(go())
    assert pids, "the snapshot was not encoded in a child"
    assert pids[0] != os.getpid()


def test_closing_the_log_kills_a_snapshot_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def go() -> None:
        mlog = _leader(tmp_path)
        mlog.snapshot_source = lambda: _image(3)
        monkeypatch.setattr(mlog._snapshot_writer, "write", lambda *a: time.sleep(60) or [])
        last = mlog.propose([r.TopicRecord(name="x", topic_id=uuid.uuid4())])
        await mlog.wait_committed(last)
        deadline = time.monotonic() + 20
        while mlog._snapshot_child is None:
            assert time.monotonic() < deadline, "no snapshot child"
            await asyncio.sleep(0.02)
        child = mlog._snapshot_child
        mlog.close()
        await _gone_soon(child, "after the log closed")
        assert mlog._snapshot_task is not None
        await asyncio.wait_for(mlog._snapshot_task, 10)
        assert mlog.snapshot_errors == 0  # (stopping is not a failed snapshot)

    asyncio.run(go())
