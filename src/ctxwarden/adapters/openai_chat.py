"""OpenAI Chat Completions (``POST /v1/chat/completions``)."""

from __future__ import annotations

from typing import Any

from ctxwarden.adapters.base import (
    Adapter,
    ItemMemo,
    check_pairing,
    expect,
    expect_object,
    expect_text_or_list,
    item_memo,
    optional_str,
    parse_items,
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
    SafetyClass,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from ctxwarden.model.render import render_conversation

__all__ = ["ADAPTER", "parse", "render"]

_RESULT = SafetyClass.CONDENSABLE

_MEDIA_TYPES = {"image_url": "image", "input_audio": "audio", "file": "file"}


_MEMO: ItemMemo = item_memo()
"""Items parsed before (see :func:`~ctxwarden.adapters.base.parse_items`)."""


def _content_parts(
    content: Any, path: Path, text_safety: SafetyClass = SafetyClass.LOSSLESS_TRANSFORMABLE
) -> tuple[ContentPart, ...]:
    if content is None:
        return ()
    if isinstance(content, str):
        return (TextPart(text=content, path=path, safety=text_safety),)
    items = expect_text_or_list(content, path)
    parts: list[ContentPart] = []
    for j, item in enumerate(items):
        item_path = (*path, j)
        block = expect_object(item, item_path)
        kind = block.get("type")
        if kind == "text":
            text = expect(block.get("text"), str, (*item_path, "text"))
            parts.append(TextPart(text=text, path=(*item_path, "text"), safety=text_safety))
        elif isinstance(kind, str) and kind in _MEDIA_TYPES:
            parts.append(MediaPart(media_type=_MEDIA_TYPES[kind], path=item_path))
        else:
            parts.append(OpaquePart(wire_type=str(kind), path=item_path, raw_json=_json(block)))
    return tuple(parts)


def _other_call(call: dict[str, Any], call_id: str, kind: Any, path: Path) -> Part:
    """A call of another type (``custom``: ``{"custom": {"name", "input"}}``): a call
    whose id its result answers; a custom call's text ``input`` is its argument text
    (condensable in old calls, as a Responses ``custom_tool_call``'s input), any other
    kind is never rewritten (no arguments path); opaque when it names no tool."""
    body = call.get(kind) if isinstance(kind, str) else None
    if isinstance(body, dict) and isinstance(body.get("name"), str):
        raw = body.get("input", "")
        arguments = raw if isinstance(raw, str) else _json(raw)
        text_input = kind == "custom" and isinstance(raw, str) and "input" in body
        return ToolCallPart(
            call_id=call_id, name=body["name"], arguments=arguments, path=path,
            arguments_path=(*path, kind, "input") if text_input else None,
        )  # fmt: skip
    return OpaquePart(wire_type=str(kind), path=path, raw_json=_json(call))


def _tool_calls(value: Any, path: Path) -> list[Part]:
    calls: list[Part] = []
    for j, item in enumerate(expect(value, list, path)):
        item_path = (*path, j)
        call = expect_object(item, item_path)
        call_id = expect(call.get("id"), str, (*item_path, "id"))
        function = call.get("function")
        kind = call.get("type", "function")
        if kind != "function":
            calls.append(_other_call(call, call_id, kind, item_path))
            continue
        # a function call without its function is malformed here, where it is (its
        # result would otherwise be blamed for lacking a call)
        fn = expect_object(function, (*item_path, "function"))
        name = expect(fn.get("name"), str, (*item_path, "function", "name"))
        arguments = fn.get("arguments", "")
        args_path: Path | None = (*item_path, "function", "arguments")
        if not isinstance(arguments, str):
            arguments, args_path = str(arguments), None
        calls.append(
            ToolCallPart(
                call_id=call_id,
                name=name,
                arguments=arguments,
                path=item_path,
                arguments_path=args_path,
            )
        )
    return calls


def _message(item: Any, path: Path) -> Message:
    msg = expect_object(item, path)
    role = expect(msg.get("role"), str, (*path, "role"))
    content_path = (*path, "content")
    if role == "tool":
        call_id = expect(msg.get("tool_call_id"), str, (*path, "tool_call_id"))
        result = ToolResultPart(
            call_id=call_id,
            content=_content_parts(msg.get("content"), content_path, _RESULT),
            path=path,
        )
        return Message(role=role, parts=(result,), path=path)
    if msg.get("annotations"):  # citations index into the content: it stays as it is
        parts: list[Part] = [
            OpaquePart(wire_type="annotated", path=content_path, raw_json=_json(msg.get("content")))
        ]
    else:
        parts = list(_content_parts(msg.get("content"), content_path))
    if role == "assistant" and msg.get("tool_calls") is not None:
        parts.extend(_tool_calls(msg["tool_calls"], (*path, "tool_calls")))
    if role == "function":
        parts = [OpaquePart(wire_type="function", path=path, raw_json=_json(msg))]
    return Message(role=role, parts=tuple(parts), path=path)


def _tool_names(tools: Any) -> tuple[str, ...]:
    names: list[str] = []
    if isinstance(tools, list):
        for tool in tools:
            fn = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                names.append(fn["name"])
    return tuple(names)


def parse(wire: Any) -> Conversation:
    """Parse a Chat Completions request body (see :mod:`ctxwarden.adapters.base`)."""
    body = expect_object(wire, ())
    messages = expect(body.get("messages"), list, ("messages",))
    parsed = parse_items(messages, "messages", _message, _MEMO)
    conversation = Conversation(
        api="openai.chat",
        wire=body,
        messages=parsed.messages,
        item_hashes=parsed.hashes,
        item_sizes=parsed.sizes,
        model=optional_str(body, "model", ()),
        tool_names=_tool_names(body.get("tools")),
    )
    check_pairing(conversation)
    return conversation


def render(conversation: Conversation) -> dict[str, Any]:
    """Render a Chat Completions request (edited texts written back, rest exact)."""
    return render_conversation(conversation)


ADAPTER = Adapter(api="openai.chat", parse=parse, render=render)
