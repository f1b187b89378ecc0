"""KIP-890 part 1 on the produce path (Kafka's ``transaction.partition.verification.enable``,
on by default): before a partition leader appends the first transactional batch of a
producer's transaction there, it asks the transaction coordinator whether the partition
is in that producer's ongoing transaction. A write arriving after its transaction ended
(a retry delayed past the abort, a zombie) is refused instead of opening a transaction no
coordinator will ever end — a "hanging" transaction that would hold the last stable
offset, and every read_committed consumer, until ``transaction.max.timeout.ms``.

A verification holds until the producer's next marker in the partition: a marker written
while the produce waited for the coordinator voids it, and the batch is refused."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode

from keeperless.broker.partitions import AppendResult, Partition
from keeperless.protocol.records import BATCH_HEADER_SIZE, BatchHeader, read_header

__all__ = [
    "TxnOwners",
    "Verify",
    "needs_verification",
    "still_verified",
    "transactional_header",
    "verify_produce",
]

# (transactional id, producer id, epoch, partitions, add them: a TV2 producer's write)
# -> the coordinator's answer for each
Verify = Callable[
    [str, int, int, list[tuple[str, int]], bool], Awaitable[dict[tuple[str, int], ErrorCode]]
]

# the coordinator is moving or busy: the producer retries (Kafka answers the same)
_RETRIABLE = {
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.concurrent_transactions,
}


def transactional_header(records: bytes | None) -> BatchHeader | None:
    """The header of ``records`` if they are a transactional data batch."""
    if not records or len(records) < BATCH_HEADER_SIZE:
        return None
    try:
        h = read_header(records, 0)
    except ValueError:
        return None
    if not h.is_transactional or h.is_control or h.producer_id < 0:
        return None
    return h


class TxnOwners:
    """Which transactional id each producer id belongs to, as the coordinators confirmed
    it to this broker: a produce naming another id for that producer is refused
    (INVALID_PRODUCER_ID_MAPPING), and a producer not confirmed yet is verified even
    where its transaction is already open - else anyone allowed one transactional id
    could write into another's open transaction with its producer id (found by a
    helper's probe). Bounded: a forgotten producer is simply verified again."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._owner: dict[int, str] = {}

    def get(self, pid: int) -> str | None:
        return self._owner.get(pid)

    def confirm(self, pid: int, tid: str) -> None:
        if pid not in self._owner and len(self._owner) >= self.limit:
            self._owner.pop(next(iter(self._owner)))
        self._owner[pid] = tid


def needs_verification(p: Partition, records: bytes | None) -> BatchHeader | None:
    """The header of a transactional data batch whose producer has no transaction open
    in ``p`` in the batch's epoch and no verification standing for it; None otherwise.
    A newer epoch's batch while an older epoch's transaction is still open here (a TV2
    producer's next transaction, written before the previous one's marker) is verified:
    the coordinator answers CONCURRENT_TRANSACTIONS until that marker is written, as
    Kafka's ``hasOngoingTransaction(producerId, producerEpoch)`` has it - appended
    unverified, the batch would join the old transaction and its marker would end it."""
    h = transactional_header(records)
    if h is None:
        return None
    if h.producer_id in p.txns.ongoing:
        e = p.state.producers.get(h.producer_id)
        if e is not None and e.epoch == h.producer_epoch:
            return None
    if p.state.verified.get(h.producer_id) == h.producer_epoch:
        return None
    return h


def _produce_error(err: ErrorCode, version: int) -> ErrorCode:
    if err in _RETRIABLE:
        return ErrorCode.not_enough_replicas
    if err == ErrorCode.transaction_abortable:
        # Produce v11+ clients take TRANSACTION_ABORTABLE (KIP-890); older ones do not
        # know it and get INVALID_TXN_STATE
        return err if version >= 11 else ErrorCode.invalid_txn_state
    if err == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    return err


async def verify_produce(
    verify: Verify,
    transactional_id: str | None,
    version: int,
    wanted: list[tuple[str, int, Partition, bytes | None]],
    owners: TxnOwners | None = None,
) -> tuple[dict[tuple[str, int], AppendResult], set[tuple[str, int]]]:
    """Verify every partition of a produce request that needs it: (the refused ones with
    their answer, the partitions to check again before appending: all of them if the
    coordinator was waited for — a marker may have ended a transaction meanwhile —
    else none). Those verified are remembered on the partition until its next marker
    for that producer."""
    todo: dict[tuple[int, int], list[tuple[str, int, Partition]]] = {}
    refused: dict[tuple[str, int], AppendResult] = {}
    for name, index, p, records in wanted:
        h = transactional_header(records)
        if h is None:
            continue
        if transactional_id is None:
            refused[(name, index)] = AppendResult(
                ErrorCode.invalid_record,
                message="Transactional records in a produce request without a transactional id",
            )
            continue
        owner = owners.get(h.producer_id) if owners is not None else transactional_id
        if owner is not None and owner != transactional_id:
            refused[(name, index)] = AppendResult(
                ErrorCode.invalid_producer_id_mapping,
                message=f"Producer {h.producer_id} does not belong to {transactional_id!r}",
            )
            continue
        if owner is not None and needs_verification(p, records) is None:
            continue
        todo.setdefault((h.producer_id, h.producer_epoch), []).append((name, index, p))
    for (pid, epoch), parts in todo.items():
        assert transactional_id is not None
        # Produce v12+ comes from a TV2 producer (Kafka's client sends v12 only then),
        # which adds no partitions itself: the leader adds them (KIP-890 part 2)
        answers = await verify(
            transactional_id, pid, epoch, [(n, i) for n, i, _ in parts], version >= 12
        )
        for name, index, p in parts:
            err = answers.get((name, index), ErrorCode.coordinator_not_available)
            if err == ErrorCode.none:
                p.state.verified[pid] = epoch
                if owners is not None:
                    owners.confirm(pid, transactional_id)
                continue
            refused[(name, index)] = AppendResult(
                _produce_error(err, version),
                message=f"Partition {name}-{index} is not in the ongoing transaction of "
                f"{transactional_id!r} (producer {pid}, epoch {epoch}): {err.name}",
            )
    waited = {(name, index) for name, index, _p, _r in wanted} if todo else set()
    return refused, waited


def still_verified(p: Partition, records: bytes | None) -> bool:
    """After the wait for the coordinator: no marker voided the verification."""
    return needs_verification(p, records) is None
