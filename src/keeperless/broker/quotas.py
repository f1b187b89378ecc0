"""Client quotas enforced as Kafka does (KIP-13, KIP-124, KIP-219): the
``producer_byte_rate``, ``consumer_byte_rate`` and ``request_percentage`` of the
ClientQuotaRecords in the metadata image, for the most specific entity that matches a
request's user and client id (Kafka's precedence: user+client-id, user+default
client-id, user, default user+client-id, default user+default client-id, default user,
client-id, default client-id). All connections of the clients a quota entity covers
share its rate, measured over Kafka's 11 one-second windows. A client over its quota is
answered at once with ``throttle_time_ms`` set to how long it must wait to be back at
its quota, and its connection is muted (nothing more is read) for that long."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from keeperless.metadata.image import MetadataImage, QuotaEntity
from keeperless.protocol.apis import ApiKey

__all__ = ["QuotaManager", "Rate"]

WINDOW_S = 1.0  # quota.window.size.seconds
SAMPLES = 11  # quota.window.num
MAX_THROTTLE_MS = int(WINDOW_S * SAMPLES * 1000)


@dataclass(slots=True)
class Rate:
    """A rate measured over ``samples`` windows of ``window_s`` seconds, as Kafka's
    metrics measure quotas. Kafka's Rate (client quotas) measures over a span never less
    than ``samples - 1`` windows, so a new client's first burst is measured against the
    whole span; its SimpleRate (replication quotas, ``simple``) over what has elapsed
    since the oldest window, but at least one window."""

    window_s: float = WINDOW_S
    samples: int = SAMPLES
    simple: bool = False
    windows: deque[list[float]] = field(default_factory=deque)  # [start, amount]

    def record(self, now: float, amount: float) -> tuple[float, float]:
        """Add ``amount`` at ``now``: (the rate per second, the span it is measured over)."""
        w = self.windows
        if not w or now - w[-1][0] >= self.window_s:
            w.append([now, 0.0])
        w[-1][1] += amount
        return self.measure(now)

    def measure(self, now: float) -> tuple[float, float]:
        """(the rate per second at ``now``, the span it is measured over)."""
        w = self.windows
        while w and now - w[0][0] >= self.window_s * self.samples:
            w.popleft()
        if not w:
            return 0.0, self.window_s
        span = now - w[0][0]
        if self.simple:
            span = max(span, self.window_s)
        else:
            full = int(span / self.window_s)
            if full < self.samples - 1:
                span += (self.samples - 1 - full) * self.window_s
        return sum(a for _, a in w) / span, span


class QuotaManager:
    def __init__(self, image: Callable[[], MetadataImage], clock: Callable[[], float]) -> None:
        self._image = image
        self._clock = clock
        self._rates: dict[tuple[str, QuotaEntity], Rate] = {}

    @property
    def active(self) -> bool:
        """Any client quota set (else nothing is measured: no cost per request)."""
        return bool(self._image().client_quotas)

    def _quota(
        self, user: str | None, client_id: str | None, key: str
    ) -> tuple[QuotaEntity, float] | None:
        quotas = self._image().client_quotas
        if not quotas:
            return None
        u, c = ("user", user), ("client-id", client_id)
        du, dc = ("user", None), ("client-id", None)
        order: list[QuotaEntity] = []
        if user is not None:
            order += [(c, u), (dc, u), (u,)]
        order += [(c, du), (dc, du), (du,), (c,), (dc,)]
        for entity in order:
            found = quotas.get(entity)
            if found is not None and key in found:
                return entity, found[key]
        return None

    def record(self, key: str, user: str | None, client_id: str | None, amount: float) -> int:
        """Record ``amount`` (bytes, or ms of request time) against the quota ``key``;
        the throttle time (ms) the client is owed, 0 within its quota."""
        found = self._quota(user, client_id, key)
        if found is None:
            return 0
        entity, quota = found
        if key == "request_percentage":
            quota = quota * 10  # percent of one thread's time: ms per second
        if quota <= 0:
            return MAX_THROTTLE_MS
        now = self._clock()
        rate = self._rates.setdefault((key, entity), Rate())
        observed, span = rate.record(now, amount)
        if observed <= quota:
            return 0
        return min(MAX_THROTTLE_MS, int((observed - quota) / quota * span * 1000))

    def throttle(
        self,
        principal: str | None,
        client_id: str | None,
        api_key: int,
        request_bytes: int,
        response_bytes: int,
        handling_ms: float,
        replica: bool = False,
    ) -> int:
        """The throttle time of one request (the largest any of its quotas asks)."""
        user = principal[5:] if principal and principal.startswith("User:") else principal
        t = self.record("request_percentage", user, client_id, handling_ms)
        if api_key == ApiKey.PRODUCE:
            t = max(t, self.record("producer_byte_rate", user, client_id, request_bytes))
        elif api_key == ApiKey.FETCH and not replica:
            t = max(t, self.record("consumer_byte_rate", user, client_id, response_bytes))
        return t
