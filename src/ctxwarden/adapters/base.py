"""The adapter seam: one module per wire format, each with ``parse`` and ``render``.

``parse(wire) -> Conversation`` validates the shape it relies on and raises
:class:`~ctxwarden.errors.MalformedRequest` naming the JSON path of the first problem;
``render(conversation) -> wire`` writes edited text back (see
:mod:`ctxwarden.model.render`). Shapes an adapter does not know become opaque parts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from ctxwarden.errors import MalformedRequest
from ctxwarden.memo import MESSAGE_MEMO_BYTES, MESSAGE_MEMO_LIMIT, BoundedMemo
from ctxwarden.model.conversation import Conversation, Message
from ctxwarden.model.hashing import digest
from ctxwarden.model.parts import Path

__all__ = [
    "Adapter",
    "ItemMemo",
    "ParsedItems",
    "check_pairing",
    "expect",
    "expect_object",
    "expect_text_or_list",
    "has_non_finite",
    "item_memo",
    "json_text",
    "optional_str",
    "parse_items",
    "written_exactly",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Adapter:
    """One wire format: its name, its parser and its renderer."""

    api: str
    parse: Callable[[Any], Conversation]
    render: Callable[[Conversation], dict[str, Any]]


ItemMemo = BoundedMemo[tuple[int, str], Message]
"""Parsed items by position and content hash (see :func:`parse_items`)."""


def item_memo() -> ItemMemo:
    """An adapter's memo of parsed items (bounded by entries and by the bytes of the
    messages it keeps: :mod:`ctxwarden.memo`)."""
    return BoundedMemo(MESSAGE_MEMO_LIMIT, MESSAGE_MEMO_BYTES)


@dataclass(frozen=True, slots=True)
class ParsedItems:
    """A request's message list parsed: the messages, and when every item is JSON,
    each item's content hash and compact-JSON size (else both empty)."""

    messages: tuple[Message, ...]
    hashes: tuple[str, ...]
    sizes: tuple[int, ...]


def parse_items(
    items: list[Any],
    key: str,
    parse_item: Callable[[Any, Path], Message],
    memo: ItemMemo,
    inexact: Callable[[Any], bool] | None = None,
) -> ParsedItems:
    """Every item of a request's message list parsed, with each item's content hash
    and size.

    Agents resend their whole history every turn. An item with the same JSON at the
    same position parses to the same immutable :class:`Message`, so it is looked up in
    ``memo`` (by position and content hash) instead of parsed again; the hashes are the
    element hashes the planner needs anyway, and the sizes, read off the same encoding,
    give the request's size without encoding it again. An item that is not JSON (a
    library caller's Python object) is parsed without the memo and has neither, and so
    is one ``inexact`` finds holding an object a pass may rewrite with a float NaN or
    infinity in it (an Anthropic ``tool_use`` input): orjson writes those as ``null``,
    so its hash would be an item's holding ``null`` and the memo could hand it that
    item's editable parse. A NaN anywhere else is harmless (only edited paths are
    written back) and not looked for.
    """
    messages: list[Message] = []
    hashes: list[str] = []
    sizes: list[int] = []
    for i, item in enumerate(items):
        encoded = _compact_json(item)
        if encoded is not None and inexact is not None and inexact(item):
            encoded = None  # its hash would be an item's holding null: no memo
        if encoded is None:
            messages.append(parse_item(item, (key, i)))
            continue
        h = digest(encoded)
        hashes.append(h)
        sizes.append(len(encoded))
        message = memo.get((i, h), None)
        if message is None:
            parsed = parse_item(item, (key, i))
            message = memo.put((i, h), parsed, parsed.footprint())
        messages.append(message)
    if len(hashes) != len(items):
        return ParsedItems(tuple(messages), (), ())
    return ParsedItems(tuple(messages), tuple(hashes), tuple(sizes))


_TYPE_NAMES: dict[type, str] = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "an integer",
}


def expect(value: Any, kind: type[T], path: Path) -> T:
    """``value`` if it is a ``kind``, else a :class:`MalformedRequest` at ``path``."""
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    got = type(value).__name__ if value is not None else "null"
    raise MalformedRequest(f"expected {_TYPE_NAMES.get(kind, kind.__name__)}, got {got}", path)


def expect_key(obj: dict[str, Any], key: str, kind: type[T], path: Path) -> T:
    """``obj[key]`` if it is a ``kind``, else a :class:`MalformedRequest` at
    ``path + (key,)`` that says "missing" when ``obj`` has no such key."""
    if key not in obj:
        want = _TYPE_NAMES.get(kind, kind.__name__)
        raise MalformedRequest(f"missing (expected {want})", (*path, key))
    return expect(obj[key], kind, (*path, key))


def expect_text_or_list(value: Any, path: Path) -> list[Any]:
    """``value`` as a list where a string is valid too (the caller took the string):
    else a :class:`MalformedRequest` at ``path`` that names both."""
    if isinstance(value, list):
        return value
    got = type(value).__name__ if value is not None else "null"
    raise MalformedRequest(f"expected a string or an array, got {got}", path)


def expect_object(value: Any, path: Path) -> dict[str, Any]:
    """``value`` as a JSON object, else a :class:`MalformedRequest` at ``path``."""
    return expect(value, dict, path)


def json_text(value: Any) -> str:
    """``value`` as compact JSON text (for counting opaque parts), ``""`` if not JSON
    (a float NaN or infinity is written as ``null``: see :func:`written_exactly`)."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return ""


def written_exactly(value: Any, encoded: str | bytes) -> bool:
    """Whether ``encoded``, orjson's writing of ``value``, is ``value`` itself: not
    when a float NaN or infinity lies in it, which orjson writes as ``null`` (text
    edited and written back would hold ``null`` in place of the caller's value)."""
    holds_null = "null" in encoded if isinstance(encoded, str) else b"null" in encoded
    return not holds_null or not has_non_finite(value)


def _compact_json(value: Any) -> bytes | None:
    """``value`` as compact JSON, ``None`` when orjson cannot write it (a library
    caller's Python object)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return None


def has_non_finite(value: Any) -> bool:
    """Whether a NaN or an infinity lies anywhere in ``value`` (which orjson writes as
    ``null``: an object holding one must not be rewritten, see :func:`parse_items`);
    ``value`` is JSON-shaped, no deeper than orjson's nesting limit."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(has_non_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(has_non_finite(v) for v in value)
    return False


def optional_str(obj: dict[str, Any], key: str, path: Path) -> str | None:
    """``obj[key]`` if present and a string; ``None`` if absent or null."""
    value = obj.get(key)
    if value is None:
        return None
    return expect(value, str, (*path, key))


def check_pairing(conversation: Conversation, *, allow_unknown_results: bool = False) -> None:
    """Every tool result answers a call made earlier in the conversation.

    ``allow_unknown_results`` is for continuations (``previous_response_id``) whose
    calls live upstream. Raises :class:`MalformedRequest` at the result's call id.
    """
    if allow_unknown_results:
        return
    seen: set[str] = set()
    for message in conversation.messages:
        for call in message.tool_calls:
            seen.add(call.call_id)
        for result in message.tool_results:
            if result.call_id not in seen:
                raise MalformedRequest(
                    f"tool result without its call (id {result.call_id!r})",
                    (*result.path, _CALL_ID_KEY.get(conversation.api, "call_id")),
                )


_CALL_ID_KEY = {
    "openai.chat": "tool_call_id",
    "openai.responses": "call_id",
    "anthropic.messages": "tool_use_id",
}
