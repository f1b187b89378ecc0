"""The transaction coordinator's rules for one partition of ``__transaction_state`` (a
shard on the coordinator runtime): the state of each transactional id, changed only by
replaying the partition's records. Each operation checks a request against that state
and returns the record of the id's next state with the answer to give once it is
committed (Kafka's TransactionCoordinator handlers and TransactionMetadata's
``prepare*`` transitions; a transition outside Kafka's table is refused, not written).

Kafka keeps in memory what its records do not hold (``lastProducerEpoch``) and sets it
when a write completes; here the shard remembers the whole next state of each write it
asked for and takes it when that record is replayed. A shard read from the log knows
only what the records hold, as Kafka's after a failover.

States (Kafka's numbers): Empty 0, Ongoing 1, PrepareCommit 2, PrepareAbort 3,
CompleteCommit 4, CompleteAbort 5, Dead 6, PrepareEpochFence 7.

Transaction version 2 (KIP-890 part 2), chosen per request as Kafka does (EndTxn v5,
AddPartitionsToTxn v5 from a partition leader adding for a Produce v12+): every
transaction ends with an epoch bump, its markers carry the bumped epoch, and EndTxn
answers the producer id and epoch of the next transaction; a late write or marker of an
ended transaction is then older than the producer's epoch everywhere and refused."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.coordinator.outcome import Outcome, Record
from keeperless.coordinator.txn_records import (
    TxnMetadata,
    TxnStatus,
    parse_txn_record,
    txn_key,
    txn_value,
    valid_transition,
    value_version,
)

__all__ = ["MAX_EPOCH", "Reply", "TxnRules", "TxnShard"]

MAX_EPOCH = 32767 - 1  # past it the producer gets a new id (Kafka's rule)
_PREPARING = (TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT, TxnStatus.PREPARE_EPOCH_FENCE)
_IDLE = (TxnStatus.EMPTY, TxnStatus.COMPLETE_COMMIT, TxnStatus.COMPLETE_ABORT)
# a transaction ending or ended (EndTxn's retries)
_ENDING = (TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT, TxnStatus.COMPLETE_COMMIT,
           TxnStatus.COMPLETE_ABORT)  # fmt: skip

Partition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TxnRules:
    """The broker's transaction.* keys the rules read."""

    max_timeout_ms: int = 900000
    id_expiration_ms: int = 604800000


@dataclass(frozen=True, slots=True)
class Reply:
    """An operation's answer. ``end``: the transaction now prepared to end (its markers
    are to be written, then its completion); ``need_producer_id``: ask again with a new
    producer id from the controller."""

    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1
    end: str | None = None
    need_producer_id: bool = False
    partition_errors: tuple[tuple[Partition, ErrorCode], ...] = ()


_NEED_ID = Reply(ErrorCode.none, need_producer_id=True)


def _reply(error: ErrorCode, **kw: Any) -> Outcome[Reply]:
    return Outcome([], Reply(error, **kw))


def _fresh_epoch(md: TxnMetadata) -> bool:
    """No transaction ended in the producer's current epoch: it was just given (Empty),
    or the last transaction was a TV2 one, whose end bumped it."""
    return md.state == TxnStatus.EMPTY or md.client_tv >= 2


def next_ids(md: TxnMetadata) -> tuple[int, int]:
    """The producer id and epoch a producer uses after an EndTxn v5."""
    return (
        (md.next_producer_id, 0)
        if md.next_producer_id != -1
        else (md.producer_id, md.producer_epoch)
    )


class TxnShard:
    def __init__(self, rules: TxnRules) -> None:
        self.rules = rules
        self.txns: dict[str, TxnMetadata] = {}
        # the offset of the record that prepared each id's transaction to end: which
        # transaction a completion is for (a TV1 producer's next one has the same epoch)
        self.prepared_at: dict[str, int] = {}
        # the next state of each write asked for, by id, with its record's value: taken
        # when that record is replayed (what the record does not hold included)
        self._transit: dict[str, tuple[bytes | None, TxnMetadata | None]] = {}

    # -- replay ---------------------------------------------------------------------------

    def replay(
        self,
        key: bytes,
        value: bytes | None,
        offset: int,
        producer_id: int = -1,
        transactional: bool = False,
    ) -> None:
        parsed = parse_txn_record(key, value)
        if parsed is None:
            return
        tid, md = parsed
        transit = self._transit.pop(tid, None)
        if transit is not None and transit[0] == value:
            md = transit[1]
        if md is None:
            self.txns.pop(tid, None)
        else:
            self.txns[tid] = md
        if md is not None and md.state in (TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT):
            self.prepared_at[tid] = offset
        else:
            self.prepared_at.pop(tid, None)

    def replay_marker(self, producer_id: int, commit: bool) -> None:
        """(No transaction writes to the transaction log.)"""

    def carry_over(self, previous: TxnShard) -> None:
        """Read again after a write not confirmed, in the same leadership: the epochs
        before the bumps this coordinator made (Kafka keeps its in-memory state then)."""
        for tid, md in self.txns.items():
            old = previous.txns.get(tid)
            if (
                old is not None
                and md.prev_epoch == -1
                and (old.producer_id, old.producer_epoch) == (md.producer_id, md.producer_epoch)
            ):
                md.prev_epoch = old.prev_epoch

    def preparing(self) -> list[TxnMetadata]:
        """Transactions prepared to end: their markers are still to be written (after a
        load, the previous coordinator's)."""
        return [
            md
            for md in self.txns.values()
            if md.state in (TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT)
        ]

    # -- writing --------------------------------------------------------------------------

    def _write(self, new: TxnMetadata, finalized_tv: int) -> list[Record]:
        tid = new.transactional_id
        value = txn_value(new, value_version(new, finalized_tv))
        self._transit[tid] = (value, new)
        return [(txn_key(tid), value)]

    def _transition(
        self, md: TxnMetadata, now_ms: int, finalized_tv: int, **changes: Any
    ) -> list[Record] | ErrorCode:
        """The record of ``md`` with ``changes``; INVALID_TXN_STATE for a state change
        outside Kafka's table of valid transitions (not written)."""
        state = changes.get("state", md.state)
        if not valid_transition(md.state, state):
            return ErrorCode.invalid_txn_state
        return self._write(dataclasses.replace(md, **changes, update_ms=now_ms), finalized_tv)

    def _begin_end(
        self,
        md: TxnMetadata,
        commit: bool,
        bump: bool,
        now_ms: int,
        finalized_tv: int,
        new_producer_id: int | None,
        tv: int | None = None,
    ) -> Outcome[Reply]:
        """PrepareCommit/PrepareAbort; the markers follow once it is written. The epoch is
        bumped when the coordinator aborts on its own (fencing the producer) and at the end
        of every TV2 transaction; a TV2 producer whose epoch runs out gets a new producer
        id once the transaction is complete."""
        state = TxnStatus.PREPARE_COMMIT if commit else TxnStatus.PREPARE_ABORT
        epoch = md.producer_epoch + 1 if bump else md.producer_epoch
        prev = md.producer_epoch if bump else md.prev_epoch
        tv = md.client_tv if tv is None else tv
        next_pid = -1
        if bump and tv >= 2 and md.producer_epoch >= MAX_EPOCH:
            if new_producer_id is None:
                return Outcome([], _NEED_ID)
            next_pid = new_producer_id
        records = self._transition(
            md, now_ms, finalized_tv, state=state, producer_epoch=epoch, prev_epoch=prev,
            client_tv=tv, next_producer_id=next_pid,
        )  # fmt: skip
        if isinstance(records, ErrorCode):
            return _reply(records)
        new = self._transit[md.transactional_id][1]
        assert new is not None
        pid, epoch = next_ids(new)
        return Outcome(records, Reply(ErrorCode.none, pid, epoch, end=md.transactional_id))

    # -- InitProducerId ---------------------------------------------------------------------

    def init_producer_id(
        self,
        tid: str,
        timeout_ms: int,
        hint_pid: int,
        hint_epoch: int,
        now_ms: int,
        finalized_tv: int,
        new_producer_id: int | None = None,
    ) -> Outcome[Reply]:
        if not 0 < timeout_ms <= self.rules.max_timeout_ms:
            return _reply(ErrorCode.invalid_transaction_timeout)
        md = self.txns.get(tid)
        if md is None:
            if new_producer_id is None:
                return Outcome([], _NEED_ID)
            md = TxnMetadata(tid, new_producer_id, -1, timeout_ms, TxnStatus.EMPTY)
            new_producer_id = None  # used
        if md.state in _PREPARING:
            return _reply(ErrorCode.concurrent_transactions)
        # KIP-360: a producer naming its id and epoch bumps them (after an abortable
        # error), also when the coordinator aborted its transaction with the next epoch
        if hint_pid >= 0 and (
            hint_pid != md.producer_id or hint_epoch not in (md.producer_epoch, md.prev_epoch)
        ):
            return _reply(ErrorCode.producer_fenced)
        if md.state == TxnStatus.ONGOING:
            # the previous producer's transaction is aborted first (fencing it); the new
            # one asks again until that is done
            out = self._begin_end(md, False, True, now_ms, finalized_tv, new_producer_id)
            if not out.records:
                return out  # refused, or a producer id is needed first
            return Outcome(out.records, Reply(ErrorCode.concurrent_transactions, end=tid))
        pid, epoch = md.producer_id, md.producer_epoch + 1
        if epoch > MAX_EPOCH:
            if new_producer_id is None:
                return Outcome([], _NEED_ID)
            pid, epoch = new_producer_id, 0
        records = self._transition(
            md, now_ms, finalized_tv, producer_id=pid, producer_epoch=epoch,
            timeout_ms=timeout_ms, state=TxnStatus.EMPTY, partitions=set(), start_ms=-1,
        )  # fmt: skip
        if isinstance(records, ErrorCode):
            return _reply(records)
        return Outcome(records, Reply(ErrorCode.none, pid, epoch))

    # -- adding partitions ----------------------------------------------------------------

    def producer_error(self, tid: str, pid: int, epoch: int) -> ErrorCode | None:
        md = self.txns.get(tid)
        if md is not None and pid == md.next_producer_id and md.state in _PREPARING:
            return ErrorCode.concurrent_transactions  # TV2: its epoch ran out
        if md is None or md.producer_id != pid:
            return ErrorCode.invalid_producer_id_mapping
        if md.producer_epoch != epoch:
            return ErrorCode.producer_fenced
        if md.state in _PREPARING:
            return ErrorCode.concurrent_transactions
        return None

    def _add(
        self, md: TxnMetadata, parts: set[Partition], now_ms: int, finalized_tv: int, tv: int
    ) -> list[Record] | ErrorCode:
        """Add ``parts`` to the producer's transaction, beginning one if none is open
        (``tv`` 2: a partition leader adding for a TV2 producer's Produce, KIP-890)."""
        if md.state == TxnStatus.ONGOING and parts <= md.partitions and md.client_tv == tv:
            return []
        start = md.start_ms if md.state == TxnStatus.ONGOING else now_ms
        return self._transition(
            md, now_ms, finalized_tv, state=TxnStatus.ONGOING, partitions=md.partitions | parts,
            start_ms=start, client_tv=tv,
        )  # fmt: skip

    def add_partitions(
        self,
        tid: str,
        pid: int,
        epoch: int,
        wanted: list[Partition],
        unknown: Iterable[Partition],
        verify_only: bool,
        tv: int,
        now_ms: int,
        finalized_tv: int,
    ) -> Outcome[Reply]:
        """AddPartitionsToTxn (``verify_only``: KIP-890 part 1's check by a partition
        leader); ``unknown``: the partitions the metadata does not have. The answer's
        partition errors name each partition's error."""
        err = self.producer_error(tid, pid, epoch)
        errors: dict[Partition, ErrorCode] = {}
        records: list[Record] = []
        if err is None:
            md = self.txns[tid]
            errors = dict.fromkeys(unknown, ErrorCode.unknown_topic_or_partition)
            if errors:
                err = ErrorCode.operation_not_attempted
            elif verify_only or (tv >= 2 and md.state in _IDLE and not _fresh_epoch(md)):
                # (a TV2 add begins a transaction only with an epoch no transaction
                # ended in: else a late write of a TV1 transaction, same epoch, would
                # open one; a producer moving to TV2 aborts once to get a new epoch)
                ongoing = md.partitions if md.state == TxnStatus.ONGOING else set()
                errors = {k: ErrorCode.transaction_abortable for k in wanted if k not in ongoing}
                err = ErrorCode.none
            else:
                added = self._add(md, set(wanted), now_ms, finalized_tv, tv)
                if isinstance(added, ErrorCode):
                    err = added
                else:
                    records, err = added, ErrorCode.none
        code = err or ErrorCode.none
        per = tuple((k, errors.get(k, code)) for k in wanted)
        return Outcome(records, Reply(code, partition_errors=per))

    def add_offsets(
        self, tid: str, pid: int, epoch: int, offsets_partition: Partition, now_ms: int,
        finalized_tv: int,
    ) -> Outcome[Reply]:  # fmt: skip
        err = self.producer_error(tid, pid, epoch)
        if err is not None:
            return _reply(err)
        added = self._add(self.txns[tid], {offsets_partition}, now_ms, finalized_tv, 0)
        if isinstance(added, ErrorCode):
            return _reply(added)
        return Outcome(added, Reply(ErrorCode.none))

    # -- ending ---------------------------------------------------------------------------

    def end_txn(
        self,
        tid: str,
        pid: int,
        epoch: int,
        commit: bool,
        tv: int,
        now_ms: int,
        finalized_tv: int,
        new_producer_id: int | None = None,
    ) -> Outcome[Reply]:
        """EndTxn; the answer carries (v5, TV2) the producer id and epoch of the
        producer's next transaction."""
        md = self.txns.get(tid)
        if md is None:
            return _reply(ErrorCode.invalid_producer_id_mapping)

        def ok(err: ErrorCode = ErrorCode.none) -> Outcome[Reply]:
            nxt = next_ids(md) if err == ErrorCode.none else (-1, -1)
            return _reply(err, producer_id=nxt[0], producer_epoch=nxt[1])

        # TV2 retries: the epoch was bumped at the end (or ran out: a new producer id)
        overflowed = (
            md.client_tv >= 2 and pid == md.prev_producer_id and epoch == MAX_EPOCH
            and md.producer_epoch == 0
        )  # fmt: skip
        if md.producer_id != pid and not overflowed:
            return _reply(ErrorCode.invalid_producer_id_mapping)
        done = TxnStatus.COMPLETE_COMMIT if commit else TxnStatus.COMPLETE_ABORT
        preparing = TxnStatus.PREPARE_COMMIT if commit else TxnStatus.PREPARE_ABORT
        aborted_for_it = (
            not commit
            and epoch == md.prev_epoch
            and md.state in (TxnStatus.PREPARE_ABORT, TxnStatus.COMPLETE_ABORT)
        )
        bumped = overflowed or (md.client_tv >= 2 and md.producer_epoch == epoch + 1)
        if aborted_for_it or (bumped and md.state in (done, preparing)):
            # a retry of what was ended (or the coordinator's abort at its timeout)
            return ok(ErrorCode.none if md.state == done else ErrorCode.concurrent_transactions)
        if bumped and md.state not in (TxnStatus.ONGOING, TxnStatus.EMPTY):
            return _reply(ErrorCode.invalid_txn_state)
        if md.producer_epoch != epoch:
            return _reply(ErrorCode.producer_fenced)
        if tv >= 2 and not commit and not _fresh_epoch(md) and md.state in _IDLE:
            # a producer moving to TV2 after a TV1 transaction, refused its first write
            # (TRANSACTION_ABORTABLE), aborts: nothing is open, the epoch is bumped
            # (PrepareAbort, then CompleteAbort with no marker to write)
            return self._begin_end(md, False, True, now_ms, finalized_tv, new_producer_id, tv)
        if md.client_tv >= 2 and md.state in _ENDING:
            # TV2: the ended transaction's epoch is the next one's, with nothing added
            # (retries carry the epoch before the bump): Kafka says PRODUCER_FENCED
            return _reply(ErrorCode.producer_fenced)
        if md.state == done:
            return ok()  # a retry of what is done
        if md.state == preparing:
            return _reply(ErrorCode.concurrent_transactions)
        if md.state != TxnStatus.ONGOING:
            return _reply(ErrorCode.invalid_txn_state)
        return self._begin_end(md, commit, tv >= 2, now_ms, finalized_tv, new_producer_id, tv)

    def complete(
        self, tid: str, commit: bool, prepared_at: int, now_ms: int, finalized_tv: int
    ) -> Outcome[bool]:
        """CompleteCommit/CompleteAbort once every marker of the transaction prepared by
        the record at ``prepared_at`` is written; nothing if that one is over."""
        md = self.txns.get(tid)
        preparing = TxnStatus.PREPARE_COMMIT if commit else TxnStatus.PREPARE_ABORT
        if md is None or md.state != preparing or self.prepared_at.get(tid) != prepared_at:
            return Outcome([], False)
        done: dict[str, Any] = {
            "state": TxnStatus.COMPLETE_COMMIT if commit else TxnStatus.COMPLETE_ABORT,
            "partitions": set(),
        }
        if md.next_producer_id != -1:  # TV2, the epoch ran out: the next id
            done.update(
                producer_id=md.next_producer_id, producer_epoch=0,
                prev_producer_id=md.producer_id, next_producer_id=-1,
            )  # fmt: skip
        records = self._transition(md, now_ms, finalized_tv, **done)
        return Outcome([] if isinstance(records, ErrorCode) else records, True)

    # -- timeouts -------------------------------------------------------------------------

    def timed_out(self, now_ms: int) -> list[str]:
        """Transactions open longer than their producer's transaction.timeout.ms."""
        return sorted(
            tid
            for tid, md in self.txns.items()
            if md.state == TxnStatus.ONGOING and now_ms - md.start_ms > md.timeout_ms
        )

    def abort_timed_out(
        self, tid: str, now_ms: int, finalized_tv: int, new_producer_id: int | None = None
    ) -> Outcome[Reply]:
        """Abort (and fence, bumping the epoch) a transaction still timed out."""
        if tid not in self.timed_out(now_ms):
            return _reply(ErrorCode.none)
        md = self.txns[tid]
        return self._begin_end(md, False, True, now_ms, finalized_tv, new_producer_id)

    def expired(self, now_ms: int) -> list[str]:
        """Idle ids unused longer than transactional.id.expiration.ms."""
        limit = self.rules.id_expiration_ms
        return sorted(
            tid
            for tid, md in self.txns.items()
            if md.state in _IDLE and now_ms - md.update_ms > limit
        )

    def expire(self, tid: str, now_ms: int) -> Outcome[bool]:
        """The id's tombstone (removed by the cleaner); its next producer starts anew."""
        if tid not in self.expired(now_ms):
            return Outcome([], False)
        self._transit[tid] = (None, None)
        return Outcome([(txn_key(tid), None)], True)
