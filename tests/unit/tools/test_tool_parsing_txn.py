"""Offset JSON files of kafka-delete-records.sh: version 1 only, as Kafka's."""

from __future__ import annotations

import re

import pytest

from keeperless.tools.delete_records import parse_offsets
from keeperless.tools.errors import ToolError


def test_only_version_1_offset_files_are_taken() -> None:
    row = '{"topic": "t", "partition": 0, "offset": 5}'
    assert parse_offsets(f'{{"partitions": [{row}], "version": 1}}', "f") == [("t", 0, 5)]
    assert parse_offsets(f'{{"partitions": [{row}]}}', "f") == [("t", 0, 5)]  # 1 by default
    with pytest.raises(ToolError, match="Not supported version field value 2"):
        parse_offsets(f'{{"partitions": [{row}], "version": 2}}', "f")


def test_errors_are_named_by_kafkas_exception_classes() -> None:
    """kafka-log-dirs.sh prints an offline directory's error as the exception class
    Kafka's Errors enum maps it to."""
    from kio.schema.errors import ErrorCode

    from keeperless.tools.client import exception_class

    base = "org.apache.kafka.common.errors."
    assert exception_class(ErrorCode.kafka_storage_error) == base + "KafkaStorageException"
    assert exception_class(ErrorCode.log_dir_not_found) == base + "LogDirNotFoundException"
    assert (
        exception_class(ErrorCode.cluster_authorization_failed)
        == base + "ClusterAuthorizationException"
    )


def test_the_share_groups_tool_prints_assignments_as_kafka() -> None:
    """kafka-share-groups.sh --members: partitions grouped by topic (ShareGroupCommand)."""
    from types import SimpleNamespace as N

    from keeperless.tools.share_groups import _assignment

    m = N(assignment=N(topic_partitions=[N(topic_name="q3", partitions=[2, 0, 1]),
                                         N(topic_name="a", partitions=[0])]))  # fmt: skip
    assert _assignment(m) == (4, "a:0;q3:0,1,2")


@pytest.mark.parametrize(
    ("flags", "refusal"),
    [
        (["--describe"], "--describe takes one of these options: --group, --all-groups"),
        (["--describe", "--group", "g", "--members", "--state"], "at most one of these"),
        (["--describe", "--group", "g", "--state", "Stable"], "does not take a value for --state"),
        (["--delete"], "--delete takes the options --group or --all-groups"),
        (["--delete", "--group", "g", "--all-groups"], "either --group or --all-groups, not both"),
        (
            ["--delete", "--group", "g", "--topic", "t"],
            "--delete does not take the option: --topic",
        ),
        (["--delete-offsets", "--group", "g"], "--delete-offsets takes the following options"),
        (
            ["--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest"],
            "--reset-offsets takes the option: --execute or --dry-run",
        ),
        (
            [
                "--reset-offsets",
                "--group",
                "g",
                "--topic",
                "t",
                "--to-earliest",
                "--execute",
                "--dry-run",
            ],
            "only accepts one of --execute and --dry-run",
        ),
        (["--list", "--verbose"], "--verbose is only valid with --describe"),
        (["--list", "--all-groups"], "--list does not take the option: --all-groups"),
        (["--describe", "--group", "g", "--timeout", "0"], "--timeout 0"),
    ],
)
def test_the_share_groups_tool_checks_its_flags_as_kafkas(flags: list[str], refusal: str) -> None:
    """ShareGroupCommandOptions.checkArgs' refusals, one line each."""
    from keeperless.cli.parser import build_parser
    from keeperless.tools.share_groups import check_args

    args = build_parser().parse_args(["share-groups", "--bootstrap-server", "h:1", *flags])
    with pytest.raises(ToolError, match=re.escape(refusal)):
        check_args(args)


def test_the_share_groups_tool_takes_what_kafkas_takes() -> None:
    from keeperless.cli.parser import build_parser
    from keeperless.tools.share_groups import check_args

    for flags in (["--describe", "--all-groups", "--members", "--verbose"],
                  ["--describe", "--group", "g", "--group", "h", "--state", "--timeout", "500"],
                  ["--list", "--state", "Stable,Empty"], ["--delete", "--all-groups"],
                  ["--reset-offsets", "--group", "g", "--all-topics", "--to-latest",
                   "--dry-run"],
                  ["--reset-offsets", "--group", "g", "--to-latest", "--execute"]):  # fmt: skip
        check_args(build_parser().parse_args(["share-groups", "--bootstrap-server", "h:1", *flags]))


def test_reset_offsets_to_offset_0_and_shift_by_0_are_given() -> None:
    """--to-offset 0 and --shift-by 0 are specs like any other (0 == False in Python:
    they were taken for not given, so both tools refused them, found by a new user)."""
    from keeperless.cli.parser import build_parser
    from keeperless.tools import groups, share_groups

    parser = build_parser()
    for tool, check in (("consumer-groups", groups.check_args),
                        ("share-groups", share_groups.check_args)):  # fmt: skip
        for spec in (["--to-offset", "0"], ["--shift-by", "0"], ["--to-offset", "5"]):
            args = parser.parse_args([tool, "--bootstrap-server", "h:1", "--reset-offsets",
                                      "--group", "g", "--topic", "t", "--dry-run",
                                      *spec])  # fmt: skip
            check(args)  # no ToolError
        args = parser.parse_args([tool, "--bootstrap-server", "h:1", "--reset-offsets",
                                  "--group", "g", "--topic", "t", "--dry-run"])  # fmt: skip
        with pytest.raises(ToolError, match="takes exactly one of these options"):
            check(args)


def test_a_broker_that_does_not_answer_in_time_is_a_timeout_not_unreachable() -> None:
    """kafka-share-groups.sh --timeout 1 against a live broker said it could not reach
    it (found by a fresh-eyes trial); Kafka's tools say TimeoutException."""
    import socket

    from keeperless.protocol.apis import ApiKey
    from keeperless.tools.client import call

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()  # accepts, never answers
        port = server.getsockname()[1]
        with pytest.raises(ToolError, match="TimeoutException: no answer from 127.0.0.1:.* "
                                            "within 200 ms"):  # fmt: skip
            call([("127.0.0.1", port)], ApiKey.API_VERSIONS, 3,
                 {"client_software_name": "t", "client_software_version": "1"}, 0.2)  # fmt: skip
