"""storage format --standalone: the voter's directory id is a Kafka Uuid that never
starts with '-' (the CI run of b66a9ae failed once in 64: remove-controller
--controller-directory-id took such an id for an option)."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from keeperless.cli.main import _initial_controllers
from keeperless.server.config import load_config
from keeperless.storage.meta_properties import uuid_to_kafka

# a uuid whose Kafka string starts with '-' (first 6 bits 111110), then an ordinary one
DASHED = uuid.UUID(int=0xF8 << 120 | 12345, version=4)
PLAIN = uuid.UUID("0f0e0d0c-0b0a-4908-8706-050403020100")


def test_a_standalone_voters_directory_id_never_starts_with_a_dash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert uuid_to_kafka(DASHED).startswith("-")
    draws = iter([DASHED, PLAIN])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(draws))
    cfg = load_config(properties={
        "process.roles": "controller", "node.id": "1",
        "controller.listener.names": "CONTROLLER",
        "listeners": "CONTROLLER://127.0.0.1:9093",
        "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
        "log.dirs": str(tmp_path),
    })  # fmt: skip
    args = SimpleNamespace(initial_controllers=None, standalone=True,
                           no_initial_controllers=False)  # fmt: skip
    voters = _initial_controllers(args, cfg)
    (voter,) = voters.voters
    assert voter.directory_id == PLAIN
    assert not uuid_to_kafka(voter.directory_id).startswith("-")
