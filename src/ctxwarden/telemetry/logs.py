"""A stdlib ``logging`` formatter that writes one JSON object per line.

Fields: ``ts`` (ISO 8601 UTC), ``level``, ``logger``, ``msg`` and, when the record
carries a ``ctx`` mapping (see :class:`~ctxwarden.telemetry.events.LogSink`), its
fields at the top level. Exceptions add ``exc_type`` only, never the message or
traceback text, because those can quote request contents.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

__all__ = ["LIBRARY_LOGGERS", "JsonFormatter", "configure_json_logging"]


_LINE_BREAKS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})
"""Line breaks JSON leaves unescaped but ``str.splitlines`` (and some log shippers)
split on: escaped, so a client's text (a model name) cannot break a log line."""


class JsonFormatter(logging.Formatter):
    """Format records as single-line JSON (see module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        ctx = getattr(record, "ctx", None)
        if isinstance(ctx, dict):
            out.update(ctx)
            out["level"] = record.levelname.lower()
        if record.exc_info and record.exc_info[0] is not None:
            out["exc_type"] = record.exc_info[0].__name__
        try:
            line = orjson.dumps(out, default=str).decode()
        except TypeError:  # orjson.JSONEncodeError: an integer past 64 bits, a key no str
            line = orjson.dumps(_writable(out), default=str).decode()
        return line.translate(_LINE_BREAKS)  # one line for every splitter


def _writable(value: Any, depth: int = 0) -> Any:
    """``value`` as orjson can write it: an integer past 64 bits (an upstream's usage
    figures summed past them) becomes ``None``, a key that is no string its ``str``,
    anything nested past a few levels (an event is flat) ``str``."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**64 else None
    if depth > 8:
        return str(value)
    if isinstance(value, dict):
        return {str(k): _writable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_writable(v, depth + 1) for v in value]
    return value


LIBRARY_LOGGERS = ("aiohttp", "asyncio")
"""Loggers of the libraries the proxy runs on. Their default output (Python's last-resort
stderr handler) prints tracebacks, and an aiohttp parser error's traceback quotes the raw
request bytes: headers with API keys, message text. They get the same JSON handler, at
warning level, so only the exception's type is written."""


def configure_json_logging(level: int = logging.INFO, stream: Any = None) -> logging.Handler:
    """Attach one JSON handler to the ``ctxwarden`` logger and, at warning level or
    above, to :data:`LIBRARY_LOGGERS` (idempotent); returns it."""
    logger = logging.getLogger("ctxwarden")
    for handler in logger.handlers:
        if isinstance(handler.formatter, JsonFormatter):
            return handler
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    for name in LIBRARY_LOGGERS:
        library = logging.getLogger(name)
        library.addHandler(handler)
        library.setLevel(max(level, logging.WARNING))
        library.propagate = False
    return handler
