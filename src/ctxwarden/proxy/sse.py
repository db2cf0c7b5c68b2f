"""Server-sent events: an incremental splitter and provider usage extraction.

The splitter never holds more than one incomplete event; complete events come out
with their raw bytes (so pass-through can forward them unchanged), their ``event``
name and their ``data`` text. Usage extraction understands the three APIs' usage
objects (streaming and not) and normalizes them to prompt / cached / completion
tokens, where Anthropic's prompt total includes cache reads and cache writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["SSEEvent", "SSESplitter", "Usage", "encode_event", "ends_stream", "is_error_event"]

_BOUNDARY = re.compile(rb"\r\n\r\n|\n\n|\r\r")
MAX_EVENT_BYTES = 16 * 1024 * 1024


@dataclass(slots=True)
class SSEEvent:
    """One complete event: raw bytes (with the blank line), name and data."""

    raw: bytes
    name: str | None
    data: str

    def json(self) -> Any:
        """The data parsed as JSON, or ``None`` (``[DONE]``, empty or not JSON)."""
        if not self.data or self.data == "[DONE]":
            return None
        try:
            return orjson.loads(self.data)
        except orjson.JSONDecodeError:
            return None


_FINAL_TYPES = ("message_stop", "response.completed", "response.incomplete", "response.failed")
"""The types of the events that end a Messages or a Responses stream."""


def is_error_event(event: SSEEvent) -> bool:
    """Whether ``event`` is an upstream's error event inside a stream it answered 200:
    Messages' and Responses' ``error`` type (or an event named ``error``), a Chat chunk
    with an ``error`` object. Parsed only when its data mentions ``"error"``."""
    if event.name == "error":
        return True
    if '"error"' not in event.data:
        return False
    obj = event.json()
    return isinstance(obj, dict) and (obj.get("type") == "error" or bool(obj.get("error")))


def ends_stream(event: SSEEvent) -> bool:
    """Whether ``event`` is the last one of an answer's stream, after which a client has
    the whole answer and may close the connection (the openai SDK does so right after
    ``[DONE]``, before the body ends): Chat Completions' ``data: [DONE]``, Messages'
    ``message_stop``, a Responses ``response.completed``, ``response.incomplete`` or
    ``response.failed``. A named event is judged by its name; an unnamed one is parsed
    only when its data holds one of those types."""
    if event.data == "[DONE]":
        return True
    if event.name is not None:
        return event.name in _FINAL_TYPES
    if not any(kind in event.data for kind in _FINAL_TYPES):
        return False
    obj = event.json()
    return isinstance(obj, dict) and str(obj.get("type")) in _FINAL_TYPES


def encode_event(data: Any, name: str | None = None) -> bytes:
    """Serialize one event (``data`` is JSON-encoded unless it is ``bytes``/``str``)."""
    payload = (
        data
        if isinstance(data, bytes)
        else (data.encode() if isinstance(data, str) else orjson.dumps(data))
    )
    head = f"event: {name}\n".encode() if name else b""
    return head + b"data: " + payload + b"\n\n"


class SSESplitter:
    """Feed bytes, get complete events (see module docstring)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._scanned = 0
        """Bytes of the buffer already searched for a boundary (none there): a chunk
        costs a search of itself, not of the whole incomplete event again."""

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        buffer = self._buffer
        buffer += chunk
        events: list[SSEEvent] = []
        taken = 0
        # a boundary is at most 4 bytes: one ending in the new chunk starts at most 3
        # bytes before it
        search_from = max(0, self._scanned - 3)
        while True:
            match = _BOUNDARY.search(buffer, search_from)
            if match is None:
                break
            raw = bytes(buffer[taken : match.end()])
            taken = search_from = match.end()
            event = _parse(raw)
            if event is not None:
                events.append(event)
        del buffer[:taken]
        self._scanned = len(buffer)
        if len(buffer) > MAX_EVENT_BYTES:  # hostile or broken stream: stop parsing
            buffer.clear()
            self._scanned = 0
        return events

    def flush(self) -> list[SSEEvent]:
        """The trailing event of a stream that did not end with a blank line."""
        raw = bytes(self._buffer)
        self._buffer.clear()
        self._scanned = 0
        event = _parse(raw + b"\n\n") if raw.strip() else None
        return [event] if event else []


def _parse(raw: bytes) -> SSEEvent | None:
    name: str | None = None
    data: list[str] = []
    for line in raw.decode("utf-8", "replace").splitlines():
        if line.startswith(":") or not line:
            continue
        key, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if key == "event":
            name = value
        elif key == "data":
            data.append(value)
    if name is None and not data:
        return SSEEvent(raw, None, "") if raw.strip() else None
    return SSEEvent(raw, name, "\n".join(data))


@dataclass(slots=True)
class Usage:
    """Provider-reported usage, summed over recall rounds."""

    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    _seen: set[str] = field(default_factory=set)

    def observe(self, obj: Any) -> None:
        """Take usage from a response body or a stream event payload (any API)."""
        if not isinstance(obj, dict):
            return
        usage = obj.get("usage")
        if not isinstance(usage, dict):
            inner = obj.get("response") or obj.get("message")
            usage = inner.get("usage") if isinstance(inner, dict) else None
        if isinstance(usage, dict):
            self._take(usage)

    def _take(self, u: dict[str, Any]) -> None:
        def num(value: Any) -> int:
            return value if isinstance(value, int) and not isinstance(value, bool) else 0

        if "prompt_tokens" in u or "input_tokens" in u:
            details = u.get("prompt_tokens_details") or u.get("input_tokens_details") or {}
            cached = num(details.get("cached_tokens")) if isinstance(details, dict) else 0
            cached += num(u.get("cache_read_input_tokens"))
            prompt = num(u.get("prompt_tokens")) + num(u.get("input_tokens"))
            prompt += num(u.get("cache_read_input_tokens"))
            prompt += num(u.get("cache_creation_input_tokens"))
            if prompt:
                self.prompt_tokens = max(self.prompt_tokens or 0, prompt)
                self.cached_tokens = max(self.cached_tokens or 0, cached)
        out = num(u.get("completion_tokens")) + num(u.get("output_tokens"))
        if out:
            self.completion_tokens = max(self.completion_tokens or 0, out)

    def round_done(self, totals: Usage) -> None:
        """Add this round's figures into ``totals`` (one :class:`Usage` per round)."""
        for name in ("prompt_tokens", "cached_tokens", "completion_tokens"):
            mine = getattr(self, name)
            if mine is not None:
                setattr(totals, name, (getattr(totals, name) or 0) + mine)
