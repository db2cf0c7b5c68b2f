"""Safety validation of a rewritten conversation against its original.

Only text parts may differ, and only where a pass is allowed to write:

- the rewritten request renders to JSON;
- every edited part exists in the original at the same path with a string value;
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
from ctxwarden.model.classify import protected_message_indexes
from ctxwarden.model.conversation import Conversation, Message
from ctxwarden.model.parts import Path

__all__ = ["validate_rewrite"]


def _value_at(wire: Any, path: Path) -> Any:
    node = wire
    for key in path:
        node = node[key]
    return node


def _skeleton(messages: list[Message]) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    out = []
    for m in messages:
        ids = tuple(("call", c.call_id + "\x00" + c.name) for c in m.tool_calls)
        ids += tuple(("result", r.call_id) for r in m.tool_results)
        out.append((m.role, ids))
    return out


def validate_rewrite(original: Conversation, rewritten: Conversation, rendered: Any) -> None:
    """Raise :class:`ValidationFailed` (scope ``request``) if the rewrite is unsafe."""
    try:
        orjson.dumps(rendered)
    except TypeError as exc:
        raise ValidationFailed(f"rewritten request is not JSON: {exc}") from exc
    if len(original.messages) != len(rewritten.messages):
        raise ValidationFailed("message count changed")
    changed = [
        i
        for i, (a, b) in enumerate(zip(original.messages, rewritten.messages, strict=True))
        if a is not b
    ]
    before = [original.messages[i] for i in changed]
    after = [rewritten.messages[i] for i in changed]
    if _skeleton(before) != _skeleton(after):
        raise ValidationFailed("message structure, tool ids or order changed")
    protected = protected_message_indexes(original)
    # a message object shared with the original is unchanged: only the others (and the
    # system parts) can hold edits
    for part in rewritten.edited_texts(after):
        if not part.safety.editable:
            raise ValidationFailed(f"edited a {part.safety} part", segment=str(part.path))
        if not part.text:
            raise ValidationFailed("edited text is empty", segment=str(part.path))
        try:
            before = _value_at(original.wire, part.path)
        except (KeyError, IndexError, TypeError):
            raise ValidationFailed("edited path not in original", segment=str(part.path)) from None
        if not isinstance(before, str):
            raise ValidationFailed("edited path is not text", segment=str(part.path))
        if part.path[0] != original.messages_key or not isinstance(part.path[1], int):
            raise ValidationFailed("edited text outside the messages", segment=str(part.path))
        if part.path[1] in protected:
            raise ValidationFailed("edited a protected message", segment=str(part.path))
    for index, message in zip(changed, after, strict=True):
        for call in message.tool_calls:
            if not call.edited:
                continue
            where = str(call.arguments_path)
            if index in protected or call.arguments_path is None or not call.arguments:
                raise ValidationFailed("edited protected tool-call arguments", segment=where)
            try:
                before = _value_at(original.wire, call.arguments_path)
            except (KeyError, IndexError, TypeError):
                raise ValidationFailed("edited path not in original", segment=where) from None
            if not isinstance(before, str):
                raise ValidationFailed("edited arguments are not text", segment=where)
