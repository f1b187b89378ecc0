"""Eligible leader replicas (KIP-966), as Kafka's PartitionChangeBuilder keeps them.

While a partition's ISR is at least ``min.insync.replicas``, every committed record is
on every ISR member (the leader's high watermark does not advance below it), so a
replica that leaves the ISR while it is *below* min ISR still holds every committed
record: it stays *eligible* (the ELR) and may be elected when the ISR is empty.

- An ISR change to a size below min ISR: ELR = (old ISR + old ELR) - new ISR; last
  known ELR = what was ELR or ISR and is in neither now. At or above min ISR both are
  cleared.
- With ELR on, a fenced broker leaves the ISR even when it is the last member (the ISR
  may be empty; the broker joins the ELR).
- Election: from the ISR, else - ISR empty - from the ELR (the new leader becomes the
  ISR and leaves the ELR); an unclean election clears both.

Pure: returns the fields of a PartitionChangeRecord; state changes when it is replayed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from keeperless.metadata.config_resolution import resolve_topic
from keeperless.metadata.image import BROKER_RESOURCE, MetadataImage, PartitionInfo

__all__ = ["MinIsr", "elect", "eligible_after", "min_isr_of"]

MinIsr = Callable[[str], int]  # topic name -> its effective min.insync.replicas


def min_isr_of(image: MetadataImage, static: Mapping[str, str]) -> MinIsr:
    """The controller's view of each topic's min.insync.replicas (Kafka's
    getTopicEffectiveMinIsr): the topic's own, else the cluster default, else the
    controller's file, else 1."""

    def of(topic: str) -> int:
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


def eligible_after(
    info: PartitionInfo, new_isr: tuple[int, ...], min_isr: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(ELR, last known ELR) once the ISR is ``new_isr``."""
    if len(new_isr) >= min_isr:
        return (), ()
    candidates = set(info.elr) | set(info.isr)
    elr = tuple(sorted(b for b in candidates if b not in new_isr))
    last_known = tuple(
        sorted(
            b for b in candidates | set(info.last_known_elr) if b not in new_isr and b not in elr
        )
    )
    return elr, last_known


def elect(
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    elr: tuple[int, ...],
    acceptable: Callable[[int], bool],
) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """(leader, ISR, ELR) after a clean election: the first acceptable replica in the
    ISR, else - the ISR empty - the first acceptable one in the ELR, which becomes the
    ISR; -1 when there is none."""
    for b in replicas:
        if b in isr and acceptable(b):
            return b, isr, elr
    if not isr:
        for b in replicas:
            if b in elr and acceptable(b):
                return b, (b,), tuple(x for x in elr if x != b)
    return -1, isr, elr
