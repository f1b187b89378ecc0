"""Who sent the request being handled: each connection's Session (principal, client
address, listener), set by the connection for the task that serves it and read by
handlers (authorization, the endpoints a client is told about) through
``current_session``."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

__all__ = ["ANONYMOUS", "Session", "current_listener", "current_session"]

ANONYMOUS = "User:ANONYMOUS"


@dataclass(slots=True)
class Session:
    listener: str
    protocol: str
    host: str
    principal: str = ANONYMOUS
    authenticated: bool = False
    mechanism: str | None = None


current_session: contextvars.ContextVar[Session | None] = contextvars.ContextVar(
    "keeperless_session", default=None
)


def current_listener() -> str | None:
    """The listener the request being handled came in on (None: not from a client)."""
    s = current_session.get()
    return s.listener if s is not None and s.listener else None
