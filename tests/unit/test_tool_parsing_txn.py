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
