"""Sinks (s7): an unwritable log stream or a failing sink never reaches the request."""

from __future__ import annotations

import errno
import io
import logging
from collections.abc import Iterator

import pytest

from ctxwarden.telemetry import Fanout, JsonFormatter, LogSink, MemoryRecorder


class _FullDisk(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


class _Broken:
    def emit(self, event: object) -> None:
        raise RuntimeError("sink down")


@pytest.fixture
def unwritable_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger("ctxwarden.test-unwritable")
    handler = logging.StreamHandler(_FullDisk())
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    raise_exceptions, logging.raiseExceptions = logging.raiseExceptions, False
    yield logger
    logging.raiseExceptions = raise_exceptions
    logger.removeHandler(handler)


def test_an_unwritable_log_stream_and_a_failing_sink_do_not_raise(
    unwritable_logger: logging.Logger,
) -> None:
    recorder = MemoryRecorder()
    fanout = Fanout([LogSink(unwritable_logger), _Broken(), recorder])
    for status in (200, 502):
        fanout.emit({"event": "request", "route": "chat", "status": status, "level": "error"})
    assert [e["status"] for e in recorder.events] == [200, 502]


@pytest.mark.parametrize(
    ("level", "written"), [("error", "error"), ("warning", "warning"), ("info", "info"),
                           (None, "info")],
)  # fmt: skip
def test_a_log_line_has_the_level_of_its_event(level: str | None, written: str) -> None:
    stream = io.StringIO()
    logger = logging.getLogger(f"ctxwarden.test-levels-{level}")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)  # a warning line is kept at --log-level warning
    logger.propagate = False
    try:
        LogSink(logger).emit({"event": "request", "status": 400, "level": level})
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    if written == "info":
        assert lines == []
    else:
        assert len(lines) == 1 and f'"level":"{written}"' in lines[0]
