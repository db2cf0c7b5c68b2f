"""Bounded memos for content that agents resend every turn.

Derived values (a parsed message, a placeholder, a rewritten copy) are kept so a resent
history costs lookups, not work. A memo that reaches its bound is emptied: memory stays
flat, and a miss only costs recomputing the value.
"""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["IdentityMemo", "remember"]

K = TypeVar("K")
V = TypeVar("V")
Obj = TypeVar("Obj")


def remember(memo: dict[K, V], key: K, value: V, limit: int) -> V:
    """Store ``value`` under ``key`` (``memo`` is emptied first when it already holds
    ``limit`` entries) and return it."""
    if len(memo) >= limit:
        memo.clear()
    memo[key] = value
    return value


class IdentityMemo(Generic[Obj, K, V]):
    """Values derived from an object, per object identity and a key: for immutable
    objects handed out again (a memoized parse returns the same message object). Each
    entry keeps its object alive, so an ``id`` is never reused while it is cached; at
    most ``max_objects`` objects are kept."""

    def __init__(self, max_objects: int) -> None:
        self.max_objects = max_objects
        self._entries: dict[int, tuple[Obj, dict[K, V]]] = {}

    def of(self, obj: Obj) -> dict[K, V]:
        """The values memoized for ``obj`` (an empty dict to fill the first time)."""
        entry = self._entries.get(id(obj))
        if entry is None or entry[0] is not obj:
            entry = remember(self._entries, id(obj), (obj, {}), self.max_objects)
        return entry[1]

    def __len__(self) -> int:
        return len(self._entries)
