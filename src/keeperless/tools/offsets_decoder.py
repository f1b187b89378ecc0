"""kafka-dump-log.sh --offsets-decoder: the keys and values of `__consumer_offsets`
records as Kafka's tool prints them (`key: {"type":"1","data":{...}} payload:
{"version":"3","data":{...}}`)."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

from keeperless.coordinator.group_records import GroupSnapshot, decode_group_value
from keeperless.coordinator.txn_records import parse_txn_record

__all__ = ["decode_offsets_record", "decode_transaction_record"]


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def i16(self) -> int:
        (v,) = struct.unpack_from(">h", self.buf, self.pos)
        self.pos += 2
        return int(v)

    def i32(self) -> int:
        (v,) = struct.unpack_from(">i", self.buf, self.pos)
        self.pos += 4
        return int(v)

    def i64(self) -> int:
        (v,) = struct.unpack_from(">q", self.buf, self.pos)
        self.pos += 8
        return int(v)

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        s = self.buf[self.pos : self.pos + n].decode("utf-8", "replace")
        self.pos += n
        return s


def _js(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"))


def _offset_value(r: _Reader, version: int) -> dict[str, Any]:
    data: dict[str, Any] = {"offset": r.i64()}
    if version >= 3:
        data["leaderEpoch"] = r.i32()
    data["metadata"] = r.string()
    data["commitTimestamp"] = r.i64()
    if version == 1:
        data["expireTimestamp"] = r.i64()
    return data


def _group_value(g: GroupSnapshot, version: int) -> dict[str, Any]:
    """A GroupMetadataValue as Kafka's JSON converter prints it (bytes in base64)."""
    data: dict[str, Any] = {
        "protocolType": g.protocol_type,
        "generation": g.generation,
        "protocol": g.protocol,
        "leader": g.leader,
    }
    if version >= 2:
        data["currentStateTimestamp"] = g.state_timestamp_ms
    members = []
    for m in g.members:
        member: dict[str, Any] = {"memberId": m.member_id}
        if version >= 3:
            member["groupInstanceId"] = m.group_instance_id
        member.update(clientId=m.client_id, clientHost=m.client_host)
        if version >= 1:
            member["rebalanceTimeout"] = m.rebalance_timeout_ms
        member["sessionTimeout"] = m.session_timeout_ms
        member["subscription"] = base64.b64encode(m.subscription).decode()
        member["assignment"] = base64.b64encode(m.assignment).decode()
        members.append(member)
    data["members"] = members
    return data


def decode_offsets_record(key: bytes | None, value: bytes | None) -> str:
    """' key: {...} payload: {...}' for one record; what cannot be decoded is named."""
    if key is None:
        return " key: null payload: null"
    try:
        r = _Reader(key)
        kind = r.i16()
        if kind in (0, 1):
            k: dict[str, Any] = {"group": r.string(), "topic": r.string(), "partition": r.i32()}
        elif kind == 2:
            k = {"group": r.string()}
        elif kind in (3, 4, 6):  # a consumer-protocol group's (KIP-848)
            k = {"groupId": r.string()}
        elif kind in (5, 7, 8):
            k = {"groupId": r.string(), "memberId": r.string()}
        else:
            return f" key: <unknown record type {kind}, {len(key)} bytes> payload: ..."
    except struct.error:
        return f" key: <truncated, {len(key)} bytes> payload: ..."
    key_text = _js({"type": str(kind), "data": k})
    if value is None:
        return f" key: {key_text} payload: null"
    try:
        r = _Reader(value)
        version = r.i16()
        if kind in (0, 1) and 0 <= version <= 4:
            payload = _js({"version": str(version), "data": _offset_value(r, version)})
        elif kind == 2 and (g := decode_group_value(value)) is not None:
            payload = _js({"version": str(version), "data": _group_value(g, version)})
        elif kind == 2:
            payload = f"<group metadata v{version}, {len(value)} bytes>"
        else:
            payload = f"<consumer group record v{version}, {len(value)} bytes>"
    except struct.error:
        payload = f"<truncated, {len(value)} bytes>"
    return f" key: {key_text} payload: {payload}"


def decode_transaction_record(key: bytes | None, value: bytes | None) -> str:
    """kafka-dump-log.sh --transaction-log-decoder: a `__transaction_state` record as
    ' key: {"type":"0","data":{"transactionalId":...}} payload: {"version":"0",...}'."""
    if key is None:
        return " key: null payload: null"
    try:
        r = _Reader(key)
        version = r.i16()
        if version != 0:
            return f" key: <unknown record type {version}, {len(key)} bytes> payload: ..."
        key_text = _js({"type": "0", "data": {"transactionalId": r.string()}})
    except struct.error:
        return f" key: <truncated, {len(key)} bytes> payload: ..."
    if value is None:
        return f" key: {key_text} payload: null"
    try:
        vv = struct.unpack_from(">h", value, 0)[0]
        parsed = parse_txn_record(key, value)
        if parsed is None or parsed[1] is None:
            raise ValueError("not a transaction record")
        md = parsed[1]
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(md.partitions):
            by_topic.setdefault(topic, []).append(index)
        data: dict[str, Any] = {"producerId": md.producer_id}
        if vv >= 1:  # value v1's tagged fields, in the schema's order
            data["previousProducerId"] = md.prev_producer_id
            data["nextProducerId"] = md.next_producer_id
        data.update(
            producerEpoch=md.producer_epoch,
            transactionTimeoutMs=md.timeout_ms,
            transactionStatus=int(md.state),
            transactionPartitions=[
                {"topic": t, "partitionIds": ids} for t, ids in by_topic.items()
            ],
            transactionLastUpdateTimestampMs=md.update_ms,
            transactionStartTimestampMs=md.start_ms,
        )
        if vv >= 1:
            data["clientTransactionVersion"] = md.client_tv
        payload = _js({"version": str(vv), "data": data})
    except (struct.error, IndexError, ValueError, UnicodeDecodeError):
        payload = f"<truncated, {len(value)} bytes>"
    return f" key: {key_text} payload: {payload}"


def decode_share_state_record(key: bytes | None, value: bytes | None) -> str:
    """kafka-dump-log.sh --share-group-state-decoder: a `__share_group_state` record
    (ShareSnapshot, type 0, or ShareUpdate, type 1) as ' key: {"type":"0","data":{...}}
    payload: {"version":"0","data":{...}}'."""
    from keeperless.coordinator.share_records import (
        ShareRecordError,
        ShareSnapshot,
        decode_key,
        decode_value,
    )

    if key is None:
        return " key: null payload: null"
    try:
        kind, sk = decode_key(key)
    except ShareRecordError as e:
        return f" key: <{e}, {len(key)} bytes> payload: ..."
    tid = base64.urlsafe_b64encode(sk.topic_id.bytes).decode().rstrip("=")
    key_text = _js({"type": str(kind), "data": {"groupId": sk.group_id, "topicId": tid,
                                               "partition": sk.partition}})  # fmt: skip
    if value is None:
        return f" key: {key_text} payload: null"
    try:
        v = decode_value(kind, value)
    except ShareRecordError as e:
        return f" key: {key_text} payload: <{e}, {len(value)} bytes>"
    data: dict[str, Any] = {"snapshotEpoch": v.snapshot_epoch}
    if isinstance(v, ShareSnapshot):
        data["stateEpoch"] = v.state_epoch
    data.update(leaderEpoch=v.leader_epoch, startOffset=v.start_offset, stateBatches=[
        {"firstOffset": b.first_offset, "lastOffset": b.last_offset,
         "deliveryState": b.delivery_state, "deliveryCount": b.delivery_count}
        for b in v.batches
    ])  # fmt: skip
    version = struct.unpack_from(">h", value, 0)[0]
    return f" key: {key_text} payload: {_js({'version': str(version), 'data': data})}"
