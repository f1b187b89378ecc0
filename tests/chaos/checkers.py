"""Checkers of a chaos run. Each states a property and reads only the recorded history,
what the cluster serves after healing, and the nodes' files after a clean stop:

* writes: every acknowledged value is in its partition at the offset it was acknowledged
  with; no value twice; nothing never sent; one producer's values in send order (but a
  value librdkafka sent again under a bumped producer epoch after a message timed out is
  the client's duplicate, as against Kafka: told apart by the batches' epochs);
* reads: every record a consumer was given is in the final log at that offset;
* compaction (a compacted topic the cleaner works on): each key's latest record is
  its latest acknowledged write (or a later one), at its acknowledged offset;
* deletions (DeleteRecords on the workload's topic): the final log start is at or after
  every acknowledged low watermark and at or before the highest offset asked; only
  what lies below it may be missing;
* commits: the committed offsets the cluster reports never go back and never point past
  the log; an acknowledged commit is never lost;
* admin: the admin client's results are linearizable against a sequential model of
  topics (existence, partition count) and configs (an operation whose outcome is
  unknown may take effect at any later point, or never; a forwarded request sent again
  may find its own first attempt's work done);
* controllers: at most one active controller per epoch; a controller cut off from the
  majority resigns and idles;
* agreement: after healing, every node's metadata log holds the same records at the same
  offsets and builds the same image; every replica of a partition holds the same
  batches (of a compacted topic: the same latest record of every key); no directory
  of a deleted or foreign topic is left;
* logs: no traceback, no ERROR or CRITICAL line that the faults do not explain.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.chaos.history import Event, History

__all__ = [
    "check_admin",
    "check_commits",
    "check_compaction",
    "check_controllers",
    "check_deletions",
    "check_logs",
    "check_metadata_agreement",
    "check_reads",
    "check_replicas",
    "check_upgrades",
    "check_writes",
    "explain_duplicates",
]

Anomaly = dict[str, Any]
Final = dict[int, tuple[int, int, list[tuple[int, str]]]]  # partition -> (lo, hi, records)


def _anomaly(kind: str, **detail: Any) -> Anomaly:
    return {"kind": kind, **detail}


# -- writes and reads --------------------------------------------------------------------


def _deletions(history: History) -> tuple[dict[int, int], dict[int, int]]:
    """DeleteRecords on the workload's topic: per partition, the highest offset asked
    (whatever the outcome) and the highest low watermark acknowledged."""
    asked: dict[int, int] = {}
    acked: dict[int, int] = {}
    for e in history.of("admin", "delete-records"):
        p = e.value["partition"]
        if e.type == "invoke":
            asked[p] = max(asked.get(p, 0), e.value["offset"])
        elif e.type == "ok":
            acked[p] = max(acked.get(p, 0), e.value["low_watermark"])
    return asked, acked


def check_deletions(history: History, final: Final) -> list[Anomaly]:
    """An acknowledged DeleteRecords is never undone (the log starts at or after it),
    and nothing is deleted that was not asked (the log starts at or before the highest
    offset asked)."""
    asked, acked = _deletions(history)
    out = []
    for p, (lo, _hi, _records) in sorted(final.items()):
        if lo < acked.get(p, 0):
            out.append(_anomaly("deletion-undone", partition=p, acknowledged=acked[p], start=lo))
        if lo > asked.get(p, 0):
            out.append(_anomaly("deleted-unasked", partition=p, asked=asked.get(p, 0), start=lo))
    return out


def check_writes(
    history: History, final: Final, prefix: str = "producer-", topic: str = "chaos"
) -> tuple[list[Anomaly], dict[str, int]]:
    """The writes of the producers named ``prefix``... to ``final``, the partitions of
    ``topic`` (DeleteRecords only ever touches the workload's main topic, written by
    "producer-"). Duplicates and reorderings name the topic: explain_duplicates looks
    their writers up in that topic's files."""
    asked = _deletions(history)[0] if prefix == "producer-" else {}
    sent: dict[str, Event] = {}
    acked: dict[str, tuple[int, int]] = {}
    unknown = 0
    for e in history.of(prefix, "send"):
        v = e.value["value"]
        if e.type == "invoke":
            sent[v] = e
        elif e.type == "ok":
            acked[v] = (e.value["partition"], e.value["offset"])
        elif e.type == "info":
            unknown += 1
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for p, (_lo, _hi, records) in final.items():
        for offset, value in records:
            where[value].append((p, offset))
    out: list[Anomaly] = []
    # where consumers read each value (an acknowledgement without an offset is placed
    # by a read, if any)
    read_at: dict[str, list[tuple[int, int]]] = defaultdict(list)
    if prefix == "producer-":
        for e in history.of("consumer-", "read"):
            for rp, roff, rvalue in e.value:
                read_at[rvalue].append((rp, roff))
    for value, (p, offset) in sorted(acked.items()):
        if offset is None or offset < 0:
            # librdkafka's idempotent producer acknowledges a batch whose request timed
            # out once a later batch's sequence shows it was persisted, without an offset
            if any(q == p for q, _ in where.get(value, [])):
                continue
            if p in final and any(
                q == p and off < min(asked.get(p, 0), final[p][0]) for q, off in read_at[value]
            ):
                continue  # read where a DeleteRecords deleted it since (seed 4303)
            out.append(_anomaly("lost", value=value, acked_at=[p, None], found=[]))
            continue
        if p in final and offset < min(asked.get(p, 0), final[p][0]):
            continue  # deleted by a DeleteRecords (check_deletions checks the start)
        if (p, offset) not in where.get(value, []):
            out.append(
                _anomaly("lost", value=value, acked_at=[p, offset], found=where.get(value, []))
            )
    for value, places in sorted(where.items()):
        if len(places) > 1:
            out.append(_anomaly("duplicated", value=value, at=places, topic=topic))
        if value not in sent:
            out.append(_anomaly("phantom", value=value, at=places))
    for p, (_lo, _hi, records) in final.items():
        last: dict[str, int] = {}
        for offset, value in records:
            producer, _, seq = value.rpartition("-")
            if producer in last and int(seq) < last[producer]:
                out.append(
                    _anomaly("reordered", partition=p, offset=offset, value=value,
                             after=f"{producer}-{last[producer]}", topic=topic)
                )  # fmt: skip
            last[producer] = max(last.get(producer, -1), int(seq))
    stats = {
        "sent": len(sent),
        "acked": len(acked),
        "unknown_outcome": unknown,
        "unknown_but_written": sum(1 for v in where if v in sent and v not in acked),
        "in_log": sum(len(r) for _, _, r in final.values()),
    }
    return out, stats


def batch_writers(
    data_dirs: dict[int, list[Path]], topic: str, wanted: set[Any] | None = None
) -> dict[tuple[int, int], tuple[int, int, bool]]:
    """(partition, offset) -> (producer id, producer epoch, transactional) of the batch
    that holds it, from any replica's files (only the ``wanted`` offsets if given)."""
    from keeperless.protocol.records import CorruptBatchError, iter_batches
    from keeperless.storage.partition_dirs import partition_dirs

    writer: dict[tuple[int, int], tuple[int, int, bool]] = {}
    for d in (d for dirs in data_dirs.values() for d in dirs):
        for (t, p), pdir in partition_dirs(d).items():
            if t != topic:
                continue
            for seg in sorted(pdir.glob("*.log")):
                data = seg.read_bytes()
                try:
                    for _pos, h in iter_batches(data):
                        if h.is_control:
                            continue
                        for off in range(h.base_offset, h.last_offset + 1):
                            if wanted is None or (p, off) in wanted:
                                writer[(p, off)] = (
                                    h.producer_id,
                                    h.producer_epoch,
                                    h.is_transactional,
                                )
                except CorruptBatchError:
                    continue
    return writer


def explain_duplicates(
    anomalies: list[Anomaly], data_dirs: dict[int, list[Path]], topic: str
) -> tuple[list[Anomaly], list[Anomaly]]:
    """Split "duplicated" anomalies into the cluster's and the client's.

    librdkafka's idempotent producer bumps its epoch when a message times out, and sends
    again under the new epoch, from sequence 0, what it had in flight on every partition,
    written or not (Kafka gives the same duplicates; only a transactional producer is
    exactly-once). Two copies written under different epochs of one producer are that; two
    copies under one epoch mean the broker failed to recognise a retry: ours. The values
    sent again also come after later ones ("reordered"): explained with them. Returns
    (anomalies kept, anomalies explained), reading batch headers from the nodes' files.
    Only anomalies of ``topic`` are looked at: a copy's offsets mean nothing in another
    topic's files (seed 8204: the bulk topic's copies were looked up in the main topic's,
    whose batches at those offsets had other writers).
    """
    dups = [a for a in anomalies if a["kind"] == "duplicated" and a.get("topic") == topic]
    if not dups:
        return anomalies, []
    wanted = {tuple(place) for a in dups for place in a["at"]}
    writer = {
        k: (pid, epoch) for k, (pid, epoch, _txn) in batch_writers(data_dirs, topic, wanted).items()
    }
    kept: list[Anomaly] = []
    explained: list[Anomaly] = []
    for a in anomalies:
        if a["kind"] == "duplicated" and a.get("topic") == topic:
            ids = [writer.get((p, off)) for p, off in a["at"]]
            known = [i for i in ids if i is not None]
            one_producer = len({pid for pid, _ in known}) == 1
            if len(known) == len(ids) and one_producer and len(set(known)) == len(known):
                explained.append({**a, "writers": known})
                continue
        kept.append(a)
    # the copies sent again come after later values: the same cause, not a reordering
    again = {a["value"] for a in explained}

    def resent(a: Anomaly) -> bool:
        return a["kind"] == "reordered" and a.get("topic") == topic and a["value"] in again

    explained += [a for a in kept if resent(a)]
    kept = [a for a in kept if not resent(a)]
    return kept, explained


def check_reads(history: History, final: Final) -> list[Anomaly]:
    asked, _ = _deletions(history)
    logs = {p: dict(records) for p, (_lo, _hi, records) in final.items()}
    out = []
    for e in history.of("consumer-", "read"):
        for p, offset, value in e.value:
            if p in final and offset < min(asked.get(p, 0), final[p][0]):
                continue  # deleted since it was read
            got = logs.get(p, {}).get(offset)
            if got != value:
                out.append(
                    _anomaly("read-not-in-log", consumer=e.process, partition=p,
                             offset=offset, read=value, log=got, t=e.time_s)
                )  # fmt: skip
    return out


def check_commits(history: History, final: Final) -> list[Anomaly]:
    out: list[Anomaly] = []
    seen: dict[int, tuple[int, float]] = {}
    for e in history.of("monitor", "committed"):
        if e.type != "ok":
            continue
        for p, offset in e.value.items():
            if offset < 0:
                continue
            if p in seen and offset < seen[p][0]:
                out.append(
                    _anomaly("commit-went-back", partition=p, before=seen[p][0],
                             before_t=seen[p][1], now=offset, t=e.time_s)
                )  # fmt: skip
            seen[p] = (offset, e.time_s)
            hi = final.get(p, (0, 0, []))[1]
            if offset > hi:
                out.append(_anomaly("commit-past-log", partition=p, offset=offset, log_end=hi))
    acked: dict[int, int] = {}
    for e in history.of("consumer-", "commit"):
        if e.type == "ok":
            for p, offset in e.value.items():
                acked[p] = max(acked.get(p, -1), offset)
    for p, offset in sorted(acked.items()):
        last = seen.get(p, (-1, 0.0))[0]
        if last < offset:
            out.append(_anomaly("commit-lost", partition=p, acknowledged=offset, final=last))
    return out


# -- admin ------------------------------------------------------------------------------


def _apply(state: dict[str, tuple[int, str | None]], f: str, v: dict[str, Any]) -> str:
    """Apply an admin operation to the model; returns the outcome the controller gives."""
    topic = v["topic"]
    parts, retention = state.get(topic, (0, None))
    if f == "create":
        if parts:
            return "topic_exists"
        state[topic] = (v["partitions"], None)
        return "none"
    if not parts:
        return "unknown_topic"
    if f == "delete":
        state[topic] = (0, None)
        return "none"
    if f == "partitions":
        if v["total"] <= parts:
            return "invalid_partitions"
        state[topic] = (v["total"], retention)
        return "none"
    state[topic] = (parts, v["retention.ms"])  # config
    return "none"


PENDING_S = 30.0

# outcomes that may be answered whatever the model says, and change nothing: the
# request was refused for lack of live brokers, before taking effect
_REFUSALS = {"invalid_replication_factor"}
# outcomes that leave the operation's effect unknown: NOT_CONTROLLER may come after the
# controller appended its records and lost the leadership before they committed - the
# next leader may still commit them (Kafka's controller fails its pending operations
# with NotControllerException then; seed 4414: a topic created "not_controller")
_UNKNOWN = {"not_controller"}

# what a request answers when it is sent again after its first attempt took effect: a
# broker forwards an admin request to the active controller again when the connection
# drops or the controller moves before it answers, as Kafka's forwarding does, and the
# second attempt finds the first one's work done. Accepted when the operation itself
# explains it (it was possible, and its effect is kept).
_ALREADY_DONE = {"create": "topic_exists", "partitions": "invalid_partitions",
                 "delete": "unknown_topic"}  # fmt: skip


def check_admin(history: History) -> tuple[list[Anomaly], dict[str, int]]:
    ops: list[tuple[Event, Event]] = []
    invokes: dict[int, Event] = {}
    for e in history.of("admin"):
        if e.f == "delete-records":  # of the workload's topic: check_deletions
            continue
        if e.type == "invoke":
            invokes[e.op] = e
        elif e.op in invokes:
            ops.append((invokes.pop(e.op), e))
    # a state: the topics, and the operations of unknown outcome that may still happen
    Config = tuple[frozenset[tuple[str, int, str | None]], frozenset[int]]
    states: set[Config] = {(frozenset(), frozenset())}
    pending: dict[int, tuple[str, dict[str, Any]]] = {}
    pending_since: dict[int, tuple[float, str, dict[str, Any]]] = {}
    stats = {"ops": len(ops), "unknown_outcome": 0}

    def as_dict(topics: frozenset[tuple[str, int, str | None]]) -> dict[str, Any]:
        return {t: (p, r) for t, p, r in topics}

    def freeze(d: dict[str, Any]) -> frozenset[tuple[str, int, str | None]]:
        return frozenset((t, p, r) for t, (p, r) in d.items() if p)

    def closure(configs: set[Config]) -> set[Config]:
        out, todo = set(configs), list(configs)
        while todo:
            topics, waiting = todo.pop()
            for op in waiting:
                f, v = pending[op]
                d = as_dict(topics)
                _apply(d, f, v)  # a pending operation's outcome is whatever it was
                nxt = (freeze(d), waiting - {op})
                if nxt not in out:
                    out.add(nxt)
                    todo.append(nxt)
        return out

    for inv, done in ops:
        f, v = inv.f, inv.value
        # an operation of unknown outcome takes effect within PENDING_S of its timeout
        # or never (a forwarded request that did not commit by then never will)
        expired = {op for op, (t, _f, _v) in pending_since.items() if t < inv.time_s - PENDING_S}
        if expired:
            states = {(t, w - expired) for t, w in closure(states)}
            for op in expired:
                del pending_since[op]
        if done.type == "info" or done.value.get("code") in _UNKNOWN:
            stats["unknown_outcome"] += 1
            pending[inv.op] = (f, v)
            pending_since[inv.op] = (done.time_s, f, v)
            states = {(t, w | {inv.op}) for t, w in states}
            continue
        code = done.value["code"]
        nxt: set[Config] = set()
        for topics, waiting in closure(states):
            if code in _REFUSALS:
                nxt.add((topics, waiting))
                continue
            d = as_dict(topics)
            got = _apply(d, f, v)
            if got == code or (got == "none" and _ALREADY_DONE.get(f) == code):
                nxt.add((freeze(d), waiting))
        if not nxt:
            possible = sorted(sorted(t) for t, _ in closure(states))[:5]
            found = _anomaly(
                "admin-not-linearizable",
                op=f,
                value=v,
                outcome=code,
                t=done.time_s,
                possible_states=possible,
            )
            return [found], stats
        states = nxt
        if len(states) > 100_000:
            return [_anomaly("admin-check-too-many-states", t=done.time_s)], stats
    return [], stats


def check_voters(history: History, final: list[dict[str, Any]] | None) -> list[Anomaly]:
    """A dynamic quorum's voter set after healing is what the acknowledged voter changes
    made of the first one: an acknowledged add (id and directory id) is a voter unless
    an acknowledged removal followed, an acknowledged removal is not unless an add
    followed; a change whose outcome is unknown leaves its id unchecked."""
    events = [e.value for e in history.of("nemesis", "voters")]
    if not events:
        return []
    if final is None:
        return [_anomaly("voters-unknown", why="no controller described the quorum")]
    expected: dict[int, str] = {}
    unsure: set[int] = set()
    for v in events:
        if v["op"] == "initial":
            expected = {int(k): d for k, d in v["voters"].items()}
        elif v["outcome"] == "ok" and v["op"] == "add":
            expected[v["node"]] = v["dir"]
        elif v["outcome"] == "ok" and v["op"] == "remove":
            if expected.get(v["node"]) == v["dir"]:
                del expected[v["node"]]
        elif v["outcome"] == "info":
            unsure.add(v["node"])
    got = {int(v["id"]): v["directoryId"] for v in final}
    wrong = {
        i: {"expected": expected.get(i), "final": got.get(i)}
        for i in sorted(set(expected) | set(got))
        if i not in unsure and expected.get(i) != got.get(i)
    }
    return [_anomaly("voters-lost", voters=wrong, final=got)] if wrong else []


def check_upgrades(history: History, first: str, final: str | None) -> list[Anomaly]:
    """The finalized metadata.version after healing is at least the last acknowledged
    upgrade, and no more than the highest attempted."""
    from keeperless.metadata.features import metadata_version_for_release as level

    acked = [e.value["release"] for e in history.of("nemesis", "upgrade") if e.type == "ok"]
    tried = [e.value["release"] for e in history.of("nemesis", "upgrade") if e.type == "invoke"]
    if final is None:
        return [_anomaly("upgrade-unknown-final-level")]
    low = max([level(first), *(level(r) for r in acked)])
    high = max([level(first), *(level(r) for r in tried)])
    if not low <= level(final) <= high:
        return [_anomaly("upgrade-lost", acknowledged=acked[-1:] or [first], final=final)]
    return []


# -- controllers, logs -----------------------------------------------------------------

_ACTIVE = re.compile(r"\[node (\d+)\] Became the active controller in epoch (\d+)")


def check_controllers(logs: dict[int, str], isolated: list[dict[str, Any]]) -> list[Anomaly]:
    by_epoch: dict[int, set[int]] = defaultdict(set)
    for text in logs.values():
        for node, epoch in _ACTIVE.findall(text):
            by_epoch[int(epoch)].add(int(node))
    out = [
        _anomaly("two-active-controllers", epoch=e, nodes=sorted(n))
        for e, n in sorted(by_epoch.items())
        if len(n) > 1
    ]
    for cut in isolated:
        text = logs.get(cut["node"], "")
        if cut["cpu_pct"] > 25.0:
            out.append(_anomaly("busy-while-cut-off", **cut))
        resigned = "resigning leadership" in text or "No longer the active controller" in text
        # (a controller cut off while no leader was known may have been a follower or an
        # observer all along: the seed-7100 dynamic run isolated observer 8 so)
        if cut.get("was_leader", True) and not resigned:
            out.append(_anomaly("never-resigned-while-cut-off", **cut))
    return out


_BAD = re.compile(r"Traceback|\b(ERROR|CRITICAL)\b")
# lines the injected faults explain (reason in the comment)
_EXPLAINED = (
    "No space left on device",  # disk-full fault
    "INCONSISTENT_CLUSTER_ID",  # never expected here, but explained if seen with a fault
)


# what a broker logs about a log directory the disk-failure fault broke
_DISK_FAILED = ("is offline after an I/O error", "cannot be read", "Not a directory")


def _orphaned_spawn(lines: list[str]) -> bool:
    """The traceback of a worker the cleaner's process pool was starting when its node
    was killed (kill -9): the spawned child reads its start-up data from the dead parent,
    finds the pipe closed and prints to the node's log (campaign seed 8443 on 4133bce).
    Nothing of keeperless's ran in it; any other traceback still counts."""
    block: list[str] = []
    for line in lines:  # the traceback, up to its exception line
        block.append(line)
        if line.startswith("EOFError") or (block[1:] and not line.startswith((" ", "T"))):
            break
    text = "\n".join(block)
    return (
        block[-1] == "EOFError: Ran out of input"
        and "multiprocessing/spawn.py" in text
        and "keeperless" not in text
    )


def check_logs(
    logs: dict[int, str], disk_full_nodes: Iterable[int], failed_disk_nodes: Iterable[int] = ()
) -> list[Anomaly]:
    full = set(disk_full_nodes)
    failed = set(failed_disk_nodes)
    out = []
    for node, text in sorted(logs.items()):
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if not _BAD.search(line):
                continue
            context = "\n".join(lines[i : i + 12])
            if node in full and "No space left on device" in context:
                continue
            if node in failed and any(w in context for w in _DISK_FAILED):
                continue
            if _orphaned_spawn(lines[i : i + 12]):
                continue
            out.append(_anomaly("log-error", node=node, line=line[:300], context=context[:1500]))
            if len(out) > 20:
                return out
    return out


# -- offline agreement -------------------------------------------------------------------


def check_metadata_agreement(data_dirs: dict[int, Path]) -> list[Anomaly]:
    from keeperless.runtime.raft_log import FileRaftLog

    entries: dict[int, dict[int, bytes]] = {}
    ends: dict[int, int] = {}
    for node, d in data_dirs.items():
        path = d / "__cluster_metadata-0"
        if not path.exists():
            continue
        log = FileRaftLog(path, read_only=True)
        try:
            entries[node] = {e.base_offset: e.data for e in log.read(log.start_offset, 10**9)}
            ends[node] = log.end_offset
        finally:
            log.close()
    out: list[Anomaly] = []
    out += _compare_images(data_dirs, entries, ends)
    nodes = sorted(entries)
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            common = set(entries[a]) & set(entries[b])
            upto = min(ends[a], ends[b])
            for off in sorted(o for o in common if o < upto):
                if entries[a][off] != entries[b][off]:  # followers keep the leader's bytes
                    out.append(_anomaly("metadata-logs-differ", nodes=[a, b], offset=off))
                    break
    return out


def _compare_images(
    data_dirs: dict[int, Path], entries: dict[int, dict[int, bytes]], ends: dict[int, int]
) -> list[Anomaly]:
    """Every node's image (its own snapshot plus its own log) at the highest offset all of
    them reach must be the same image."""
    from keeperless.metadata.image import MetadataDelta
    from keeperless.runtime.metadata_log import decode_entry, image_of_snapshot
    from keeperless.runtime.raft_log import FileRaftLog

    if len(ends) < 2:
        return []
    upto = min(ends.values())
    images = {}
    for node, d in data_dirs.items():
        if node not in entries:
            continue
        log = FileRaftLog(d / "__cluster_metadata-0", read_only=True)
        try:
            sid = log.snapshot_id
            if sid is not None and sid.end_offset > upto:
                continue  # its snapshot is past the common offset: not comparable there
            delta, image = (
                image_of_snapshot(log.snapshot_data(), sid) if sid is not None else (None, None)
            )
        finally:
            log.close()
        delta = MetadataDelta(image) if image is not None else MetadataDelta(_empty_image())
        start = sid.end_offset if sid is not None else 0
        for base in sorted(entries[node]):
            if start <= base < upto:
                for rec in decode_entry(entries[node][base]):
                    delta.replay(rec)
        images[node] = delta.apply()
    out: list[Anomaly] = []
    nodes = sorted(images)
    for n in nodes[1:]:
        a, b = images[nodes[0]], images[n]
        if (a.topics, a.brokers, a.configs, a.features) != (
            b.topics,
            b.brokers,
            b.configs,
            b.features,
        ):
            out.append(_anomaly("metadata-images-differ", nodes=[nodes[0], n], at=upto))
    return out


def _empty_image() -> Any:
    from keeperless.metadata.image import MetadataImage

    return MetadataImage()


def _keyed_state(batches: list[tuple[int, int, bytes]]) -> dict[bytes, tuple[int, bytes]]:
    from keeperless.protocol.records import decode_records

    state: dict[bytes, tuple[int, bytes]] = {}
    for _base, _last, body in batches:
        for r in decode_records(body):
            if r.key is not None:
                state[r.key] = (r.offset, r.value or b"")
    return state


def _compare_keyed(
    key: tuple[str, int], replicas: dict[int, list[tuple[int, int, bytes]]]
) -> list[Anomaly]:
    ends = {node: (b[-1][1] if b else -1) for node, b in replicas.items()}
    if len(set(ends.values())) != 1:
        return []  # not all caught up: nothing to compare
    states = {node: _keyed_state(b) for node, b in replicas.items()}
    first_node, first = next(iter(states.items()))
    for node, st in states.items():
        if st != first:
            differ = sorted(k for k in set(st) | set(first) if st.get(k) != first.get(k))
            return [
                _anomaly("compacted-replicas-differ", partition=f"{key[0]}-{key[1]}",
                         nodes=[first_node, node], keys=[k.decode() for k in differ[:5]])
            ]  # fmt: skip
    return []


def _kv_seq(value: str) -> int:
    return int(value.rsplit("-", 1)[1])


def check_compaction(history: History, final: Final) -> tuple[list[Anomaly], dict[str, int]]:
    """The compacted topic of the workload (values ``kv-<key>-<seq>``): after healing
    and cleaning, each key's latest record is its latest acknowledged write, at the
    offset acknowledged, or a later write; no acknowledged record moved."""
    # key -> (partition, offset, value) of its latest acknowledged write. One idempotent
    # producer writes them, so a key's writes (one partition) are in the order sent: the
    # latest is the highest sequence number. librdkafka acknowledges some writes without
    # an offset (a timed-out request whose successor succeeded was persisted too).
    acked: dict[str, tuple[int, int | None, str]] = {}
    at: dict[str, tuple[int, int]] = {}
    sent = 0
    for e in history.of("kv-producer", "send"):
        if e.type == "invoke":
            sent += 1
        elif e.type == "ok":
            v = e.value["value"]
            k = v.rsplit("-", 1)[0]
            if e.value["offset"] is not None:
                at[v] = (e.value["partition"], e.value["offset"])
            if k not in acked or _kv_seq(v) > _kv_seq(acked[k][2]):
                acked[k] = (e.value["partition"], e.value["offset"], v)
    latest: dict[str, tuple[int, int, str]] = {}
    in_log = 0
    out: list[Anomaly] = []
    for p, (_lo, _hi, records) in final.items():
        for offset, value in records:
            in_log += 1
            k = value.rsplit("-", 1)[0]
            if value in at and at[value] != (p, offset):
                out.append(_anomaly("compacted-record-moved", value=value, acked_at=at[value],
                                    found=[p, offset]))  # fmt: skip
            if k not in latest or offset > latest[k][1]:
                latest[k] = (p, offset, value)
    for k, (p, offset, value) in sorted(acked.items()):
        got = latest.get(k)
        if (
            got is None
            or _kv_seq(got[2]) < _kv_seq(value)
            or (offset is not None and (got[1] < offset or (got[1] == offset and got[2] != value)))
        ):
            out.append(_anomaly("compaction-lost-latest", key=k, acked=[p, offset, value],
                                found=list(got) if got else None))  # fmt: skip
    return out, {"sent": sent, "acked_keys": len(acked), "in_log": in_log}


def check_replica_counts(
    topics: dict[str, Any], topic: str, allowed: frozenset[int]
) -> list[Anomaly]:
    """After every reassignment settled, each partition of ``topic`` has as many
    replicas as some target or its original set had: a cancellation or a replaced
    target that left the replicas of two sets (once: all six after a resubmitted target
    was cancelled) is an anomaly."""
    found = topics.get(topic)
    if found is None:
        return []
    return [
        _anomaly("replica-count", topic=topic, partition=p, replicas=replicas)
        for p, replicas in sorted(found[1].items())
        if len(replicas) not in allowed
    ]


def check_replicas(
    data_dirs: dict[int, list[Path]],
    topics: dict[str, Any],
    compacted: frozenset[str] = frozenset(),
) -> list[Anomaly]:
    """``topics``: name -> (topic id, {partition: replicas}) as the metadata says;
    ``data_dirs``: each node's log directories. The replicas of a ``compacted`` topic
    clean their logs each on its own: they must hold the same latest record of every key,
    not the same batches. A partition in two log directories of one node is an anomaly
    (a move between them left its old copy)."""
    import os

    from keeperless.storage.batch_scan import BatchScan
    from keeperless.storage.partition_dirs import partition_dirs, read_topic_id

    out: list[Anomaly] = []
    found: dict[tuple[str, int], dict[int, list[tuple[int, int, bytes]]]] = defaultdict(dict)
    seen: dict[tuple[int, str, int], Path] = {}
    for node, d in ((node, d) for node, dirs in data_dirs.items() for d in dirs):
        for (topic, p), pdir in partition_dirs(d).items():
            if (node, topic, p) in seen:
                out.append(_anomaly("duplicate-replica", node=node, partition=f"{topic}-{p}",
                                    dirs=[str(seen[(node, topic, p)]), str(pdir)]))  # fmt: skip
                continue
            seen[(node, topic, p)] = pdir
            tid = read_topic_id(pdir)
            expected = topics.get(topic)
            if expected is None or expected[0] != tid or node not in expected[1].get(p, ()):
                out.append(
                    _anomaly("stray-partition-directory", node=node, dir=pdir.name,
                             topic_id=str(tid))
                )  # fmt: skip
                continue
            # the bytes of a compacted topic's batches (to read its keys); of the others,
            # what identifies a batch's bytes: its CRC, size and leader epoch (hundreds
            # of MB per replica at volume)
            keep_bytes = topic in compacted
            batches: list[tuple[int, int, Any]] = []
            corrupt = None
            for seg in sorted(pdir.glob("*.log")):
                fd = os.open(seg, os.O_RDONLY)
                try:
                    scan = BatchScan(fd, 0, os.fstat(fd).st_size, verify_crc=True)
                    for _, h, data in scan:
                        body = (
                            bytes(data) if keep_bytes else (h.crc, h.size, h.partition_leader_epoch)
                        )
                        batches.append((h.base_offset, h.last_offset, body))
                finally:
                    os.close(fd)
                if scan.stop is not None and not scan.stop.clean:
                    corrupt = (seg.name, scan.stop)
                    break
            if corrupt is not None:
                out.append(
                    _anomaly("corrupt-segment", node=node, segment=f"{pdir.name}/{corrupt[0]}",
                             error=f"{corrupt[1].reason} at byte {corrupt[1].position}")
                )  # fmt: skip
                continue
            found[(topic, p)][node] = batches
    for key, replicas in sorted(found.items()):
        if len(replicas) < 2:
            continue
        if key[0] in compacted:
            out += _compare_keyed(key, replicas)
            continue
        upto = min((b[-1][1] + 1 if b else 0) for b in replicas.values())
        # from the highest first offset: below the log start (DeleteRecords) each replica
        # deleted whole segments, and each rolled its segments where it did
        since = max((b[0][0] if b else 0) for b in replicas.values())
        views = {
            node: [(base, body) for base, last, body in b if since <= base and last < upto]
            for node, b in replicas.items()
        }
        first = next(iter(views.values()))
        for node, v in views.items():
            if v != first:
                out.append(
                    _anomaly("replicas-differ", partition=f"{key[0]}-{key[1]}",
                             nodes=sorted(views), below=upto, node=node)
                )  # fmt: skip
                break
    return out
