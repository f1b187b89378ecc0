"""AlterPartitionReassignments and ListPartitionReassignments on a broker: forwarded to
the active controller as every admin request is (KIP-590), its answer returned as it is;
an unreachable controller is a REQUEST_TIMED_OUT naming why."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.broker import Broker
from keeperless.broker.controller_channel import ControllerUnavailableError
from keeperless.metadata.admin import ApiError
from keeperless.metadata.reassignment_requests import (
    alter_response,
    list_response,
    reassignment_targets,
)
from keeperless.protocol.apis import ApiKey
from keeperless.protocol.framing import RequestHeader

__all__ = ["ReassignmentApis"]


class ReassignmentApis:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def handlers(self) -> dict[ApiKey, Any]:
        return {
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self.alter,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: self.list,
        }

    async def alter(self, header: RequestHeader, req: Any) -> Any:
        try:
            return await self.broker.forwarder.forward(header, req)
        except ControllerUnavailableError as e:
            err = ApiError(ErrorCode.request_timed_out, str(e))
            asked = reassignment_targets(req)
            return alter_response(header.api_version, [(t, p, err) for t, p, _ in asked], err)

    async def list(self, header: RequestHeader, req: Any) -> Any:
        try:
            return await self.broker.forwarder.forward(header, req)
        except ControllerUnavailableError as e:
            return list_response(header.api_version, [], ApiError(ErrorCode.request_timed_out,
                                                                  str(e)))  # fmt: skip
