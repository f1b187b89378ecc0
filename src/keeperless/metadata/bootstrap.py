"""The bootstrap checkpoint that `storage format` writes: the initial feature levels,
as a snapshot (header control record, records, footer control record)."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Any

from keeperless.metadata._records_gen import FeatureLevelRecord, UserScramCredentialRecord
from keeperless.metadata.features import METADATA_VERSION_FEATURE
from keeperless.metadata.snapshot import snapshot_of_records

__all__ = ["BOOTSTRAP_CHECKPOINT", "bootstrap_records", "build_snapshot", "scram_record"]

BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"


def bootstrap_records(metadata_version: int, extra: list[Any] | None = None) -> list[Any]:
    return [
        FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=metadata_version),
        *(extra or ()),
    ]


_SCRAM = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}


def scram_record(spec: str) -> UserScramCredentialRecord:
    """``storage format --add-scram`` as Kafka's: ``SCRAM-SHA-256=[name=alice,password=s]``
    (also ``iterations=N``, ``salt=...``), stored as salt, StoredKey and ServerKey only.
    ValueError names what is wrong."""
    m = re.fullmatch(r"\s*([\w-]+)\s*=\s*\[(.*)\]\s*", spec, re.S)
    if m is None:
        raise ValueError(f"--add-scram {spec!r}: expected MECHANISM=[name=USER,password=PASSWORD]")
    mech = m.group(1).upper()
    if mech not in _SCRAM:
        raise ValueError(f"--add-scram: unknown mechanism {mech} (SCRAM-SHA-256, SCRAM-SHA-512)")
    fields: dict[str, str] = {}
    for part in re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|[^,]*)', m.group(2)):
        fields[part[0]] = part[1][1:-1] if part[1].startswith('"') else part[1]
    for need in ("name", "password"):
        if not fields.get(need):
            raise ValueError(f"--add-scram {mech}: {need}=... is required")
    unknown = set(fields) - {"name", "password", "iterations", "salt"}
    if unknown:
        raise ValueError(f"--add-scram {mech}: unknown field {sorted(unknown)[0]!r}")
    try:
        iterations = int(fields.get("iterations", "4096"))
    except ValueError:
        raise ValueError(f"--add-scram {mech}: iterations must be a number") from None
    if not 4096 <= iterations <= 16384:
        raise ValueError(f"--add-scram {mech}: iterations must be between 4096 and 16384")
    code, algo = _SCRAM[mech]
    salt = fields["salt"].encode() if "salt" in fields else secrets.token_bytes(32)
    salted = hashlib.pbkdf2_hmac(algo, fields["password"].encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", algo).digest()
    return UserScramCredentialRecord(
        name=fields["name"],
        mechanism=code,
        salt=salt,
        stored_key=hashlib.new(algo, client_key).digest(),
        server_key=hmac.new(salted, b"Server Key", algo).digest(),
        iterations=iterations,
    )


def build_snapshot(records: list[Any], timestamp_ms: int) -> bytes:
    """The bootstrap checkpoint's bytes: a snapshot holding ``records``."""
    return snapshot_of_records(records, timestamp_ms)
