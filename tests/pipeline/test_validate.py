"""The whole-request gate: what a rewrite may and may not change."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from ctxwarden.adapters import get_adapter
from ctxwarden.errors import ValidationFailed
from ctxwarden.model import classify
from ctxwarden.model.conversation import Conversation, Message
from ctxwarden.model.parts import TextPart, ToolCallPart, ToolResultPart
from ctxwarden.pipeline.validate import validate_rewrite


def _chat() -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    return {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": "looking", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "old output " * 50},
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "newest"},
        ],
    }


def _edit_text(conversation: Conversation, index: int, text: str) -> Conversation:
    """``conversation`` with the first text (or tool-result text) of message ``index``
    rewritten."""
    message = conversation.messages[index]
    parts = list(message.parts)
    for k, part in enumerate(parts):
        if isinstance(part, TextPart):
            parts[k] = part.with_text(text)
            break
        if isinstance(part, ToolResultPart):
            content = (part.content[0].with_text(text), *part.content[1:])  # type: ignore[union-attr]
            parts[k] = replace(part, content=content)
            break
    messages = list(conversation.messages)
    messages[index] = replace(message, parts=tuple(parts))
    return replace(conversation, messages=tuple(messages))


def _check(original: Conversation, rewritten: Conversation) -> None:
    validate_rewrite(original, rewritten, get_adapter(original.api).render(rewritten))


@pytest.fixture
def original() -> Conversation:
    return classify(get_adapter("openai.chat").parse(_chat()))


def test_an_old_tool_output_may_be_rewritten(original: Conversation) -> None:
    _check(original, _edit_text(original, 3, "[ctxwarden: condensed output]"))


@pytest.mark.parametrize(
    ("index", "reason"),
    [(0, "CRITICAL_EXACT|critical_exact|protected"), (1, "critical_exact|protected"), (5, "")],
)
def test_protected_messages_may_not_change(original: Conversation, index: int, reason: str) -> None:
    with pytest.raises(ValidationFailed):
        _check(original, _edit_text(original, index, "changed"))


def test_an_edit_may_not_empty_a_text(original: Conversation) -> None:
    with pytest.raises(ValidationFailed, match="empty"):
        _check(original, _edit_text(original, 3, ""))


def test_tool_call_ids_and_order_are_fixed(original: Conversation) -> None:
    message = original.messages[2]
    parts = tuple(
        replace(p, call_id="other") if isinstance(p, ToolCallPart) else p for p in message.parts
    )
    changed = list(original.messages)
    changed[2] = Message(role=message.role, parts=parts, path=message.path)
    with pytest.raises(ValidationFailed, match="structure"):
        _check(original, replace(original, messages=tuple(changed)))
    with pytest.raises(ValidationFailed, match="count"):
        _check(original, replace(original, messages=original.messages[:-1]))


def test_edited_system_content_outside_the_messages_is_refused() -> None:
    wire = {
        "model": "claude-sonnet-4",
        "max_tokens": 100,
        "system": "be brief",
        "messages": [{"role": "user", "content": "hi"}],
    }
    original = classify(get_adapter("anthropic.messages").parse(wire))
    system = tuple(
        replace(p.with_text("be long"), safety=p.safety) if isinstance(p, TextPart) else p
        for p in original.system
    )
    with pytest.raises(ValidationFailed):
        _check(original, replace(original, system=system))


def _messages_with_a_written_file() -> Conversation:
    use = {"type": "tool_use", "id": "t1", "name": "write",
           "input": {"path": "a.py", "content": "x = 1\n" * 80, "mode": 420}}  # fmt: skip
    wire = {
        "model": "claude-sonnet-4",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "newest"},
        ],
    }
    return classify(get_adapter("anthropic.messages").parse(wire))


def _edit_arguments(conversation: Conversation, index: int, arguments: str) -> Conversation:
    message = conversation.messages[index]
    parts = tuple(
        p.with_arguments(arguments) if isinstance(p, ToolCallPart) else p for p in message.parts
    )
    messages = list(conversation.messages)
    messages[index] = replace(message, parts=parts)
    return replace(conversation, messages=tuple(messages))


def test_a_messages_call_input_is_edited_as_the_object_it_is() -> None:
    original = _messages_with_a_written_file()
    (call,) = original.messages[1].tool_calls
    assert call.arguments_path == ("messages", 1, "content", 0, "input")
    edited = _edit_arguments(original, 1, '{"path":"a.py","content":"x = 1 [cut]","mode":420}')
    rendered = get_adapter(original.api).render(edited)
    validate_rewrite(original, edited, rendered)
    assert rendered["messages"][1]["content"][0]["input"] == {
        "path": "a.py", "content": "x = 1 [cut]", "mode": 420
    }  # fmt: skip
    with pytest.raises(ValidationFailed, match="object"):
        _check(original, _edit_arguments(original, 1, "[1, 2]"))


def test_a_messages_call_input_that_is_no_object_is_not_editable() -> None:
    wire = {
        "model": "claude-sonnet-4",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "task"},
            {"role": "assistant",
             "content": [{"type": "tool_use", "id": "t1", "name": "w", "input": "x" * 400}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
        ],
    }  # fmt: skip
    (call,) = get_adapter("anthropic.messages").parse(wire).messages[1].tool_calls
    assert call.arguments_path is None and not call.arguments_object
