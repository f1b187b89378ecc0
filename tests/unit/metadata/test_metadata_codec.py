from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from keeperless.metadata._records_gen import RECORD_TYPES, PartitionRecord, RegisterBrokerRecord
from keeperless.metadata._records_gen import RegisterBrokerRecordBrokerEndpoint as Endpoint
from keeperless.metadata.codec import (
    MetadataRecordError,
    decode_record,
    encode_record,
    record_to_json,
)

ROOT = Path(__file__).parents[3]
SPEC = ROOT / "spec" / "metadata-records"  # vendored: every clone has them
SHARED_SPEC = ROOT.parent / "shared" / "spec" / "metadata-records"


def test_generated_records_are_current() -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    import gen_metadata_records

    assert len(list(SPEC.glob("*.json"))) == 25
    current = (ROOT / "src/keeperless/metadata/_records_gen.py").read_text()
    assert gen_metadata_records.generate(SPEC) == current, "run tools/gen_metadata_records.py"


def test_vendored_specs_match_the_shared_ones() -> None:
    """Where the workplace's copy is beside the checkout, ours is the same (a CI clone
    without it still checks the generated code against the vendored schemas above)."""
    if not SHARED_SPEC.exists():
        pytest.skip("no ../shared beside this checkout (the vendored copy is checked above)")
    ours = {p.name: p.read_bytes() for p in SPEC.glob("*.json")}
    shared = {p.name: p.read_bytes() for p in SHARED_SPEC.glob("*.json")}
    assert ours == shared, "copy ../shared/spec/metadata-records into spec/ and regenerate"


def test_every_record_type_roundtrips_defaults_at_every_version() -> None:
    assert len(RECORD_TYPES) == 25
    checked = 0
    for cls in RECORD_TYPES.values():
        for v in range(cls.LOWEST_VERSION, cls.HIGHEST_VERSION + 1):  # type: ignore[attr-defined]
            rec = cls()
            try:
                data = encode_record(rec, v)
            except MetadataRecordError:
                continue  # a non-nullable field left None by default
            assert decode_record(data) == (rec, v), f"{cls.__name__} v{v}"
            checked += 1
    assert checked >= 30  # most (type, version) pairs have encodable defaults


def test_register_broker_json_shape() -> None:
    rec = RegisterBrokerRecord(
        broker_id=1,
        incarnation_id=uuid.UUID(int=5),
        broker_epoch=7,
        end_points=(Endpoint(name="PLAINTEXT", host="h", port=9092, security_protocol=0),),
        rack=None,
    )
    out, version = decode_record(encode_record(rec, 0))
    js = record_to_json(out, version)
    assert js["type"] == "REGISTER_BROKER_RECORD"
    assert js["version"] == 0
    assert js["data"]["brokerId"] == 1
    assert js["data"]["endPoints"] == [
        {"name": "PLAINTEXT", "host": "h", "port": 9092, "securityProtocol": 0}
    ]
    assert "inControlledShutdown" not in js["data"]


def test_tagged_fields_roundtrip() -> None:
    rec = PartitionRecord(
        topic_id=uuid.uuid4(),
        partition_id=3,
        replicas=(1, 2),
        isr=(1,),
        leader=1,
        leader_recovery_state=1,
        eligible_leader_replicas=(2,),
    )
    assert decode_record(encode_record(rec))[0] == rec


def test_garbage_is_a_clear_error() -> None:
    with pytest.raises(MetadataRecordError):
        decode_record(b"\x01\x03\x00\x00")
    with pytest.raises(MetadataRecordError, match="unknown metadata record type"):
        decode_record(b"\x01\x63\x00")


def test_the_raw_constructor_builds_what_init_builds() -> None:
    """Decoders build records without their frozen __init__ (3x faster): the same
    value, hash and immutability, for every record type and the image's partitions."""
    import dataclasses

    from keeperless.metadata.compiled import raw_constructor
    from keeperless.metadata.image import PartitionInfo

    for cls in [*RECORD_TYPES.values(), PartitionInfo]:
        fields = dataclasses.fields(cls)
        values = [object() if i % 2 else (i, f.name) for i, f in enumerate(fields)]
        made = raw_constructor(cls)(*values)
        assert type(made) is cls
        assert made == cls(**{f.name: v for f, v in zip(fields, values, strict=True)})
        assert [getattr(made, f.name) for f in fields] == values
        # (in Python 3.11 a frozen slotted dataclass raises TypeError here)
        with pytest.raises((dataclasses.FrozenInstanceError, TypeError)):
            made.x = 1  # type: ignore[attr-defined]

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        n: int

        def __post_init__(self) -> None:
            assert self.n >= 0

    @dataclasses.dataclass(frozen=True)
    class Unslotted:
        n: int

    for cls in (Checked, Unslotted):
        with pytest.raises(TypeError, match="not a plain slotted dataclass"):
            raw_constructor(cls)


def test_uuid_arrays_roundtrip_and_a_cut_one_is_an_error() -> None:
    """A partition's directories (an array of UUIDs, decoded as one cached tuple: the
    same few repeat in a million partitions)."""
    dirs = [uuid.uuid4() for _ in range(3)]
    for d in ([], dirs[:1], dirs, [dirs[2], dirs[0], dirs[1]]):
        rec = PartitionRecord(partition_id=1, topic_id=uuid.uuid4(), replicas=[1, 2, 3][: len(d)],
                              isr=[1], leader=1, directories=d)  # fmt: skip
        raw = encode_record(rec, 2)
        for _ in range(2):  # (the second from the cache)
            back, _version = decode_record(raw)
            assert back.directories == tuple(d)
    cut = encode_record(PartitionRecord(topic_id=uuid.uuid4(), directories=dirs), 2)
    at = cut.index(dirs[2].bytes)
    with pytest.raises(MetadataRecordError):
        decode_record(cut[: at + 8])


def test_a_known_record_type_is_still_checked_to_its_end() -> None:
    """Once a (type, version) pair has been decoded, its checks are not made again for
    each record; its records are still decoded whole and bounded."""
    from keeperless.metadata._records_gen import PartitionChangeRecord

    raw = encode_record(PartitionChangeRecord(topic_id=uuid.uuid4(), isr=[1, 2], leader=1), 2)
    for _ in range(2):  # (the second through the pair already seen)
        rec, version = decode_record(raw)
        assert (rec.isr, rec.leader, version) == ((1, 2), 1, 2)
    with pytest.raises(MetadataRecordError, match="1 trailing bytes after PartitionChangeRecord"):
        decode_record(raw + b"\x00")
    with pytest.raises(MetadataRecordError, match="truncated or malformed PartitionChangeRecord"):
        decode_record(raw[:-3])
    with pytest.raises(MetadataRecordError, match="unsupported version 9 of PartitionChangeRecord"):
        decode_record(raw[:2] + b"\x09" + raw[3:])


def test_a_partitions_repeated_rest_is_decoded_once_and_never_for_another() -> None:
    """A PartitionRecord's fields after its ids (replicas, ISR, leader, epochs,
    directories) repeat across thousands of partitions: a decoder keeps them by their
    bytes and hands the same values to the next record with the same rest, and only to
    such a record; a rest followed by trailing bytes or cut short is not kept."""
    from keeperless.metadata.compiled import decoder

    tid, dirs = uuid.uuid4(), [uuid.uuid4() for _ in range(3)]

    def partition(p: int, **kw: Any) -> PartitionRecord:
        fields: dict[str, Any] = dict(replicas=[1, 2, 3], isr=[1, 2], leader=1, leader_epoch=4,
                                      partition_epoch=6, directories=dirs)  # fmt: skip
        fields |= kw  # (as decoded: arrays are tuples)
        return PartitionRecord(
            partition_id=p, topic_id=tid,
            **{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()},
        )  # fmt: skip

    first, _ = decode_record(encode_record(partition(0), 2))
    again, _ = decode_record(encode_record(partition(1), 2))
    assert (again.partition_id, again.topic_id) == (1, tid)
    assert again.isr is first.isr  # (the kept values)
    assert again.replicas is first.replicas
    for change in ({"leader_epoch": 5}, {"isr": [1, 3]}, {"directories": dirs[::-1]},
                   {"eligible_leader_replicas": [3]}, {"leader": 2}):  # fmt: skip
        rec = partition(2, **change)
        for _ in range(2):  # (the second from what the first kept)
            assert decode_record(encode_record(rec, 2))[0] == rec
    raw = encode_record(partition(3, leader_epoch=9), 2)
    for _ in range(2):  # never kept as a whole record: the trailing byte is seen each time
        with pytest.raises(MetadataRecordError, match="1 trailing bytes after PartitionRecord"):
            decode_record(raw + b"\x00")
    for _ in range(2):
        with pytest.raises(MetadataRecordError, match="truncated or malformed PartitionRecord"):
            decode_record(raw[:-20])
    assert decode_record(raw)[0] == partition(3, leader_epoch=9)
    # bounded: the kept rests of one decoder never pass their limit
    import keeperless.metadata.compiled as compiled

    memo = next(
        v for k, v in decoder(PartitionRecord, 2).__globals__.items()
        if k.startswith("R") and isinstance(v, dict)
    )  # fmt: skip
    for e in range(compiled._REST_MEMO_SIZE + 10):
        decode_record(encode_record(partition(0, leader_epoch=e), 2))
    assert 0 < len(memo) <= compiled._REST_MEMO_SIZE
