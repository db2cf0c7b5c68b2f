"""Bounded memos for content that agents resend every turn.

Derived values (a parsed message, a placeholder, a rewritten copy, the signals of a
text) are kept so a resent history costs lookups, not work; they never change a
result, only the time it takes. Every memo is bounded
twice: by entries and by an estimate of the bytes its entries keep alive (the texts
they hold and the values derived from them), so a proxy fed many large distinct
outputs keeps flat memory. Past either bound the oldest entries (in insertion order)
are dropped until it is back under three quarters of it: a working set a little over
the bound keeps most of its hits, and a miss only costs recomputing the value.

The bounds are sized for a proxy's working set, not one session's: a proxy serves many
sessions at once and each request resends its whole history, so a memo must hold the
live messages of all of them. With per-message memos of 4,096 entries, 150 sessions
condensed in turn (as a proxy sees them) took twice the time of the same sessions one
after the other, and their p95 went past 10 ms (``benchmarks/engine_overhead.py
--interleave``). Module-level memos are shared by every engine of a process, the
others belong to one engine (its passes, its token counters); all are safe to use from
several threads.

One budget caps them all (:data:`DEFAULT_MEMO_BUDGET`, or :func:`set_memo_budget`): each
memo's byte bound (and each token counter's) is its own bound scaled by one factor, so
that the live memos together keep at most that many estimated bytes; a memo that comes
or goes changes the factor, which each memo reads when it stores. Without a budget
(``set_memo_budget(None)``) each memo has its own bound, about 1.7 GB estimated in all
for one engine that has condensed (its passes' memos, one token counter). The estimate
counts a text once per memo that holds it, so it runs above the memory really used.
Caches keyed by session (an engine's segment walks, decoded session states, and the
element changes and rewritten messages of each session's last request) are bounded the
same way: by sessions and by bytes, within the budget.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

__all__ = [
    "DEFAULT_MEMO_BUDGET",
    "MESSAGE_MEMO_BYTES",
    "MESSAGE_MEMO_LIMIT",
    "MISSING",
    "OBJECT_BYTES",
    "SESSION_MEMO_BYTES",
    "SESSION_MEMO_LIMIT",
    "TEXT_MEMO_BYTES",
    "TEXT_MEMO_LIMIT",
    "BoundedMemo",
    "Budgeted",
    "IdentityMemo",
    "footprint",
    "memo_budget",
    "memo_weight",
    "register_budgeted",
    "set_memo_budget",
    "share",
    "text_memo",
]

MESSAGE_MEMO_LIMIT = 65_536
"""Entries of a per-message memo (a parsed, classified or rewritten message): the live
messages of a few hundred concurrent sessions."""

MESSAGE_MEMO_BYTES = 128 * 1024 * 1024
"""Estimated bytes a per-message memo may keep alive."""

TEXT_MEMO_LIMIT = 65_536
"""Entries of a per-text memo (signals of a text, a placeholder, a normalized text)."""

TEXT_MEMO_BYTES = 32 * 1024 * 1024
"""Estimated bytes a per-text memo may keep alive (its texts and their values)."""

SESSION_MEMO_LIMIT = 512
"""Sessions a per-session cache keeps (the last walk or state of each; least recently
used dropped first)."""

SESSION_MEMO_BYTES = 256 * 1024 * 1024
"""Estimated bytes a per-session cache may keep alive (one conversation's segment texts
per entry; the decoded session states, about half as heavy, take half). A miss costs a
walk of the whole conversation, and a proxy visits its live sessions in turn, the worst
order for a cache too small for them: on the corpus a session's walk weighs about
190 KB, so at the default budget's share 160 live sessions fit."""

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")
Obj = TypeVar("Obj")
P = ParamSpec("P")

OBJECT_BYTES = 56
"""About what CPython spends on a small object (a string's header, a tuple slot...)."""


class Budgeted(Protocol):
    """A bounded cache that takes a share of the memo budget: ``own_bytes`` is its own
    bound (its share can only be smaller, :func:`share`), ``weight`` what it keeps
    now, and ``trim`` drops its oldest entries until it is within its share."""

    @property
    def own_bytes(self) -> int: ...

    @property
    def weight(self) -> int: ...

    def trim(self) -> None: ...


DEFAULT_MEMO_BUDGET = 768 * 1024 * 1024
"""The process's memo budget until :func:`set_memo_budget` changes it: the memos and
the per-session caches of one engine together. On the corpus, 160 live sessions on one
engine condense as fast under it as with no budget (``benchmarks/engine_overhead.py
--interleave 160 --memo-mb N``)."""


class _Budget:
    """The budget and the caches sharing it. Every cache's share is its own bound times
    one scale, ``min(1, total / sum of the live caches' own bounds)``, read when the
    cache stores: joining or leaving costs O(1) whatever the number of caches, and the
    shares of the others grow back when a cache goes."""

    def __init__(self, total: int | None) -> None:
        self.total = total
        self.nominal = 0
        self.scale = 1.0
        self.lock = threading.RLock()  # a cache's finalizer may run in a locked thread
        self.caches: weakref.WeakSet[Any] = weakref.WeakSet()

    def join(self, cache: Budgeted) -> None:
        own = cache.own_bytes
        with self.lock:
            self.caches.add(cache)
            self.nominal += own
            self._rescale()
        weakref.finalize(cache, self.leave, own)

    def leave(self, own: int) -> None:
        with self.lock:
            self.nominal -= own
            self._rescale()

    def _rescale(self) -> None:
        if self.total is None or self.nominal <= 0:
            self.scale = 1.0
        else:
            self.scale = min(1.0, self.total / self.nominal)

    def live(self) -> list[Any]:
        with self.lock:
            return list(self.caches)


_BUDGET = _Budget(DEFAULT_MEMO_BUDGET)


def register_budgeted(cache: Budgeted) -> None:
    """Make ``cache`` share the budget (every bounded memo registers itself)."""
    _BUDGET.join(cache)


def share(own_bytes: int) -> int:
    """The bound of a cache whose own bound is ``own_bytes``, under the budget now."""
    scale = _BUDGET.scale
    return own_bytes if scale >= 1.0 else int(own_bytes * scale)


def set_memo_budget(total_bytes: int | None) -> None:
    """Cap the estimated bytes every memo of the process keeps alive, together, at
    ``total_bytes`` (``None``: no budget, each memo's own bound). Memos over their new
    share drop their oldest entries at once."""
    if total_bytes is not None and total_bytes < 0:
        raise ValueError(f"a memo budget is bytes >= 0, not {total_bytes}")
    with _BUDGET.lock:
        _BUDGET.total = total_bytes
        _BUDGET._rescale()
    for cache in _BUDGET.live():
        cache.trim()


def memo_budget() -> int | None:
    """The budget in force (``None``: none, each memo's own bound)."""
    return _BUDGET.total


def memo_weight() -> int:
    """The estimated bytes all memos of the process keep alive now."""
    return sum(cache.weight for cache in _BUDGET.live())


def footprint(value: Any) -> int:
    """An estimate of the bytes ``value`` keeps alive: strings by length, containers by
    their items (one level of nesting is followed), anything else as one object."""
    if isinstance(value, str):
        return OBJECT_BYTES + len(value)
    if isinstance(value, (tuple, list, frozenset, set)):
        return OBJECT_BYTES + sum(
            OBJECT_BYTES + len(v) if isinstance(v, str) else footprint_flat(v) for v in value
        )
    return OBJECT_BYTES


def footprint_flat(value: Any) -> int:
    """:func:`footprint` without following containers (their items as strings)."""
    if isinstance(value, str):
        return OBJECT_BYTES + len(value)
    if isinstance(value, tuple):
        return OBJECT_BYTES + sum(
            OBJECT_BYTES + (len(v) if isinstance(v, str) else 0) for v in value
        )
    return OBJECT_BYTES


class BoundedMemo(Generic[K, V]):
    """A memo bounded by entries and by the bytes its entries keep alive (see module
    doc); each entry's weight is given when it is stored. ``max_bytes`` is its share of
    the process's budget (at most its own bound). An entry heavier than a quarter of
    that would push out everything else, turn after turn: one of up to half of it is
    kept aside instead, in one of :data:`HEAVY_ENTRIES` slots of their own (the newest
    kept, all of them together at most three quarters of ``max_bytes``, and counted
    against it: the other entries make room, down to a quarter), so that the few huge
    outputs of a live session (an output of thirty thousand error lines) are not worked
    on again at every request. Thread-safe."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self._own_bytes = max_bytes
        self._data: dict[K, tuple[V, int]] = {}
        self._bytes = 0
        self._heavy: tuple[tuple[K, V, int], ...] = ()
        """Entries too heavy for ``_data``, newest last."""
        self._lock = threading.Lock()
        register_budgeted(self)

    @property
    def own_bytes(self) -> int:
        return self._own_bytes

    @property
    def max_bytes(self) -> int:
        return share(self._own_bytes)

    def trim(self) -> None:
        with self._lock:
            self._heavy = _within(self._heavy, 3 * self.max_bytes // 4)
            if len(self) > self.max_entries or self.weight > self.max_bytes:
                self._shrink()

    def get(self, key: K, default: D) -> V | D:
        entry = self._data.get(key)
        if entry is not None:
            return entry[0]
        for heavy_key, value, _ in self._heavy:  # a tuple swapped whole: no lock needed
            if heavy_key is key or heavy_key == key:
                return value
        return default

    def pop(self, key: K, default: D) -> V | D:
        """Remove and return the value of ``key`` (``default`` when absent): for values
        one caller extends and then puts back (it is then the newest)."""
        with self._lock:
            entry = self._data.pop(key, None)
            if entry is None:
                for heavy in self._heavy:
                    if heavy[0] == key:
                        self._heavy = tuple(h for h in self._heavy if h is not heavy)
                        return heavy[1]
                return default
            self._bytes -= entry[1]
            return entry[0]

    def put(self, key: K, value: V, weight: int) -> V:
        """Store ``value`` (keeping about ``weight`` bytes alive) and return it."""
        limit = self.max_bytes
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            kept = tuple(h for h in self._heavy if h[0] != key)  # no stale copy stays
            if weight > limit // 4:
                if weight <= limit // 2:
                    kept = (*kept, (key, value, weight))[-HEAVY_ENTRIES:]
                self._heavy = _within(kept, 3 * limit // 4)
                if len(self) > self.max_entries or self.weight > limit:
                    self._shrink()
                return value
            self._heavy = kept
            self._data[key] = (value, weight)
            self._bytes += weight
            if len(self) > self.max_entries or self.weight > limit:
                self._shrink()
        return value

    def _shrink(self) -> None:
        """Drop the oldest entries down to three quarters of the bounds, the heavy
        entries counted in both (the newest of them kept within the entry bound)."""
        entries = 3 * self.max_entries // 4
        self._heavy = self._heavy[len(self._heavy) - min(len(self._heavy), entries) :]
        heavy = self.weight - self._bytes
        entries -= len(self._heavy)
        weight = 3 * (self.max_bytes - heavy) // 4
        while self._data and (len(self._data) > entries or self._bytes > weight):
            oldest = next(iter(self._data))
            self._bytes -= self._data.pop(oldest)[1]

    @property
    def weight(self) -> int:
        return self._bytes + sum(h[2] for h in self._heavy)

    def __contains__(self, key: object) -> bool:
        return key in self._data or any(h[0] == key for h in self._heavy)

    def __len__(self) -> int:
        return len(self._data) + len(self._heavy)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._bytes = 0
            self._heavy = ()


HEAVY_ENTRIES = 2
"""Entries a :class:`BoundedMemo` keeps aside that are too heavy for its main store."""


def _within(heavy: tuple[tuple[K, V, int], ...], max_bytes: int) -> tuple[tuple[K, V, int], ...]:
    """The newest of ``heavy`` that weigh at most ``max_bytes`` together."""
    kept: list[tuple[K, V, int]] = []
    total = 0
    for entry in reversed(heavy):
        if total + entry[2] > max_bytes:
            break
        kept.append(entry)
        total += entry[2]
    return tuple(reversed(kept))


_POSITIONAL, _KEYWORDS = object(), object()
"""Mark the :func:`text_memo` keys of calls with several positional arguments, and with
keyword arguments."""

MISSING: Any = object()
"""What ``BoundedMemo.get(key, MISSING)`` returns for an absent key, where ``None`` is
a memoized answer."""


def text_memo(
    max_entries: int = TEXT_MEMO_LIMIT, max_bytes: int = TEXT_MEMO_BYTES
) -> Callable[[Callable[P, V]], Callable[P, V]]:
    """Memoize a function of a text (and other small hashable arguments) in a
    :class:`BoundedMemo`; an entry weighs its arguments and its value
    (:func:`footprint`)."""

    def wrap(function: Callable[P, V]) -> Callable[P, V]:
        memo: BoundedMemo[Any, V] = BoundedMemo(max_entries, max_bytes)

        @functools.wraps(function)
        def cached(*args: P.args, **kwargs: P.kwargs) -> V:
            # one argument is its own key; the markers keep other calls' keys apart
            # from it and from each other (no sorting of an empty mapping)
            if not kwargs:
                key: Any = args[0] if len(args) == 1 else (_POSITIONAL, args)
            else:
                key = (_KEYWORDS, args, *sorted(kwargs.items()))
            found = memo.get(key, MISSING)
            if found is not MISSING:
                return found
            value = function(*args, **kwargs)
            weight = sum(footprint(a) for a in (*args, *kwargs.values())) + footprint(value)
            return memo.put(key, value, weight)

        cached.memo = memo  # type: ignore[attr-defined]
        return cached

    return wrap


class IdentityMemo(Generic[Obj, K, V]):
    """Values derived from an object, per object identity and a key: for immutable
    objects handed out again (a memoized parse returns the same message object). Each
    entry keeps its object alive, so an ``id`` is never reused while it is cached; at
    most ``max_objects`` objects, weighing at most ``max_bytes`` by ``weigh``."""

    def __init__(
        self,
        max_objects: int,
        max_bytes: int = MESSAGE_MEMO_BYTES,
        weigh: Callable[[Obj], int] = lambda _obj: OBJECT_BYTES,
    ) -> None:
        self._entries: BoundedMemo[int, tuple[Obj, dict[K, V]]] = BoundedMemo(
            max_objects, max_bytes
        )
        self._weigh = weigh

    @property
    def max_objects(self) -> int:
        return self._entries.max_entries

    @max_objects.setter
    def max_objects(self, value: int) -> None:
        self._entries.max_entries = value

    def of(self, obj: Obj) -> dict[K, V]:
        """The values memoized for ``obj`` (an empty dict to fill the first time)."""
        # the usual case read straight off the memo's main store (this module's own):
        # every message of every request asks, and the method call is half the cost
        found = self._entries._data.get(id(obj))
        if found is not None and found[0][0] is obj:
            return found[0][1]
        entry = self._entries.get(id(obj), None)
        if entry is None or entry[0] is not obj:
            # the values are derived copies sharing the object's texts: twice its weight
            entry = self._entries.put(id(obj), (obj, {}), 2 * self._weigh(obj))
        return entry[1]

    def __len__(self) -> int:
        return len(self._entries)
