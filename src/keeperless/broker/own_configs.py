"""What a broker answers itself in an IncrementalAlterConfigs before the rest is
forwarded to the controller, as Kafka's ConfigAdminManager: its loggers (changed in this
process), and a change of its own key or trust stores, which it loads first and refuses
with INVALID_CONFIG if they would not load (Kafka's DynamicBrokerConfig validation of a
per-broker SSL update) - nothing refused here reaches the metadata log."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from keeperless.broker.log_levels import BROKER_LOGGER_RESOURCE, alter_log_levels
from keeperless.metadata.admin import ApiError
from keeperless.metadata.image import BROKER_RESOURCE, MetadataImage
from keeperless.metadata.update_modes import RECONFIGURABLE_SSL, listener_key

__all__ = ["OwnConfigCheck", "answered_here"]

SET, DELETE = 0, 1
# (this broker's dynamic configs as they would be) -> why they would not load, or None
OwnConfigCheck = Callable[[Mapping[str, str]], str | None]


def _stores(key: str) -> bool:
    return listener_key(key)[1] in RECONFIGURABLE_SSL


def answered_here(
    node_id: int,
    image: MetadataImage,
    check: OwnConfigCheck | None,
    req: Any,
    legacy: bool = False,
) -> list[tuple[int, str, ApiError]]:
    """The resources of an IncrementalAlterConfigs (or, ``legacy``, an AlterConfigs,
    which replaces the whole set) answered by this broker: its loggers, and a refused
    change of its own key or trust stores."""
    out: list[tuple[int, str, ApiError]] = []
    for r in req.resources:
        if legacy:  # AlterConfigs: the whole new set
            ops = [(c.name, SET, c.value) for c in r.configs]
        else:
            ops = [(c.name, c.config_operation, c.value) for c in r.configs]
        if r.resource_type == BROKER_LOGGER_RESOURCE and not legacy:
            error = alter_log_levels(node_id, r.resource_name, ops, req.validate_only)
            out.append((r.resource_type, r.resource_name, error))
            continue
        own = r.resource_type == BROKER_RESOURCE and r.resource_name == str(node_id)
        if not own or check is None or not any(_stores(k) for k, _op, _v in ops):
            continue
        after = {} if legacy else dict(image.configs.get((BROKER_RESOURCE, r.resource_name), {}))
        for key, op, value in ops:
            if op == SET and value is not None:
                after[key] = value
            elif op == DELETE:
                after.pop(key, None)
        why = check(after)
        if why is not None:
            out.append((r.resource_type, r.resource_name,
                        ApiError(ErrorCode.invalid_config, why)))  # fmt: skip
    return out
