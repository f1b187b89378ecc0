"""Replication throttles, as Kafka's ReplicationQuotaManager: a reassignment's catch-up
may be held to a rate so that it does not starve the producers and consumers of the
brokers it moves data between.

Two quotas per broker, one per side of a replica fetch:
- the *leader* side sends a follower that is not in the ISR no records of a throttled
  replica while this broker's ``leader.replication.throttled.rate`` is exceeded;
- the *follower* side leaves a throttled replica out of its fetches while it is not in
  the ISR and ``follower.replication.throttled.rate`` is exceeded.
Which replicas are throttled is the topics' ``leader.replication.throttled.replicas`` /
``follower.replication.throttled.replicas`` (``partition:broker`` pairs naming this
broker, or ``*``). The bytes of every throttled replica count against its side's quota,
in the ISR or not (as Kafka), measured over ``replication.quota.window.num`` windows of
``replication.quota.window.size.seconds`` (Kafka's SimpleRate). Nothing is throttled
while a rate is unset.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from keeperless.broker.quotas import Rate
from keeperless.metadata.config_resolution import resolve_broker
from keeperless.metadata.image import TOPIC_RESOURCE, MetadataImage

__all__ = ["ReplicationQuota", "ReplicationQuotas", "parse_throttled_replicas"]

_ALL: frozenset[int] = frozenset({-1})  # "*": every partition of the topic


def parse_throttled_replicas(value: str, broker: int) -> frozenset[int]:
    """The partitions a throttled-replicas value names on ``broker`` (``*``: all). The
    value was validated when it was set (metadata/config_def.throttled_replicas)."""
    v = value.strip()
    if v == "*":
        return _ALL
    out = set()
    for pair in v.split(","):
        partition, _, replica = pair.strip().partition(":")
        if replica and int(replica) == broker:
            out.add(int(partition))
    return frozenset(out)


class ReplicationQuota:
    """One side's throttle: its rate limit, the replicas it applies to, its measured rate."""

    def __init__(self, rate_key: str, replicas_key: str | None, broker: int) -> None:
        self.rate_key = rate_key
        self.replicas_key = replicas_key
        self.broker = broker
        self.bound = math.inf
        self.throttled: dict[str, frozenset[int]] = {}
        self.rate = Rate(simple=True)

    @property
    def active(self) -> bool:
        """Some replica of this broker is throttled (else nothing is measured); a quota
        without a list of replicas (moves between log directories) whenever it has a
        limit."""
        if self.replicas_key is None:
            return self.bound < math.inf
        return bool(self.throttled)

    def is_throttled(self, topic: str, partition: int) -> bool:
        found = self.throttled.get(topic)
        return found is not None and (found is _ALL or partition in found)

    def exceeded(self, now: float) -> bool:
        return self.bound < math.inf and self.rate.measure(now)[0] > self.bound

    def record(self, now: float, amount: int) -> None:
        self.rate.record(now, amount)

    def wait_s(self, now: float) -> float:
        """How long until the measured rate is back within the limit (0: it is)."""
        if not self.exceeded(now):
            return 0.0
        w = self.rate.windows
        total = sum(a for _, a in w)
        return max(0.0, w[0][0] + total / self.bound - now)

    def configure(
        self,
        image: MetadataImage,
        layers: tuple[Mapping[str, str], Mapping[str, str], Mapping[str, str]],
        window_s: float,
        samples: int,
    ) -> None:
        value = resolve_broker(self.rate_key, *layers)[0]
        try:
            bound = float(value) if value is not None else math.inf
        except ValueError:
            bound = math.inf
        bound = math.inf if bound >= 2**63 - 1 else bound
        throttled: dict[str, frozenset[int]] = {}
        for (rtype, name), configs in image.configs.items():
            if self.replicas_key is None:
                break
            value = configs.get(self.replicas_key) if rtype == TOPIC_RESOURCE else None
            if value:
                parts = parse_throttled_replicas(value, self.broker)
                if parts:
                    throttled[name] = parts
        # a new throttle is measured afresh: the windows of an earlier one (up to
        # samples x window old) would stretch the span the rate is measured over, and let
        # the new catch-up start with a burst of up to that many seconds of its rate
        if (
            (throttled and not self.throttled)
            or bound != self.bound
            or (self.rate.window_s, self.rate.samples) != (window_s, samples)
        ):
            self.rate = Rate(window_s, samples, simple=True)
        self.bound = bound
        self.throttled = throttled


class ReplicationQuotas:
    """This broker's leader and follower replication throttles, kept up with the
    metadata (read again only when some config changed)."""

    def __init__(self, broker: int) -> None:
        self.leader = ReplicationQuota(
            "leader.replication.throttled.rate", "leader.replication.throttled.replicas", broker
        )
        self.follower = ReplicationQuota(
            "follower.replication.throttled.rate",
            "follower.replication.throttled.replicas",
            broker,
        )
        # replica.alter.log.dirs.io.max.bytes.per.second: every move between this
        # broker's log directories
        self.alter_log_dirs = ReplicationQuota(
            "replica.alter.log.dirs.io.max.bytes.per.second", None, broker
        )
        self._seen: object = None

    def update(
        self,
        image: MetadataImage,
        layers: tuple[Mapping[str, str], Mapping[str, str], Mapping[str, str]],
    ) -> None:
        if image.configs is self._seen:
            return
        self._seen = image.configs
        window = resolve_broker("replication.quota.window.size.seconds", *layers)[0] or "1"
        samples = resolve_broker("replication.quota.window.num", *layers)[0] or "11"
        for q in (self.leader, self.follower, self.alter_log_dirs):
            q.configure(image, layers, float(window), int(samples))
