"""The adapter seam: one module per wire format, each with ``parse`` and ``render``.

``parse(wire) -> Conversation`` validates the shape it relies on and raises
:class:`~ctxwarden.errors.MalformedRequest` naming the JSON path of the first problem;
``render(conversation) -> wire`` writes edited text back (see
:mod:`ctxwarden.model.render`). Shapes an adapter does not know become opaque parts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from ctxwarden.errors import MalformedRequest
from ctxwarden.model.conversation import Conversation
from ctxwarden.model.parts import Path

__all__ = [
    "Adapter",
    "check_pairing",
    "expect",
    "expect_object",
    "json_text",
    "optional_str",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Adapter:
    """One wire format: its name, its parser and its renderer."""

    api: str
    parse: Callable[[Any], Conversation]
    render: Callable[[Conversation], dict[str, Any]]


_TYPE_NAMES: dict[type, str] = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "an integer",
}


def expect(value: Any, kind: type[T], path: Path) -> T:
    """``value`` if it is a ``kind``, else a :class:`MalformedRequest` at ``path``."""
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    got = type(value).__name__ if value is not None else "null"
    raise MalformedRequest(f"expected {_TYPE_NAMES.get(kind, kind.__name__)}, got {got}", path)


def expect_object(value: Any, path: Path) -> dict[str, Any]:
    """``value`` as a JSON object, else a :class:`MalformedRequest` at ``path``."""
    return expect(value, dict, path)


def json_text(value: Any) -> str:
    """``value`` as compact JSON text (for counting opaque parts), ``""`` if not JSON."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return ""


def optional_str(obj: dict[str, Any], key: str, path: Path) -> str | None:
    """``obj[key]`` if present and a string; ``None`` if absent or null."""
    value = obj.get(key)
    if value is None:
        return None
    return expect(value, str, (*path, key))


def check_pairing(conversation: Conversation, *, allow_unknown_results: bool = False) -> None:
    """Every tool result answers a call made earlier in the conversation.

    ``allow_unknown_results`` is for continuations (``previous_response_id``) whose
    calls live upstream. Raises :class:`MalformedRequest` at the result's call id.
    """
    if allow_unknown_results:
        return
    seen: set[str] = set()
    for message in conversation.messages:
        for call in message.tool_calls:
            seen.add(call.call_id)
        for result in message.tool_results:
            if result.call_id not in seen:
                raise MalformedRequest(
                    f"tool result without its call (id {result.call_id!r})",
                    (*result.path, _CALL_ID_KEY.get(conversation.api, "call_id")),
                )


_CALL_ID_KEY = {
    "openai.chat": "tool_call_id",
    "openai.responses": "call_id",
    "anthropic.messages": "tool_use_id",
}
