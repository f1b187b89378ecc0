"""Eligible leader replicas (KIP-966), as Kafka's PartitionChangeBuilder keeps them.

While a partition's ISR is at least ``min.insync.replicas``, every committed record is
on every ISR member (the leader's high watermark does not advance below it), so a
replica that leaves the ISR while it is *below* min ISR still holds every committed
record: it stays *eligible* (the ELR) and may be elected when the ISR is empty.

- An ISR change to a size below min ISR: ELR = (old ISR + old ELR) - new ISR; at or
  above min ISR it is cleared.
- With ELR on, a fenced broker leaves the ISR even when it is the last member (the ISR
  may be empty; the broker joins the ELR).
- Election: from the ISR, else - ISR empty - from the ELR (the new leader becomes the
  ISR and leaves the ELR), else the last known leader (Kafka's balanced recovery, in the
  LastKnownElr field: the leader when the ISR emptied); an unclean election clears both.
- A broker back from an unclean shutdown leaves every ELR (its unflushed tail may be
  gone).

Pure: returns the fields of a PartitionChangeRecord; state changes when it is replayed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from keeperless.metadata.config_resolution import resolve_topic
from keeperless.metadata.image import BROKER_RESOURCE, MetadataImage, PartitionInfo

__all__ = ["MinIsr", "elect", "eligible_after", "leader_acceptor", "min_isr_of"]

MinIsr = Callable[[str], int]  # topic name -> its effective min.insync.replicas


def min_isr_of(image: MetadataImage, static: Mapping[str, str]) -> MinIsr:
    """The controller's view of each topic's min.insync.replicas (Kafka's
    getTopicEffectiveMinIsr): the topic's own, else the cluster default, else the
    controller's file, else 1."""
    known: dict[str, int] = {}  # (a fence asks once per partition of each topic)

    def of(topic: str) -> int:
        n = known.get(topic)
        if n is None:
            n = known[topic] = resolve(topic)
        return n

    def resolve(topic: str) -> int:
        value = resolve_topic(
            "min.insync.replicas",
            image.topic_config(topic),
            {},
            image.configs.get((BROKER_RESOURCE, ""), {}),
            static,
        )[0]
        try:
            return max(int(value or "1"), 1)
        except ValueError:
            return 1

    return of


def leader_acceptor(
    image: MetadataImage, live: Collection[int], p: PartitionInfo
) -> Callable[[int], bool]:
    """Kafka's LeaderAcceptor: a replica may lead ``p`` (or join its ISR) when its
    broker is in ``live`` and the log directory holding its replica is online (KIP-858:
    a replica on a failed disk is not)."""
    if not p.directories:
        return live.__contains__

    def ok(b: int) -> bool:
        reg = image.brokers.get(b)
        return b in live and reg is not None and reg.has_online_dir(p.directory(b))

    return ok


def eligible_after(
    info: PartitionInfo, new_isr: tuple[int, ...], min_isr: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(ELR, last known leader) once the ISR is ``new_isr``: the ELR as the module says;
    the last known leader (Kafka's default, "balanced" recovery, kept in the
    LastKnownElr field) is the leader at the moment the ISR empties."""
    elr: tuple[int, ...] = ()
    if len(new_isr) < min_isr:
        elr = tuple(sorted((set(info.elr) | set(info.isr)) - set(new_isr)))
    last_known = info.last_known_elr
    if not new_isr and info.isr and info.leader >= 0:
        last_known = (info.leader,)
    return elr, last_known


def elect(
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    elr: tuple[int, ...],
    last_known: tuple[int, ...],
    acceptable: Callable[[int], bool],
) -> tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(leader, ISR, ELR, last known leader) after an election: the first acceptable
    replica in the ISR; else - the ISR empty - the first acceptable one in the ELR, which
    becomes the ISR; else - the ELR empty too (its members came back from crashes) - the
    last known leader, as Kafka's balanced recovery does (it had the longest log when
    the ISR emptied). -1 when there is none. A partition with a leader keeps no last
    known leader."""
    for b in replicas:
        if b in isr and acceptable(b):
            return b, isr, elr, ()
    if not isr:
        for b in replicas:
            if b in elr and acceptable(b):
                return b, (b,), tuple(x for x in elr if x != b), ()
        if not elr and len(last_known) == 1 and acceptable(last_known[0]):
            return last_known[0], (last_known[0],), (), ()
    return -1, isr, elr, last_known
