"""Thinking blocks a session no longer sends, for a model that binds them to their prefix.

Such a model (registry ``binds_thinking``) refuses a thinking block once anything before
it (system, tools, earlier messages) differs from what it saw when it wrote the block.
A step that rewrites an old message therefore invalidates every block after it; the
provider's guidance for a history that is condensed is to leave the thinking of the
turns after the change out. That is allowed only where no thinking is still needed: at
the opening of a user turn (the request ends with the user's messages, none holding a
tool result: every earlier assistant turn is complete), and never so that an
assistant message is left empty. The blocks left out stay out on every later request
(the blocks the model writes afterwards follow the history without them);
:attr:`SessionState.dropped_thinking` records the blocks (by their signatures), this
module finds where a step may start and takes the blocks out of the rendered request.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from typing import Any

from ctxwarden.errors import ValidationFailed
from ctxwarden.model.conversation import Conversation
from ctxwarden.model.parts import ReasoningPart, ToolResultPart

__all__ = [
    "block_key",
    "drop_thinking",
    "droppable_from",
    "opens_user_turn",
    "thinking_blocks",
    "thinking_keys",
]


def opens_user_turn(conversation: Conversation) -> bool:
    """Whether the request ends with the user's messages (one or more: the API reads
    consecutive ones as one) holding no tool result: the assistant's earlier turns are
    complete, so none of their thinking is still needed to continue a tool call."""
    trailing = 0
    for message in reversed(conversation.messages):
        if message.role != "user":
            break
        if any(isinstance(p, ToolResultPart) for p in message.parts):
            return False
        trailing += 1
    return trailing > 0


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


def block_key(block: Any) -> str | None:
    """A thinking block's key: a digest of its signature (a ``redacted_thinking``
    block's data), which the provider made for it alone; ``None`` for anything else."""
    if not isinstance(block, dict):
        return None
    kind = block.get("type")
    seal = block.get("signature") if kind == "thinking" else None
    if kind == "redacted_thinking":
        seal = block.get("data")
    if not isinstance(seal, str) or not seal:
        return None
    return hashlib.sha256(seal.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def thinking_blocks(wire: Any, messages_key: str, start: int = 0) -> Iterator[dict[str, Any]]:
    """The ``thinking`` and ``redacted_thinking`` blocks of the assistant messages of a
    Messages request (``wire``) from message index ``start`` on, in order."""
    messages = wire.get(messages_key) if isinstance(wire, dict) else None
    for message in messages[start:] if isinstance(messages, list) else ():
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and _type_of(block) in _THINKING_TYPES:
                yield block


_THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})


def _type_of(block: dict[str, Any]) -> str | None:
    """A block's ``type`` when it is a string (a malformed one, e.g. a list, is no
    type: the upstream judges the request)."""
    kind = block.get("type")
    return kind if isinstance(kind, str) else None


def thinking_keys(wire: Any, messages_key: str, start: int) -> list[str]:
    """The keys of the thinking blocks of the assistant messages from index ``start``
    on, in order."""
    keys = (block_key(b) for b in thinking_blocks(wire, messages_key, start))
    return [key for key in keys if key is not None]


def drop_thinking(
    rendered: dict[str, Any], keys: AbstractSet[str], messages_key: str = "messages"
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A copy of ``rendered`` (a Messages request) without the thinking blocks of its
    assistant messages whose :func:`block_key` is in ``keys`` (containers on the way
    are copied, ``rendered`` is not changed), and the blocks left out.

    Raises :class:`ValidationFailed` when a message would be left empty (the caller
    then sends the original request)."""
    messages = rendered.get(messages_key)
    if not keys or not isinstance(messages, list):
        return rendered, []
    out = list(messages)
    dropped: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        content = message.get("content")
        if not isinstance(content, list):
            continue
        kept: list[Any] = []
        gone: list[dict[str, Any]] = []
        for block in content:  # each block's key made once (a digest of its signature)
            (gone if block_key(block) in keys else kept).append(block)
        if not gone:
            continue
        if not kept:
            raise ValidationFailed("thinking drop would empty a message", segment=str(index))
        out[index] = {**message, "content": kept}
        dropped += gone
    if not dropped:
        return rendered, []
    return {**rendered, messages_key: out}, dropped
