"""API-independent views of wire requests, as the replay measures them.

The replay looks at requests the way a provider does: a *header* (every top-level
field except the message list) followed by the message items in order. The three
APIs differ only in where the item list lives and how a tool output is marked:

- ``openai.chat``: ``messages``; an item with role ``tool`` (or ``function``);
- ``openai.responses``: ``input`` (a string counts as one user item); an item whose
  ``type`` ends in ``_output`` (``function_call_output``, ...);
- ``anthropic.messages``: ``messages``; a ``tool_result`` content block.

Text is collected from string leaves. Structural keys (roles, types, ids,
signatures, encrypted content, cache markers) are not text; tool-call ``arguments``
are JSON text and are decoded so that the strings inside them count.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from ctxwarden.adapters.openai_responses import is_model_item

__all__ = [
    "MESSAGE_KEYS",
    "action_text",
    "decoded_strings",
    "header_of",
    "item_role",
    "item_skeleton",
    "item_texts",
    "items_of",
]

MESSAGE_KEYS = {
    "openai.chat": "messages",
    "openai.responses": "input",
    "anthropic.messages": "messages",
}

_SKIP_KEYS = frozenset(
    {
        "role",
        "type",
        "id",
        "call_id",
        "tool_call_id",
        "tool_use_id",
        "signature",
        "encrypted_content",
        "status",
        "cache_control",
        "media_type",
        "detail",
    }
)
_MEDIA_TYPES = frozenset(
    {"image", "document", "image_url", "input_image", "input_file", "input_audio", "file"}
)
MEDIA_PLACEHOLDER = "\x00media\x00"
"""Stands for an embedded image or file; the counter prices it as a flat media item."""


def items_of(request: Any, api: str) -> list[Any]:
    """The message items of ``request`` (never ``None``; a bare string input is one item)."""
    if not isinstance(request, dict):
        return []
    value = request.get(MESSAGE_KEYS.get(api, "messages"))
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return []


def header_of(request: Any, api: str) -> dict[str, Any]:
    """Every top-level field of ``request`` except its message list."""
    if not isinstance(request, dict):
        return {}
    key = MESSAGE_KEYS.get(api, "messages")
    return {k: v for k, v in request.items() if k != key}


def item_role(item: Any) -> str:
    """The role an item plays: its wire role, ``tool`` for outputs, ``assistant`` for calls."""
    if not isinstance(item, dict):
        return "user"
    role = item.get("role")
    if isinstance(role, str):
        return role
    kind = str(item.get("type", ""))
    if kind.endswith("_output"):
        return "tool"
    if kind.endswith("_call") or is_model_item(item):  # reasoning too
        return "assistant"  # the engine's reading too: it never protects less than this
    return kind or "unknown"


def _is_tool_item(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    return item.get("role") in ("tool", "function") or str(item.get("type", "")).endswith("_output")


def _leaves(value: Any, tool: bool, out: list[tuple[bool, str]]) -> None:
    if isinstance(value, str):
        out.append((tool, value))
    elif isinstance(value, list):
        for v in value:
            _leaves(v, tool, out)
    elif isinstance(value, dict):
        if str(value.get("type")) in _MEDIA_TYPES:
            out.append((tool, MEDIA_PLACEHOLDER))
            return
        inner_tool = tool or value.get("type") == "tool_result"
        for key, v in value.items():
            if key not in _SKIP_KEYS:
                _leaves(v, inner_tool, out)


def item_texts(item: Any) -> list[tuple[bool, str]]:
    """``(is_tool_output, text)`` for every text leaf of one item, in order."""
    out: list[tuple[bool, str]] = []
    _leaves(item, _is_tool_item(item), out)
    return out


def decoded_strings(text: str) -> Iterator[str]:
    """The string values of ``text`` read as JSON, at any depth; ``text`` itself when it
    is not JSON."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        yield text
        return
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            yield v
        elif isinstance(v, list):
            stack.extend(reversed(v))
        elif isinstance(v, dict):
            stack.extend(reversed(list(v.values())))


def action_text(action: Any) -> str:
    """All text of a next action (an assistant item, or a list of them), arguments decoded."""
    items = action if isinstance(action, list) else [action]
    texts: list[str] = []
    for item in items:
        for _, text in item_texts(item):
            if text.startswith(("{", "[")):
                texts.extend(decoded_strings(text))
            else:
                texts.append(text)
    return "\n".join(texts)


def item_skeleton(item: Any) -> tuple[tuple[str, str, str], ...]:
    """The protocol skeleton of an item: ``(kind, id, name)`` of each tool call and result."""
    if not isinstance(item, dict):
        return ()
    out: list[tuple[str, str, str]] = []
    for call in item.get("tool_calls") or ():
        if isinstance(call, dict):
            fn = call.get("function")
            name = fn.get("name", "") if isinstance(fn, dict) else ""
            out.append(("call", str(call.get("id", "")), str(name)))
    if "tool_call_id" in item:
        out.append(("result", str(item.get("tool_call_id", "")), ""))
    kind = str(item.get("type", ""))
    if kind.endswith("_call") and "call_id" in item:
        out.append(("call", str(item.get("call_id", "")), str(item.get("name", ""))))
    elif kind.endswith("_output") and "call_id" in item:
        out.append(("result", str(item.get("call_id", "")), ""))
    content = item.get("content")
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") in ("tool_use", "server_tool_use"):
                out.append(("call", str(block.get("id", "")), str(block.get("name", ""))))
            elif block.get("type") == "tool_result":
                out.append(("result", str(block.get("tool_use_id", "")), ""))
    return tuple(out)
