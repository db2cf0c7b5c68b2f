"""Thinking blocks a session no longer sends, for a model that binds them to their prefix.

Such a model (registry ``binds_thinking``) refuses a thinking block once anything before
it (system, tools, earlier messages) differs from what it saw when it wrote the block.
A step that rewrites an old message therefore invalidates every block after it; the
provider's guidance for a history that is condensed is to leave the thinking of the
turns after the change out. That is allowed only where no thinking is still needed: at
the opening of a user turn (the last message is the user's, with no tool results: every
earlier assistant turn is complete), and never so that an assistant message is left
empty. The blocks left out stay out on every later request (the blocks the model writes
afterwards follow the history without them); :attr:`SessionState.thinking_drops`
records the ranges, this module finds where they may start and takes the blocks out of
the rendered request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxwarden.errors import ValidationFailed
from ctxwarden.model.conversation import Conversation
from ctxwarden.model.parts import ReasoningPart, ToolResultPart

__all__ = ["THINKING_TYPES", "drop_thinking", "droppable_from", "opens_user_turn"]

THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})
"""The content block types a drop leaves out."""


def opens_user_turn(conversation: Conversation) -> bool:
    """Whether the request's last message is the user's and holds no tool result: the
    assistant's earlier turns are complete, so none of their thinking is still needed
    to continue a tool call."""
    if not conversation.messages:
        return False
    last = conversation.messages[-1]
    return last.role == "user" and not any(isinstance(p, ToolResultPart) for p in last.parts)


def droppable_from(conversation: Conversation) -> int:
    """The first message index from which every thinking block to the end can be left
    out without leaving an assistant message empty: one past the last assistant message
    made of reasoning alone (0 when there is none)."""
    for index in range(len(conversation.messages) - 1, -1, -1):
        message = conversation.messages[index]
        if (
            message.role == "assistant"
            and message.parts
            and all(isinstance(p, ReasoningPart) for p in message.parts)
        ):
            return index + 1
    return 0


def drop_thinking(
    rendered: dict[str, Any], ranges: Sequence[tuple[int, int]], messages_key: str = "messages"
) -> tuple[dict[str, Any], int]:
    """A copy of ``rendered`` (a Messages request) without the thinking blocks of the
    assistant messages in ``ranges`` (``[start, end)`` message indexes; containers on
    the way are copied, ``rendered`` is not changed), and how many blocks were left out.

    Raises :class:`ValidationFailed` when a message in a range is not where it should
    be or would be left empty (the caller then sends the original request)."""
    messages = rendered.get(messages_key)
    if not ranges or not isinstance(messages, list):
        return rendered, 0
    out = list(messages)
    dropped = 0
    for index in sorted({i for start, end in ranges for i in range(start, end)}):
        if index >= len(out):
            raise ValidationFailed("thinking drop past the messages", segment=str(index))
        message = out[index]
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        content = message.get("content")
        if not isinstance(content, list):
            continue
        kept = [b for b in content if not (isinstance(b, dict) and b.get("type") in THINKING_TYPES)]
        if len(kept) == len(content):
            continue
        if not kept:
            raise ValidationFailed("thinking drop would empty a message", segment=str(index))
        out[index] = {**message, "content": kept}
        dropped += len(content) - len(kept)
    if not dropped:
        return rendered, 0
    return {**rendered, messages_key: out}, dropped
