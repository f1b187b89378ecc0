"""The soak benchmark's short form (bench/soak.py): a 3+3 cluster under sustained acks=all
produce with a consumer group reading along, every node restarted together twice:
nothing acknowledged is lost. The full form runs for hours (`python bench/soak.py`)."""

from __future__ import annotations

from bench import soak


def test_sustained_writes_survive_full_cluster_restarts() -> None:
    r = soak.main(["--minutes", "0.6", "--restart-every-s", "12", "--rate", "1500",
                   "--no-save"])  # fmt: skip
    assert r["acknowledged"] > 10_000, "the producer hardly ran"
    assert len(r["restarts"]) >= 2, "fewer full restarts than asked"
    assert r["lost"] == 0, f"acknowledged records lost: {r['lost_first']}"
    assert r["read_back"] >= r["acknowledged"]
