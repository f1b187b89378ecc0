from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, Node


def running(n: Node, release: str | None = None) -> Iterator[Node]:
    """A fixture's node: formatted (at ``release``, the latest production one if None),
    started, yielded, stopped."""
    n.format(release=release)
    n.start()
    try:
        yield n
    finally:
        n.stop()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    yield from running(Node(tmp_path))


@pytest.fixture
def cluster3(tmp_path: Path) -> Iterator[Cluster]:
    """3 controllers + 2 brokers, started."""
    c = Cluster(tmp_path)
    c.start()
    try:
        yield c
    finally:
        c.stop()


# every node's StandardAuthorizer enforcing ACLs, allowing what no ACL names; the nodes'
# own principal (ANONYMOUS over PLAINTEXT) a super user, as KIP-801 requires for a quorum
# to form before its ACLs are loaded
AUTHORIZED = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    "super.users": "User:ANONYMOUS",
}


@pytest.fixture
def cluster3_authorized(tmp_path: Path) -> Iterator[Cluster]:
    """3 controllers + 2 brokers with an authorizer (ACLs can be created), started."""
    c = Cluster(tmp_path, extra=AUTHORIZED)
    c.start()
    try:
        yield c
    finally:
        c.stop()
