"""OffsetCommit, OffsetFetch, ListGroups and DescribeGroups on the group coordinator."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.coordinator.classic_group import GroupState
from keeperless.coordinator.group_records import group_key
from keeperless.coordinator.group_shard import offset_key, offset_value
from keeperless.coordinator.outcome import Record
from keeperless.group.coordinator import GroupCoordinator
from keeperless.metadata.group_configs import GROUP_RESOURCE
from keeperless.protocol.acl_operations import NOT_REQUESTED, all_operations
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader, response_class

__all__ = ["GroupOffsets"]

# TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP: what ListConfigResources v1 lists
_CONFIG_RESOURCE_TYPES = (2, 4, 8, 16, 32)


class GroupOffsets:
    def __init__(self, coordinator: GroupCoordinator) -> None:
        # a share group's deletion (its state at the share coordinator, share/offsets.py)
        self.delete_share_group: Callable[[str], Awaitable[ErrorCode | None]] | None = None
        self.gc = coordinator
        self.broker = coordinator.broker

    def handlers(self) -> dict[ApiKey, Any]:
        gc = self.gc
        return {
            ApiKey.OFFSET_COMMIT: self.offset_commit,
            ApiKey.OFFSET_FETCH: self.offset_fetch,
            ApiKey.JOIN_GROUP: gc.join_group,
            ApiKey.HEARTBEAT: gc.heartbeat,
            ApiKey.LEAVE_GROUP: gc.leave_group,
            ApiKey.SYNC_GROUP: gc.sync_group,
            ApiKey.DESCRIBE_GROUPS: self.describe_groups,
            ApiKey.LIST_GROUPS: self.list_groups,
            ApiKey.DELETE_GROUPS: self.delete_groups,
            ApiKey.OFFSET_DELETE: self.offset_delete,
            ApiKey.LIST_CONFIG_RESOURCES: self.list_config_resources,
        }

    async def offset_commit(self, header: RequestHeader, req: Any) -> Any:
        group_id = req.group_id
        err = self.gc._group_error(group_id) or self.member_error(
            group_id,
            getattr(req, "member_id", ""),
            getattr(req, "generation_id_or_member_epoch", -1),
            getattr(req, "group_instance_id", None),
        )
        now = int(time.time() * 1000)
        records: list[Record] = []
        topics = []
        for t in req.topics:
            for p in t.partitions:
                e = err
                if e is None and self.broker.image.topic(t.name) is None:
                    e = ErrorCode.unknown_topic_or_partition
                if e is None:
                    epoch = getattr(p, "committed_leader_epoch", -1)
                    records.append(
                        (
                            offset_key(group_id, t.name, p.partition_index),
                            offset_value(p.committed_offset, epoch, p.committed_metadata, now),
                        )
                    )
                topics.append((t.name, p.partition_index, e or ErrorCode.none))
        if records:  # (the shard replays them as they are appended)
            failed = await self.gc.store(group_id, records)
            if failed is not None:
                topics = [(n, i, failed if e == ErrorCode.none else e) for n, i, e in topics]
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for name, idx, e in topics:
            by_topic.setdefault(name, []).append({"partition_index": idx, "error_code": e})
        return build(
            response_class(ApiKey.OFFSET_COMMIT, header.api_version),
            {
                "throttle_time": 0,
                "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()],
            },
        )

    def member_error(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        instance: str | None,
        transactional: bool = False,
    ) -> ErrorCode | None:
        """Whether a commit of ``member_id`` at ``generation`` may write the group's
        offsets now (Kafka's validateOffsetCommit). A member the group does not know -
        a member of a generation that was never stored, when the coordinator failed
        over - is refused: its partitions may be another member's by now, and that
        member may have fetched the offsets already (found by the fault harness: a
        transactional copier whose group coordinator failed over committed the offsets
        of records the group's next member read again). A member of the stored
        generation is known to the new coordinator (group_records.py). A transactional
        commit is checked at its append, after any wait, never before."""
        g = self.gc.groups.get(group_id)
        cg = self.gc.consumer_groups.get(group_id)
        if cg is not None and (cg.members or g is None or not g.members):
            return _consumer_member_error(cg, member_id, generation, transactional)
        if generation >= 0 or member_id or instance is not None:
            err = ErrorCode.unknown_member_id if g is None else g.check_member(
                member_id, generation, instance
            )  # fmt: skip
            # as Kafka's validateOffsetCommit: a member of the current generation commits
            # while the group prepares a rebalance (what an eager consumer does as it
            # gives its partitions up, before it joins again); only between the join and
            # the sync, the new generation's assignment not handed out yet, is it told
            # to rejoin (refused in PreparingRebalance too, librdkafka's eager groups
            # read again what they had consumed, and kafka-python's commits raised)
            completing = g is not None and g.state == GroupState.COMPLETING
            if err == ErrorCode.none and completing and not transactional:
                err = ErrorCode.rebalance_in_progress
            return None if err == ErrorCode.none else err
        if not transactional and g is not None and g.members:
            return ErrorCode.unknown_member_id  # simple commits only for groups without members
        return None

    async def _fetch_group(
        self, group_id: str, topics: Any, require_stable: bool = False
    ) -> tuple[ErrorCode, list[dict[str, Any]]]:
        err = self.gc._group_error(group_id)
        got = err if err is not None else await self.gc.committed_offsets(group_id)
        if isinstance(got, ErrorCode):
            return got, []
        offsets, pending = got
        # offsets in an open transaction: a reader asking for stable ones asks again
        unstable = pending if require_stable else set()
        wanted: list[tuple[str, list[int]]]
        if topics is None:
            grouped: dict[str, list[int]] = {}
            for name, idx in sorted(offsets):
                grouped.setdefault(name, []).append(idx)
            wanted = list(grouped.items())
        else:
            wanted = [(t.name, list(t.partition_indexes)) for t in topics]
        out = []
        for name, idxs in wanted:
            parts = []
            for idx in idxs:
                off, epoch, meta, _ = offsets.get((name, idx), (-1, -1, "", -1))
                parts.append(
                    {
                        "partition_index": idx,
                        "committed_offset": off,
                        "committed_leader_epoch": epoch,
                        "metadata": meta,
                        "error_code": ErrorCode.unstable_offset_commit
                        if (name, idx) in unstable
                        else ErrorCode.none,
                    }
                )
            out.append({"name": name, "partitions": parts})
        return ErrorCode.none, out

    async def offset_fetch(self, header: RequestHeader, req: Any) -> Any:
        cls = response_class(ApiKey.OFFSET_FETCH, header.api_version)
        if header.api_version >= 8:
            groups = []
            for g in req.groups:
                err, topics = await self._fetch_group(g.group_id, g.topics, req.require_stable)
                groups.append({"group_id": g.group_id, "topics": topics, "error_code": err})
            return build(cls, {"throttle_time": 0, "groups": groups})
        stable = getattr(req, "require_stable", False)
        err, topics = await self._fetch_group(req.group_id, req.topics, stable)
        if header.api_version < 2 and err != ErrorCode.none:
            topics = [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": i,
                            "committed_offset": -1,
                            "metadata": "",
                            "error_code": err,
                        }
                        for i in t.partition_indexes
                    ],
                }
                for t in req.topics or ()
            ]
        return build(cls, {"throttle_time": 0, "topics": topics, "error_code": err})

    async def list_groups(self, header: RequestHeader, req: Any) -> Any:
        # Kafka compares state and type filters case-insensitively
        states = {s.lower() for s in getattr(req, "states_filter", ()) or ()}
        types = {t.lower() for t in getattr(req, "types_filter", ()) or ()}
        names = set(self.gc.groups) | set(self.gc.offsets) | set(self.gc.consumer_groups)
        names |= set(self.gc.share_groups)
        out = []
        for gid in sorted(names):
            g = self.gc.groups.get(gid)
            cg = self.gc.consumer_groups.get(gid)
            sg = self.gc.share_groups.get(gid)
            if sg is not None:  # KIP-932
                state, kind, protocol_type = sg.state.value, "share", "share"
            elif cg is not None and (cg.members or g is None or not g.members):
                state, kind, protocol_type = cg.state, "consumer", "consumer"
            else:
                state = g.state if g else GroupState.EMPTY
                kind, protocol_type = "classic", (g.protocol_type if g else "") or "consumer"
            if states and state.lower() not in states:
                continue
            if types and kind not in types:
                continue
            out.append(
                {
                    "group_id": gid,
                    "protocol_type": protocol_type,
                    "group_state": state,
                    "group_type": kind,
                }
            )
        return build(
            response_class(ApiKey.LIST_GROUPS, header.api_version),
            {"throttle_time": 0, "error_code": ErrorCode.none, "groups": out},
        )

    async def describe_groups(self, header: RequestHeader, req: Any) -> Any:
        out = []
        for gid in req.groups:
            err = self.gc._group_error(gid)
            g = self.gc.groups.get(gid)
            cg = self.gc.consumer_groups.get(gid)
            if err is None and cg is not None and cg.members:
                out.append(
                    {
                        "error_code": ErrorCode.group_id_not_found,
                        "error_message": f"Group {gid} is not a classic group.",
                        "group_id": gid,
                        "group_state": GroupState.DEAD,
                        "protocol_type": "",
                        "protocol_data": "",
                        "members": [],
                    }
                )
                continue
            entry: dict[str, Any] = {
                "error_code": err or ErrorCode.none,
                "group_id": gid,
                "group_state": GroupState.DEAD
                if g is None and gid not in self.gc.offsets
                else (g.state if g else GroupState.EMPTY),
                "protocol_type": (g.protocol_type if g else "") or "",
                "protocol_data": (g.protocol if g else "") or "",
                "members": [],
                "authorized_operations": all_operations("group")
                if getattr(req, "include_authorized_operations", False)
                else NOT_REQUESTED,
            }
            if g is not None and err is None:
                entry["members"] = [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata_for(g.protocol or ""),
                        "member_assignment": m.assignment,
                    }
                    for m in g.members.values()
                ]
            out.append(entry)
        return build(
            response_class(ApiKey.DESCRIBE_GROUPS, header.api_version),
            {"throttle_time": 0, "groups": out},
        )

    async def delete_groups(self, header: RequestHeader, req: Any) -> Any:
        results = []
        for gid in req.groups_names:
            err = self.gc._group_error(gid)
            if err is None and gid in self.gc.share_groups and self.delete_share_group:
                err = await self.delete_share_group(gid)
                results.append({"group_id": gid, "error_code": err or ErrorCode.none})
                continue
            g = self.gc.groups.get(gid)
            cg = self.gc.consumer_groups.get(gid)
            if err is None and ((g is not None and g.members) or (cg is not None and cg.members)):
                err = ErrorCode.non_empty_group
            elif (
                err is None
                and g is None
                and cg is None
                and gid not in self.gc.offsets
                and (
                    not self.gc.pending_partitions(gid)  # (offsets in open transactions only)
                )
            ):
                err = ErrorCode.group_id_not_found
            if err is None:
                # tombstones, so that the deletion survives a restart: of the committed
                # offsets and of those in open transactions (Kafka's deleteAllOffsets)
                # (replayed as appended: from the group's open transactions too, so
                # that a marker after them does not bring them back)
                doomed = sorted(set(self.gc.offsets.get(gid, {})) | self.gc.pending_partitions(gid))
                tombstones: list[Record] = [(offset_key(gid, t, p), None) for t, p in doomed]
                if g is not None:
                    tombstones.append((group_key(gid), None))
                tombstones += self.gc.consumer_group_tombstones(gid)
                if tombstones:
                    err = await self.gc.store(gid, tombstones)
                if err is None:
                    deleted = self.gc.groups.pop(gid, None)
                    if deleted is not None:
                        # a join that came during the write waits in it: it is told to
                        # find the coordinator again, and joins a new group
                        deleted.abandon()
                    self.gc.consumer_groups.pop(gid, None)
            results.append({"group_id": gid, "error_code": err or ErrorCode.none})
        return build(
            response_class(ApiKey.DELETE_GROUPS, header.api_version),
            {"throttle_time": 0, "results": results},
        )

    async def offset_delete(self, header: RequestHeader, req: Any) -> Any:
        """OffsetDelete (KIP-496): drop a group's committed offsets for topics its members
        no longer consume (GROUP_SUBSCRIBED_TO_TOPIC for those they do)."""
        gid = req.group_id
        err = self.gc._group_error(gid)
        g = self.gc.groups.get(gid)
        offsets = self.gc.offsets.get(gid, {})
        if (
            err is None
            and g is None
            and gid not in self.gc.offsets
            and gid not in (self.gc.consumer_groups)
            and not self.gc.pending_partitions(gid)  # (offsets in open transactions only)
        ):
            err = ErrorCode.group_id_not_found
        subscribed: set[str] = set()
        cg = self.gc.consumer_groups.get(gid)
        if err is None and g is None and cg is not None:
            err = None
            image = self.broker.image
            view = {t.name: (t.topic_id, len(t.partitions)) for t in image.topics.values()}
            subscribed = cg.subscribed_topics(view)
        elif err is None and g is not None and g.members:
            if (g.protocol_type or "consumer") != "consumer":
                err = ErrorCode.non_empty_group
            else:
                subscribed = g.subscribed_topics()
        topics = []
        doomed: list[tuple[str, int]] = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                e = ErrorCode.none
                if t.name in subscribed:
                    e = ErrorCode.group_subscribed_to_topic
                elif (t.name, p.partition_index) in offsets or (
                    (t.name, p.partition_index) in self.gc.pending_partitions(gid)
                ):
                    doomed.append((t.name, p.partition_index))
                parts.append({"partition_index": p.partition_index, "error_code": e})
            topics.append({"name": t.name, "partitions": parts})
        if err is None and doomed:  # (replayed as appended, as in delete_groups)
            err = await self.gc.store(gid, [(offset_key(gid, t, i), None) for t, i in doomed])
        return build(
            response_class(ApiKey.OFFSET_DELETE, header.api_version),
            {
                "error_code": err or ErrorCode.none,
                "throttle_time": 0,
                "topics": topics if err is None else [],
            },
        )

    async def list_config_resources(self, header: RequestHeader, req: Any) -> Any:
        """ListConfigResources (KIP-1142; v0 was ListClientMetricsResources): the
        resources whose configs can be described. Types outside Kafka 4.1's set are
        refused with UNSUPPORTED_VERSION, as Kafka does."""
        wanted = set(getattr(req, "resource_types", ()) or ()) if header.api_version else {16}
        if not wanted:
            wanted = set(_CONFIG_RESOURCE_TYPES)
        if not wanted <= set(_CONFIG_RESOURCE_TYPES):
            return build(
                response_class(ApiKey.LIST_CONFIG_RESOURCES, header.api_version),
                {
                    "throttle_time": 0,
                    "error_code": ErrorCode.unsupported_version,
                    "config_resources": [],
                },
            )
        image = self.broker.image
        brokers = [str(b) for b in sorted(image.brokers)]
        names = {
            2: sorted(image.topic_ids),
            4: brokers,
            8: brokers,
            16: [],  # no client metrics subscriptions (KIP-714) here
            # the groups this coordinator knows, and every group with configs of its own
            32: sorted(
                set(self.gc.groups)
                | set(self.gc.offsets)
                | {n for t, n in image.configs if t == GROUP_RESOURCE and image.configs[t, n]}
            ),
        }
        out = [{"resource_name": n, "resource_type": t} for t in sorted(wanted) for n in names[t]]
        return build(
            response_class(ApiKey.LIST_CONFIG_RESOURCES, header.api_version),
            {"throttle_time": 0, "error_code": ErrorCode.none, "config_resources": out},
        )


def _consumer_member_error(
    cg: Any, member_id: str, epoch: int, transactional: bool = False
) -> ErrorCode | None:
    """KIP-848: a commit to a consumer group comes from a member at its epoch (or the
    previous one while it moves on); a simple commit only to a group without members
    (a transactional one without a member from any producer, as Kafka allows)."""
    if epoch < 0 and not member_id:
        return ErrorCode.unknown_member_id if cg.members and not transactional else None
    m = cg.members.get(member_id)
    if m is None:
        return ErrorCode.unknown_member_id
    if epoch not in (m.member_epoch, m.previous_epoch):
        return ErrorCode.stale_member_epoch
    return None
