"""Request events and the one sink seam every telemetry consumer plugs into.

Contract:

- The proxy emits exactly one event per request: a flat mapping of counters,
  labels and durations (see :data:`EVENT_FIELDS`). Events never carry message
  contents, credentials or header values; the proxy builds them from reports
  and counts only.
- A sink is anything with ``emit(event)``. Built-in sinks use the same seam:
  :class:`LogSink` (one JSON log line), :class:`~ctxwarden.telemetry.metrics.MetricsSink`
  (Prometheus) and :class:`MemoryRecorder` (tests assert on what was recorded).
- A sink that raises does not fail the request: :class:`Fanout` logs and moves on.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "EVENT_FIELDS", "MAX_COUNT", "Fanout", "LogSink", "MemoryRecorder", "Sink", "count",
    "model_label",
]  # fmt: skip

#: The fields a request event may carry (documentation and a guard in tests).
EVENT_FIELDS: frozenset[str] = frozenset(
    {
        "event", "level", "route", "api", "method", "mode", "rollout_reason",
        "canary_bucket", "canary_percent", "session", "tenant", "model", "stream",
        "status", "error_type", "error_at", "bytes_before", "bytes_after", "tokens_before",
        "tokens_after", "tokens_saved", "saving_percent", "transforms", "rollbacks",
        "fallbacks", "fallback_reason", "band", "pressure", "references",
        "recall_injected", "recall_rounds", "recall_calls", "recall_errors",
        "upstream_status", "upstream_ms", "overhead_ms", "condense_ms", "total_ms",
        "usage_prompt_tokens", "usage_cached_tokens", "usage_completion_tokens",
        "client_disconnected", "stream_cut", "cache_breakpoint", "compaction_step",
        "thinking_dropped", "window_source",
    }
)  # fmt: skip

_log = logging.getLogger("ctxwarden.telemetry")

MAX_COUNT = 2**53
"""The largest count a sink takes (a float counter is exact up to it); a figure past it,
or below 0, comes from a misbehaving upstream (its ``usage``) and is dropped."""


def count(value: Any) -> int | None:
    """``value`` as a count a sink may add (an ``int``, not a ``bool``, in
    ``0..MAX_COUNT``; an integral float too), else ``None``."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    return None


MODEL_OTHER = "other"
"""What an event says for a model string that is no plain model name (:func:`model_label`)."""

_MODEL_NAME = re.compile(r"[A-Za-z0-9._:/@+\-]{1,128}")


def model_label(value: Any) -> str | None:
    """The client's ``model`` as an event may carry it: a plain model name (letters,
    digits and ``. _ : / @ + -``, at most 128 characters: every provider's names,
    Bedrock ARNs and fine-tune ids included) as sent; any other string (longer, with
    spaces, control characters, a query string: it may hold a secret, and a log line
    must stay short) is ``"other"``, never quoted in part; a non-string is ``None``."""
    if not isinstance(value, str):
        return None
    return value if _MODEL_NAME.fullmatch(value) else MODEL_OTHER


@runtime_checkable
class Sink(Protocol):
    """Receives one event per request; must not block for long."""

    def emit(self, event: Mapping[str, Any]) -> None: ...


class MemoryRecorder:
    """Keeps every event in a list (for tests and the in-process demo)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def emit(self, event: Mapping[str, Any]) -> None:
        self.events.append(dict(event))

    def last(self, **match: Any) -> dict[str, Any]:
        """The newest event whose fields equal ``match`` (KeyError when none)."""
        for item in reversed(self.events):
            found: dict[str, Any] = item
            if all(found.get(k) == v for k, v in match.items()):
                return found
        raise KeyError(f"no event matching {match}")

    def clear(self) -> None:
        self.events.clear()


_LEVELS = {"error": logging.ERROR, "warning": logging.WARNING}


class LogSink:
    """One log record per event on logger ``ctxwarden.requests``.

    The event rides on the record as ``record.ctx`` so that
    :class:`~ctxwarden.telemetry.logs.JsonFormatter` writes it as one JSON line.
    Level is the event's: ``error`` (store failures, proxy faults), ``warning`` (load
    signals, refused requests), else ``info``.
    """

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger("ctxwarden.requests")

    def emit(self, event: Mapping[str, Any]) -> None:
        level = _LEVELS.get(str(event.get("level")), logging.INFO)
        if self.logger.isEnabledFor(level):
            self.logger.log(level, "request", extra={"ctx": dict(event)})


class Fanout:
    """Emits to several sinks; one failing sink never affects the others."""

    def __init__(self, sinks: Iterable[Sink] = ()) -> None:
        self.sinks: list[Sink] = list(sinks)

    def add(self, sink: Sink) -> None:
        self.sinks.append(sink)

    def emit(self, event: Mapping[str, Any]) -> None:
        for sink in self.sinks:
            try:
                sink.emit(event)
            except Exception:  # telemetry must never fail a request
                _log.exception("telemetry sink %s failed", type(sink).__name__)
