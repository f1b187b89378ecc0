"""The handlers of one listener, registered against the API table (``protocol/apis.py``).

Each part of a node (the data plane, the group and transaction coordinators, the
controller's admin APIs, Raft) registers the handlers it owns; an API registered twice,
one the table does not serve on that listener, or one the table serves that nobody
registered is an error when the node starts, naming the API and its owners - never a
silent ``dict.update`` that lets the later one win.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from keeperless.protocol.apis import APIS, ApiKey, Listener
from keeperless.protocol.framing import RequestHeader

__all__ = ["ApiRegistry", "Handler", "RegistryError"]

Handler = Callable[[RequestHeader, Any], Awaitable[Any]]

# answered by the connection itself (its SASL state machine), never by a handler
CONNECTION_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


class RegistryError(Exception):
    """An API registered twice, on a listener that does not serve it, or not at all."""


class ApiRegistry:
    """The handlers of one listener, each API registered once by its owner."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self._handlers: dict[ApiKey, Handler] = {}
        self._owners: dict[ApiKey, str] = {}

    def register(self, owner: str, handlers: Mapping[ApiKey, Handler]) -> None:
        for key, handler in handlers.items():
            key = ApiKey(key)
            if key in self._handlers:
                raise RegistryError(
                    f"{key.title} ({int(key)}) is registered twice on the "
                    f"{self.listener.value} listener: by {self._owners[key]} and by {owner}"
                )
            spec = APIS.get(key)
            if spec is None or spec.versions(self.listener) is None:
                raise RegistryError(
                    f"{owner} registers {key.title} ({int(key)}), which protocol/apis.py "
                    f"does not serve on the {self.listener.value} listener"
                )
            if key in CONNECTION_APIS:
                raise RegistryError(f"{key.title} is answered by the connection, not {owner}")
            self._handlers[key] = handler
            self._owners[key] = owner

    def owner(self, key: ApiKey) -> str:
        return self._owners[key]

    def complete(self, exempt: Iterable[ApiKey] = ()) -> dict[int, Handler]:
        """Every handler, once each API the table serves on this listener has one."""
        skip = CONNECTION_APIS | frozenset(exempt)
        missing = [
            k.title
            for k, spec in sorted(APIS.items())
            if spec.versions(self.listener) is not None and k not in self._handlers
            and k not in skip
        ]  # fmt: skip
        if missing:
            raise RegistryError(
                f"no handler registered on the {self.listener.value} listener for "
                + ", ".join(missing)
            )
        out: dict[int, Handler] = {k: h for k, h in self._handlers.items()}
        return out

    def versions(self) -> dict[int, tuple[int, int]]:
        """The (min, max) versions served on this listener, for the router."""
        out: dict[int, tuple[int, int]] = {}
        for k, spec in APIS.items():
            rng = spec.versions(self.listener)
            if rng is not None:
                out[k] = rng
        return out
