"""BROKER_LOGGER: a broker's log levels changed at run time as Kafka's brokers do."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from keeperless.broker.log_levels import alter_log_levels, logger_levels

NAME = "keeperless.broker.replication"


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    logging.getLogger(NAME)  # exists, as in a running broker
    before = logging.getLogger(NAME).level
    yield
    logging.getLogger(NAME).setLevel(before)


def test_set_shows_and_delete_returns_to_the_root_level() -> None:
    assert alter_log_levels(5, "5", [(NAME, 0, "debug")], False).code == ErrorCode.none
    assert dict(logger_levels())[NAME] == "DEBUG"
    assert logging.getLogger(NAME).isEnabledFor(logging.DEBUG)
    assert alter_log_levels(5, "5", [(NAME, 0, "TRACE")], False).code == ErrorCode.none
    assert dict(logger_levels())[NAME] == "TRACE"
    assert alter_log_levels(5, "5", [(NAME, 1, None)], False).code == ErrorCode.none
    assert dict(logger_levels())[NAME] == dict(logger_levels())["root"]


def test_validate_only_changes_nothing() -> None:
    level = logging.getLogger(NAME).level
    assert alter_log_levels(5, "5", [(NAME, 0, "ERROR")], True).code == ErrorCode.none
    assert logging.getLogger(NAME).level == level


@pytest.mark.parametrize(
    ("name", "ops", "code", "says"),
    [
        ("4", [(NAME, 0, "DEBUG")], ErrorCode.invalid_request, "expected 5, but received 4"),
        ("5", [(NAME, 0, "LOUD")], ErrorCode.invalid_config, "not a supported log level"),
        ("5", [("no.such", 0, "DEBUG")], ErrorCode.invalid_config, "Logger no.such does not"),
        ("5", [("root", 1, None)], ErrorCode.invalid_request, "root logger is not allowed"),
        ("5", [(NAME, 2, "DEBUG")], ErrorCode.invalid_request, "APPEND operation is not"),
    ],
)
def test_refusals_name_what_was_wrong_and_apply_nothing(
    name: str, ops: list[tuple[str, int, str | None]], code: ErrorCode, says: str
) -> None:
    level = logging.getLogger(NAME).level
    err = alter_log_levels(5, name, [(NAME, 0, "DEBUG"), *ops], False)
    assert err.code == code
    assert says in (err.message or "")
    assert logging.getLogger(NAME).level == level  # the valid first op not applied either
