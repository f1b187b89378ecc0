"""What reaches the disk, and in which order: a renamed or created file is durable only
once its directory is fsynced, and a vote only once `quorum-state` is. These tests
record every fsync (by path) and rename, so a missing directory fsync turns them red."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from keeperless.protocol.records import build_batch, iter_batches
from keeperless.raft import messages as m
from keeperless.raft.messages import Entry, SnapshotId
from keeperless.raft.state import ElectionState
from keeperless.runtime.metadata_log import MetadataLog
from keeperless.runtime.raft_log import FileRaftLog
from keeperless.storage.durable import write_atomically
from keeperless.storage.log import LogConfig, PartitionLog


@pytest.fixture
def disk_ops(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every ("fsync", path) and ("replace", destination) in the order they happen."""
    ops: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        ops.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: str | Path, dst: str | Path) -> None:
        real_replace(src, dst)
        ops.append(("replace", str(dst)))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return ops


def _after(ops: list[tuple[str, str]], op: tuple[str, str], then: tuple[str, str]) -> bool:
    """Whether ``then`` follows the last ``op``."""
    if op not in ops:
        return False
    last = len(ops) - 1 - ops[::-1].index(op)
    return then in ops[last + 1 :]


def test_an_atomic_write_syncs_the_file_then_its_name(
    tmp_path: Path, disk_ops: list[tuple[str, str]]
) -> None:
    target = tmp_path / "quorum-state"
    write_atomically(target, b"new")
    assert disk_ops == [
        ("fsync", str(tmp_path / "quorum-state.tmp")),
        ("replace", str(target)),
        ("fsync", str(tmp_path)),
    ]
    assert target.read_bytes() == b"new"


def test_a_torn_temporary_file_is_never_read(tmp_path: Path) -> None:
    """A crash while writing leaves the old file whole and a torn `.tmp` beside it: the
    old state is what a restart reads, and the next write replaces the torn file."""
    state_dir = tmp_path / "__cluster_metadata-0"
    state_dir.mkdir()
    old = ElectionState(3, -1, 2, (1, 2, 3))
    write_atomically(state_dir / "quorum-state", old.encode())
    (state_dir / "quorum-state.tmp").write_bytes(b'{"leaderId": 1, "leaderEp')  # torn
    mlog = MetadataLog(1, (1, 2, 3), tmp_path, send=lambda _: None)
    assert mlog.core.state == old
    assert mlog.core.state.voted_id == 2  # the vote of epoch 3 is remembered
    mlog.close()


def test_a_damaged_quorum_state_stops_the_node_with_its_name(tmp_path: Path) -> None:
    """`quorum-state` itself is only ever replaced whole; if it is damaged anyway (a
    disk fault), starting with no vote could vote twice in an epoch: refuse, and say
    which file."""
    state_dir = tmp_path / "__cluster_metadata-0"
    state_dir.mkdir()
    (state_dir / "quorum-state").write_bytes(b'{"leaderId": 1, "leaderEp')
    with pytest.raises(ValueError, match="quorum-state"):
        MetadataLog(1, (1, 2, 3), tmp_path, send=lambda _: None)


def test_the_election_state_is_durable_with_its_name_before_anything_is_sent(
    tmp_path: Path, disk_ops: list[tuple[str, str]]
) -> None:
    """A candidate's vote for itself is in `quorum-state`, renamed into place and its
    directory fsynced, before its first vote request leaves."""
    sent: list[tuple[m.Message, list[tuple[str, str]]]] = []
    mlog = MetadataLog(1, (1, 2, 3), tmp_path, send=lambda msg: sent.append((msg, list(disk_ops))))
    mlog.start()
    mlog.core.tick(mlog.core.next_deadline())  # the election timer fires: pre-vote
    mlog._process()
    pre = next(msg for msg, _ in sent if isinstance(msg, m.VoteRequest) and msg.dst == 2)
    assert pre.pre_vote
    sent.clear()
    mlog.step(m.VoteResponse(2, 1, pre.epoch, True, -1, True, request_id=pre.request_id))
    requests = [(msg, ops) for msg, ops in sent if isinstance(msg, m.VoteRequest)]
    assert requests, "the candidate asked for no votes"
    state_dir = tmp_path / "__cluster_metadata-0"
    for msg, ops_before in requests:
        assert not msg.pre_vote
        assert _after(
            ops_before, ("replace", str(state_dir / "quorum-state")), ("fsync", str(state_dir))
        ), "a vote request left before its election state was durable by name"
    assert ElectionState.decode((state_dir / "quorum-state").read_bytes()).voted_id == 1
    mlog.close()


def test_a_new_segment_is_durable_by_name(tmp_path: Path, disk_ops: list[tuple[str, str]]) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig(segment_bytes=200), 0)
    batch = build_batch([(None, b"x" * 150, ())])
    log.append(batch, list(iter_batches(batch)), 0)
    first = list(disk_ops)
    assert ("fsync", str(tmp_path / "t-0")) in first  # the first segment, and the dir
    assert ("fsync", str(tmp_path)) in first
    disk_ops.clear()
    data = bytearray(batch)
    data[0:8] = (1).to_bytes(8, "big")
    log.append(bytes(data), list(iter_batches(bytes(data))), 0)  # rolls
    assert len(list((tmp_path / "t-0").glob("*.log"))) == 2
    assert ("fsync", str(tmp_path / "t-0")) in disk_ops
    log.close()


def _entry(base: int, epoch: int) -> Entry:
    data = bytearray(build_batch([(None, b"r%d" % base, ())]))
    data[0:8] = base.to_bytes(8, "big")
    data[12:16] = epoch.to_bytes(4, "big")
    return Entry(base, base, epoch, bytes(data))


def test_snapshots_and_truncations_are_durable_by_name(
    tmp_path: Path, disk_ops: list[tuple[str, str]]
) -> None:
    d = tmp_path / "__cluster_metadata-0"
    log = FileRaftLog(d, segment_bytes=120)
    log.append([_entry(i, 1) for i in range(6)])
    disk_ops.clear()
    log.take_snapshot(SnapshotId(2, 1), b"image")
    name = str(d / "00000000000000000002-0000000001.checkpoint")
    assert _after(disk_ops, ("replace", name), ("fsync", str(d)))
    disk_ops.clear()
    segments = len(list(d.glob("*.log")))
    log.truncate_to(3)
    assert len(list(d.glob("*.log"))) < segments  # whole segments went
    assert ("fsync", str(d)) in disk_ops
    log.close()


def test_a_node_stopping_during_a_metadata_fsync_closes_its_log_after_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The fsync runs in a thread; a stop meanwhile closed the log under it, and its
    completion then read the closed log (an IndexError traceback on every such stop,
    found by the fault harness's rolls): the log is closed once the fsync is done."""
    import asyncio
    import threading
    import time

    async def go() -> None:
        mlog = MetadataLog(1, (1,), tmp_path, send=lambda _: None)
        entered = threading.Event()
        real_flush = mlog.raft_log.flush

        def slow_flush() -> None:
            entered.set()
            time.sleep(0.2)
            real_flush()  # the descriptors must still be open here

        mlog.raft_log.flush = slow_flush  # type: ignore[method-assign]
        mlog._request_flush()
        await asyncio.get_running_loop().run_in_executor(None, entered.wait, 5)
        mlog.close()
        assert not mlog.raft_log.plog.closed  # not under the fsync's feet
        for _ in range(100):
            if mlog.raft_log.plog.closed:
                break
            await asyncio.sleep(0.01)
        assert mlog.raft_log.plog.closed

    asyncio.run(go())
    assert "Traceback" not in caplog.text
    assert "halting" not in caplog.text


def test_a_response_arriving_after_the_stop_is_ignored(tmp_path: Path) -> None:
    """Seed 101: a Raft fetch response that arrived after the node stopped stepped the
    core over the closed log (IndexError in an event-loop callback)."""
    sent: list[m.Message] = []
    mlog = MetadataLog(1, (1, 2, 3), tmp_path, send=sent.append)
    mlog.start()
    mlog.core.tick(mlog.core.next_deadline())
    mlog._process()
    pre = next(msg for msg in sent if isinstance(msg, m.VoteRequest) and msg.dst == 2)
    mlog.close()
    mlog.step(m.VoteResponse(2, 1, pre.epoch, True, -1, True, request_id=pre.request_id))
