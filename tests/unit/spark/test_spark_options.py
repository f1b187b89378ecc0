"""Spark source/sink options: Spark's Kafka names, defaults and refusals (no session)."""

from __future__ import annotations

import pytest

from keeperless.spark.options import (
    OptionError,
    format_offsets,
    from_checkpoint,
    parse_offsets_json,
    parse_sink,
    parse_source,
    rate_limit,
    to_checkpoint,
)

BS = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_defaults_follow_spark_for_batch_and_streaming():
    batch = parse_source({**BS, "subscribe": "a, b"}, streaming=False)
    assert batch.subscription.topics == ("a", "b")
    assert (batch.starting.kind, batch.ending.kind) == ("earliest", "latest")
    assert batch.fail_on_data_loss
    assert not batch.include_headers
    streaming = parse_source({**BS, "subscribePattern": "t-.*"}, streaming=True)
    assert streaming.starting.kind == "latest"
    assert streaming.subscription.matches("t-1")
    assert not streaming.subscription.matches("x")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "a"}, "'kafka.bootstrap.servers' must be specified"),
        ({**BS}, "Exactly one of the options 'subscribe', 'subscribePattern' or 'assign'"),
        ({**BS, "subscribe": "a", "assign": '{"a":[0]}'}, "(given: subscribe, assign)"),
        ({**BS, "assign": "[0]"}, "for 'assign'"),
        ({**BS, "subscribe": "a", "startingOffsets": "latest"}, "can't be latest"),
        ({**BS, "subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, "can't be earliest"),
        ({**BS, "subscribe": "a", "startingOffsets": "{bad"}, "for 'startingOffsets'"),
        ({**BS, "subscribe": "a", "failOnDataLoss": "maybe"}, "'failOnDataLoss' must be"),
        ({**BS, "subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "startingOffsets"),
        ({**BS, "subscribePattern": "("}, "Invalid subscribePattern"),
    ],
)
def test_bad_options_name_what_is_wrong(options, message):
    with pytest.raises(OptionError, match=None) as info:
        parse_source(options, streaming=False)
    assert message in str(info.value)


def test_streaming_refuses_ending_offsets_and_takes_max_offsets_per_trigger():
    with pytest.raises(OptionError, match="endingOffsets"):
        parse_source({**BS, "subscribe": "a", "endingOffsets": "latest"}, streaming=True)
    opts = parse_source({**BS, "subscribe": "a", "maxOffsetsPerTrigger": "100"}, streaming=True)
    assert opts.max_offsets_per_trigger == 100
    with pytest.raises(OptionError, match="positive integer"):
        parse_source({**BS, "subscribe": "a", "maxOffsetsPerTrigger": "0"}, streaming=True)


def test_kafka_options_pass_through_without_the_prefix():
    opts = parse_source(
        {
            **BS,
            "subscribe": "a",
            "kafka.client.id": "me",
            "kafka.default.api.timeout.ms": "1500",
            "kafka.max.poll.records": "5",
        },
        streaming=False,
    )
    assert opts.client_config == {"client.id": "me"}
    assert opts.api_timeout_ms == 1500
    sink = parse_sink({**BS, "topic": "out", "kafka.acks": "all"})
    assert (sink.topic, sink.client_config) == ("out", {"acks": "all"})
    with pytest.raises(OptionError, match="key.serializer"):
        parse_sink({**BS, "kafka.key.serializer": "x"})


def test_offsets_json_round_trips_in_the_kafka_source_shape():
    offsets = parse_offsets_json('{"a":{"0":23,"1":-1},"b":{"0":-2}}', "startingOffsets")
    assert offsets == {("a", 0): 23, ("a", 1): -1, ("b", 0): -2}
    assert format_offsets(offsets) == '{"a":{"0":23,"1":-1},"b":{"0":-2}}'
    assert from_checkpoint(to_checkpoint(offsets)) == offsets


def test_rate_limit_spreads_by_backlog_like_spark():
    start = {("a", 0): 0, ("a", 1): 0}
    latest = {("a", 0): 13, ("a", 1): 12}
    assert rate_limit(start, latest, 100) == latest
    limited = rate_limit(start, latest, 10)
    assert limited == {("a", 0): 5, ("a", 1): 4}  # 5.2 and 4.8 rounded down
    # a share below one rounds up, so a small partition still advances
    tiny = rate_limit({("a", 0): 0, ("b", 0): 0}, {("a", 0): 1000, ("b", 0): 1}, 10)
    assert tiny == {("a", 0): 9, ("b", 0): 1}
    # partitions new to the query start where their backlog starts
    assert rate_limit({}, {("c", 0): 4}, 10) == {("c", 0): 4}


def test_registering_the_source_does_not_end_a_python_c_process() -> None:
    """pyspark's Spark Connect module calls sys.exit(0) on import when its dependencies
    (grpc) are missing and __main__ has no file - as under ``python -c``, an embedded
    interpreter or a pytest-xdist worker. Registering the data source imported it, so a
    ``python -c`` job ended silently, with status 0, before its first write."""
    import subprocess
    import sys

    code = (
        "from keeperless.spark import _accept_default_save_mode\n"
        "_accept_default_save_mode()\n"
        "print('still running')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "still running" in out.stdout, out.stderr
