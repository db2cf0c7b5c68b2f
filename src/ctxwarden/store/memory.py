"""An in-process store for tests and one-shot runs (same contract as SQLite)."""

from __future__ import annotations

import functools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from ctxwarden.errors import ArtifactCorrupted, ArtifactMissing
from ctxwarden.store.base import content_digest, make_ref, text_body, touch_interval

__all__ = ["MemoryStore"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _locked(method: _F) -> _F:
    """``method`` under the store's lock: an engine's background gc runs beside its
    condenses (unlocked, a get could revive an entry gc had just dropped)."""

    @functools.wraps(method)
    def run(self: MemoryStore, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return run  # type: ignore[return-value]


class MemoryStore:
    """Artifacts in a dict keyed by ``(tenant, ref)``, in order of last use (the order
    only changes when a last use is rewritten, so it always follows the timestamps).
    Safe across threads: every call holds one lock."""

    def __init__(self, *, ttl_seconds: float = 30 * 86400, max_bytes: int = 1 << 30) -> None:
        self.ttl = ttl_seconds
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, str], tuple[str, str, float]] = OrderedDict()
        self._sizes: dict[tuple[str, str], int] = {}  # as put (a corrupted copy keeps it)
        self._states: dict[tuple[str, str], tuple[bytes, float]] = {}
        self._bytes = 0
        self._lock = threading.RLock()

    def _live(self, key: tuple[str, str], now: float) -> tuple[str, str, float] | None:
        """The entry under ``key`` unless it is absent or past its TTL."""
        item = self._items.get(key)
        if item is None or now - item[2] > self.ttl:
            return None
        return item

    def _use(self, key: tuple[str, str], text: str, digest: str, now: float) -> None:
        self._items[key] = (text, digest, now)
        self._items.move_to_end(key)

    @_locked
    def put(self, tenant: str, text: str) -> str:
        """Keep ``text``; a damaged stored copy is replaced, a valid one of a different
        text sharing the reference (a 48-bit prefix collision) is kept (first write wins)."""
        size = len(text_body(text))
        digest = content_digest(text)
        ref = make_ref(digest)
        key = (tenant, ref)
        old = self._items.get(key)
        if old is not None:
            old_text, old_digest, _ = old
            if old_digest != digest and content_digest(old_text) == old_digest:
                return ref  # a valid artifact of another text: first write wins
            self._bytes -= self._sizes[key]
        self._sizes[key] = size
        self._bytes += self._sizes[key]
        self._use(key, text, digest, time.time())
        return ref

    @_locked
    def get(self, tenant: str, ref: str) -> str:
        now = time.time()
        item = self._live((tenant, ref), now)
        if item is None:
            raise ArtifactMissing(f"no artifact {ref}")
        text, digest, _ = item
        if content_digest(text) != digest:
            raise ArtifactCorrupted(f"artifact {ref} does not match its digest")
        self._use((tenant, ref), text, digest, now)
        return text

    @_locked
    def has(self, tenant: str, ref: str) -> bool:
        return self._live((tenant, ref), time.time()) is not None

    @_locked
    def missing(self, tenant: str, refs: Collection[str]) -> frozenset[str]:
        now = time.time()
        stale_before = now - touch_interval(self.ttl)
        gone = set()
        for ref in refs:
            key = (tenant, ref)
            item = self._live(key, now)
            if item is None:
                gone.add(ref)
            elif item[2] < stale_before:
                self._use(key, item[0], item[1], now)
        return frozenset(gone)

    @_locked
    def lose_artifacts(self) -> None:
        """Test hook: every artifact is gone (evicted, lost); session states stay."""
        self._items.clear()
        self._sizes.clear()
        self._bytes = 0

    @_locked
    def corrupt(self, tenant: str, ref: str, text: str) -> None:
        """Test hook: replace stored bytes without updating the digest."""
        _, digest, used = self._items[(tenant, ref)]
        self._items[(tenant, ref)] = (text, digest, used)

    @_locked
    def get_state(self, tenant: str, session: str) -> bytes | None:
        entry = self._states.get((tenant, session))
        if entry is None or time.time() - entry[1] > self.ttl:
            return None
        return entry[0]

    @_locked
    def put_state(self, tenant: str, session: str, state: bytes) -> None:
        self._states[(tenant, session)] = (bytes(state), time.time())

    @_locked
    def stats(self) -> dict[str, int]:
        tenants = {t for t, _ in self._items} | {t for t, _ in self._states}
        return {
            "artifacts": len(self._items),
            "bytes": self._bytes,
            "sessions": len(self._states),
            "tenants": len(tenants),
        }

    @_locked
    def gc(self, now: float | None = None) -> int:
        """Drop session state and artifacts unused for ``ttl``, then the artifacts larger
        than ``max_bytes`` by themselves (they could never be kept), then the least
        recently used until the rest fits ``max_bytes`` (the SQLite rule)."""
        now = time.time() if now is None else now
        for key in [k for k, (_, updated) in self._states.items() if now - updated > self.ttl]:
            del self._states[key]
        dropped = 0
        for key in [k for k, (_, _, used) in self._items.items() if now - used > self.ttl]:
            self._drop(key)
            dropped += 1
        if self._bytes > self.max_bytes:
            over = self.max_bytes
            for key in sorted(
                self._items, key=lambda k: (self._sizes[k] <= over, self._items[k][2])
            ):
                if self._bytes <= self.max_bytes:
                    break
                self._drop(key)
                dropped += 1
        return dropped

    def _drop(self, key: tuple[str, str]) -> None:
        del self._items[key]
        self._bytes -= self._sizes.pop(key)

    def close(self) -> None:
        return None
