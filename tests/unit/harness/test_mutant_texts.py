"""Every Raft mutant's text is found exactly once in the code it edits: a change to the
core that moves a mutant's line shows here, in `make check`, not at the end of the
mutation self-check (which stops at the first mutant it cannot plant)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sim.mutants import MUTANTS

RAFT = Path(__file__).resolve().parents[3] / "src" / "keeperless" / "raft"


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda mt: mt.name)
def test_the_mutant_can_be_planted(mutant) -> None:  # type: ignore[no-untyped-def]
    edits = [(mutant.path, old) for old, _ in mutant.edits]
    edits += [(path, old) for path, old, _ in mutant.also]
    for path, old in edits:
        assert (RAFT / path).read_text().count(old) == 1, f"{mutant.name}: raft/{path}\n{old}"
