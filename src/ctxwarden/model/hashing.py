"""Element hashes of a request: the head (system, instructions, tools), then each message.

Two requests share a cached prefix exactly as far as their element hashes agree; the
planner and the token counter's per-message memo both key on them. Also the request's
size as compact JSON, read off the items' encodings that hashing made.
"""

from __future__ import annotations

import hashlib

import orjson

from ctxwarden.model.conversation import Conversation

__all__ = ["digest", "element_hashes", "item_digest", "wire_size"]


def digest(data: bytes) -> str:
    """A short content hash (SHA-256's first 12 bytes, hex): SHA-256 runs on the CPU's
    SHA extensions where it has them, about twice as fast as BLAKE2b on a long
    history's items. Internal to a process and its session states: a state written
    with another hash reads as an edited history once (its decisions are re-checked
    against their texts, and the next step's cache estimate starts afresh)."""
    return hashlib.sha256(data).hexdigest()[:24]


def item_digest(item: object) -> str:
    """The hash of one wire item (its compact JSON); raises ``TypeError`` for non-JSON."""
    return digest(orjson.dumps(item))


def element_hashes(conversation: Conversation) -> list[str]:
    """``[head, message 0, message 1, ...]`` hashes of the wire request."""
    wire = conversation.wire
    head = [wire.get("system"), wire.get("instructions"), wire.get("tools")]
    hashes = [digest(orjson.dumps(head))]
    items = wire.get(conversation.messages_key)
    if isinstance(items, list) and len(conversation.item_hashes) == len(items):
        hashes.extend(conversation.item_hashes)
    elif isinstance(items, list):
        hashes.extend(item_digest(m) for m in items)
    elif items is not None:
        hashes.append(digest(orjson.dumps(items)))
    return hashes


def wire_size(conversation: Conversation) -> int | None:
    """Bytes of ``conversation.wire`` as compact JSON (``len(orjson.dumps(wire))``),
    ``None`` if JSON cannot encode it. With the item sizes the adapter measured while
    hashing, only the rest of the request is encoded: a long history is not encoded a
    second time."""
    wire = conversation.wire
    key = conversation.messages_key
    items = wire.get(key)
    try:
        if not isinstance(items, list) or len(conversation.item_sizes) != len(items):
            return len(orjson.dumps(wire))
        shell = len(orjson.dumps({**wire, key: []}))  # the list's brackets counted here
    except TypeError:
        return None
    return shell + sum(conversation.item_sizes) + max(0, len(items) - 1)  # the commas
