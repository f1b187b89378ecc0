"""A node raises its soft open-file limit to the hard one at start, as the JVM does for
Kafka: a broker keeps a descriptor per segment and per connection."""

from __future__ import annotations

import resource

import pytest

from keeperless.runtime.open_files import raise_open_file_limit


def test_the_soft_limit_is_raised_to_the_hard_one(caplog: pytest.LogCaptureFixture) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard < 256:
        pytest.skip(f"a hard limit of {hard} cannot be tested here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard // 2, hard))
    try:
        with caplog.at_level("INFO"):
            assert raise_open_file_limit() == hard
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
        assert f"from {hard // 2} to {hard}" in caplog.text
        assert raise_open_file_limit() == hard  # already there: nothing to do
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
