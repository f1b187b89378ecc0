"""Quorum arithmetic, on its own as in etcd's raft."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["majority", "majority_offset"]


def majority(voters: int) -> int:
    return voters // 2 + 1


def majority_offset(offsets: Iterable[int], voters: int) -> int:
    """The largest offset that a majority of ``voters`` have reached (absent voters
    count as -1)."""
    ordered = sorted(offsets, reverse=True)
    ordered += [-1] * (voters - len(ordered))
    return ordered[majority(voters) - 1]
