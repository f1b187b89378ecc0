"""A share group's offsets (KIP-932), on the group's coordinator: DescribeShareGroupOffsets
(90) answers each share-partition's start offset and the leader epoch that last wrote it,
read from the share coordinator (ReadShareGroupStateSummary) - what
``kafka-share-groups.sh --describe --offsets`` shows."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.share_apis import ShareApis
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader, response_class

__all__ = ["ShareOffsetsApis"]


class ShareOffsetsApis:
    def __init__(self, shares: ShareApis) -> None:
        self.shares = shares
        self.broker = shares.broker

    def handlers(self) -> dict[ApiKey, Any]:
        return {ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: self.describe}

    def _group_refusal(self, gid: str) -> tuple[ErrorCode, str | None] | None:
        err = self.shares.gc._group_error(gid)
        if err is not None:
            return err, None
        if self.shares._other_kind(gid):
            return ErrorCode.group_id_not_found, f"Group {gid} is not a share group."
        return None

    async def _partition(self, gid: str, name: str, idx: int, only_known: bool) -> Any:
        t = self.broker.image.topic(name)
        if t is None or idx not in t.partitions:
            return {"partition_index": idx, "start_offset": -1, "leader_epoch": -1,
                    "error_code": ErrorCode.unknown_topic_or_partition,
                    "error_message": f"Unknown partition {name}-{idx}"}  # fmt: skip
        persister = self.shares.persister
        if persister is None:
            return None
        got = await persister.summary(gid, t.topic_id, idx)
        if got.error == ErrorCode.none and got.start_offset < 0 and only_known:
            return None  # the group never read it
        return {"partition_index": idx, "start_offset": got.start_offset,
                "leader_epoch": got.leader_epoch, "error_code": got.error,
                "error_message": got.message}  # fmt: skip

    async def describe(self, header: RequestHeader, req: Any) -> Any:
        groups = []
        for g in req.groups:
            refused = self._group_refusal(g.group_id)
            if refused is not None:
                groups.append({"group_id": g.group_id, "topics": [], "error_code": refused[0],
                               "error_message": refused[1]})  # fmt: skip
                continue
            if g.topics is None:  # every topic the group reads
                sg = self.shares.groups.get(g.group_id)
                names = sorted(sg.subscribed_topics()) if sg is not None else []
                wanted = []
                for name in names:
                    t = self.broker.image.topic(name)
                    if t is not None:
                        wanted.append((name, sorted(t.partitions), True))
            else:
                wanted = [(t.topic_name, list(t.partitions), False) for t in g.topics]
            topics = []
            for name, indexes, only_known in wanted:
                parts = [await self._partition(g.group_id, name, i, only_known) for i in indexes]
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
