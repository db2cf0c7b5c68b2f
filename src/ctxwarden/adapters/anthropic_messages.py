"""Anthropic Messages (``POST /v1/messages``).

``system`` is a string or text blocks; message content is a string or blocks:
``text``, ``image`` / ``document``, ``tool_use``, ``tool_result`` (string or nested
blocks, ``is_error``), ``thinking`` (with ``signature``) and ``redacted_thinking``.
``cache_control`` and every other field stay in the wire untouched. A ``tool_use``
``input`` object is its call's arguments (as compact JSON): an old call's may be
condensed, written back as an object.
"""

from __future__ import annotations

from typing import Any

from ctxwarden.adapters.base import (
    Adapter,
    ItemMemo,
    check_pairing,
    expect,
    expect_key,
    expect_object,
    expect_text_or_list,
    has_non_finite,
    item_memo,
    optional_str,
    parse_items,
    written_exactly,
)
from ctxwarden.adapters.base import (
    json_text as _json,
)
from ctxwarden.model.conversation import Conversation, Message
from ctxwarden.model.parts import (
    ContentPart,
    MediaPart,
    OpaquePart,
    Part,
    Path,
    ReasoningPart,
    SafetyClass,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from ctxwarden.model.render import render_conversation

__all__ = ["ADAPTER", "parse", "render"]

_MEDIA_TYPES = {"image": "image", "document": "file", "search_result": "file"}


_MEMO: ItemMemo = item_memo()
"""Items parsed before (see :func:`~ctxwarden.adapters.base.parse_items`)."""


def _simple_block(
    block: dict[str, Any],
    path: Path,
    text_safety: SafetyClass = SafetyClass.LOSSLESS_TRANSFORMABLE,
) -> ContentPart:
    kind = block.get("type")
    if kind == "text" and not block.get("citations"):  # cited text stays as it is
        text = expect_key(block, "text", str, path)
        return TextPart(text=text, path=(*path, "text"), safety=text_safety)
    if isinstance(kind, str) and kind in _MEDIA_TYPES:
        return MediaPart(media_type=_MEDIA_TYPES[kind], path=path)
    return OpaquePart(wire_type=str(kind), path=path, raw_json=_json(block))


def _result_content(content: Any, path: Path) -> tuple[ContentPart, ...]:
    if content is None:
        return ()
    if isinstance(content, str):
        return (TextPart(text=content, path=path),)
    blocks = expect_text_or_list(content, path)
    return tuple(
        _simple_block(expect_object(b, (*path, j)), (*path, j)) for j, b in enumerate(blocks)
    )


def _inexact_input(item: Any) -> bool:
    """Whether a message holds a ``tool_use`` whose ``input`` orjson cannot write
    exactly (a NaN or an infinity in it: see
    :func:`~ctxwarden.adapters.base.parse_items`); a look at the blocks' types, not a
    walk of the message."""
    content = item.get("content") if isinstance(item, dict) else None
    if not isinstance(content, list):
        return False
    return any(
        isinstance(block, dict)
        and block.get("type") == "tool_use"
        and isinstance(block.get("input"), dict)
        and has_non_finite(block["input"])
        for block in content
    )


def _block(value: Any, path: Path) -> Part:
    block = expect_object(value, path)
    kind = block.get("type")
    if kind == "tool_use":
        value = block.get("input", {})
        arguments = _json(value)  # "" past orjson (a huge integer)
        editable = isinstance(value, dict) and bool(arguments) and written_exactly(value, arguments)
        return ToolCallPart(
            call_id=expect_key(block, "id", str, path),
            name=expect_key(block, "name", str, path),
            arguments=arguments,
            path=path,
            arguments_path=(*path, "input") if editable else None,
            arguments_object=editable,
        )
    if kind == "tool_result":
        is_error = block.get("is_error")  # null: not given, as the SDKs send unset fields
        return ToolResultPart(
            call_id=expect_key(block, "tool_use_id", str, path),
            content=_result_content(block.get("content"), (*path, "content")),
            is_error=is_error is not None and expect(is_error, bool, (*path, "is_error")),
            path=path,
        )
    if kind == "thinking":
        text = expect_key(block, "thinking", str, path)
        return ReasoningPart(text=text, path=path, signed=block.get("signature") is not None)
    if kind == "redacted_thinking":
        return ReasoningPart(text="", path=path, signed=True, redacted=True)
    return _simple_block(block, path)


def _message(value: Any, path: Path) -> Message:
    msg = expect_object(value, path)
    role = expect_key(msg, "role", str, path)
    content = msg.get("content")
    content_path = (*path, "content")
    parts: tuple[Part, ...]
    if content is None and role == "system":
        parts = ()  # a (beta) system message may carry settings alone: no content
    elif isinstance(content, str):
        parts = (TextPart(text=content, path=content_path),)
    else:
        blocks = expect_text_or_list(content, content_path)
        parts = tuple(_block(b, (*content_path, j)) for j, b in enumerate(blocks))
    return Message(role=role, parts=parts, path=path)


def _system(value: Any) -> tuple[Part, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (TextPart(text=value, path=("system",)),)
    blocks = expect_text_or_list(value, ("system",))
    return tuple(
        _simple_block(expect_object(b, ("system", j)), ("system", j)) for j, b in enumerate(blocks)
    )


def _tool_names(tools: Any) -> tuple[str, ...]:
    if not isinstance(tools, list):
        return ()
    return tuple(t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str))


def parse(wire: Any) -> Conversation:
    """Parse a Messages request body (see :mod:`ctxwarden.adapters.base`)."""
    body = expect_object(wire, ())
    messages = expect_key(body, "messages", list, ())
    parsed = parse_items(messages, "messages", _message, _MEMO, _inexact_input)
    conversation = Conversation(
        api="anthropic.messages",
        wire=body,
        messages=parsed.messages,
        item_hashes=parsed.hashes,
        item_sizes=parsed.sizes,
        system=_system(body.get("system")),
        model=optional_str(body, "model", ()),
        tool_names=_tool_names(body.get("tools")),
    )
    check_pairing(conversation)
    return conversation


def render(conversation: Conversation) -> dict[str, Any]:
    """Render a Messages request (edited texts written back, rest exact)."""
    return render_conversation(conversation)


ADAPTER = Adapter(api="anthropic.messages", parse=parse, render=render)
