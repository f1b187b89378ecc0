"""Jepsen's Kafka analyses (tests/chaos/jepsen_checker.py): each catches a hand-built
history holding its anomaly and accepts the matching allowed history."""

from __future__ import annotations

from typing import Any

from tests.chaos.jepsen_checker import JOp, analyze

_n = 0


def op(process: str, f: str, mops: list[Any], type_: str = "ok", t: float = 0.0,
       commit_at: float | None = None) -> JOp:  # fmt: skip
    global _n
    _n += 1
    return JOp(_n, process, type_, f, mops, t, t + 0.1, commit_at)


def send(k: str, v: int, o: int) -> list[Any]:
    return ["send", k, v, o]


def poll(**keys: list[tuple[int, int]]) -> list[Any]:
    return ["poll", {k: [list(p) for p in pairs] for k, pairs in keys.items()}]


def kinds(ops: list[JOp], marks: dict[str, list[float]] | None = None) -> set[str]:
    for i, o in enumerate(ops):
        o.index = i
    anomalies, _ = analyze(ops, marks or {})
    return {a["kind"] for a in anomalies}


def test_a_clean_history_has_no_anomaly() -> None:
    ops = [
        op("p", "send", [send("a", 1, 0)], t=1),
        op("p", "send", [send("a", 2, 1)], t=2),
        op("t", "txn", [send("a", 3, 2), send("b", 4, 0)], t=3, commit_at=3.05),
        op("c", "poll", [poll(a=[(0, 1), (1, 2), (2, 3)], b=[(0, 4)])], t=4),
    ]
    assert kinds(ops) == set()


def test_an_idempotent_producers_epoch_bump_explains_its_duplicates() -> None:
    """librdkafka sends again, under a bumped epoch, what it had in flight when a
    message timed out (chaos seed 8002): copies under different epochs of one idempotent
    producer are the client's; under one epoch, or a transactional producer's, not."""
    ops = [op("p", "send", [send("1", 1, 0)], t=1), op("p", "send", [send("1", 2, 2)], t=2),
           op("c", "poll", [poll(**{"1": [(0, 1), (1, 2), (2, 2)]})], t=3)]  # fmt: skip
    for i, o in enumerate(ops):
        o.index = i

    def found(writers: dict[tuple[int, int], tuple[int, int, bool]]) -> set[str]:
        anomalies, stats = analyze(ops, {}, writers)
        return {a["kind"] for a in anomalies} | (
            {"bump"} if stats["duplicates-epoch-bump"] else set()
        )

    idem = {(1, 0): (7, 0, False), (1, 1): (7, 0, False), (1, 2): (7, 1, False)}
    assert found(idem) == {"bump"}
    assert found({**idem, (1, 2): (7, 0, False)}) == {"duplicate"}  # one epoch: ours
    assert found({**idem, (1, 2): (8, 1, False)}) == {"duplicate"}  # another producer
    assert found({k: (p, e, True) for k, (p, e, _) in idem.items()}) == {"duplicate"}
    assert found({(1, 0): (7, 0, False)}) == {"duplicate"}  # a copy not found in the files


def test_lost_unseen_duplicate_and_inconsistent_offsets() -> None:
    base = [op("p", "send", [send("a", 1, 0)], t=1), op("p", "send", [send("a", 2, 1)], t=2)]
    assert kinds([*base, op("c", "poll", [poll(a=[(1, 2)])], t=3)]) == {"lost-write"}
    assert kinds([*base, op("c", "poll", [poll(a=[(0, 1)])], t=3)]) == {"unseen"}
    dup = op("c", "poll", [poll(a=[(0, 1), (1, 2), (2, 1)])], t=3)
    assert kinds([*base, dup]) == {"duplicate"}
    clash = op("c", "poll", [poll(a=[(0, 1), (1, 7)])], t=3)
    assert "inconsistent-offsets" in kinds([*base, clash])
    # an acknowledged send whose offset the client does not know (librdkafka: None) is
    # still checked for loss, by value
    unknown = op("p", "send", [["send", "a", 3, None]], t=2.5)
    assert kinds([*base, unknown, op("c", "poll", [poll(a=[(0, 1), (1, 2)])], t=3)]) == {"unseen"}
    seen = op("c", "poll", [poll(a=[(0, 1), (1, 2), (2, 3)])], t=3)
    assert kinds([*base, unknown, seen]) == set()


def test_aborted_and_precommitted_reads() -> None:
    aborted = op("t", "txn", [send("a", 1, 0)], type_="fail", t=1)
    assert kinds([aborted, op("c", "poll", [poll(a=[(0, 1)])], t=2)]) == {"G1a"}
    assert kinds([aborted, op("c", "poll", [poll(a=[])], t=2)]) == set()
    # read at 1.1, before its transaction asked to commit at 2.0
    txn = op("t", "txn", [send("a", 1, 0)], t=0.5, commit_at=2.0)
    early = op("c", "poll", [poll(a=[(0, 1)])], t=1.0)
    assert kinds([txn, early]) == {"precommitted-read"}
    late = op("c", "poll", [poll(a=[(0, 1)])], t=2.5)
    assert kinds([txn, late]) == set()


def test_poll_skip_and_nonmonotonic_poll_unless_across_a_rebalance() -> None:
    writes = [op("p", "send", [send("a", v, v)], t=v) for v in range(4)]
    first = op("c", "poll", [poll(a=[(0, 0)])], t=10)
    skip = op("c", "poll", [poll(a=[(2, 2), (3, 3)])], t=11)  # offset 1 skipped
    other = op("d", "poll", [poll(a=[(1, 1)])], t=12)  # someone saw offset 1
    assert kinds([*writes, first, skip, other]) == {"poll-skip"}
    assert kinds([*writes, first, skip, other], {"c": [10.5]}) == set()  # a rebalance
    back = op("c", "poll", [poll(a=[(0, 0), (1, 1)])], t=11)
    again = op("c", "poll", [poll(a=[(1, 1), (2, 2), (3, 3)])], t=12)
    assert kinds([*writes, back, again]) == {"nonmonotonic-poll"}
    assert kinds([*writes, back, again], {"c": [11.5]}) == set()
    inside = op("c", "poll", [poll(a=[(0, 0), (2, 2), (1, 1), (3, 3)])], t=11)
    assert kinds([*writes, inside]) == {"int-poll-skip", "int-nonmonotonic-poll"}


def test_nonmonotonic_send_unless_the_producer_restarted() -> None:
    ops = [
        op("p", "send", [send("a", 1, 5)], t=1),
        op("p", "send", [send("a", 2, 3)], t=2),
        op("c", "poll", [poll(a=[(3, 2), (5, 1)])], t=3),
    ]
    assert kinds(ops) == {"nonmonotonic-send"}
    assert kinds(ops, {"p": [1.5]}) == set()


def test_g1c_is_reported_and_g0_is_allowed() -> None:
    # T1 wrote a@0 before T2's a@1 (ww T1 -> T2), yet T1 read T2's b@0 (wr T2 -> T1)
    t1 = op("t1", "txn", [poll(b=[(0, 20)]), send("a", 10, 0)], t=2, commit_at=3)
    t2 = op("t2", "txn", [send("a", 11, 1), send("b", 20, 0)], t=1, commit_at=1.5)
    reader = op("c", "poll", [poll(a=[(0, 10), (1, 11)])], t=5)
    assert kinds([t1, t2, reader]) == {"G1c"}
    # the same writes without the read: a write cycle (a: T1 < T2, b: T2 < T1), G0 only
    g0a = op("t1", "txn", [send("a", 10, 0), send("b", 21, 1)], t=1, commit_at=3)
    g0b = op("t2", "txn", [send("a", 11, 1), send("b", 20, 0)], t=1, commit_at=3)
    everything = op("c", "poll", [poll(a=[(0, 10), (1, 11)], b=[(0, 20), (1, 21)])], t=5)
    ops = [g0a, g0b, everything]
    for i, o in enumerate(ops):
        o.index = i
    anomalies, stats = analyze(ops, {})
    assert anomalies == []
    assert stats["g0-cycles"] == 1


def test_long_transactions_interleaving_appends_are_no_cycle() -> None:
    """Campaign seed 8400: transactions that appended to one key at once and to another
    seconds later (a partition unavailable). Offsets alone make a cycle with a read in it
    (X -ww c-> S1 -ww c-> W -ww d-> S2 -wr-> Y -ww a-> X); in time there is none: X
    appends c@0, S1 c@1, W c@2 and (late) d@0, W commits, S2 appends d@1, Y reads it,
    appends a@2 and commits, X appends a@3 (late) and commits. Kafka orders appends, not
    transactions."""
    x = op("x", "txn", [send("c", 1, 0), send("a", 2, 3)], t=1, commit_at=10)
    s1 = op("s1", "send", [send("c", 3, 1)], t=2)
    w = op("w", "txn", [send("c", 4, 2), send("d", 5, 0)], t=3, commit_at=6)
    s2 = op("s2", "send", [send("d", 6, 1)], t=5.5)
    y = op("y", "txn", [poll(d=[(0, 5), (1, 6)]), send("a", 7, 2)], t=7, commit_at=8)
    everything = op("c", "poll", [poll(a=[(2, 7), (3, 2)], c=[(0, 1), (1, 3), (2, 4)],
                                       d=[(0, 5), (1, 6)])], t=11)  # fmt: skip
    assert kinds([x, s1, w, s2, y, everything]) == set()
    # Y reading past X's own early append while X is still open is a cycle
    y2 = op("y", "txn", [poll(c=[(0, 1), (1, 3)]), send("a", 7, 2)], t=7, commit_at=8)
    assert "G1c" in kinds([x, s1, w, s2, y2, everything])


def test_a_poll_past_an_open_transaction_is_a_cycle() -> None:
    """A read_committed poll past a transaction's append orders that transaction's commit
    before the poll: here the transaction then read what the poller wrote after it."""
    t1 = op("t1", "txn", [poll(b=[(0, 40)]), send("a", 10, 0)], t=2, commit_at=3)
    maybe = op("m", "send", [send("a", 11, 1)], type_="info", t=1)  # outcome unknown
    r = op("r", "txn", [poll(a=[(1, 11)]), send("b", 40, 0)], t=1.5, commit_at=1.8)
    assert "G1c" in kinds([t1, maybe, r])
    below = op("r", "txn", [poll(a=[(0, 10)]), send("b", 40, 0)], t=1.5, commit_at=1.8)
    assert "G1c" in kinds([t1, below])  # it read t1's own value: wr, the same cycle
    before = op("r", "txn", [poll(c=[(0, 50)]), send("b", 40, 0)], t=1.5, commit_at=1.8)
    assert "G1c" not in kinds([t1, maybe, before])  # nothing read past t1's append
