"""Offset JSON files of kafka-delete-records.sh: version 1 only, as Kafka's."""

from __future__ import annotations

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
    assert _assignment(m) == "a:0;q3:0,1,2"


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
                                      "--group", "g", "--topic", "t", *spec])  # fmt: skip
            check(args)  # no ToolError
        args = parser.parse_args([tool, "--bootstrap-server", "h:1", "--reset-offsets",
                                  "--group", "g", "--topic", "t"])  # fmt: skip
        with pytest.raises(ToolError, match="takes exactly one of these options"):
            check(args)
