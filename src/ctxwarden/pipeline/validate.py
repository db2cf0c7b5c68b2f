"""Safety validation of a rewritten conversation against its original.

Only text parts may differ, and only where a pass is allowed to write:

- the rewritten request renders to JSON;
- every edited part exists in the original at the same path with a string value
  (edited tool-call arguments the wire keeps as an object: an object, and the edit
  reads as one);
- no edited part is in a protected message (system, first user, newest) or has an
  exact safety class;
- message count, roles, tool call ids / names and result ids are unchanged, in order;
- no edited text is empty.

Segment-level checks (error lines kept, references resolve) are done by the pass
runner per segment; this module is the whole-request gate.
"""

from __future__ import annotations

from typing import Any

import orjson

from ctxwarden.errors import ValidationFailed
from ctxwarden.memo import MESSAGE_MEMO_LIMIT, IdentityMemo
from ctxwarden.model.classify import protected_message_indexes
from ctxwarden.model.conversation import Conversation, Message
from ctxwarden.model.parts import Path, TextPart

__all__ = ["validate_rewrite"]


def _value_at(wire: Any, path: Path) -> Any:
    node = wire
    for key in path:
        node = node[key]
    return node


def _skeleton(message: Message) -> tuple[str, tuple[tuple[str, str], ...]]:
    ids = tuple(("call", c.call_id + "\x00" + c.name) for c in message.tool_calls)
    ids += tuple(("result", r.call_id) for r in message.tool_results)
    return message.role, ids


_PASSED: IdentityMemo[Message, tuple[int, bool], Message] = IdentityMemo(
    MESSAGE_MEMO_LIMIT, weigh=Message.footprint
)
"""Rewritten messages that passed :func:`_check_message`, by their original, its
position and whether that position is protected. The checks read nothing else: the
original came from the wire item at that position (the adapters' parse memo is keyed
by position and content), and the frozen rewrite of an old message is the same object
every turn, so a resent history is checked once, not on every request."""


def validate_rewrite(original: Conversation, rewritten: Conversation, rendered: Any) -> int:
    """Raise :class:`ValidationFailed` (scope ``request``) if the rewrite is unsafe;
    else return the size of ``rendered`` in bytes as compact JSON."""
    try:
        size = len(orjson.dumps(rendered))
    except TypeError as exc:
        raise ValidationFailed(f"rewritten request is not JSON: {exc}") from exc
    if len(original.messages) != len(rewritten.messages):
        raise ValidationFailed("message count changed")
    protected = protected_message_indexes(original)
    for part in rewritten.edited_texts(()):  # the system parts: never edited
        _check_text(original, part, protected)
    # a message object shared with the original is unchanged: only the others can hold edits
    for index, (before, after) in enumerate(
        zip(original.messages, rewritten.messages, strict=True)
    ):
        if before is after:
            continue
        key = (index, index in protected)
        passed = _PASSED.of(before)
        if passed.get(key) is not after:
            _check_message(original, index, before, after, protected)
            passed[key] = after
    return size


def _check_message(
    original: Conversation, index: int, before: Message, after: Message, protected: frozenset[int]
) -> None:
    """The checks of one rewritten message (see module doc)."""
    if _skeleton(before) != _skeleton(after):
        raise ValidationFailed("message structure, tool ids or order changed")
    for part in after.text_parts():
        if part.edited:
            _check_text(original, part, protected)
    for call in after.tool_calls:
        if not call.edited:
            continue
        where = str(call.arguments_path)
        if index in protected or call.arguments_path is None or not call.arguments:
            raise ValidationFailed("edited protected tool-call arguments", segment=where)
        try:
            value = _value_at(original.wire, call.arguments_path)
        except (KeyError, IndexError, TypeError):
            raise ValidationFailed("edited path not in original", segment=where) from None
        if not call.arguments_object:
            if not isinstance(value, str):
                raise ValidationFailed("edited arguments are not text", segment=where)
            continue
        if not isinstance(value, dict):
            raise ValidationFailed("edited arguments are not an object", segment=where)
        try:
            edited = orjson.loads(call.arguments)
        except orjson.JSONDecodeError:
            edited = None
        if not isinstance(edited, dict):
            raise ValidationFailed("edited arguments do not read as an object", segment=where)


def _check_text(original: Conversation, part: TextPart, protected: frozenset[int]) -> None:
    """An edited text part: editable, not empty, a string of the original's messages,
    outside the protected ones."""
    if not part.safety.editable:
        raise ValidationFailed(f"edited a {part.safety} part", segment=str(part.path))
    if not part.text:
        raise ValidationFailed("edited text is empty", segment=str(part.path))
    try:
        value = _value_at(original.wire, part.path)
    except (KeyError, IndexError, TypeError):
        raise ValidationFailed("edited path not in original", segment=str(part.path)) from None
    if not isinstance(value, str):
        raise ValidationFailed("edited path is not text", segment=str(part.path))
    if part.path[0] != original.messages_key or not isinstance(part.path[1], int):
        raise ValidationFailed("edited text outside the messages", segment=str(part.path))
    if part.path[1] in protected:
        raise ValidationFailed("edited a protected message", segment=str(part.path))
