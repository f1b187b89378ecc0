"""The context of one request as a handler sees it (Kafka's RequestContext): its header
and who sent it from where - the connection's Session (principal, client address,
listener). The router builds one for every request and passes it to the handler in place
of the bare header; a forwarded request (Envelope) is handled with the context of the
client it names. Nothing is read from context variables."""

from __future__ import annotations

from dataclasses import dataclass

from keeperless.protocol.framing import RequestHeader
from keeperless.protocol.session import ANONYMOUS, Session

__all__ = ["RequestContext", "listener_of", "session_of"]


@dataclass(frozen=True, slots=True)
class RequestContext(RequestHeader):
    """A request's header and its sender. ``session`` None: a request made inside the
    node (a controller answering its own broker), allowed everything."""

    session: Session | None = None

    @property
    def principal(self) -> str:
        return self.session.principal if self.session is not None else ANONYMOUS

    @property
    def listener(self) -> str | None:
        """The listener the request came in on (None: not from a client)."""
        s = self.session
        return s.listener if s is not None and s.listener else None

    @classmethod
    def of(cls, header: RequestHeader, session: Session | None) -> RequestContext:
        return cls(header.api_key, header.api_version, header.correlation_id,
                   header.client_id, session)  # fmt: skip


def session_of(header: RequestHeader) -> Session | None:
    """The sender of a request a handler was given (None: from inside the node)."""
    return header.session if isinstance(header, RequestContext) else None


def listener_of(header: RequestHeader) -> str | None:
    """The listener a request came in on (None: not from a client)."""
    return header.listener if isinstance(header, RequestContext) else None
