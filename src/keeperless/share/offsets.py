"""A share group's offsets (KIP-932), on the group's coordinator: DescribeShareGroupOffsets
(90) answers each share-partition's start offset and the leader epoch that last wrote it,
read from the share coordinator (ReadShareGroupStateSummary), and from v1 its lag
(KIP-1226: the partition's high watermark less the start offset and the records past it
whose delivery completed) - what ``kafka-share-groups.sh --describe --offsets`` shows;
AlterShareGroupOffsets (91) starts share-partitions again at new offsets
(InitializeShareGroupState under the next state epoch) and DeleteShareGroupOffsets (92)
deletes a topic's state (DeleteShareGroupState), both only while the group has no
member; DeleteGroups of a share group deletes the state of every topic it read."""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.coordinator.outcome import Record
from keeperless.coordinator.share_group import ShareGroup
from keeperless.coordinator.share_group_records import StoredShareGroup, share_group_records
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader, response_class
from keeperless.share.apis import ShareApis

__all__ = ["ShareOffsetsApis"]

log = logging.getLogger(__name__)
_LIST_OFFSETS_TIMEOUT_S = 5.0
_LIST_OFFSETS_VERSION = 7


class ShareOffsetsApis:
    def __init__(self, shares: ShareApis) -> None:
        self.shares = shares
        self.broker = shares.broker

    def handlers(self) -> dict[ApiKey, Any]:
        return {
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: self.describe,
            ApiKey.ALTER_SHARE_GROUP_OFFSETS: self.alter,
            ApiKey.DELETE_SHARE_GROUP_OFFSETS: self.delete,
        }

    def _busy(self, gid: str) -> tuple[ErrorCode, str] | None:
        g = self.shares.groups.get(gid)
        if g is not None and g.members:
            return ErrorCode.non_empty_group, (
                f"The share group {gid} has {len(g.members)} member(s): its offsets can be "
                "changed only while it has none"
            )
        return None

    async def alter(self, header: RequestHeader, req: Any) -> Any:
        cls = response_class(ApiKey.ALTER_SHARE_GROUP_OFFSETS, header.api_version)
        gid = req.group_id
        refused = self._group_refusal(gid) or self._busy(gid)
        if refused is not None:
            return build(cls, {"throttle_time": datetime.timedelta(0), "error_code": refused[0],
                               "error_message": refused[1], "responses": []})  # fmt: skip
        persister = self.shares.persister
        assert persister is not None
        out = []
        for t in req.topics:
            t_img = self.broker.image.topic(t.topic_name)
            parts = []
            for p in t.partitions:
                msg: str | None
                if t_img is None or p.partition_index not in t_img.partitions:
                    code, msg = ErrorCode.unknown_topic_or_partition, (
                        f"Unknown partition {t.topic_name}-{p.partition_index}")  # fmt: skip
                elif p.start_offset < 0:
                    code, msg = ErrorCode.invalid_request, (
                        f"Start offset {p.start_offset} of {t.topic_name}-"
                        f"{p.partition_index} is negative")  # fmt: skip
                else:
                    now = await persister.summary(gid, t_img.topic_id, p.partition_index)
                    code, msg = now.error, now.message
                    if code == ErrorCode.none:
                        code, msg = await persister.initialize(
                            gid, t_img.topic_id, p.partition_index, now.state_epoch + 1,
                            p.start_offset,
                        )  # fmt: skip
                parts.append({"partition_index": p.partition_index, "error_code": code,
                              "error_message": msg})  # fmt: skip
            out.append({"topic_name": t.topic_name,
                        "topic_id": t_img.topic_id if t_img is not None else None,
                        "partitions": parts})  # fmt: skip
        # a group that did not exist is made (Empty), as Kafka's coordinator makes it, so
        # the tool lists and describes what was written (found by a fresh-eyes review)
        group = self.shares.groups.get(gid)
        if group is None:
            group = self.shares.groups[gid] = ShareGroup(gid)
        group.topics_read |= {t.topic_name for t in req.topics if self.broker.image.topic(
            t.topic_name) is not None}  # fmt: skip
        stored = await self.shares._store_group(group)
        if stored is not None:
            return build(cls, {"throttle_time": datetime.timedelta(0), "error_code": stored,
                               "error_message": f"The share group {gid} could not be stored",
                               "responses": out})  # fmt: skip
        return build(cls, {"throttle_time": datetime.timedelta(0), "error_code": ErrorCode.none,
                           "error_message": None, "responses": out})  # fmt: skip

    async def _delete_topic(self, gid: str, name: str) -> tuple[ErrorCode, str | None]:
        t_img = self.broker.image.topic(name)
        persister = self.shares.persister
        if t_img is None:
            return ErrorCode.unknown_topic_or_partition, f"Unknown topic {name}"
        if persister is None:
            return ErrorCode.none, None
        for idx in sorted(t_img.partitions):
            code, msg = await persister.delete(gid, t_img.topic_id, idx)
            if code != ErrorCode.none:
                return code, msg
        return ErrorCode.none, None

    async def delete(self, header: RequestHeader, req: Any) -> Any:
        cls = response_class(ApiKey.DELETE_SHARE_GROUP_OFFSETS, header.api_version)
        gid = req.group_id
        refused = self._group_refusal(gid) or self._busy(gid)
        group = self.shares.groups.get(gid)
        if refused is None and group is None:
            refused = ErrorCode.group_id_not_found, f"Share group {gid} does not exist"
        if refused is not None or group is None:
            code, message = refused or (ErrorCode.group_id_not_found, None)
            return build(cls, {"throttle_time": datetime.timedelta(0), "error_code": code,
                               "error_message": message, "responses": []})  # fmt: skip
        out = []
        for t in req.topics:
            msg: str | None
            if t.topic_name not in group.topics_read:
                code, msg = ErrorCode.unknown_topic_or_partition, (
                    f"Share group {gid} has no state for topic {t.topic_name}")  # fmt: skip
            else:
                code, msg = await self._delete_topic(gid, t.topic_name)
                if code == ErrorCode.none:
                    group.topics_read.discard(t.topic_name)
            t_img = self.broker.image.topic(t.topic_name)
            out.append({"topic_name": t.topic_name,
                        "topic_id": t_img.topic_id if t_img is not None else None,
                        "error_code": code, "error_message": msg})  # fmt: skip
        stored = await self.shares._store_group(group)
        return build(cls, {"throttle_time": datetime.timedelta(0), "error_code": stored or
                           ErrorCode.none, "error_message": None, "responses": out})  # fmt: skip

    async def delete_group(self, gid: str) -> ErrorCode | None:
        """DeleteGroups of a share group (from the group coordinator): the state of every
        topic it read, then the group; None when deleted."""
        g = self.shares.groups.get(gid)
        if g is None:
            return ErrorCode.group_id_not_found
        if g.members:
            return ErrorCode.non_empty_group
        for name in sorted(g.topics_read):
            if self.broker.image.topic(name) is None:
                continue  # deleted with its topic
            code, _ = await self._delete_topic(gid, name)
            if code != ErrorCode.none:
                return code
        gone: list[Record] = [(k, None) for k in share_group_records(gid, StoredShareGroup())]
        err = await self.shares.gc.store(gid, gone)
        if err is not None:
            return err
        self.shares.groups.pop(gid, None)
        self.shares.gc.share_stored.pop(gid, None)
        return None

    def _group_refusal(self, gid: str) -> tuple[ErrorCode, str | None] | None:
        err = self.shares.gc._group_error(gid)
        if err is not None:
            return err, None
        if self.shares._other_kind(gid):
            return ErrorCode.group_id_not_found, f"Group {gid} is not a share group."
        return None

    async def _high_watermark(self, name: str, idx: int) -> int:
        """The partition's high watermark, from its leader (-1: not known now)."""
        p = self.broker.partitions.get(name, idx)
        if p is not None and p.is_leader:
            return int(p.high_watermark)
        t = self.broker.image.topic(name)
        reg = self.broker.image.brokers.get(t.partitions[idx].leader) if t is not None else None
        dest = reg.endpoint(self.broker.inter_broker_listener) if reg is not None else None
        if dest is None:
            return -1
        body = {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": name, "partitions": [{"partition_index": idx, "timestamp": -1}]}]}  # fmt: skip
        try:
            resp = await self.broker.peers.request(
                dest,
                ApiKey.LIST_OFFSETS,
                _LIST_OFFSETS_VERSION,
                body,
                timeout_s=_LIST_OFFSETS_TIMEOUT_S,
            )
        except OSError as e:  # TimeoutError too: the lag is shown as unknown
            log.debug("[node %d] High watermark of %s-%d: %s", self.broker.node_id, name, idx, e)
            return -1
        got = resp.topics[0].partitions[0]
        return int(got.offset) if int(got.error_code) == 0 else -1

    async def _partition(
        self, gid: str, name: str, idx: int, only_known: bool, with_lag: bool
    ) -> Any:
        t = self.broker.image.topic(name)
        if t is None or idx not in t.partitions:
            return {"partition_index": idx, "start_offset": -1, "leader_epoch": -1, "lag": -1,
                    "error_code": ErrorCode.unknown_topic_or_partition,
                    "error_message": f"Unknown partition {name}-{idx}"}  # fmt: skip
        persister = self.shares.persister
        if persister is None:
            return None
        got = await persister.summary(gid, t.topic_id, idx)
        if got.error == ErrorCode.none and got.start_offset < 0 and only_known:
            return None  # the group never read it
        lag = -1
        if with_lag and got.error == ErrorCode.none and got.start_offset >= 0:
            hw = await self._high_watermark(name, idx)
            if hw >= 0 and got.delivery_complete >= 0:
                lag = max(0, hw - got.start_offset - got.delivery_complete)
        return {"partition_index": idx, "start_offset": got.start_offset,
                "leader_epoch": got.leader_epoch, "lag": lag, "error_code": got.error,
                "error_message": got.message}  # fmt: skip

    async def describe(self, header: RequestHeader, req: Any) -> Any:
        lag = header.api_version >= 1
        groups = []
        for g in req.groups:
            refused = self._group_refusal(g.group_id)
            if refused is not None:
                groups.append({"group_id": g.group_id, "topics": [], "error_code": refused[0],
                               "error_message": refused[1]})  # fmt: skip
                continue
            if g.topics is None:  # every topic the group reads
                sg = self.shares.groups.get(g.group_id)
                names = sorted(sg.topics_read | sg.subscribed_topics()) if sg is not None else []
                wanted = []
                for name in names:
                    t = self.broker.image.topic(name)
                    if t is not None:
                        wanted.append((name, sorted(t.partitions), True))
            else:
                wanted = [(t.topic_name, list(t.partitions), False) for t in g.topics]
            topics = []
            for name, indexes, only_known in wanted:
                parts = [
                    await self._partition(g.group_id, name, i, only_known, lag) for i in indexes
                ]
                t_img = self.broker.image.topic(name)
                shown = [p for p in parts if p is not None]
                if shown or not only_known:
                    topics.append({"topic_name": name,
                                   "topic_id": t_img.topic_id if t_img is not None else None,
                                   "partitions": shown})  # fmt: skip
            groups.append({"group_id": g.group_id, "topics": topics,
                           "error_code": ErrorCode.none, "error_message": None})  # fmt: skip
        cls = response_class(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, header.api_version)
        return build(cls, {"throttle_time": datetime.timedelta(0), "groups": groups})
