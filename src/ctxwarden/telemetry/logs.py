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

__all__ = ["JsonFormatter", "configure_json_logging"]


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
        return orjson.dumps(out, default=str).decode()


def configure_json_logging(level: int = logging.INFO, stream: Any = None) -> logging.Handler:
    """Attach one JSON handler to the ``ctxwarden`` logger (idempotent); returns it."""
    logger = logging.getLogger("ctxwarden")
    for handler in logger.handlers:
        if isinstance(handler.formatter, JsonFormatter):
            return handler
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    return handler
