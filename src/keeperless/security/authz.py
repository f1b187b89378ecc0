"""The broker's authorization checks: the StandardAuthorizer (security/authorizer.py)
applied to the principal and address of the connection a request came in on. Without
``authorizer.class.name`` every request is allowed (Kafka's default); requests a node
makes itself (no session) are always allowed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.metadata.image import MetadataImage
from keeperless.protocol.context import session_of
from keeperless.protocol.framing import RequestHeader
from keeperless.security.authorizer import CLUSTER_NAME, AclOp, Authorizer, Resource

__all__ = ["AclOp", "Authz", "Resource"]

# the error Kafka answers for a refused operation on each kind of resource
DENIED = {
    Resource.TOPIC: ErrorCode.topic_authorization_failed,
    Resource.GROUP: ErrorCode.group_authorization_failed,
    Resource.CLUSTER: ErrorCode.cluster_authorization_failed,
    Resource.TRANSACTIONAL_ID: ErrorCode.transactional_id_authorization_failed,
}


class Authz:
    def __init__(
        self,
        image: Callable[[], MetadataImage],
        authorizer: Authorizer | None,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        self._image = image
        self.authorizer = authorizer
        # Kafka's early.start.listeners rule: until the ACLs are known (the metadata log
        # caught up), only super users are allowed
        self._ready = ready

    def image(self) -> MetadataImage:
        return self._image()

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def allowed(
        self, who: RequestHeader, op: AclOp, resource: Resource, name: str = CLUSTER_NAME
    ) -> bool:
        """Whether the sender of the request ``who`` (its RequestContext) may."""
        if self.authorizer is None:
            return True
        s = session_of(who)
        if s is None:
            return True  # a request made inside the node
        if self._ready is not None and not self._ready():
            return s.principal in self.authorizer.super_users
        return self.authorizer.authorize(
            self._image().acls, s.principal, s.host, op, resource, name
        )

    def check(
        self, who: RequestHeader, op: AclOp, resource: Resource, name: str = CLUSTER_NAME
    ) -> ErrorCode | None:
        """None if allowed; else the error Kafka answers."""
        return None if self.allowed(who, op, resource, name) else DENIED[resource]

    def topic_ops(self, who: RequestHeader, name: str, ops: Any) -> int:
        """Kafka's authorized-operations bit field of a topic for the sender."""
        return self.ops(who, Resource.TOPIC, name, ops)

    def ops(self, who: RequestHeader, resource: Resource, name: str, ops: Any) -> int:
        """Kafka's authorized-operations bit field of a resource for the sender."""
        s = session_of(who)
        if self.authorizer is None or s is None:
            return -2147483648
        return self.authorizer.authorized_ops(
            self._image().acls, s.principal, s.host, resource, name, ops
        )
