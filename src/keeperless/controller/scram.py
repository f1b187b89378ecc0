"""SCRAM credentials in the metadata log (KIP-554): AlterUserScramCredentials stores the
salt, StoredKey and ServerKey derived from the client's salted password (never the
password); DescribeUserScramCredentials shows mechanisms and iterations only.
Deleting a user's last credential removes the delegation tokens it owns."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from keeperless.controller.delegation_tokens import tokens_of_removed_users
from keeperless.controller.quorum_controller import QuorumController, Result
from keeperless.metadata import _records_gen as r
from keeperless.metadata.admin import ApiError

__all__ = ["MECHANISMS", "alter_scram_credentials", "scram_keys"]

# mechanism code -> (name, hash)
MECHANISMS = {1: ("SCRAM-SHA-256", "sha256"), 2: ("SCRAM-SHA-512", "sha512")}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384


def scram_keys(mechanism: int, salted_password: bytes) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) of RFC 5802."""
    algo = MECHANISMS[mechanism][1]
    client_key = hmac.new(salted_password, b"Client Key", algo).digest()
    stored_key = hashlib.new(algo, client_key).digest()
    server_key = hmac.new(salted_password, b"Server Key", algo).digest()
    return stored_key, server_key


def alter_scram_credentials(
    c: QuorumController,
    deletions: Sequence[tuple[str, int]],
    upsertions: Sequence[tuple[str, int, int, bytes, bytes]],
) -> Result[list[tuple[str, ApiError]]]:
    """Per user (in request order), the first error of its alterations, else none."""
    seen: dict[tuple[str, int], int] = {}
    for user, mech in [*deletions, *((u[0], u[1]) for u in upsertions)]:
        seen[(user, mech)] = seen.get((user, mech), 0) + 1
    errors: dict[str, ApiError] = {}
    order: list[str] = []
    records: list[object] = []

    def fail(user: str, code: ErrorCode, msg: str) -> None:
        errors.setdefault(user, ApiError(code, msg))

    def common(user: str, mech: int) -> bool:
        """The checks deletions and upsertions share; True if one failed."""
        if user not in order:
            order.append(user)
        if not user:
            fail(user, ErrorCode.unacceptable_credential, "Username must not be empty")
        elif seen[(user, mech)] > 1:
            fail(
                user,
                ErrorCode.duplicate_resource,
                "A user credential cannot be altered twice in the same request",
            )
        elif mech not in MECHANISMS:
            fail(user, ErrorCode.unsupported_sasl_mechanism, f"Unknown SCRAM mechanism {mech}")
        else:
            return False
        return True

    for user, mech in deletions:
        if common(user, mech):
            continue
        if (user, mech) not in c.image.scram:
            fail(
                user,
                ErrorCode.resource_not_found,
                "Attempt to delete a user credential that does not exist",
            )
        else:
            records.append(r.RemoveUserScramCredentialRecord(name=user, mechanism=mech))
    for user, mech, iterations, salt, salted in upsertions:
        if common(user, mech):
            continue
        if iterations < MIN_ITERATIONS:
            fail(
                user,
                ErrorCode.unacceptable_credential,
                f"Too few iterations: {iterations} < {MIN_ITERATIONS}",
            )
        elif iterations > MAX_ITERATIONS:
            fail(
                user,
                ErrorCode.unacceptable_credential,
                f"Too many iterations: {iterations} > {MAX_ITERATIONS}",
            )
        elif not salt or not salted:
            fail(user, ErrorCode.unacceptable_credential, "Salt and salted password are required")
        else:
            stored, server = scram_keys(mech, salted)
            records.append(
                r.UserScramCredentialRecord(
                    name=user,
                    mechanism=mech,
                    salt=salt,
                    stored_key=stored,
                    server_key=server,
                    iterations=iterations,
                )
            )
    # a user with any error gets none of its alterations applied
    kept = [rec for rec in records if getattr(rec, "name", None) not in errors]
    # a user left with no credential at all can no longer log in: its tokens go too
    deleted = {
        (x.name, x.mechanism) for x in kept if isinstance(x, r.RemoveUserScramCredentialRecord)
    }
    remaining = {u for u, m in c.image.scram if (u, m) not in deleted}
    remaining |= {x.name for x in kept if isinstance(x, r.UserScramCredentialRecord)}
    kept += tokens_of_removed_users(c.image, sorted({u for u, _ in deleted} - remaining))
    return Result(kept, [(u, errors.get(u, ApiError.none())) for u in order])
