"""The voter set of a KRaft quorum (KIP-853), and where it is kept.

A voter is a replica id *and* a directory id: a controller whose disk was replaced
comes back with a new directory id, and so is a new replica that must be added as a
voter, never mistaken for the old one (which may have voted, or held committed entries,
that the new disk lost). A static quorum (``kraft.version`` 0) knows its voters by id
only, from ``controller.quorum.voters``; their directory ids are None.

A dynamic quorum (``kraft.version`` 1) keeps its voter set in the log as VotersRecord
control records (and in snapshots, and in the bootstrap checkpoint written by
``storage format``). Each replica uses the *latest* voter set in its log, committed or
not; a truncation that removes a VotersRecord brings back the set before it.
``VoterHistory`` keeps those sets by offset.
"""

from __future__ import annotations

import base64
import bisect
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.voters_record.v0.data import Endpoint as KioEndpoint
from kio.schema.voters_record.v0.data import KRaftVersionFeature, VotersRecord
from kio.schema.voters_record.v0.data import Voter as KioVoter
from kio.static.primitive import i16, i32, u16

from keeperless.protocol.control import (
    KRAFT_VERSION,
    KRAFT_VOTERS,
    control_key,
    decode_control,
    encode_control,
)
from keeperless.protocol.records import CorruptBatchError, build_batch, decode_records, iter_batches

__all__ = [
    "Endpoint",
    "LogHistory",
    "Voter",
    "VoterHistory",
    "VoterSet",
    "voters_in_batch",
    "voters_in_snapshot",
    "voters_records",
]

T = TypeVar("T")

# the kraft.version levels of Kafka 4.x: 0 a static quorum, 1 a dynamic one (KIP-853)
KRAFT_VERSION_STATIC, KRAFT_VERSION_DYNAMIC = 0, 1


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str  # a controller listener's name
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Voter:
    id: int
    directory_id: uuid.UUID | None = None  # None: a static voter, known by id only
    endpoints: tuple[Endpoint, ...] = ()

    def matches(self, node_id: int, directory_id: uuid.UUID | None) -> bool:
        """Whether the replica (``node_id``, ``directory_id``) is this voter."""
        return node_id == self.id and (
            self.directory_id is None or directory_id == self.directory_id
        )

    def __str__(self) -> str:
        """``id`` or ``id-directory`` with the directory id as Kafka prints it."""
        if self.directory_id is None:
            return str(self.id)
        d = base64.urlsafe_b64encode(self.directory_id.bytes).decode().rstrip("=")
        return f"{self.id}-{d}"


@dataclass(frozen=True, slots=True)
class VoterSet:
    voters: tuple[Voter, ...] = ()  # sorted by id; ids are unique

    @classmethod
    def of(cls, voters: Iterable[Voter]) -> VoterSet:
        vs = tuple(sorted(voters, key=lambda v: v.id))
        ids = [v.id for v in vs]
        if len(set(ids)) != len(ids):
            raise ValueError(f"a voter set names a replica id twice: {ids}")
        return cls(vs)

    @classmethod
    def static(cls, ids: Iterable[int]) -> VoterSet:
        return cls.of(Voter(i) for i in ids)

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(v.id for v in self.voters)

    def __len__(self) -> int:
        return len(self.voters)

    def __iter__(self) -> Iterator[Voter]:
        return iter(self.voters)

    def get(self, node_id: int) -> Voter | None:
        for v in self.voters:
            if v.id == node_id:
                return v
        return None

    def has(self, node_id: int, directory_id: uuid.UUID | None) -> bool:
        v = self.get(node_id)
        return v is not None and v.matches(node_id, directory_id)

    def with_voter(self, voter: Voter) -> VoterSet:
        return VoterSet.of([*(v for v in self.voters if v.id != voter.id), voter])

    def without(self, node_id: int) -> VoterSet:
        return VoterSet(tuple(v for v in self.voters if v.id != node_id))

    def __str__(self) -> str:
        return "[" + ", ".join(str(v) for v in self.voters) + "]"


def _to_kio(voter: Voter) -> KioVoter:
    return KioVoter(
        voter_id=i32(voter.id),  # type: ignore[arg-type]
        voter_directory_id=voter.directory_id,
        endpoints=tuple(
            KioEndpoint(name=e.name, host=e.host, port=u16(e.port)) for e in voter.endpoints
        ),
        k_raft_version_feature=KRaftVersionFeature(
            min_supported_version=i16(0), max_supported_version=i16(KRAFT_VERSION_DYNAMIC)
        ),
    )


def _from_kio(v: KioVoter) -> Voter:
    return Voter(
        int(v.voter_id),
        v.voter_directory_id,
        tuple(Endpoint(e.name, e.host, int(e.port)) for e in v.endpoints),
    )


def voters_records(
    voters: VoterSet, *, kraft_version: int | None = None, timestamp_ms: int = 0
) -> bytes:
    """A control batch holding ``voters`` as a VotersRecord, after a KRaftVersionRecord
    when ``kraft_version`` is given (as a snapshot and the bootstrap checkpoint hold)."""
    records: list[tuple[bytes | None, bytes | None, tuple[()]]] = []
    if kraft_version is not None:
        rec = KRaftVersionRecord(version=i16(0), k_raft_version=i16(kraft_version))
        records.append((control_key(KRAFT_VERSION), encode_control(rec), ()))
    body = VotersRecord(version=i16(0), voters=tuple(_to_kio(v) for v in voters))
    records.append((control_key(KRAFT_VOTERS), encode_control(body), ()))
    return build_batch(records, timestamp_ms=timestamp_ms, control=True)


def voters_in_batch(batch: bytes) -> tuple[int | None, VoterSet | None]:
    """The kraft.version and voter set a control batch records (None where it has none)."""
    version: int | None = None
    voters: VoterSet | None = None
    for r in decode_records(batch):
        try:
            kind, value = decode_control(r)
        except ValueError:
            continue
        if kind == KRAFT_VERSION and value is not None:
            version = int(value.k_raft_version)
        elif kind == KRAFT_VOTERS and value is not None:
            voters = VoterSet.of(_from_kio(v) for v in value.voters)
    return version, voters


def voters_in_snapshot(data: bytes) -> tuple[int | None, VoterSet | None]:
    """The kraft.version and voter set a snapshot's control batches hold (None: none)."""
    version: int | None = None
    voters: VoterSet | None = None
    try:
        for pos, h in iter_batches(data, verify_crc=False):
            if h.is_control:
                v, s = voters_in_batch(data[pos : pos + h.size])
                version = v if v is not None else version
                voters = s if s is not None else voters
    except CorruptBatchError:
        pass  # not batches (a state machine's own format): no voter set in it
    return version, voters


class LogHistory(Generic[T]):
    """A value kept in the log by the offset of each record that set it (Kafka's
    LogHistory): the voter sets (the base set from the configuration, bootstrap or
    snapshot, then every VotersRecord), and the kraft.version."""

    def __init__(self, base: T, offset: int = -1) -> None:
        self._offsets: list[int] = [offset]
        self._sets: list[T] = [base]

    @property
    def latest(self) -> T:
        return self._sets[-1]

    @property
    def latest_offset(self) -> int:
        """The offset of the latest VotersRecord (-1: the bootstrap or static set)."""
        return self._offsets[-1]

    def at(self, offset: int) -> T:
        """The value in force just after ``offset`` (records at or below it)."""
        i = bisect.bisect_right(self._offsets, offset) - 1
        return self._sets[max(i, 0)]

    def add(self, offset: int, value: T) -> None:
        if offset <= self._offsets[-1]:
            raise ValueError(f"a value at {offset} after one at {self._offsets[-1]}")
        self._offsets.append(offset)
        self._sets.append(value)

    def truncate(self, end_offset: int) -> None:
        """Forget the sets recorded at or after ``end_offset`` (a log truncation)."""
        while len(self._offsets) > 1 and self._offsets[-1] >= end_offset:
            self._offsets.pop()
            self._sets.pop()

    def reset(self, base: T, offset: int = -1) -> None:
        """Start again from ``base`` (a snapshot ending after ``offset`` replaced the log)."""
        self._offsets = [offset]
        self._sets = [base]

    def compact(self, start_offset: int) -> None:
        """Fold the sets recorded below ``start_offset`` into the base (a snapshot now
        holds them)."""
        i = max(bisect.bisect_right(self._offsets, start_offset - 1) - 1, 0)
        del self._offsets[:i]
        del self._sets[:i]


VoterHistory = LogHistory  # (the voter sets' history: LogHistory[VoterSet])
