"""Jepsen's Kafka analyses (``jepsen.tests.kafka``) over the history of the Jepsen
workload: operations ``send``, ``poll`` and ``txn`` (several of each in one
transaction), each a list of micro-operations on keys (here: partitions of one topic)
with unique integer values.

A micro-operation, as the workload records it in an operation's completion:
``["send", key, value, offset]`` (offset -1 when not known) and
``["poll", {key: [[offset, value], ...]}]``. Processes mark with ``info`` events
``assign``/``rebalance`` (a consumer may then legitimately skip or go back) and
``restart`` (a new client: a producer's sends start a new order).

Analyses (each returns Jepsen's anomaly name with the evidence):
- ``inconsistent-offsets``: two values at one offset of a key;
- ``duplicate``: one value at two offsets;
- ``lost-write``: acknowledged, never polled, although polls read past its offset;
- ``unseen``: acknowledged and never polled by the end (the workload's final drain
  reads every key to its end, so this is a loss too);
- ``G1a`` (aborted read): a poll returned a value of a transaction that aborted;
- ``precommitted-read``: a poll returned a value before its transaction was asked to
  commit;
- ``poll-skip`` / ``nonmonotonic-poll``: one consumer, one key, from one poll to its
  next - offsets known to hold values skipped over, or the offset went back - allowed
  across an assign or rebalance, as Jepsen allows;
- ``int-poll-skip`` / ``int-nonmonotonic-poll``: the same inside one poll;
- ``nonmonotonic-send``: one producer's acknowledged sends to a key going back;
- ``G1c``: a cycle of write-write (offset order) and write-read dependencies between
  operations holding at least one write-read edge; pure write-write cycles (G0) are
  counted, not reported, as Kafka allows them.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.chaos.history import Event

__all__ = ["JOp", "analyze", "ops_from_events"]

Anomaly = dict[str, Any]
_MARKS = ("assign", "rebalance", "restart")
_LIMIT = 20  # evidence kept per kind


@dataclass(slots=True)
class JOp:
    index: int
    process: str
    type: str  # ok | fail | info
    f: str  # send | poll | txn
    mops: list[Any]
    invoke_s: float
    complete_s: float
    commit_at: float | None = None  # a transaction's EndTxn(commit) request time
    sends: list[tuple[str, int, int]] = field(default_factory=list)  # key, value, offset
    polls: list[tuple[str, list[tuple[int, int]]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for m in self.mops:
            if m[0] == "send":
                # an acknowledged send's offset may be unknown (None): librdkafka
                # acknowledges an idempotent batch whose request timed out once a
                # later one succeeds, without its offset (Jepsen records nil)
                off = -1 if m[3] is None else int(m[3])
                self.sends.append((str(m[1]), int(m[2]), off))
            elif m[0] == "poll":
                for k, pairs in m[1].items():
                    self.polls.append((str(k), [(int(o), int(v)) for o, v in pairs]))


def ops_from_events(
    events: Iterable[Event], prefix: str = "jepsen-"
) -> tuple[list[JOp], dict[str, list[float]]]:
    """Pair invocations with completions; the marks (assign, rebalance, restart) per
    process."""
    invokes: dict[int, Event] = {}
    ops: list[JOp] = []
    marks: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if not e.process.startswith(prefix):
            continue
        if e.type == "invoke":
            invokes[e.op] = e
        elif e.f in _MARKS:
            marks[e.process].append(e.time_s)
        elif e.op in invokes:
            inv = invokes.pop(e.op)
            v = e.value or {}
            ops.append(JOp(len(ops), e.process, e.type, e.f, list(v.get("mops", [])),
                           inv.time_s, e.time_s, v.get("commit_at")))  # fmt: skip
    return ops, marks


def _crossed(marks: list[float], a: float, b: float) -> bool:
    """A mark between times a and b."""
    i = bisect.bisect_right(marks, a)
    return i < len(marks) and marks[i] <= b


def _epoch_bump(
    writers: Mapping[tuple[int, int], tuple[int, int, bool]], partition: int, offsets: set[int]
) -> bool:
    """One value at several offsets, each copy written by the same idempotent (not
    transactional) producer under a different epoch: librdkafka bumps its epoch after a
    message times out and sends again, from sequence 0, what it had in flight, written
    or not. Kafka keeps those copies too (idempotence holds within an epoch); copies
    under one epoch, or a transactional producer's, are not explained."""
    ids = [writers.get((partition, o)) for o in offsets]
    known = [i for i in ids if i is not None]
    return (
        len(known) == len(ids)
        and not any(txn for _, _, txn in known)
        and len({pid for pid, _, _ in known}) == 1
        and len({epoch for _, epoch, _ in known}) == len(known)
    )


def analyze(
    ops: list[JOp],
    marks: dict[str, list[float]],
    writers: Mapping[tuple[int, int], tuple[int, int, bool]] | None = None,
) -> tuple[list[Anomaly], dict[str, int]]:
    """``writers``: (partition, offset) -> (producer id, epoch, transactional) of the
    batches in the log, which explain an idempotent producer's duplicates (below)."""
    found: dict[str, list[Anomaly]] = defaultdict(list)
    bumped = 0

    def report(kind: str, **detail: Any) -> None:
        found[kind].append(detail)

    # -- what is at each offset ----------------------------------------------------------
    at: dict[str, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    where: dict[tuple[str, int], set[int]] = defaultdict(set)  # (key, value) -> offsets
    acked: dict[tuple[str, int], tuple[int, JOp]] = {}
    aborted: dict[tuple[str, int], JOp] = {}
    writer: dict[tuple[str, int], JOp] = {}
    seen: dict[tuple[str, int], list[JOp]] = defaultdict(list)
    for op in ops:
        for k, v, o in op.sends:
            if op.type == "ok":
                acked[(k, v)] = (o, op)
                writer[(k, v)] = op
                if o >= 0:
                    at[k][o].add(v)
                    where[(k, v)].add(o)
            elif op.type == "fail":
                aborted[(k, v)] = op
        for k, pairs in op.polls:
            for o, v in pairs:
                at[k][o].add(v)
                where[(k, v)].add(o)
                seen[(k, v)].append(op)
    for k, offsets in at.items():
        for o, vs in sorted(offsets.items()):
            if len(vs) > 1:
                report("inconsistent-offsets", key=k, offset=o, values=sorted(vs))
    for (k, v), places in where.items():
        if len(places) > 1:
            if writers is not None and _epoch_bump(writers, int(k), places):
                bumped += 1
                continue
            report("duplicate", key=k, value=v, offsets=sorted(places))
    known = {k: sorted(offsets) for k, offsets in at.items()}
    top: dict[str, int] = defaultdict(lambda: -1)  # the highest offset any poll read
    for k, v in seen:
        top[k] = max(top[k], *where[(k, v)])
    # -- lost, unseen, aborted and precommitted reads ------------------------------------
    for (k, v), (o, op) in acked.items():
        if (k, v) in seen:
            continue
        if 0 <= o <= top.get(k, -1):
            report("lost-write", key=k, value=v, offset=o, op=op.index)
        else:
            report("unseen", key=k, value=v, offset=o, op=op.index)
    for kv, readers in seen.items():
        if kv in aborted and kv not in acked:
            report("G1a", key=kv[0], value=kv[1], writer=aborted[kv].index,
                   readers=[r.index for r in readers][:5])  # fmt: skip
        w = writer.get(kv)
        if w is not None and w.commit_at is not None:
            early = [r.index for r in readers if r is not w and r.complete_s < w.commit_at]
            if early:
                report("precommitted-read", key=kv[0], value=kv[1], writer=w.index,
                       commit_at=w.commit_at, readers=early[:5])  # fmt: skip
    # -- one consumer's polls, one producer's sends --------------------------------------
    last: dict[tuple[str, str], tuple[int, float]] = {}
    for op in sorted(ops, key=lambda x: x.complete_s):
        pm = marks.get(op.process, [])
        for k, pairs in op.polls:
            offs = [o for o, _ in pairs]
            for a, b in itertools.pairwise(offs):
                if b <= a:
                    report("int-nonmonotonic-poll", process=op.process, key=k, offsets=[a, b])
                elif _between(known.get(k, []), a, b):
                    report("int-poll-skip", process=op.process, key=k, offsets=[a, b],
                           skipped=_between(known[k], a, b)[:5])  # fmt: skip
            if not offs:
                continue
            prev = last.get((op.process, k))
            if prev is not None and not _crossed(pm, prev[1], op.complete_s):
                a, b = prev[0], offs[0]
                if b <= a:
                    report("nonmonotonic-poll", process=op.process, key=k, offsets=[a, b],
                           op=op.index)  # fmt: skip
                elif _between(known.get(k, []), a, b):
                    report("poll-skip", process=op.process, key=k, offsets=[a, b],
                           skipped=_between(known[k], a, b)[:5], op=op.index)  # fmt: skip
            last[(op.process, k)] = (offs[-1], op.complete_s)
    sent: dict[tuple[str, str], tuple[int, float]] = {}
    for op in sorted(ops, key=lambda x: x.invoke_s):
        if op.type != "ok":
            continue
        pm = marks.get(op.process, [])
        for k, _v, o in op.sends:
            prev = sent.get((op.process, k))
            if o < 0:
                continue
            if prev is not None and o <= prev[0] and not _crossed(pm, prev[1], op.invoke_s):
                report("nonmonotonic-send", process=op.process, key=k, offsets=[prev[0], o],
                       op=op.index)  # fmt: skip
            sent[(op.process, k)] = (o, op.invoke_s)
    # -- dependency cycles ---------------------------------------------------------------
    g0, g1c = _cycles(ops, at, writer, seen)
    for scc in g1c:
        report("G1c", ops=scc[:10], size=len(scc))
    anomalies = [
        {"kind": kind, "count": len(items), "examples": items[:_LIMIT]}
        for kind, items in sorted(found.items())
    ]
    stats = {
        "duplicates-epoch-bump": bumped,
        "ops": len(ops),
        "ok": sum(op.type == "ok" for op in ops),
        "txns": sum(op.f == "txn" and op.type == "ok" for op in ops),
        "aborted": sum(op.type == "fail" for op in ops),
        "values-acked": len(acked),
        "values-read": len(seen),
        "g0-cycles": len(g0),
    }
    return anomalies, stats


def _between(known: list[int], a: int, b: int) -> list[int]:
    """Offsets holding values strictly between a and b."""
    return known[bisect.bisect_right(known, a) : bisect.bisect_left(known, b)]


def _cycles(
    ops: list[JOp],
    at: dict[str, dict[int, set[int]]],
    writer: dict[tuple[str, int], JOp],
    seen: dict[tuple[str, int], list[JOp]],
) -> tuple[list[list[int]], list[list[int]]]:
    """(G0 components: operations in a cycle of write-write edges alone, which Kafka
    allows; G1c components: operations whose order in time contradicts itself).

    Kafka orders neither transactions nor their commits by offset, so a write-write edge
    orders two appends, not two transactions. The G1c check is over points in time, as
    Kafka defines them: each operation's poll (P, before it begins writing), its append
    to each key (W_k) and its commit (C), with P < W_k < C; A's append to k below B's
    orders A.W_k < B.W_k; a value read orders its writer's C before the reader's P; and
    a read_committed poll past a transactional write (below the last stable offset)
    orders that transaction's C before the poll. A cycle among these points is a
    contradiction: an anomaly, whatever its name (G1c for Jepsen). Long transactions
    whose appends interleave with others' are not (campaign seed 8400: a transaction
    appended to one key at once and to another three seconds later)."""
    # -- G0: operations, write-write edges in offset order ---------------------------------
    ww: dict[int, set[int]] = defaultdict(set)
    for k, offsets in at.items():
        prev: JOp | None = None
        for o in sorted(offsets):
            for v in offsets[o]:
                w = writer.get((k, v))
                if w is None:
                    continue
                if prev is not None and prev is not w:
                    ww[prev.index].add(w.index)
                prev = w
    g0 = [sorted(c) for c in _tarjan(len(ops), ww) if len(c) > 1]
    # -- points in time ------------------------------------------------------------------
    ids: dict[tuple[Any, ...], int] = {}
    owner: list[int] = []  # point -> its operation (-1: a helper point)

    def point(*name: Any) -> int:
        if name not in ids:
            ids[name] = len(owner)
            owner.append(name[0] if isinstance(name[0], int) else -1)
        return ids[name]

    edges: dict[int, set[int]] = defaultdict(set)
    committed = [op for op in ops if op.type == "ok"]
    for op in committed:
        c = point(op.index, "C")
        p = point(op.index, "P") if op.polls else None
        for k in {k for k, _, _ in op.sends}:
            w = point(op.index, "W", k)
            edges[w].add(c)
            if p is not None:
                edges[p].add(w)
    # a value at several offsets (reported as a duplicate) has no one place in the order
    copies: dict[tuple[str, int], int] = defaultdict(int)
    for k, offsets in at.items():
        for vs in offsets.values():
            for v in vs:
                copies[(k, v)] += 1
    for k, offsets in at.items():  # appends in offset order
        prev_w: int | None = None
        for o in sorted(offsets):
            for v in offsets[o]:
                w_op = writer.get((k, v))
                if w_op is None or copies[(k, v)] > 1:
                    continue
                w = point(w_op.index, "W", k)
                if prev_w is not None and prev_w != w:
                    edges[prev_w].add(w)
                prev_w = w
    for kv, readers in seen.items():  # a value read: its writer committed first
        w_op = writer.get(kv)
        if w_op is None:
            continue
        for r in readers:
            if r is not w_op and r.type == "ok":
                edges[point(w_op.index, "C")].add(point(r.index, "P"))
    # read_committed past a transaction's append: it had committed (a chain of helper
    # points per key in offset order stands for "every transaction appended below here")
    for k, offsets in at.items():
        chain: list[tuple[int, int]] = []  # (offset, helper point)
        for o in sorted(offsets):
            for v in offsets[o]:
                w_op = writer.get((k, v))
                if w_op is None or w_op.f != "txn" or copies[(k, v)] > 1:
                    continue
                h = point("lso", k, o, w_op.index)
                edges[point(w_op.index, "C")].add(h)
                if chain:
                    edges[chain[-1][1]].add(h)
                chain.append((o, h))
        if not chain:
            continue
        firsts = [o for o, _ in chain]
        for r in committed:
            top = max((o for key, pairs in r.polls if key == k for o, _ in pairs), default=-1)
            i = bisect.bisect_left(firsts, top)  # the appends strictly below the top read
            if i > 0:
                edges[chain[i - 1][1]].add(point(r.index, "P"))
    g1c = []
    for scc in _tarjan(len(owner), edges):
        if len(scc) > 1:
            g1c.append(sorted({owner[x] for x in scc if owner[x] >= 0}))
    return g0, g1c


def _tarjan(n: int, edges: dict[int, set[int]]) -> list[list[int]]:
    """Tarjan's strongly connected components, iteratively."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in range(n):
        if root in index:
            continue
        work = [(root, iter(edges.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(edges.get(nxt, ()))))
                    advanced = True
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                scc = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    scc.append(x)
                    if x == node:
                        break
                out.append(scc)
    return out
