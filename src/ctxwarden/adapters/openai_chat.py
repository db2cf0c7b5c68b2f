"""OpenAI Chat Completions (``POST /v1/chat/completions``)."""

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
            text = expect_key(block, "text", str, item_path)
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
        call_id = expect_key(call, "id", str, item_path)
        function = call.get("function")
        kind = call.get("type", "function")
        if kind != "function":
            calls.append(_other_call(call, call_id, kind, item_path))
            continue
        # a function call without its function is malformed here, where it is (its
        # result would otherwise be blamed for lacking a call)
        fn = expect_object(function, (*item_path, "function"))
        name = expect_key(fn, "name", str, (*item_path, "function"))
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
    role = expect_key(msg, "role", str, path)
    content_path = (*path, "content")
    if role == "tool":
        call_id = expect_key(msg, "tool_call_id", str, path)
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
    if role == "assistant" and msg.get("function_call") is not None:
        parts.append(_legacy_call(msg["function_call"], path))
    if role == "function":
        return _legacy_result(msg, path)
    return Message(role=role, parts=tuple(parts), path=path)


_LEGACY_ID = "function_call@"
"""Legacy function calls (``function_call`` / ``role: function``) carry no id: the
model names a call by its message's index, and a result answers the call of the
message just before it (the only place the API lets it answer from)."""


def _legacy_call(value: Any, path: Path) -> Part:
    """An assistant's legacy ``function_call``: a call named by its message's index,
    its ``arguments`` condensable like a tool call's; opaque when it names no function."""
    if not (isinstance(value, dict) and isinstance(value.get("name"), str)):
        return OpaquePart(wire_type="function_call", path=(*path, "function_call"),
                          raw_json=_json(value))  # fmt: skip
    arguments = value.get("arguments", "")
    args_path: Path | None = (*path, "function_call", "arguments")
    if not isinstance(arguments, str):
        arguments, args_path = _json(arguments), None
    return ToolCallPart(
        call_id=f"{_LEGACY_ID}{path[-1]}", name=value["name"], arguments=arguments,
        path=(*path, "function_call"), arguments_path=args_path,
    )  # fmt: skip


def _legacy_result(msg: dict[str, Any], path: Path) -> Message:
    """A ``role: function`` message, read as the result of the call just before it
    (:func:`_paired_legacy_results` makes it opaque again when there is none)."""
    result = ToolResultPart(
        call_id=f"{_LEGACY_ID}{path[-1] - 1}" if isinstance(path[-1], int) else _LEGACY_ID,
        content=_content_parts(msg.get("content"), (*path, "content"), _RESULT),
        path=path,
    )
    return Message(role="function", parts=(result,), path=path)


def _paired_legacy_results(messages: tuple[Message, ...], items: list[Any]) -> tuple[Message, ...]:
    """``messages`` (parsed from the wire ``items``) with every ``role: function``
    message that follows no legacy call of its own made opaque (the API accepts one
    anywhere; it stays exactly as sent)."""
    out: list[Message] | None = None
    for i, message in enumerate(messages):
        if message.role != "function":
            continue
        wanted = f"{_LEGACY_ID}{i - 1}"
        if i > 0 and any(c.call_id == wanted for c in messages[i - 1].tool_calls):
            continue
        if out is None:
            out = list(messages)
        opaque = OpaquePart(wire_type="function", path=message.path, raw_json=_json(items[i]))
        out[i] = Message(role="function", parts=(opaque,), path=message.path)
    return messages if out is None else tuple(out)


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
    messages = expect_key(body, "messages", list, ())
    parsed = parse_items(messages, "messages", _message, _MEMO)
    conversation = Conversation(
        api="openai.chat",
        wire=body,
        messages=_paired_legacy_results(parsed.messages, messages),
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
