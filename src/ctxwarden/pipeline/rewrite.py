"""Replacements written into a conversation's messages.

A message rewritten the same way before is reused from a memo (sessions resend the
same messages and re-apply the same frozen replacements every turn), and a
:class:`Rewriter` keeps each session's last rewrite: between compaction steps the next
request writes the same texts into the same message objects (the adapters hand out one
object per item they parsed before), so only the list of messages is made again. Both
only save work: the result is the same object-for-object equal conversation.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

from ctxwarden.memo import (
    MESSAGE_MEMO_LIMIT,
    OBJECT_BYTES,
    SESSION_MEMO_BYTES,
    SESSION_MEMO_LIMIT,
    BoundedMemo,
    IdentityMemo,
)
from ctxwarden.model.conversation import Conversation, Message
from ctxwarden.model.parts import Part, Path, TextPart, ToolCallPart, ToolResultPart
from ctxwarden.passes.base import Replacement

__all__ = [
    "Rewriter",
    "apply_replacements",
    "apply_to_message",
    "texts_of",
    "writes_texts",
]


def texts_of(applied: dict[Path, Replacement]) -> dict[Path, str]:
    """The text each replacement writes, by path: all a rewrite depends on."""
    return {path: rep.text for path, rep in applied.items()}


def writes_texts(texts: dict[Path, str], applied: dict[Path, Replacement]) -> bool:
    """Whether ``applied`` writes exactly ``texts`` (:func:`texts_of`)."""
    return len(texts) == len(applied) and all(
        texts.get(path) == rep.text for path, rep in applied.items()
    )


@dataclass(frozen=True, slots=True)
class _Last:
    """A session's last rewrite: the texts written, and per message index the message
    they were written into and the result."""

    texts: dict[Path, str]
    rewritten: dict[int, tuple[Message, Message]]


class Rewriter:
    """:func:`apply_replacements` with each session's last rewrite kept (see module
    doc); safe to use from several threads."""

    def __init__(self) -> None:
        self._last: BoundedMemo[str, _Last] = BoundedMemo(
            SESSION_MEMO_LIMIT, SESSION_MEMO_BYTES // 4
        )

    def rewrite(
        self, session: str, conversation: Conversation, applied: dict[Path, Replacement]
    ) -> Conversation:
        """:func:`apply_replacements`; the session's last rewrite is reused when it
        wrote the same texts and each message it rewrote is the same object again."""
        if not applied:
            return conversation
        messages = list(conversation.messages)
        last = self._last.get(session, None)
        if last is not None and _holds(last, messages, applied):
            for index, (_, out) in last.rewritten.items():
                messages[index] = out
            return replace(conversation, messages=tuple(messages))
        by_index = _by_message(applied)
        if by_index is None:
            return apply_replacements(conversation, applied)
        rewritten = _rewritten_messages(messages, by_index)
        for index, (_, out) in rewritten.items():
            messages[index] = out
        # the texts written, and the messages it keeps alive (by their own texts: a
        # rewrite shares them)
        texts = texts_of(applied)
        weight = OBJECT_BYTES * (2 * len(texts) + 4 * len(rewritten) + 1)
        weight += sum(map(len, texts.values()))
        weight += sum(before.footprint() for before, _ in rewritten.values())
        self._last.put(session, _Last(texts, rewritten), weight)
        return replace(conversation, messages=tuple(messages))


def _holds(last: _Last, messages: list[Message], applied: dict[Path, Replacement]) -> bool:
    """Whether ``last`` is the rewrite of ``messages`` by ``applied``."""
    return writes_texts(last.texts, applied) and all(
        i < len(messages) and messages[i] is before for i, (before, _) in last.rewritten.items()
    )


def _by_message(applied: dict[Path, Replacement]) -> dict[int, dict[Path, Replacement]] | None:
    """The replacements by the index of their message (their paths start with the
    message list key and the index), ``None`` when a path does not."""
    by_index: dict[int, dict[Path, Replacement]] = defaultdict(dict)
    for path, rep in applied.items():
        if len(path) < 2 or not isinstance(path[1], int):
            return None
        by_index[path[1]][path] = rep
    return by_index


def apply_replacements(
    conversation: Conversation, applied: dict[Path, Replacement]
) -> Conversation:
    """A copy of ``conversation`` with each replacement written into its text part.

    Replacements are grouped by message (:func:`_by_message`); a message rewritten the
    same way before is reused from :data:`_APPLIED`."""
    if not applied:
        return conversation
    by_index = _by_message(applied)
    if by_index is None:
        return replace(
            conversation,
            messages=tuple(apply_to_message(m, applied) for m in conversation.messages),
        )
    messages = list(conversation.messages)
    for index, (_, out) in _rewritten_messages(messages, by_index).items():
        messages[index] = out
    return replace(conversation, messages=tuple(messages))


def _rewritten_messages(
    messages: list[Message], by_index: dict[int, dict[Path, Replacement]]
) -> dict[int, tuple[Message, Message]]:
    """Each message ``by_index`` names (an index past the list names none) and the
    message with its replacements written in."""
    return {
        i: (messages[i], _applied_message(messages[i], reps))
        for i, reps in by_index.items()
        if 0 <= i < len(messages)
    }


_APPLIED: IdentityMemo[Message, frozenset[tuple[Path, str]], Message] = IdentityMemo(
    MESSAGE_MEMO_LIMIT, weigh=Message.footprint
)
"""Rewritten copies of messages by the replacements written into them."""


def _applied_message(message: Message, reps: dict[Path, Replacement]) -> Message:
    key = frozenset((path, rep.text) for path, rep in reps.items())
    known = _APPLIED.of(message)
    out = known.get(key)
    if out is None:
        out = known[key] = apply_to_message(message, reps)
    return out


def apply_to_message(message: Message, applied: dict[Path, Replacement]) -> Message:
    """``message`` with the replacements at its parts' paths written in."""
    parts: list[Part] = []
    changed = False
    for part in message.parts:
        if isinstance(part, ToolCallPart) and part.arguments_path in applied:
            parts.append(part.with_arguments(applied[part.arguments_path].text))
            changed = True
        elif isinstance(part, TextPart) and part.path in applied:
            parts.append(part.with_text(applied[part.path].text))
            changed = True
        elif isinstance(part, ToolResultPart) and any(
            isinstance(c, TextPart) and c.path in applied for c in part.content
        ):
            content = tuple(
                c.with_text(applied[c.path].text)
                if isinstance(c, TextPart) and c.path in applied
                else c
                for c in part.content
            )
            parts.append(replace(part, content=content))
            changed = True
        else:
            parts.append(part)
    return replace(message, parts=tuple(parts)) if changed else message
