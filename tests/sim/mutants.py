"""Mutation self-check of the Raft simulation and scenario tests: ``make mutants``.

Each mutant plants one classic Raft bug in a scratch copy of ``src/``.

* A safety mutant runs the simulation's CI seeds (the same cases as ``make test``,
  interleaved so that every kind of run comes early) until one fails. It counts as
  caught only if a safety invariant of the checker fails (``InvariantError``): not a
  crash of the code, not the end-of-run liveness check. Every safety mutant must be
  caught within the CI seed count.
* Every mutant also runs the scenario tests (tests/sim/test_raft_paper.py). A scenario
  mutant (a liveness rule, or a bug the code's own guards stop) must fail at least one
  of them, and every scenario test must fail for at least one mutant: a scenario test
  that no broken rule turns red checks nothing.

    python -m tests.sim.mutants [--jobs 2] [--only NAME ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEEDS = int(os.environ.get("SIM_SEEDS", "2000"))


@dataclass(frozen=True)
class Mutant:
    name: str
    bug: str
    path: str  # under src/keeperless/raft/
    edits: tuple[tuple[str, str], ...]  # (original text, replacement), each found once
    kind: str = "safety"  # or "scenario": only the scenario tests must catch it
    also: tuple[tuple[str, str, str], ...] = ()  # (path, original, replacement) elsewhere


MUTANTS = [
    Mutant(
        "vote-not-recorded",
        "a voter grants its vote without recording it (so not durably either)",
        "election.py",
        (
            (
                "        core._transition(Role.UNATTACHED, s.epoch, -1, req.src, now_ms)\n"
                "    reply(grant)",
                "        pass\n    reply(grant)",
            ),
        ),
    ),
    Mutant(
        "vote-not-persisted",
        "a vote changes the election state in memory but is never written to disk",
        "node.py",
        (
            (
                "        if new != self.state:\n            self._ready.state = new",
                "        if (new.epoch, new.leader_id) != (self.state.epoch, self.state.leader_id):\n"
                "            self._ready.state = new",
            ),
        ),
    ),
    Mutant(
        "vote-not-reloaded",
        "a restarted voter forgets the vote it cast in its current epoch",
        "node.py",
        (("        self.state = state\n", "        self.state = state.__class__(state.epoch)\n"),),
    ),
    Mutant(
        "double-vote",
        "a voter grants a second vote in an epoch where it already voted",
        "election.py",
        (("        and s.voted_id in (-1, req.src)\n", ""),),
    ),
    Mutant(
        "no-log-check",
        "a voter grants its vote without comparing logs",
        "election.py",
        (
            (
                "    return (last_epoch, end_offset) >= (core.log.last_epoch(), core.log.end_offset)",
                "    return True",
            ),
        ),
    ),
    Mutant(
        "log-check-offset-only",
        "a voter compares log length only, not the last epoch",
        "election.py",
        (
            (
                "    return (last_epoch, end_offset) >= (core.log.last_epoch(), core.log.end_offset)",
                "    return end_offset >= core.log.end_offset",
            ),
        ),
    ),
    Mutant(
        "stale-vote-counted",
        "a candidate counts a vote granted in an older epoch (responses not matched)",
        "election.py",
        (
            (
                "    if pending is None or pending[0].request_id != resp.request_id:\n"
                "        return  # it answers no request of ours still in flight: late or duplicated\n"
                "    req = pending[0]\n"
                "    del nominee.requests[resp.src]\n",
                "    nominee.requests.pop(resp.src, None)\n"
                "    req = m.VoteRequest(core.node_id, resp.src, resp.epoch, 0, 0, resp.pre_vote)\n",
            ),
            (
                "    elif core.role is Role.CANDIDATE and resp.epoch == core.epoch == req.epoch:",
                "    elif core.role is Role.CANDIDATE and resp.epoch <= core.epoch:",
            ),
        ),
    ),
    Mutant(
        "candidate-same-epoch",
        "a candidate stands in its current epoch instead of the next",
        "election.py",
        (
            (
                "    core._transition(Role.CANDIDATE, core.epoch + 1, -1, core.node_id, now_ms)",
                "    core._transition(Role.CANDIDATE, max(core.epoch, 1), -1, core.node_id, now_ms)",
            ),
        ),
    ),
    Mutant(
        "pre-vote-elects",
        "a prospective node that wins the pre-vote leads without a real election",
        "election.py",
        (
            (
                "        if core.role is Role.PROSPECTIVE:\n            become_candidate(core, now_ms)",
                "        if core.role is Role.PROSPECTIVE:\n            _become_leader(core, nominee, now_ms)",
            ),
        ),
    ),
    Mutant(
        "figure-8",
        "a leader commits entries of an earlier epoch by counting replicas",
        "node.py",
        (
            (
                "        if hw > self.high_watermark and hw > leader.epoch_start_offset:",
                "        if hw > self.high_watermark:",
            ),
        ),
    ),
    Mutant(
        "leader-counts-unsynced",
        "a leader counts its own log end, not its durable end, towards the high watermark",
        "node.py",
        (
            (
                "        mine = [self.durable_end] if self.is_voter else []\n",
                "        mine = [self.log.end_offset] if self.is_voter else []\n",
            ),
        ),
    ),
    Mutant(
        "observers-counted",
        "a leader counts observers' fetches towards the high watermark",
        "node.py",
        (
            (
                "        offsets = mine + [p.fetch_offset for _, p in self._voter_progress()]\n",
                "        offsets = mine + [p.fetch_offset for _, p in leader.progress.items()]\n",
            ),
        ),
    ),
    Mutant(
        "fetch-before-durable",
        "a follower fetches (reports its log end) before its appends are durable",
        "replication.py",
        (
            (
                "    if core.log.end_offset != core.durable_end:\n        return  #",
                "    if False:\n        return  #",
            ),
        ),
    ),
    Mutant(
        "no-consistency-check",
        "a leader sends entries without checking the follower's last fetched epoch",
        "replication.py",
        (("    if req.fetch_offset > 0:\n        at = ", "    if False:\n        at = "),),
    ),
    Mutant(
        "stale-fetch-response",
        "responses matched on the fetch offset alone, and no guard against truncating "
        "committed entries (the bug of seeds 3577 and 5073)",
        "replication.py",
        (
            (
                "    req = fetch.request\n    return (\n",
                "    return resp.fetch_offset == core.log.end_offset\n    req = fetch.request\n    return (\n",
            ),
            (
                "        if cut < max(core.applied, min(core.high_watermark, core.log.end_offset)):",
                "        if False:",
            ),
        ),
    ),
    Mutant(
        "apply-uncommitted",
        "a node applies entries that are durable but not known to be committed",
        "node.py",
        (
            (
                "        limit = min(self.high_watermark, self.durable_end)",
                "        limit = self.durable_end",
            ),
        ),
    ),
    Mutant(
        "pre-vote-ignores-leader",
        "a voter grants pre-votes while it follows a live leader (disruptive rejoins)",
        "election.py",
        (
            (
                "        has_leader = core.role is Role.LEADER or (\n",
                "        has_leader = False and (\n",
            ),
        ),
        kind="scenario",
    ),
    Mutant(
        "no-check-quorum",
        "a leader cut off from the majority never resigns",
        "core.py",
        (("        if len(recent) + me >= majority(len(self.voters)):\n", "        if True:\n"),),
        kind="scenario",
    ),
    Mutant(
        "snapshot-divergence-truncates",
        "a leader answers a divergence inside its snapshot with a truncation point",
        "replication.py",
        (
            (
                "                answer(snapshot=sid)  # the divergence lies inside our snapshot",
                "                answer(diverging=at)  # the divergence lies inside our snapshot",
            ),
        ),
        kind="scenario",
    ),
    Mutant(
        "fetch-unbounded",
        "a leader answers a fetch with every entry it may, whatever their bytes",
        "node.py",
        (
            (
                "            if size > self.config.max_fetch_bytes and n > 0:\n",
                "            if False:\n",
            ),
        ),
        kind="scenario",
    ),
    Mutant(
        "snapshot-chunk-from-start",
        "a leader answers every FetchSnapshot with the snapshot's first chunk",
        "replication.py",
        (
            (
                "    chunk, size = core.log.snapshot_chunk(\n        req.position,",
                "    chunk, size = core.log.snapshot_chunk(\n        0,",
            ),
        ),
        kind="scenario",
    ),
    # -- voter changes (KIP-853): caught by the dynamic-quorum runs ("m" cases) --
    Mutant(
        "two-voter-changes",
        "a leader starts a voter change while the previous one is not committed",
        "membership.py",
        (("    if latest >= core.high_watermark:\n", "    if False:\n"),),
    ),
    Mutant(
        "change-before-epoch-commit",
        "a new leader changes the voters before it has committed an entry of its epoch",
        "membership.py",
        (("    if core.high_watermark <= leader.epoch_start_offset:\n", "    if False:\n"),),
    ),
    Mutant(
        "removed-leader-keeps-leading",
        "a leader that removed itself counts its own log and never resigns",
        "node.py",
        (
            (
                "        mine = [self.durable_end] if self.is_voter else []\n",
                "        mine = [self.durable_end]\n",
            ),
            ("            and not self.is_voter\n", "            and False\n"),
        ),
    ),
    Mutant(
        "replaced-disk-votes",
        "a controller whose disk was replaced votes (and is counted) as the voter it was",
        "voters.py",
        (
            (
                "        return node_id == self.id and (\n"
                "            self.directory_id is None or directory_id == self.directory_id\n"
                "        )\n",
                "        return node_id == self.id\n",
            ),
        ),
        also=(
            (
                "election.py",
                "    if core.dynamic and req.voter_dir not in (None, core.directory_id):\n",
                "    if False:\n",
            ),
        ),
    ),
]
SCENARIOS = ROOT / "tests" / "sim" / "test_raft_paper.py"


# -- the cases of the simulation, in CI's numbers --------------------------------------------


def cases(seeds: int = SEEDS) -> list[tuple[str, int]]:
    """Every simulation case `make test` runs, interleaved round-robin by kind."""
    groups = [
        [("q3", s) for s in range(seeds * 3 // 4)],
        [("q5", s) for s in range(seeds // 4)],
        [("q1", s) for s in range(100)],
        [("majority", s) for s in range(50)],
        [("removed", s) for s in range(30)],
        [("m", s) for s in range(seeds // 4)],
    ]
    out: list[tuple[str, int]] = []
    for i in range(max(len(g) for g in groups)):
        out.extend(g[i] for g in groups if i < len(g))
    return out


def _run_case(kind: str, seed: int) -> None:
    from tests.sim import test_raft_quorum as t

    {
        "q3": t.test_three_voters,
        "q5": t.test_five_voters,
        "q1": t.test_single_voter_with_crashes,
        "majority": t.test_majority_lost_and_regained,
        "removed": t.test_removed_voter_is_told_and_observes,
        "m": t.test_voter_changes,
    }[kind](seed)


def _child(seeds: int) -> int:
    """Run the cases until a safety invariant fails; print the result as one JSON line.
    Liveness failures and crashes on the way are counted, not taken as a catch."""
    import logging

    logging.disable(logging.CRITICAL)
    from tests.sim.raft_sim import InvariantError

    other: dict[str, int] = {}
    for n, (kind, seed) in enumerate(cases(seeds), 1):
        try:
            _run_case(kind, seed)
        except InvariantError as e:
            first = (str(e).splitlines() or ["InvariantError"])[0]
            print(
                json.dumps(
                    {
                        "case": f"{kind}_seed_{seed}",
                        "runs": n,
                        "verdict": "invariant",
                        "error": first,
                        "other": other,
                    }
                )
            )
            return 0
        except AssertionError:
            other["liveness"] = other.get("liveness", 0) + 1
        except Exception as e:
            other[type(e).__name__] = other.get(type(e).__name__, 0) + 1
    print(
        json.dumps(
            {
                "case": None,
                "runs": len(cases(seeds)),
                "verdict": "survived",
                "error": "",
                "other": other,
            }
        )
    )
    return 0


# -- the parent: one scratch copy per mutant ------------------------------------------------


def _apply(mutant: Mutant, scratch: Path) -> None:
    shutil.copytree(ROOT / "src", scratch / "src", ignore=shutil.ignore_patterns("__pycache__"))
    edits = [(mutant.path, old, new) for old, new in mutant.edits] + list(mutant.also)
    for path, old, new in edits:
        target = scratch / "src" / "keeperless" / "raft" / path
        text = target.read_text()
        if text.count(old) != 1:
            raise SystemExit(
                f"mutant {mutant.name}: the text to replace occurs {text.count(old)} times in "
                f"raft/{path} (the code changed; update the mutant):\n{old}"
            )
        target.write_text(text.replace(old, new))


def _failing_scenarios(env: dict[str, str]) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", str(SCENARIOS)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return sorted(
        {
            ln.split("::", 1)[1].split(" ", 1)[0].split("[", 1)[0]
            for ln in proc.stdout.splitlines()
            if ln.startswith("FAILED ") and "::" in ln
        }
    )


def run_mutant(mutant: Mutant, seeds: int) -> dict[str, object]:
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as tmp:
        scratch = Path(tmp)
        _apply(mutant, scratch)
        env = dict(os.environ, PYTHONPATH=f"{scratch / 'src'}{os.pathsep}{ROOT}")
        scenarios = _failing_scenarios(env)
        result: dict[str, object] = {"case": None, "runs": 0, "verdict": "-", "error": ""}
        if mutant.kind == "safety":
            proc = subprocess.run(
                [sys.executable, "-m", "tests.sim.mutants", "--child", "--seeds", str(seeds)],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            if proc.returncode != 0 or not lines:
                result["verdict"] = "broken"
                result["error"] = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            else:
                result = json.loads(lines[-1])
        elif scenarios:
            result["verdict"] = "scenario"
    result.update(
        name=mutant.name,
        bug=mutant.bug,
        kind=mutant.kind,
        scenarios=scenarios,
        seconds=round(time.monotonic() - t0, 1),
    )
    return result


def _scenario_names() -> list[str]:
    import ast

    tree = ast.parse(SCENARIOS.read_text())
    return [
        f.name for f in tree.body if isinstance(f, ast.FunctionDef) and f.name.startswith("test_")
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=SEEDS, help="the CI seed count (SIM_SEEDS)")
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child(args.seeds)
    chosen = [mt for mt in MUTANTS if args.only is None or mt.name in args.only]
    print(f"{len(chosen)} mutants of raft/, {len(cases(args.seeds))} simulation cases each at most")
    results = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for r in pool.map(lambda mt: run_mutant(mt, args.seeds), chosen):
            results.append(r)
            mark = {"invariant": "caught", "scenario": "scenario", "-": "MISSED"}.get(
                str(r["verdict"]), str(r["verdict"]).upper()
            )
            other = ", ".join(f"{v} {k}" for k, v in dict(r.get("other") or {}).items())
            failing = ", ".join(map(str, r["scenarios"])) or "none"  # type: ignore[call-overload]
            print(
                f"  {r['name']:<30} {mark:<9} {r['case'] or '-'!s:<18} "
                f"after {r['runs']:>4} runs {r['seconds']:>6}s  {r['error']}"
                + (f"  (before it: {other} failures)" if other else "")
                + f"\n  {'':<30} scenario tests failing: {failing}",
                flush=True,
            )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    bad = [r["name"] for r in results if r["verdict"] not in ("invariant", "scenario")]
    untouched: list[str] = []
    if args.only is None:
        broken = {t for r in results for t in r["scenarios"]}  # type: ignore[attr-defined]
        untouched = [t for t in _scenario_names() if t not in broken]
    if bad:
        print(f"NOT caught: {', '.join(map(str, bad))}")
    if untouched:
        print(f"scenario tests that no mutant turns red: {', '.join(untouched)}")
    if bad or untouched:
        return 1
    n_safety = sum(1 for r in results if r["kind"] == "safety")
    print(
        f"all {n_safety} safety mutants caught by a safety invariant; every scenario "
        "mutant fails a scenario test, and every scenario test fails for some mutant"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
