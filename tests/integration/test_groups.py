"""Classic consumer groups under churn, as Kafka coordinates them (issue 13): static
membership, session timeout bounds, convergence after rapid subscription changes,
cooperative rebalances without extra rounds."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.integration.cluster import Node, kafka_request, wait_until


def _topics(node: Node, *specs: tuple[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    for f in admin.create_topics([NewTopic(t, n, 1) for t, n in specs]).values():
        f.result(20)


class Member:
    """A confluent-kafka consumer polled by the test, recording its rebalance events."""

    def __init__(self, node: Node, group: str, **extra: Any) -> None:
        conf = {
            "bootstrap.servers": node.bootstrap,
            "group.id": group,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "auto.offset.reset": "earliest",
            **extra,
        }
        self.c = Consumer(conf)
        self.events: list[tuple[str, list[tuple[str, int]]]] = []

    def subscribe(self, topics: list[str]) -> None:
        def on_assign(c: Any, parts: list[Any]) -> None:
            self.events.append(("assign", sorted((p.topic, p.partition) for p in parts)))

        def on_revoke(c: Any, parts: list[Any]) -> None:
            self.events.append(("revoke", sorted((p.topic, p.partition) for p in parts)))

        self.c.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke)

    def assignment(self) -> list[tuple[str, int]]:
        return sorted((p.topic, p.partition) for p in self.c.assignment())

    def poll(self) -> None:
        self.c.poll(0.05)


def _poll_until(members: list[Member], cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
        if cond():
            return
    raise TimeoutError(f"timed out waiting for {what}: {[m.assignment() for m in members]}")


def test_a_static_member_restarts_without_a_rebalance(node: Node) -> None:
    """KIP-345: a member with group.instance.id that comes back within its session gets
    its assignment back; the other member sees no rebalance at all."""
    _topics(node, ("static", 4))
    a = Member(node, "static-g", **{"group.instance.id": "a"})
    b = Member(node, "static-g", **{"group.instance.id": "b"})
    a.subscribe(["static"])
    b.subscribe(["static"])
    _poll_until(
        [a, b],
        lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2,
        30,
        "two members with two partitions each",
    )
    b_parts = b.assignment()
    events_before = list(a.events)
    b.c.close()  # a static member does not leave the group on close
    b2 = Member(node, "static-g", **{"group.instance.id": "b"})
    b2.subscribe(["static"])
    _poll_until([a, b2], lambda: b2.assignment() == b_parts, 20, "b's partitions back")
    for _ in range(20):  # a while longer: nothing may happen to a
        a.poll()
        b2.poll()
    assert a.events == events_before, "the other member saw a rebalance"
    assert "Group static-g: static member" in node.logs()
    a.c.close()
    b2.c.close()


def test_join_outside_the_session_timeout_bounds_is_refused(node: Node) -> None:
    body = {
        "group_id": "bounds",
        "session_timeout": 1000,  # group.min.session.timeout.ms is 6000
        "rebalance_timeout": 10000,
        "member_id": "",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00"}],
        "reason": None,
    }
    from confluent_kafka import Producer

    Producer({"bootstrap.servers": node.bootstrap}).flush(1)
    wait_until(
        lambda: (
            kafka_request(node.port, 10, 4, {"key_type": 0, "coordinator_keys": ["bounds"]})
            .coordinators[0]
            .error_code
            == ErrorCode.none
        ),
        20,
        what="the coordinator",
    )
    assert kafka_request(node.port, 11, 9, body).error_code == ErrorCode.invalid_session_timeout
    body["session_timeout"] = 1_800_001  # group.max.session.timeout.ms is 1800000
    assert kafka_request(node.port, 11, 9, body).error_code == ErrorCode.invalid_session_timeout


def test_rapid_subscription_changes_settle_on_the_last_one(node: Node) -> None:
    """Subscribe, unsubscribe and re-subscribe in quick succession: the group settles on
    the final subscription (a member id handed out and never used held every later
    rebalance for the whole rebalance timeout)."""
    _topics(node, ("churn-a", 2), ("churn-b", 2))
    # the default max.poll.interval.ms (5 minutes) is the rebalance timeout
    m = Member(node, "churn-g")
    other = Member(node, "churn-g")
    other.subscribe(["churn-a", "churn-b"])
    _poll_until([other], lambda: len(other.assignment()) == 4, 30, "the first member settles")
    for topics in (["churn-a"], [], ["churn-b"], [], ["churn-a"], [], ["churn-a", "churn-b"]):
        if topics:
            m.subscribe(topics)
        else:
            m.c.unsubscribe()
        for _ in range(2):
            m.poll()
    everything = [("churn-a", 0), ("churn-a", 1), ("churn-b", 0), ("churn-b", 1)]
    _poll_until(
        [m, other],
        lambda: (
            sorted(m.assignment() + other.assignment()) == everything and len(m.assignment()) == 2
        ),
        30,
        "the final subscription's assignment",
    )
    m.c.close()
    other.c.close()


def test_a_cooperative_member_leaving_costs_the_others_one_round(node: Node) -> None:
    """cooperative-sticky: when a member leaves, the others get its partitions in one
    incremental assignment and give up none of their own."""
    _topics(node, ("coop", 6))
    conf = {"partition.assignment.strategy": "cooperative-sticky"}
    ms = [Member(node, "coop-g", **conf) for _ in range(3)]
    for m in ms:
        m.subscribe(["coop"])
    _poll_until(ms, lambda: all(len(m.assignment()) == 2 for m in ms), 40, "2 partitions each")
    for _ in range(20):
        for m in ms:
            m.poll()
    stay = ms[:2]
    before = [list(m.events) for m in stay]
    owned = [m.assignment() for m in stay]
    ms[2].c.close()
    _poll_until(stay, lambda: all(len(m.assignment()) == 3 for m in stay), 30, "3 each")
    for _ in range(20):
        for m in stay:
            m.poll()
    for m, old, had in zip(stay, before, owned, strict=True):
        new = m.events[len(old) :]
        assert [kind for kind, _ in new] == ["assign"], new  # one round, nothing revoked
        assert set(had) <= set(m.assignment())
        m.c.close()


def test_a_member_commits_while_another_joins(node: Node) -> None:
    """An eager member commits what it consumed after another member's join started the
    rebalance and before it joins again itself (kafka-python's commit in its poll loop,
    librdkafka's on revoke). Kafka accepts a current member's commit in
    PreparingRebalance; refused, eager groups read those records again."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    _topics(node, ("eager", 2))
    a = KafkaConsumer(bootstrap_servers=node.bootstrap, group_id="eager",
                      enable_auto_commit=False, auto_offset_reset="earliest")  # fmt: skip
    b = Member(node, "eager")
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    try:
        a.subscribe(["eager"])
        deadline = time.monotonic() + 30
        while not a.assignment() and time.monotonic() < deadline:
            a.poll(200)
        assert len(a.assignment()) == 2
        b.subscribe(["eager"])

        def preparing() -> bool:
            b.poll()
            group = admin.describe_consumer_groups(["eager"])["eager"].result(10)
            return "PREPARING" in str(group.state)

        wait_until(preparing, 30, what="the group preparing a rebalance")
        offsets = {TopicPartition("eager", p): OffsetAndMetadata(7, "", -1) for p in (0, 1)}
        a.commit(offsets)  # (refused: CommitFailedError, REBALANCE_IN_PROGRESS)
        assert a.committed(TopicPartition("eager", 0)) == 7
    finally:
        a.close()
        b.c.close()
