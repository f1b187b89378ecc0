"""The share-group analyses (tests/chaos/share_checker.py): each catches a hand-built
history holding its anomaly and accepts the matching allowed history."""

from __future__ import annotations

from tests.chaos.history import History
from tests.chaos.share_checker import Ack, Delivery, check_share, from_events

LIMIT = 3
WRITES = {1: (0, 0), 2: (0, 1)}


def d(value: int, count: int, t: float, process: str = "c0") -> Delivery:
    return Delivery(process, value, 0, value - 1, count, t, t + 0.1)


def a(value: int, kind: str, t: float, confirmed: bool = True, process: str = "c0") -> Ack:
    return Ack(process, value, kind, confirmed, t, t + 0.1)


def kinds(deliveries: list[Delivery], acks: list[Ack], writes: dict[int, tuple[int, int]]
          = WRITES) -> set[str]:  # fmt: skip
    anomalies, _ = check_share(writes, deliveries, acks, LIMIT)
    return {x["kind"] for x in anomalies}


def test_a_clean_history_has_no_anomaly() -> None:
    # 1 released, then redelivered and accepted; 2 never acknowledged by a crashed
    # consumer, then redelivered (same count: its acquisition was lost to a failover)
    ds = [d(1, 1, 1), d(2, 1, 1, "crashed"), d(1, 2, 3), d(2, 1, 9)]
    acks = [a(1, "release", 2), a(1, "accept", 4), a(2, "accept", 10)]
    assert kinds(ds, acks) == set()


def test_a_count_above_the_limit() -> None:
    ds = [d(1, 1, 1), d(1, 2, 2), d(1, 3, 3), d(1, 4, 4), d(2, 1, 1)]
    acks = [a(1, "accept", 5), a(2, "accept", 2)]
    assert kinds(ds, acks) == {"share-delivery-count-over-limit"}


def test_records_at_the_limit_are_archived_not_stuck() -> None:
    ds = [d(1, 1, 1), d(1, 2, 2), d(1, 3, 3), d(2, 1, 1)]
    acks = [a(1, "release", 1.5), a(1, "release", 2.5), a(1, "release", 3.5),
            a(2, "reject", 2)]  # fmt: skip
    assert kinds(ds, acks) == set()


def test_two_confirmed_acknowledgements_that_end_a_record() -> None:
    ds = [d(1, 1, 1, "c0"), d(1, 1, 1, "c1"), d(2, 1, 1)]
    acks = [a(1, "accept", 2, process="c0"), a(1, "reject", 2.05, process="c1"),
            a(2, "accept", 2)]  # fmt: skip
    assert "share-acknowledged-twice" in kinds(ds, acks)
    # one of them with an unknown outcome (it may have been refused): allowed
    acks[1] = a(1, "reject", 2.05, confirmed=False, process="c1")
    assert kinds(ds, acks) == set()


def test_a_delivery_begun_after_a_confirmed_accept() -> None:
    ds = [d(1, 1, 1), d(1, 2, 5, "c1"), d(2, 1, 1)]
    acks = [a(1, "accept", 2), a(2, "accept", 2)]
    assert kinds(ds, acks) == {"share-delivered-after-acknowledged"}
    # an accept whose outcome is unknown, then delivered again: it was not applied
    acks[0] = a(1, "accept", 2, confirmed=False)
    assert kinds(ds, acks) == set()
    # a delivery begun before the accept was confirmed: the accept was then refused
    # (its lock had expired), which a confirmed accept says it was not - but the
    # times alone cannot tell, so it is allowed
    ds[1] = d(1, 2, 2.05, "c1")
    acks[0] = a(1, "accept", 2)
    assert kinds(ds, acks) == set()


def test_an_acknowledgement_of_a_record_another_consumer_got_meanwhile() -> None:
    # c0's lock expired while it was slow; c1 got the record; c0's accept was confirmed
    ds = [d(1, 1, 1, "c0"), d(1, 2, 8, "c1"), d(2, 1, 1)]
    acks = [a(1, "accept", 9, process="c0"), a(2, "accept", 2)]
    assert kinds(ds, acks) == {"share-acknowledged-without-lock"}
    acks[0] = a(1, "accept", 9, confirmed=False, process="c0")  # maybe refused: allowed
    assert kinds(ds, acks) == set()
    acks[0] = a(1, "accept", 9, process="c1")  # the one who got it last: allowed
    assert kinds(ds, acks) == set()


def test_a_count_not_above_a_confirmed_release() -> None:
    # delivered with count 2, released (confirmed: written back with count 2), then
    # delivered with count 2 or 1: the written state went back
    for later in (2, 1):
        ds = [d(1, 1, 0), d(1, 2, 1), d(1, later, 3), d(2, 1, 1)]
        acks = [a(1, "release", 1.5), a(1, "accept", 4), a(2, "accept", 2)]
        assert kinds(ds, acks) == {"share-delivery-count-decreased"}, later
    # the release's outcome unknown, or no release at all (the consumer crashed, or its
    # leader did): the delivery may be forgotten (KIP-932), a lower count is allowed
    ds = [d(1, 2, 1), d(1, 1, 3), d(2, 1, 1)]
    acks = [a(1, "release", 1.5, confirmed=False), a(1, "accept", 4), a(2, "accept", 2)]
    assert kinds(ds, acks) == set()
    acks = [a(1, "accept", 4), a(2, "accept", 2)]
    assert kinds(ds, acks) == set()
    # released by another consumer than the one that got it: not its delivery
    ds = [d(1, 2, 1, "c1"), d(1, 1, 3), d(2, 1, 1)]
    acks = [a(1, "release", 1.5), a(1, "accept", 4), a(2, "accept", 2)]
    assert kinds(ds, acks) == set()


def test_a_record_at_another_offset_than_written() -> None:
    ds = [d(1, 1, 1), Delivery("c0", 2, 0, 7, 1, 1, 1.1)]
    acks = [a(1, "accept", 2), a(2, "accept", 2)]
    assert kinds(ds, acks) == {"share-inconsistent-offset"}


def test_an_acknowledged_write_nobody_got() -> None:
    ds = [d(1, 1, 1)]
    acks = [a(1, "accept", 2)]
    assert kinds(ds, acks) == {"share-unseen"}
    assert kinds(ds, acks, {1: (0, 0)}) == set()


def test_a_released_or_abandoned_record_never_delivered_again() -> None:
    ds = [d(1, 1, 1), d(2, 2, 1, "crashed")]
    acks = [a(1, "release", 2)]
    found, _ = check_share(WRITES, ds, acks, LIMIT)
    assert [x["kind"] for x in found] == ["share-not-redelivered"]
    assert found[0]["values"] == [1, 2]


def test_a_crashed_consumer_may_have_taken_one_unseen_delivery_per_kill() -> None:
    """Seed 8831: the crasher reported a record with count 2 (limit 3) and was killed
    at once; librdkafka had fetched ahead, so one more delivery (count 3) went unseen
    and the record was archived at the limit. A kill after its last recorded delivery
    allows that; without one it is never delivered again for no reason."""
    ds = [d(1, 1, 1), d(1, 2, 2, "crasher"), d(2, 1, 1)]
    acks = [a(2, "accept", 2)]
    found, _ = check_share(WRITES, ds, acks, LIMIT)
    assert [x["kind"] for x in found] == ["share-not-redelivered"]
    found, _ = check_share(WRITES, ds, acks, LIMIT, kills=[2.2])
    assert found == []
    found, _ = check_share(WRITES, ds, acks, LIMIT, kills=[1.5])  # before it: no
    assert [x["kind"] for x in found] == ["share-not-redelivered"]
    ds[1] = d(1, 1, 2, "crasher")  # count 1: one unseen delivery leaves it below
    found, _ = check_share(WRITES, ds, acks, LIMIT, kills=[2.2])
    assert [x["kind"] for x in found] == ["share-not-redelivered"]


def test_events_of_the_workload() -> None:
    h = History()
    op = h.invoke("share-producer", "send", {"value": 1})
    h.complete(op, "share-producer", "ok", "send", {"value": 1, "partition": 0, "offset": 0})
    op = h.invoke("share-consumer-0", "poll")
    h.complete(op, "share-consumer-0", "ok", "poll", {"records": [[0, 0, 1, 1], [1, 0, 2, 1]]})
    h.info("share-crasher", "poll", {"records": [[1, 1, 3, 1]], "start_s": 0.5, "end_s": 0.6})
    op = h.invoke("share-consumer-0", "ack", {"acks": [[0, 0, 1, "accept"], [1, 0, 2, "reject"]]})
    h.complete(op, "share-consumer-0", "ok", "ack", {"confirmed": [0]})
    op = h.invoke("share-consumer-0", "ack", {"acks": [[0, 0, 1, "release"]]})
    h.complete(op, "share-consumer-0", "info", "ack", {"error": "timed out"})
    writes, ds, acks = from_events(h.of("share-"))
    assert writes == {1: (0, 0)}
    assert [(x.value, x.partition, x.offset, x.count) for x in ds] == [
        (1, 0, 0, 1), (2, 1, 0, 1), (3, 1, 1, 1)
    ]  # fmt: skip
    assert (ds[2].start_s, ds[2].end_s) == (0.5, 0.6)
    assert [(x.value, x.kind, x.confirmed) for x in acks] == [
        (1, "accept", True), (2, "reject", False), (1, "release", False)
    ]  # fmt: skip


def test_a_write_acknowledged_without_an_offset() -> None:
    """Seed 8907: librdkafka reports a retried batch answered DUPLICATE_SEQUENCE_NUMBER
    as delivered, with no offset; the checker stopped with a TypeError. Such a write is
    known by its partition alone: it must still be seen, at any offset of it."""
    h = History()
    op = h.invoke("share-producer", "send", {"value": 1})
    h.complete(op, "share-producer", "ok", "send", {"value": 1, "partition": 0, "offset": None})
    writes, _, _ = from_events(h.of("share-producer"))
    assert writes == {1: (0, -1)}
    acks = [a(1, "accept", 2)]
    assert kinds([d(1, 1, 1)], acks, writes) == set()  # at offset 0 of partition 0
    assert kinds([], acks, writes) == {"share-unseen"}
    elsewhere = [Delivery("c0", 1, 1, 0, 1, 1, 1.1)]  # partition 1: not where it went
    assert kinds(elsewhere, acks, writes) == {"share-inconsistent-offset"}
