from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, Node


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    n.format()
    n.start()
    try:
        yield n
    finally:
        n.stop()


@pytest.fixture
def cluster3(tmp_path: Path) -> Iterator[Cluster]:
    """3 controllers + 2 brokers, started."""
    c = Cluster(tmp_path)
    c.start()
    try:
        yield c
    finally:
        c.stop()
