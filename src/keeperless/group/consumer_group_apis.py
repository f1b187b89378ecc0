"""ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848) on the group coordinator."""

from __future__ import annotations

import time
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.coordinator.consumer_group import (
    ASSIGNORS,
    LEAVE,
    STATIC_LEAVE,
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    HeartbeatError,
    Subscription,
    TopicsView,
)
from keeperless.group.coordinator import GroupCoordinator
from keeperless.metadata.features import consumer_protocol_enabled
from keeperless.protocol.acl_operations import NOT_REQUESTED, all_operations
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.build import build
from keeperless.protocol.framing import RequestHeader, response_class

__all__ = ["ConsumerGroupApis"]


class ConsumerGroupApis:
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.gc = coordinator
        self.broker = coordinator.broker

    def handlers(self) -> dict[ApiKey, Any]:
        return {
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self.heartbeat,
            ApiKey.CONSUMER_GROUP_DESCRIBE: self.describe,
        }

    def _view(self) -> TopicsView:
        image = self.broker.image
        return {t.name: (t.topic_id, len(t.partitions)) for t in image.topics.values()}

    def _disabled(self) -> str | None:
        """Why the consumer group protocol is off here (group.version 0), or None."""
        if consumer_protocol_enabled(self.broker.image.features):
            return None
        return (
            "The consumer group protocol (KIP-848) is not enabled: the cluster's "
            "group.version is 0. Enable it with kafka-features.sh upgrade --feature "
            "group.version=1, or use group.protocol=classic."
        )

    async def heartbeat(self, header: RequestHeader, req: Any) -> Any:
        interval = self.gc.consumer_heartbeat_interval_ms(req.group_id)
        try:
            disabled = self._disabled()
            if disabled is not None:
                raise HeartbeatError(ErrorCode.unsupported_version, disabled)
            reply = self._heartbeat(header, req)
            # what changed is stored before the member hears of it (Kafka's runtime
            # answers once its records are committed), so a new coordinator has it
            stored = await self.gc.store_consumer_group(req.group_id, reply[0])
            if stored is not None:
                cg = self.gc.consumer_groups.get(req.group_id)
                if cg is not None and reply[0] in cg.members:
                    cg.members[reply[0]].sent = None  # (not heard: send it again)
                raise HeartbeatError(
                    stored, f"The group's state could not be stored: {stored.name}"
                )
        except HeartbeatError as e:
            self.gc.store_consumer_group_later(req.group_id)  # (a fenced member may be gone)
            return build(
                response_class(ApiKey.CONSUMER_GROUP_HEARTBEAT, header.api_version),
                {
                    "throttle_time": 0,
                    "error_code": e.code,
                    "error_message": str(e),
                    "member_id": None,
                    "member_epoch": -1,
                    "heartbeat_interval": interval,
                    "assignment": None,
                },
            )
        member_id, epoch, assignment = reply
        return build(
            response_class(ApiKey.CONSUMER_GROUP_HEARTBEAT, header.api_version),
            {
                "throttle_time": 0,
                "error_code": ErrorCode.none,
                "error_message": None,
                "member_id": member_id,
                "member_epoch": epoch,
                "heartbeat_interval": interval,
                "assignment": None
                if assignment is None
                else {
                    "topic_partitions": [
                        {"topic_id": t, "partitions": sorted(ps)}
                        for t, ps in sorted(assignment.items(), key=lambda kv: str(kv[0]))
                    ]
                },
            },
        )

    def _heartbeat(self, header: RequestHeader, req: Any) -> tuple[str, int, Assignment | None]:
        gid = req.group_id
        if not gid:
            raise HeartbeatError(ErrorCode.invalid_request, "GroupId can't be empty.")
        err = self.gc._group_error(gid)
        if err is not None:
            raise HeartbeatError(err, f"This broker is not the coordinator of group {gid}")
        if gid in self.gc.share_groups:  # KIP-932: a share group's id, as Kafka refuses it
            raise HeartbeatError(
                ErrorCode.group_id_not_found, f"Group {gid} is not a consumer group."
            )
        classic = self.gc.groups.get(gid)
        if classic is not None and classic.members:
            # a consumer-protocol member joins a classic group: it becomes a consumer
            # group with its classic members (KIP-848 online migration), once stable
            if req.member_epoch != 0:
                raise HeartbeatError(
                    ErrorCode.unknown_member_id, f"Group {gid} is a classic group."
                )
            if self.gc.mixed.upgrade(gid) is None:
                raise HeartbeatError(
                    ErrorCode.coordinator_not_available,
                    f"Group {gid} is rebalancing under the classic protocol (or has members "
                    "of another protocol type); it is converted once it is stable",
                )
        now = time.monotonic()
        epoch = req.member_epoch
        owned = _owned(req.topic_partitions)
        names = req.subscribed_topic_names
        regex = getattr(req, "subscribed_topic_regex", None)
        assignor = req.server_assignor
        if assignor is not None and assignor not in ASSIGNORS:
            raise HeartbeatError(
                ErrorCode.unsupported_assignor,
                f"Assignor {assignor} is not supported. Supported assignors: "
                f"{', '.join(sorted(ASSIGNORS))}.",
            )
        rebalance_ms = int(req.rebalance_timeout.total_seconds() * 1000)
        g = self.gc.consumer_groups.get(gid)
        if epoch in (LEAVE, STATIC_LEAVE):
            if g is None:
                raise HeartbeatError(ErrorCode.unknown_member_id, f"Group {gid} has no members")
            g.leave(req.member_id, static=epoch == STATIC_LEAVE)
            self.gc.mixed.maybe_downgrade(gid, now)
            return req.member_id, epoch, None
        if epoch == 0:
            if (names is None and regex is None) or owned is None or rebalance_ms <= 0:
                raise HeartbeatError(
                    ErrorCode.invalid_request,
                    "A joining member must give its rebalance timeout, its subscription and "
                    "its (empty) owned partitions",
                )
            member_id = req.member_id
            if header.api_version >= 1 and not member_id:
                raise HeartbeatError(
                    ErrorCode.invalid_request, "MemberId can't be empty (KIP-1082)."
                )
            if not member_id:
                member_id = str(uuid.uuid4())
            if g is None:
                g = self.gc.consumer_groups[gid] = ConsumerGroup(
                    gid, self.broker.node_id, self.gc.settings.consumer_assignors[0]
                )
            spec = (
                req.rack_id,
                header.client_id or "",
                "/127.0.0.1",
                rebalance_ms,
                Subscription(tuple(sorted(names or ())), regex or None),
                assignor,
            )
            m = g.join(member_id, req.instance_id, spec, now)
        else:
            m_or_none = g.members.get(req.member_id) if g is not None else None
            if g is None or m_or_none is None:
                raise HeartbeatError(
                    ErrorCode.unknown_member_id,
                    f"Member {req.member_id} is not a member of group {gid}",
                )
            m = m_or_none
            g.validate_epoch(m, epoch, owned)
            subscription = None
            if names is not None or regex is not None:  # null: unchanged
                subscription = Subscription(
                    tuple(sorted(names)) if names is not None else m.subscription.names,
                    (regex or None) if regex is not None else m.subscription.regex,
                )
            g.update(m, subscription, assignor, rebalance_ms, now)
        view = self._view()
        g.refresh(view)
        g.compute_target(view)
        g.reconcile(m, owned, now)
        full = epoch == 0 or (owned is not None and owned != m.sent)
        reply = g.heartbeat_reply(m, full)
        return reply.member_id, reply.member_epoch, reply.assignment

    async def describe(self, header: RequestHeader, req: Any) -> Any:
        groups = []
        image = self.broker.image
        names = {t.topic_id: t.name for t in image.topics.values()}
        disabled = self._disabled()

        def partitions(a: Assignment) -> list[dict[str, Any]]:
            return [
                {"topic_id": t, "topic_name": names.get(t, ""), "partitions": sorted(ps)}
                for t, ps in sorted(a.items(), key=lambda kv: str(kv[0]))
            ]

        for gid in req.group_ids:
            entry: dict[str, Any] = {
                "error_code": ErrorCode.none,
                "error_message": None,
                "group_id": gid,
                "group_state": "Dead",
                "group_epoch": -1,
                "assignment_epoch": -1,
                "assignor_name": "",
                "members": [],
                "authorized_operations": all_operations("group")
                if req.include_authorized_operations
                else NOT_REQUESTED,
            }
            err = self.gc._group_error(gid)
            g = self.gc.consumer_groups.get(gid)
            if disabled is not None:
                entry.update(error_code=ErrorCode.unsupported_version, error_message=disabled)
            elif err is not None:
                entry.update(error_code=err)
            elif g is None:
                classic = gid in self.gc.groups or gid in self.gc.offsets
                entry.update(
                    error_code=ErrorCode.group_id_not_found,
                    error_message=f"Group {gid} is not a consumer group."
                    if classic
                    else f"Group {gid} not found.",
                )
            else:
                entry.update(
                    group_state=g.state,
                    group_epoch=g.group_epoch,
                    assignment_epoch=g.assignment_epoch,
                    assignor_name=g.assignor_name(),
                    members=[_member(m, g, partitions) for m in g.members.values()],
                )
            groups.append(entry)
        return build(
            response_class(ApiKey.CONSUMER_GROUP_DESCRIBE, header.api_version),
            {"throttle_time": 0, "groups": groups},
        )


def _member(m: ConsumerMember, g: ConsumerGroup, partitions: Any) -> dict[str, Any]:
    return {
        "member_id": m.member_id,
        "instance_id": m.instance_id,
        "rack_id": m.rack_id,
        "member_epoch": m.member_epoch,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "subscribed_topic_names": list(m.subscription.names),
        "subscribed_topic_regex": m.subscription.regex,
        "assignment": {"topic_partitions": partitions(m.assigned)},
        "target_assignment": {"topic_partitions": partitions(g.target.get(m.member_id, {}))},
        "member_type": 0 if m.classic is not None else 1,  # classic / consumer protocol
    }


def _owned(tps: Any) -> Assignment | None:
    if tps is None:
        return None
    return {t.topic_id: frozenset(t.partitions) for t in tps if t.partitions}
