"""A broker's loggers as Kafka's BROKER_LOGGER config resource: their levels described
with log4j's names and changed at run time by IncrementalAlterConfigs, on the broker
itself (never forwarded: the levels are this process's, not the cluster's)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from keeperless.metadata.admin import ApiError

__all__ = ["BROKER_LOGGER_RESOURCE", "alter_log_levels", "logger_levels"]

BROKER_LOGGER_RESOURCE = 8
ROOT = "root"
TRACE = 5  # log4j's TRACE, below Python's DEBUG
# log4j's level names (what Kafka shows and accepts) and Python's levels
_LEVELS = {
    "OFF": logging.CRITICAL + 10,
    "FATAL": logging.CRITICAL,
    "ERROR": logging.ERROR,
    "WARN": logging.WARNING,
    "INFO": logging.INFO,
    "DEBUG": logging.DEBUG,
    "TRACE": TRACE,
    "ALL": 1,
}
_NAMES = {v: k for k, v in _LEVELS.items()}
SET, DELETE = 0, 1


def _logger(name: str) -> logging.Logger:
    return logging.getLogger(None if name == ROOT else name)


def _known(name: str) -> bool:
    return name == ROOT or (
        name.startswith("keeperless") and name in logging.root.manager.loggerDict
    )


def level_name(level: int) -> str:
    return _NAMES.get(level) or logging.getLevelName(level)


def logger_levels() -> list[tuple[str, str]]:
    """The root logger and keeperless's loggers with their effective levels."""
    names = [
        ROOT,
        *sorted(n for n in logging.root.manager.loggerDict if n.startswith("keeperless")),
    ]
    return [(n, level_name(_logger(n).getEffectiveLevel())) for n in names]


def alter_log_levels(
    node_id: int, name: str, ops: Sequence[tuple[str, int, str | None]], validate_only: bool
) -> ApiError:
    """Kafka's ConfigAdminManager rules: the resource is this broker's id; SET to a log4j
    level, DELETE back to the root logger's level (never the root's own); APPEND and
    SUBTRACT are refused. All validated before any is applied."""
    if name != str(node_id):
        return ApiError(
            ErrorCode.invalid_request,
            f"Unexpected broker id, expected {node_id}, but received {name}",
        )
    changes: list[tuple[str, int | None]] = []
    for logger, op, value in ops:
        if op not in (SET, DELETE):
            kind = {2: "APPEND", 3: "SUBTRACT"}.get(op, str(op))
            return ApiError(
                ErrorCode.invalid_request,
                f"{kind} operation is not allowed for the BROKER_LOGGER resource",
            )
        if not _known(logger):
            return ApiError(ErrorCode.invalid_config, f"Logger {logger} does not exist!")
        if op == DELETE:
            if logger == ROOT:
                return ApiError(
                    ErrorCode.invalid_request,
                    "Removing the log level of the root logger is not allowed",
                )
            changes.append((logger, None))
            continue
        level = _LEVELS.get((value or "").upper())
        if level is None:
            return ApiError(
                ErrorCode.invalid_config,
                f"Cannot set the log level of {logger} to {value} as it is not a supported "
                f"log level. Valid log levels are {', '.join(_LEVELS)}",
            )
        changes.append((logger, level))
    if not validate_only:
        for logger, lvl in changes:
            _logger(logger).setLevel(logging.NOTSET if lvl is None else lvl)
            logging.getLogger(__name__).info(
                "[node %d] Log level of %s set to %s", node_id, logger,
                "the root logger's" if lvl is None else level_name(lvl),
            )  # fmt: skip
    return ApiError.none()
