"""Render a conversation back to its wire form.

Contract: the result is a new top-level dict equal to ``conversation.wire`` except that
each edited text part's string is written at its path (and edited tool-call arguments
the wire keeps as an object, the object their JSON text reads as). Containers on the way to an
edit are copied; everything else is shared with the input (which is never mutated).
So ``render(parse(x)) == x`` holds for any request, unknown fields included.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from ctxwarden.model.conversation import Conversation
from ctxwarden.model.parts import Path

__all__ = ["apply_texts", "render_conversation"]


def apply_texts(wire: Any, edits: Iterable[tuple[Path, str, bool]]) -> dict[str, Any]:
    """Return a copy of ``wire`` with each ``(path, text, as_object)`` written, copying
    on the way: the text itself, or with ``as_object`` the JSON value it reads as
    (``orjson.JSONDecodeError`` when it does not read)."""
    root: dict[str, Any] = dict(wire)
    copied: set[int] = {id(root)}
    for path, text, as_object in edits:
        node: Any = root
        for key in path[:-1]:
            child = node[key]
            if id(child) not in copied:
                child = dict(child) if isinstance(child, dict) else list(child)
                node[key] = child
                copied.add(id(child))
            node = child
        node[path[-1]] = orjson.loads(text) if as_object else text
    return root


def render_conversation(conversation: Conversation) -> dict[str, Any]:
    """The wire request for ``conversation`` (see module contract)."""
    return apply_texts(conversation.wire, conversation.edits())
