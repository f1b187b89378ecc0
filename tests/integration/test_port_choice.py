"""The test harness's port choice: below the ephemeral range, never the same port twice."""

from __future__ import annotations

from tests.integration.cluster import _ephemeral_low, free_port


def test_ports_are_never_handed_out_twice_and_stay_below_the_ephemeral_range() -> None:
    # 3,000 draws from ~22,000 ports collide with near certainty if drawn independently
    ports = [free_port() for _ in range(3000)]
    assert len(set(ports)) == len(ports)
    assert all(p < _ephemeral_low() for p in ports)
