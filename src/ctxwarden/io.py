"""Reading requests and sessions from files (plain or gzip JSON, or ``-`` for stdin)."""

from __future__ import annotations

import gzip
import sys
import zlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from ctxwarden.errors import MalformedRequest, ReplayError

__all__ = [
    "Session",
    "bundled_sessions",
    "guess_api",
    "load_json",
    "load_request",
    "load_session",
    "session_requests",
]


def read_bytes(source: str | Path) -> bytes:
    """A file's bytes (``-``: standard input), gunzipped when they are gzip data; a
    missing, unreadable or broken file is a :class:`ReplayError` naming it."""
    if str(source) == "-":
        return sys.stdin.buffer.read()
    path = Path(source)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ReplayError(f"{path}: no such file") from None
    except OSError as exc:
        raise ReplayError(f"{path}: {exc.strerror}") from exc
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise ReplayError(f"{path}: broken gzip data ({exc})") from exc
    return data


def load_json(source: str | Path) -> Any:
    """Parse a JSON file; invalid JSON is a :class:`MalformedRequest` at the root."""
    data = read_bytes(source)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise MalformedRequest(f"{source}: not JSON ({exc})", ()) from None


def guess_api(request: Any) -> str:
    """Best guess of a request's API from its shape (default ``openai.chat``)."""
    if not isinstance(request, dict):
        return "openai.chat"
    if "input" in request or "instructions" in request or "previous_response_id" in request:
        return "openai.responses"
    if "system" in request:
        return "anthropic.messages"
    for message in request.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            kinds = {b.get("type") for b in content if isinstance(b, dict)}
            if kinds & {"tool_use", "tool_result", "thinking", "redacted_thinking"}:
                return "anthropic.messages"
    return "openai.chat"


@dataclass(frozen=True, slots=True)
class Session:
    """A recorded agent session: an OpenAI chat message list and where it came from."""

    id: str
    model: str | None
    messages: list[dict[str, Any]]
    tools: list[Any] | None = None
    source: str = ""


def _is_session(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("messages"), list)
        and ("source" in obj or "agent" in obj or "meta" in obj)
    )


def load_session(source: str | Path) -> Session:
    """A session file (``{id, model, messages, ...}`` or a bare message list)."""
    obj = load_json(source)
    if isinstance(obj, list):
        return Session(id=Path(str(source)).name, model=None, messages=obj)
    if not isinstance(obj, dict) or not isinstance(obj.get("messages"), list):
        raise ReplayError(f"{source}: not a session (no messages list)")
    return Session(
        id=str(obj.get("id") or Path(str(source)).name),
        model=obj.get("model"),
        messages=obj["messages"],
        tools=obj.get("tools"),
        source=str(obj.get("source", "")),
    )


def session_requests(session: Session) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """One ``(request, next_action)`` per assistant message, in order."""
    out = []
    for k, message in enumerate(session.messages):
        if isinstance(message, dict) and message.get("role") == "assistant" and k > 0:
            request: dict[str, Any] = {
                "model": session.model or "unknown",
                "messages": session.messages[:k],
            }
            if session.tools:
                request["tools"] = session.tools
            out.append((request, message))
    return out


def load_request(source: str | Path) -> Any:
    """A request body; a session file gives its last real request."""
    obj = load_json(source)
    if _is_session(obj):
        session = load_session(source)
        pairs = session_requests(session)
        if pairs:
            return pairs[-1][0]
        return {"model": session.model or "unknown", "messages": session.messages}
    return obj


def bundled_sessions() -> list[Path]:
    """The real sessions shipped in the package (see ``data/sessions/README.md``)."""
    folder = resources.files("ctxwarden.data").joinpath("sessions")
    return sorted(Path(str(p)) for p in folder.iterdir() if p.name.endswith(".json.gz"))
