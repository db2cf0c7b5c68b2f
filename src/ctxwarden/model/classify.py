"""Assign each part its safety class from its kind and its position.

Rules (first match wins):

- system content, system/developer messages, the first user message, every message
  after the last assistant message, and the last assistant message itself when it
  carries signed or redacted reasoning (Anthropic refuses a request whose latest
  assistant message with thinking blocks differs from the response) are
  ``critical_exact``;
- tool calls and opaque parts are ``protocol_exact``; reasoning is
  ``continuation_exact``; media is ``rehydratable_exact``;
- a tool-result text identical to an earlier tool-result text is
  ``droppable_duplicate``; other tool-result text is ``condensable``;
- other text (assistant prose, later user turns) is ``lossless_transformable``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from ctxwarden.memo import MESSAGE_MEMO_LIMIT, IdentityMemo
from ctxwarden.model.conversation import Conversation, Message
from ctxwarden.model.parts import (
    ContentPart,
    MediaPart,
    OpaquePart,
    Part,
    ReasoningPart,
    SafetyClass,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

__all__ = ["classify", "protected_message_indexes", "signed_reasoning_end"]

_SYSTEM_ROLES = frozenset({"system", "developer"})


def protected_message_indexes(conversation: Conversation) -> frozenset[int]:
    """Indexes of messages that no pass may change (system, first user, newest, and
    the last assistant message when it carries signed reasoning)."""
    messages = conversation.messages
    protected = {i for i, message in enumerate(messages) if message.role in _SYSTEM_ROLES}
    for i, message in enumerate(messages):
        if message.role == "user" and message.item_type == "message":
            protected.add(i)
            break
    protected.update(range(conversation.newest_start, len(messages)))
    last = conversation.last_assistant_index
    if last >= 0 and any(_signed(p) for p in messages[last].parts):
        protected.add(last)
    return frozenset(protected)


def signed_reasoning_end(conversation: Conversation) -> int:
    """One past the index of the last message carrying signed or redacted reasoning
    (0 when none does): for a model that binds its thinking blocks to what precedes
    them, the messages before this index are what the newest such block was produced
    for."""
    for i in range(len(conversation.messages) - 1, -1, -1):
        if any(_signed(p) for p in conversation.messages[i].parts):
            return i + 1
    return 0


def _signed(part: Part) -> bool:
    return isinstance(part, ReasoningPart) and (part.signed or part.redacted)


P = TypeVar("P", TextPart, MediaPart, OpaquePart, ToolCallPart, ToolResultPart, ReasoningPart)


def _with(part: P, safety: SafetyClass) -> P:
    return part if part.safety is safety else replace(part, safety=safety)


def _natural(part: ContentPart, in_tool_result: bool, seen: set[str]) -> ContentPart:
    if isinstance(part, TextPart):
        if not in_tool_result:
            return _with(part, SafetyClass.LOSSLESS_TRANSFORMABLE)
        if part.text in seen and part.text:
            return _with(part, SafetyClass.DROPPABLE_DUPLICATE)
        seen.add(part.text)
        return _with(part, SafetyClass.CONDENSABLE)
    if isinstance(part, MediaPart):
        return _with(part, SafetyClass.REHYDRATABLE_EXACT)
    return _with(part, SafetyClass.PROTOCOL_EXACT)


def _classify_part(part: Part, exact: bool, seen: set[str]) -> Part:
    if exact:
        if isinstance(part, ToolResultPart):
            content = tuple(replace(p, safety=SafetyClass.CRITICAL_EXACT) for p in part.content)
            return replace(part, content=content, safety=SafetyClass.CRITICAL_EXACT)
        if isinstance(part, ToolCallPart | OpaquePart):
            return replace(part, safety=SafetyClass.PROTOCOL_EXACT)
        if isinstance(part, ReasoningPart):
            return replace(part, safety=SafetyClass.CONTINUATION_EXACT)
        return replace(part, safety=SafetyClass.CRITICAL_EXACT)
    if isinstance(part, ToolResultPart):
        content = tuple(_natural(p, True, seen) for p in part.content)
        if all(a is b for a, b in zip(content, part.content, strict=True)):
            return _with(part, SafetyClass.CONDENSABLE)
        return replace(part, content=content, safety=SafetyClass.CONDENSABLE)
    if isinstance(part, ToolCallPart):
        return _with(part, SafetyClass.PROTOCOL_EXACT)
    if isinstance(part, OpaquePart):
        return _with(part, SafetyClass.PROTOCOL_EXACT)
    if isinstance(part, ReasoningPart):
        return _with(part, SafetyClass.CONTINUATION_EXACT)
    return _natural(part, False, seen)


def classify(conversation: Conversation) -> Conversation:
    """A copy of ``conversation`` with every part's safety class set (see module rules)."""
    protected = protected_message_indexes(conversation)
    seen: set[str] = set()
    messages = [
        _classified(message, i in protected, seen)
        for i, message in enumerate(conversation.messages)
    ]
    system = tuple(_classify_part(p, True, seen) for p in conversation.system)
    return replace(conversation, messages=tuple(messages), system=system)


_MEMO: IdentityMemo[Message, tuple[bool, tuple[bool, ...]], Message] = IdentityMemo(
    MESSAGE_MEMO_LIMIT, weigh=Message.footprint
)
"""Classified copies of parsed messages (the adapters hand out the same object for an
item they parsed before), by what classification depends on: the exact flag and which
of the message's tool-result texts earlier messages already showed."""


_NO_TEXTS: dict[bool, tuple[bool, tuple[bool, ...]]] = {True: (True, ()), False: (False, ())}
"""The memo keys of messages without tool-result texts to look at."""


def _classified(message: Message, exact: bool, seen: set[str]) -> Message:
    """``message`` classified; adds its tool-result texts to ``seen`` like a part by
    part walk would."""
    texts = () if exact else message.result_texts
    if texts:
        key = (exact, tuple(bool(t) and t in seen for t in texts))
        seen.update(texts)
    else:
        key = _NO_TEXTS[exact]
    known = _MEMO.of(message)
    out = known.get(key)
    if out is None:
        earlier = {t for t, shown in zip(texts, key[1], strict=True) if shown}
        parts = tuple(_classify_part(p, exact, earlier) for p in message.parts)
        same = all(a is b for a, b in zip(parts, message.parts, strict=True))
        out = known[key] = message if same else replace(message, parts=parts)
    return out
