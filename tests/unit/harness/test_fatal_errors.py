"""The fault harness records a client's fatal error with librdkafka's reason (produce
raises only "Local: Fatal error"): the CI failure of seed 101 split gave no reason."""

from __future__ import annotations

from tests.chaos.history import History


class _Err:
    def __init__(self, fatal: bool, text: str) -> None:
        self._fatal, self._text = fatal, text

    def fatal(self) -> bool:
        return self._fatal

    def str(self) -> str:
        return self._text


def test_only_fatal_errors_are_recorded_with_their_reason() -> None:
    h = History()
    cb = h.fatal_errors("producer-1")
    cb(_Err(False, "Broker: Not leader for partition"))
    assert h.of("producer-1", "fatal") == []
    cb(_Err(True, "ProduceRequest for t [3] failed due to sequence desynchronization"))
    [e] = h.of("producer-1", "fatal")
    assert e.type == "info"
    assert "sequence desynchronization" in e.value["error"]
