"""Raft's safety properties, checked over the whole history of a simulation.

The simulator reports what it observes: election states written to disk, messages as
they leave a node (with that node's disk at that moment), every change to every node's
log (append, truncate, snapshot), high watermarks, entries handed to the state machine,
and every change to a voter's disk. The checker states the properties from the Raft
paper and KIP-595 on those observations alone, and keeps just enough state to check
each one incrementally, so that checking after every event costs about the same at the
end of a long run as at its start.

Properties:
  * election safety: at most one leader per epoch; epochs on disk never go back;
  * votes: a granted vote (and a candidate's vote for itself) is durable before it is
    sent; a voter's durable vote in an epoch never changes, across restarts too;
  * leader append-only: a leader never truncates its log nor appends another epoch's
    entries;
  * log matching: an entry is identified by (last offset, epoch); every copy of it on
    every node (voters and observers) has the same bytes and the same predecessor, so
    logs that share an entry share the whole prefix before it;
  * commitment: the high watermark of a leader advances only onto an entry of its own
    epoch; committed entries never change; no node believes more is committed than some
    leader committed; committed entries are durable on a majority of voters at every
    moment; a follower reports (fetches at) only offsets durable on its disk;
  * leader completeness: every leader's log holds every entry committed before it was
    elected, and every entry committed in an earlier epoch while it leads;
  * state-machine safety: a node applies only committed entries, in order, never loses
    an applied entry (truncation or snapshot), and snapshots hold exactly the committed
    values below their end.

With a dynamic voter set (KIP-853) a voter is a node id *and* a directory id, votes are
kept per disk, and:
  * committed entries are durable on enough voters of the latest committed voter set
    that every majority of it holds them (a majority, for an odd number of voters;
    majorities without the voters whose disks were replaced, who can never vote again),
    so no configuration a leader can be elected by loses them;
  * voter changes are made one at a time: a leader appends a voter change only when
    every voter change before it is committed and it has committed an entry of its own
    epoch (Ongaro's fix of single-server changes); the voter set in the batch that
    starts an epoch may only restate the current one.
"""

from __future__ import annotations

import bisect
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from keeperless.protocol.control import LEADER_CHANGE, control_type
from keeperless.protocol.records import CorruptBatchError, decode_records, iter_batches
from keeperless.raft import messages as m
from keeperless.raft.messages import Entry, SnapshotId
from keeperless.raft.quorum import majority
from keeperless.raft.state import ElectionState
from keeperless.raft.voters import Voter, VoterSet, voters_in_batch

Key = tuple[int, int]  # (last offset, epoch) names an entry, or the end of a snapshot


def key_of(e: Entry) -> Key:
    return (e.last_offset, e.epoch)


def snapshot_key(sid: SnapshotId) -> Key:
    return (sid.end_offset - 1, sid.epoch)


def entry_values(e: Entry) -> list[tuple[int, bytes]]:
    if e.control:
        return []
    return [(r.offset, r.value or b"") for r in decode_records(e.data)]


def snapshot_values(data: bytes) -> list[tuple[int, bytes]]:
    """The simulation's snapshot: the core's voter-set batch (dynamic quorums), then one
    batch whose record is the JSON of the applied values."""
    try:
        for pos, h in iter_batches(data, verify_crc=False):
            if not h.is_control:
                [r] = decode_records(data[pos : pos + h.size])
                return [(o, bytes.fromhex(v)) for o, v in json.loads(r.value or b"[]")]
    except CorruptBatchError:
        pass
    return []


def voters_of(e: Entry) -> VoterSet | None:
    """The voter set a control entry records (None: none)."""
    if not e.control:
        return None
    return voters_in_batch(e.data)[1]


def starts_epoch(e: Entry) -> bool:
    return e.control and any(control_type(r) == LEADER_CHANGE for r in decode_records(e.data))


@dataclass
class DiskView:
    """What a node has durably: election state, log entries and newest snapshot."""

    state: ElectionState
    entries: list[Entry] = field(default_factory=list)
    snapshot: tuple[SnapshotId, bytes] | None = None

    @property
    def start(self) -> int:
        return self.snapshot[0].end_offset if self.snapshot else 0

    @property
    def end(self) -> int:
        return self.entries[-1].last_offset + 1 if self.entries else self.start

    def index_at(self, offset: int) -> int:
        """Index of the entry holding ``offset`` (len(entries) if none)."""
        i = bisect.bisect_right(self.entries, offset, key=lambda e: e.base_offset) - 1
        if i >= 0 and self.entries[i].last_offset >= offset:
            return i
        return len(self.entries)

    def epoch_before(self, offset: int) -> int | None:
        """Epoch of the entry ending at ``offset - 1`` (of the snapshot if it ends there)."""
        if offset == 0:
            return 0
        if self.snapshot and self.snapshot[0].end_offset == offset:
            return self.snapshot[0].epoch
        i = self.index_at(offset - 1)
        if i < len(self.entries) and self.entries[i].last_offset == offset - 1:
            return self.entries[i].epoch
        return None


class SafetyChecker:
    def __init__(
        self,
        voters: tuple[int, ...],
        fail: Callable[[str], None],
        initial: VoterSet | None = None,
        nodes: tuple[int, ...] = (),
    ) -> None:
        """``initial``: the bootstrap voter set of a dynamic quorum (None: static
        ``voters``); ``nodes``: every node, for a dynamic quorum's durability count."""
        self.voters = voters
        self.dynamic = initial is not None
        self.config = initial if initial is not None else VoterSet.static(voters)
        self.dirs: dict[int, uuid.UUID | None] = {v.id: v.directory_id for v in self.config}
        self.gen: dict[int, int] = {}  # node -> how many times its disk was replaced
        self.fail = fail
        self.leaders: dict[int, int] = {}  # epoch -> leader
        self.votes: dict[tuple[int, int], int] = {}  # (epoch, voter) -> candidate
        self.disk_epoch: dict[int, int] = {}
        # log matching: entry key -> (entry, key of the entry before it)
        self.canon: dict[Key, tuple[Entry, Key | None]] = {}
        self.committed: list[Entry] = []  # in offset order, contiguous from 0
        self.committed_bases: list[int] = []
        self.committed_end = 0
        self.committed_values: dict[int, bytes] = {}
        self.committed_epochs: set[int] = set()
        self.durable_upto: dict[int, int] = {v: 0 for v in (*voters, *nodes)}
        self.current_leaders: dict[int, tuple[int, Callable[[int, int], list[Entry]]]] = {}

    # -- helpers --------------------------------------------------------------------

    def committed_at(self, offset: int) -> Entry | None:
        i = bisect.bisect_right(self.committed_bases, offset) - 1
        if i >= 0 and self.committed[i].last_offset >= offset:
            return self.committed[i]
        return None

    def _is_committed(self, e: Entry) -> bool:
        return self.committed_at(e.base_offset) == e and e.base_offset < self.committed_end

    # -- election state and messages ----------------------------------------------------

    def _votes(self, node: int) -> bool:
        """Whether ``node``'s votes are checked (any node's, in a dynamic quorum: a
        replica may vote for a candidate whose voter set it has not seen yet)."""
        return self.dynamic or node in self.voters

    def wiped(self, node: int, directory_id: uuid.UUID | None) -> None:
        """``node``'s disk was replaced by an empty one with a new directory id."""
        self.gen[node] = self.gen.get(node, 0) + 1
        self.dirs[node] = directory_id
        self.disk_epoch.pop(node, None)

    def state_written(self, node: int, old: ElectionState, new: ElectionState) -> None:
        if new.epoch < self.disk_epoch.get(node, 0):
            self.fail(f"node {node}: epoch on disk went back to {new.epoch}")
        self.disk_epoch[node] = new.epoch
        if not self._votes(node) or new.voted_id < 0:
            if self._votes(node) and old.epoch == new.epoch and old.voted_id >= 0:
                self.fail(
                    f"node {node}: durable vote for {old.voted_id} in epoch {new.epoch} was erased"
                )
            return
        key = node if not self.gen.get(node) else node * 1000 + self.gen[node]
        prev = self.votes.setdefault((new.epoch, key), new.voted_id)
        if prev != new.voted_id:
            self.fail(
                f"voter {node} voted twice in epoch {new.epoch}: for {prev}, then for "
                f"{new.voted_id}"
            )

    def sent(self, node: int, msg: m.Message, disk: DiskView) -> None:
        s = disk.state
        if isinstance(msg, m.VoteResponse) and msg.granted and not msg.pre_vote:
            if self._votes(node) and (s.epoch, s.voted_id) != (msg.epoch, msg.dst):
                self.fail(
                    f"voter {node} granted its vote in epoch {msg.epoch} to {msg.dst} "
                    f"before it was durable (disk: epoch {s.epoch}, voted {s.voted_id})"
                )
        elif isinstance(msg, m.VoteRequest) and not msg.pre_vote:
            if (s.epoch, s.voted_id) != (msg.epoch, node):
                self.fail(
                    f"candidate {node} asked for votes in epoch {msg.epoch} before its "
                    f"own vote was durable (disk: epoch {s.epoch}, voted {s.voted_id})"
                )
        elif isinstance(msg, m.BeginQuorumEpoch) or (
            isinstance(msg, m.FetchResponse) and msg.error == m.NONE and msg.leader_id == node
        ):
            if (s.epoch, s.leader_id) != (msg.epoch, node):
                self.fail(
                    f"node {node} acted as leader of epoch {msg.epoch} before that was "
                    f"durable (disk: epoch {s.epoch}, leader {s.leader_id})"
                )
        elif isinstance(msg, m.FetchRequest) and (
            msg.fetch_offset > disk.end
            or (
                disk.epoch_before(msg.fetch_offset) not in (msg.last_fetched_epoch, None)
                and msg.fetch_offset > disk.start
            )
        ):
            self.fail(
                f"node {node} fetched at {msg.fetch_offset} (epoch "
                f"{msg.last_fetched_epoch}) but its disk holds up to {disk.end}"
            )

    # -- logs -------------------------------------------------------------------------

    def leader_elected(
        self, node: int, epoch: int, read: Callable[[int, int], list[Entry]], start: int
    ) -> None:
        prev = self.leaders.setdefault(epoch, node)
        if prev != node:
            self.fail(f"two leaders in epoch {epoch}: {prev} and {node}")
        self.current_leaders[node] = (epoch, read)
        # leader completeness: everything committed so far is in the new leader's log
        self._holds(node, epoch, read, max(start, 0), self.committed_end)

    def forget_leader(self, node: int, epoch: int) -> None:
        """``node`` crashed while its leadership of ``epoch`` was being written, before
        the write: nothing it did as that leader left it or reached its disk."""
        if self.leaders.get(epoch) == node:
            del self.leaders[epoch]
        for k in [k for k in self.canon if k[1] == epoch]:
            del self.canon[k]
        self.current_leaders.pop(node, None)

    def leader_gone(self, node: int) -> None:
        self.current_leaders.pop(node, None)

    def _holds(
        self, node: int, epoch: int, read: Callable[[int, int], list[Entry]], lo: int, hi: int
    ) -> None:
        if lo >= hi:
            return
        i = bisect.bisect_right(self.committed_bases, lo) - 1
        want = self.committed[max(i, 0) :]
        got = {e.base_offset: e for e in read(lo, 10**9)}
        for e in want:
            if e.base_offset >= hi:
                break
            if e.last_offset < lo:
                continue
            if got.get(e.base_offset) != e:
                self.fail(
                    f"leader {node} of epoch {epoch} lacks committed entry "
                    f"{e.base_offset}-{e.last_offset} of epoch {e.epoch}"
                )

    def appended(
        self,
        node: int,
        prev: Key | None,
        entries: list[Entry],
        leader_epoch: int | None,
        read: Callable[[int, int], list[Entry]] | None = None,
    ) -> None:
        """``node`` appended ``entries`` after the entry (or snapshot end) ``prev``;
        ``leader_epoch`` is set when it appends as the leader of that epoch (and
        ``read`` reads its log)."""
        if leader_epoch is not None:
            prior = self.leaders.setdefault(leader_epoch, node)
            if prior != node:
                self.fail(f"two leaders in epoch {leader_epoch}: {prior} and {node}")
        for e in entries:
            k = key_of(e)
            known = self.canon.get(k)
            if known is None:
                if leader_epoch != e.epoch:
                    self.fail(
                        f"node {node} appended entry {e.base_offset} of epoch {e.epoch} "
                        "that no leader of that epoch created"
                    )
                prior = self.leaders.setdefault(e.epoch, node)
                if prior != node:
                    self.fail(f"entry of epoch {e.epoch} created by {node}, not by {prior}")
                self.canon[k] = (e, prev)
                if read is not None and voters_of(e) is not None:
                    self._voter_change(node, e, read)
            else:
                entry, before = known
                if entry != e:
                    self.fail(f"node {node}: two different entries named {k}")
                if before != prev:
                    self.fail(
                        f"log matching: node {node} holds entry {k} after {prev}, "
                        f"its leader wrote it after {before}"
                    )
            if leader_epoch is not None and e.epoch != leader_epoch:
                self.fail(f"leader {node} of epoch {leader_epoch} appended epoch {e.epoch}")
            prev = k

    def _voter_change(self, node: int, e: Entry, read: Callable[[int, int], list[Entry]]) -> None:
        """Leader ``node`` creates entry ``e``, which records a voter set."""
        new = voters_of(e)
        before = [x for x in read(0, 10**9) if x.last_offset < e.base_offset]
        earlier = self.config
        for x in before:
            vs = voters_of(x)
            if vs is not None:
                earlier = vs
            if x.base_offset >= self.committed_end and vs is not None:
                self.fail(
                    f"leader {node} appended voter set {new} at {e.base_offset} while the voter "
                    f"change at {x.base_offset} ({vs}) is not committed"
                )
        if starts_epoch(e):
            keys = {(v.id, v.directory_id) for v in new or ()}
            if keys != {(v.id, v.directory_id) for v in earlier}:
                self.fail(f"leader {node} changed the voters to {new} as it took office")
            return
        if e.epoch not in self.committed_epochs:
            self.fail(
                f"leader {node} of epoch {e.epoch} changed the voters to {new} before it "
                "committed an entry of its epoch"
            )

    def truncated(
        self, node: int, offset: int, removed: list[Entry], leader: bool, applied_end: int
    ) -> None:
        if not removed:
            return
        if leader:
            self.fail(f"leader {node} truncated its log to {offset}")
        for e in removed:
            if self._is_committed(e):
                self.fail(f"node {node} truncated committed entry {e.base_offset}")
            if e.base_offset < applied_end:
                self.fail(
                    f"node {node} truncated entry {e.base_offset}, which it had applied "
                    f"(applied up to {applied_end})"
                )

    def snapshot_made(
        self, node: int, sid: SnapshotId, data: bytes, applied_end: int | None
    ) -> None:
        """A snapshot taken (``applied_end`` None) or installed by ``node``."""
        if applied_end is not None and sid.end_offset < applied_end:
            self.fail(
                f"node {node} replaced its state by snapshot {sid}, which ends below what "
                f"it had applied ({applied_end})"
            )
        if sid.end_offset > self.committed_end:
            self.fail(f"node {node}: snapshot {sid} covers uncommitted entries")
        last = self.committed_at(sid.end_offset - 1)
        if last is None or key_of(last) != snapshot_key(sid):
            self.fail(f"node {node}: snapshot {sid} does not end at a committed entry")
        got = dict(snapshot_values(data))
        want = {o: v for o, v in self.committed_values.items() if o < sid.end_offset}
        if got != want:
            self.fail(f"node {node}: snapshot {sid} holds other values than were committed")

    # -- commitment and application -------------------------------------------------------

    def high_watermark(
        self,
        node: int,
        hw: int,
        leader_epoch: int | None,
        read: Callable[[int, int], list[Entry]],
    ) -> None:
        """``node``'s high watermark is now ``hw`` (it went up); ``leader_epoch`` is set
        when the node is the leader of that epoch."""
        if leader_epoch is None:
            if hw > self.committed_end:
                self.fail(
                    f"node {node} believes {hw} is committed; leaders committed only "
                    f"{self.committed_end}"
                )
            return
        tip = read(hw - 1, 1)
        if not tip or tip[0].base_offset > hw - 1 or tip[0].epoch != leader_epoch:
            self.fail(
                f"leader {node} of epoch {leader_epoch} moved its high watermark to {hw}, "
                "onto an entry of an earlier epoch"
            )
        if hw <= self.committed_end:
            for e in read(max(hw - 1, 0), 1):
                if self.committed_at(e.base_offset) not in (e, None):
                    self.fail(f"leader {node} committed another entry at {e.base_offset}")
            return
        start = self.committed_end
        new = [e for e in read(start, 10**9) if e.last_offset < hw]
        for e in new:
            if e.base_offset < start:
                if self.committed_at(e.base_offset) != e:
                    self.fail(f"leader {node}: committed entry at {e.base_offset} changed")
                continue
            if e.base_offset != self.committed_end:
                self.fail(f"leader {node}: committed a hole at {self.committed_end}")
            self.committed.append(e)
            self.committed_bases.append(e.base_offset)
            self.committed_end = e.last_offset + 1
            self.committed_values.update(entry_values(e))
            self.committed_epochs.add(e.epoch)
            vs = voters_of(e)
            if vs is not None:
                self.config = vs
        if self.committed_end < hw:
            self.fail(f"leader {node}: high watermark {hw} beyond the end of its log")
        # leader completeness for leaders elected earlier that lead still
        for other, (epoch, other_read) in self.current_leaders.items():
            if other != node and epoch > leader_epoch:
                self._holds(other, epoch, other_read, start, hw)

    def applied(self, node: int, e: Entry, applied_end: int) -> None:
        """``node`` hands ``e`` to its state machine, having applied up to ``applied_end``."""
        if e.base_offset != applied_end:
            self.fail(f"node {node} applied entry {e.base_offset} after {applied_end}")
        if not self._is_committed(e):
            self.fail(f"node {node} applied entry {e.base_offset}, which is not committed")

    # -- durability -------------------------------------------------------------------

    def disk_changed(self, voter: int, disk: DiskView, changed_from: int | None) -> None:
        """``voter``'s disk changed at ``changed_from`` and after (None: anywhere)."""
        if voter not in self.durable_upto:
            return
        upto = 0 if changed_from is None else min(self.durable_upto[voter], changed_from)
        self.durable_upto[voter] = self._extend(disk, upto)

    def _extend(self, disk: DiskView, upto: int) -> int:
        upto = max(upto, disk.start)
        i = disk.index_at(upto)
        while i < len(disk.entries) and upto < self.committed_end:
            e = disk.entries[i]
            if e.base_offset != upto or self.committed_at(upto) != e:
                break
            upto = e.last_offset + 1
            i += 1
        return upto

    def holders(self, disks: dict[int, DiskView], end: int) -> set[int]:
        """The voters of the committed voter set whose disks (the voter's own: same
        directory id) hold every committed entry below ``end``."""
        out = set()
        for v in self.config:
            if v.id not in self.durable_upto or not self._same_disk(v):
                continue
            upto = self.durable_upto[v.id]
            if upto < end:
                upto = self.durable_upto[v.id] = self._extend(disks[v.id], upto)
            if upto >= end:
                out.add(v.id)
        return out

    def _same_disk(self, v: Voter) -> bool:
        """Whether voter ``v`` is its node's disk now (a static voter: by id only)."""
        return v.directory_id is None or self.dirs.get(v.id) == v.directory_id

    def need(self) -> int:
        """How many voters of the committed set must hold an entry so that every
        majority of the set that can still vote holds it: a voter whose disk was
        replaced (another directory id now) never votes again, so no majority counts it.
        """
        n = len(self.config)
        alive = sum(1 for v in self.config if self._same_disk(v))
        return alive - majority(n) + 1

    def check_durable(self, disks: dict[int, DiskView]) -> None:
        """Every committed entry is on the disks of enough voters of the committed voter
        set that each majority of it holds them."""
        end = self.committed_end
        have = self.holders(disks, end)
        if len(have) < self.need():
            self.fail(
                f"committed entries up to {end} are durable on {len(have)} voters of "
                f"{self.config} only ({dict(self.durable_upto)})"
            )
