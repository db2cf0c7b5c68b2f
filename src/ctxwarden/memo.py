"""Bounded memos for content that agents resend every turn.

Derived values (a parsed message, a placeholder, a rewritten copy) are kept so a resent
history costs lookups, not work. A memo that reaches its bound drops its oldest quarter:
memory stays flat, and a miss only costs recomputing the value.

The bounds are sized for a proxy's working set, not one session's: a proxy serves many
sessions at once and each request resends its whole history, so a memo must hold the
live messages of all of them. With per-message memos of 4,096 entries, 150 sessions
condensed in turn (as a proxy sees them) took twice the time of the same sessions one
after the other, and their p95 went past 10 ms (``benchmarks/engine_overhead.py
--interleave``).
"""

from __future__ import annotations

import itertools
from typing import Generic, TypeVar

__all__ = ["MESSAGE_MEMO_LIMIT", "TEXT_MEMO_LIMIT", "IdentityMemo", "remember"]

MESSAGE_MEMO_LIMIT = 65_536
"""Entries of a per-message memo (a parsed, classified or rewritten message): the live
messages of a few hundred concurrent sessions. An entry refers to the message's texts,
which the token counter's memo keeps anyway."""

TEXT_MEMO_LIMIT = 65_536
"""Entries of a per-text memo (signals of a text, a placeholder, a normalized text)."""

K = TypeVar("K")
V = TypeVar("V")
Obj = TypeVar("Obj")


def remember(memo: dict[K, V], key: K, value: V, limit: int) -> V:
    """Store ``value`` under ``key`` and return it. When ``memo`` already holds
    ``limit`` entries its oldest quarter (in insertion order) is dropped first: a
    working set a little over the bound keeps most of its hits, which emptying the
    whole memo would lose every time it fills."""
    if len(memo) >= limit:
        excess = len(memo) - limit + max(1, limit // 4)
        for old in list(itertools.islice(memo, excess)):
            del memo[old]
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
