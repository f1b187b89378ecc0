"""The share-group analyses of the fault harness (KIP-932's guarantees, issue 28): read a
history of share consumers' deliveries and acknowledgements and report

- ``share-delivery-count-over-limit``: a record delivered with a count above
  ``group.share.delivery.count.limit`` (it must have been archived before);
- ``share-acknowledged-twice``: two acknowledgements of one record that ends it (ACCEPT
  or REJECT) both confirmed by the broker - an ended record accepts nothing more;
- ``share-delivered-after-acknowledged``: a poll begun after an ACCEPT or REJECT of a
  record was confirmed returned that record (no consumer may acquire an ended record; a
  consumer whose lock expired has its acknowledgement refused, not applied);
- ``share-acknowledged-without-lock``: a confirmed acknowledgement of a record by a
  consumer that another consumer got in between (the first one's acquisition had ended,
  so its acknowledgement must have been refused);
- ``share-delivery-count-decreased``: a delivery begun after a RELEASE of the record was
  confirmed, counted no higher than the delivery released (a release is written to the
  share coordinator before it is confirmed: the record went back to AVAILABLE with that
  count). Deliveries whose end nobody confirmed may be forgotten: KIP-932 keeps no
  acquisition durably ("in the unlikely event of a share-partition leader crash, memory
  of the in-flight delivery will be lost"; the count "cannot be relied upon to be precise
  in all situations"), so a later delivery may count lower than one of those (seeds 8819
  and 8827: a leader paused or cut off, and a leader that lost power);
- ``share-inconsistent-offset``: a record delivered at another partition or offset than
  its producer was told;
- ``share-unseen``: an acknowledged write no consumer ever got;
- ``share-not-redelivered``: a record whose last delivery did not end it (released,
  or never acknowledged: a crashed consumer's, once its lock expired) while its count was
  below the limit, and that nobody got again by the end of the final drain. A consumer
  killed -9 may have acquired records it never reported (librdkafka's share consumer
  fetches ahead of what poll returns): each kill after a record's last recorded delivery
  may have taken one more delivery of it, unseen (seed 8831: a record last seen with
  count 2 of 3, then fetched ahead by a crasher killed at once, was archived at the
  limit).

An acknowledgement whose outcome is unknown (the commit failed or timed out) may or may
not have been applied: it counts neither as confirmed nor as refused. Times are the
run's seconds; a delivery is (poll begun, poll done)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["Ack", "Delivery", "check_share", "from_events", "kill_times"]

_ENDS = ("accept", "reject")


@dataclass(frozen=True, slots=True)
class Delivery:
    process: str
    value: int
    partition: int
    offset: int
    count: int
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True)
class Ack:
    process: str
    value: int
    kind: str  # accept | release | reject
    confirmed: bool  # False: the outcome is unknown (it may have been applied)
    start_s: float
    end_s: float


def from_events(
    events: Iterable[Any],
) -> tuple[dict[int, tuple[int, int]], list[Delivery], list[Ack]]:
    """The writes acknowledged (value -> partition, offset), deliveries and
    acknowledgements in the share workload's events (tests/chaos/share_workload.py)."""
    writes: dict[int, tuple[int, int]] = {}
    deliveries: list[Delivery] = []
    acks: list[Ack] = []
    invoked: dict[int, Any] = {}
    for e in events:
        if e.type == "invoke":
            invoked[e.op] = e
            continue
        start = invoked[e.op].time_s if e.op in invoked else e.time_s
        v = e.value or {}
        if e.f == "send" and e.type == "ok":
            # an offset the client was not told (-1): librdkafka takes a
            # DUPLICATE_SEQUENCE_NUMBER answer to a retried batch for success (seed
            # 8907); the record is there, at an offset nobody knows
            off = v.get("offset")
            writes[int(v["value"])] = (int(v["partition"]), -1 if off is None else int(off))
        elif e.f == "poll":
            # a crashed consumer's deliveries come as marks with the times its own
            # process saw (a failed poll has no records)
            start, end = v.get("start_s", start), v.get("end_s", e.time_s)
            for p, off, val, count in v.get("records", []):
                deliveries.append(Delivery(e.process, val, p, off, count, start, end))
        elif e.f == "ack":
            # the partitions whose acknowledgements the broker answered without error
            done = set(v.get("confirmed", []))
            for p, _off, val, kind in invoked[e.op].value["acks"]:
                confirmed = e.type == "ok" and p in done
                acks.append(Ack(e.process, val, kind, confirmed, start, e.time_s))
    return writes, deliveries, acks


def kill_times(events: Iterable[Any]) -> list[float]:
    """When the share workload killed a consumer -9 (its "killed" marks)."""
    return [e.time_s for e in events if e.type == "info" and e.f == "killed"]


def check_share(
    writes: dict[int, tuple[int, int]],
    deliveries: list[Delivery],
    acks: list[Ack],
    limit: int,
    kills: Iterable[float] = (),
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """``kills``: when consumers were killed -9 (run seconds)."""
    killed = sorted(kills)
    anomalies: list[dict[str, Any]] = []
    by_value: dict[int, list[Delivery]] = {}
    for d in deliveries:
        by_value.setdefault(d.value, []).append(d)
        if d.count > limit:
            anomalies.append({"kind": "share-delivery-count-over-limit", "limit": limit,
                              "delivery": _d(d)})  # fmt: skip
        want = writes.get(d.value)
        if want is not None and want != (d.partition, d.offset if want[1] >= 0 else -1):
            anomalies.append({"kind": "share-inconsistent-offset", "written": list(want),
                              "delivery": _d(d)})  # fmt: skip
    ends: dict[int, list[Ack]] = {}
    maybe_ended: set[int] = set()
    for a in acks:
        if a.kind in _ENDS:
            maybe_ended.add(a.value)
            if a.confirmed:
                ends.setdefault(a.value, []).append(a)
    for value, confirmed in ends.items():
        if len(confirmed) > 1:
            anomalies.append({"kind": "share-acknowledged-twice", "value": value,
                              "acks": [_a(a) for a in confirmed]})  # fmt: skip
        first = min(confirmed, key=lambda a: a.end_s)
        late = [d for d in by_value.get(value, []) if d.start_s > first.end_s]
        if late:
            anomalies.append({"kind": "share-delivered-after-acknowledged", "value": value,
                              "ack": _a(first),
                              "deliveries": [_d(d) for d in late[:3]]})  # fmt: skip
    for a in acks:
        if not a.confirmed:
            continue
        own = [d for d in by_value.get(a.value, [])
               if d.process == a.process and d.end_s <= a.start_s]  # fmt: skip
        if not own:
            continue
        held = max(own, key=lambda d: d.end_s)
        between = [d for d in by_value[a.value] if d.process != a.process
                   and d.start_s > held.end_s and d.end_s < a.start_s]  # fmt: skip
        if between:
            anomalies.append({"kind": "share-acknowledged-without-lock", "ack": _a(a),
                              "held": _d(held), "other": _d(between[0])})  # fmt: skip
    for ack in acks:
        if ack.kind != "release" or not ack.confirmed:
            continue
        ds = by_value.get(ack.value, [])
        own = [d for d in ds if d.process == ack.process and d.end_s <= ack.start_s]
        if not own:
            continue
        released = max(own, key=lambda d: d.end_s)
        lower = [d for d in ds if d.start_s > ack.end_s and d.count <= released.count]
        if lower:
            anomalies.append({"kind": "share-delivery-count-decreased", "value": ack.value,
                              "released": _d(released), "release": _a(ack),
                              "later": _d(lower[0])})  # fmt: skip
    unseen = sorted(v for v in writes if v not in by_value)
    if unseen:
        anomalies.append({"kind": "share-unseen", "count": len(unseen), "values": unseen[:20]})
    stuck = []
    for value, ds in by_value.items():
        if value in maybe_ended:
            continue
        last = max(ds, key=lambda d: d.end_s)
        unseen_after = sum(1 for t in killed if t >= last.start_s)
        if max(d.count for d in ds) + unseen_after >= limit:
            continue  # archived when its last delivery ended unacknowledged or released
        stuck.append(value)  # every delivery ended with a release or a lost lock
    if stuck:
        anomalies.append({"kind": "share-not-redelivered", "count": len(stuck),
                          "values": sorted(stuck)[:20],
                          "last": [_d(max(by_value[v], key=lambda d: d.end_s))
                                   for v in sorted(stuck)[:3]]})  # fmt: skip
    stats = {
        "written": len(writes),
        "deliveries": len(deliveries),
        "redeliveries": sum(len(ds) - 1 for ds in by_value.values()),
        "accepted": sum(1 for a in acks if a.kind == "accept" and a.confirmed),
        "rejected": sum(1 for a in acks if a.kind == "reject" and a.confirmed),
        "released": sum(1 for a in acks if a.kind == "release" and a.confirmed),
        "unknown_acks": sum(1 for a in acks if not a.confirmed),
        "archived_at_limit": sum(
            1 for v, ds in by_value.items()
            if v not in maybe_ended and max(d.count for d in ds) >= limit
        ),
    }  # fmt: skip
    return anomalies, stats


def _d(d: Delivery) -> list[Any]:
    return [d.process, d.value, d.partition, d.offset, d.count, d.start_s, d.end_s]


def _a(a: Ack) -> list[Any]:
    return [a.process, a.value, a.kind, a.confirmed, a.start_s, a.end_s]
