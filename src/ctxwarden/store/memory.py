"""An in-process store for tests and one-shot runs (same contract as SQLite)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Collection

from ctxwarden.errors import ArtifactCorrupted, ArtifactMissing
from ctxwarden.store.base import content_digest, make_ref, touch_interval

__all__ = ["MemoryStore"]


class MemoryStore:
    """Artifacts in an LRU dict keyed by ``(tenant, ref)``."""

    def __init__(self, *, ttl_seconds: float = 30 * 86400, max_bytes: int = 1 << 30) -> None:
        self.ttl = ttl_seconds
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, str], tuple[str, str, float]] = OrderedDict()
        self._states: dict[tuple[str, str], bytes] = {}
        self._bytes = 0

    def put(self, tenant: str, text: str) -> str:
        digest = content_digest(text)
        ref = make_ref(digest)
        key = (tenant, ref)
        if key not in self._items:
            self._bytes += len(text.encode("utf-8"))
        self._items[key] = (text, digest, time.time())
        self._items.move_to_end(key)
        return ref

    def get(self, tenant: str, ref: str) -> str:
        item = self._items.get((tenant, ref))
        if item is None:
            raise ArtifactMissing(f"no artifact {ref}")
        text, digest, _ = item
        if content_digest(text) != digest:
            raise ArtifactCorrupted(f"artifact {ref} does not match its digest")
        self._items[(tenant, ref)] = (text, digest, time.time())
        self._items.move_to_end((tenant, ref))
        return text

    def has(self, tenant: str, ref: str) -> bool:
        return (tenant, ref) in self._items

    def missing(self, tenant: str, refs: Collection[str]) -> frozenset[str]:
        now = time.time()
        stale_before = now - touch_interval(self.ttl)
        gone = set()
        for ref in refs:
            key = (tenant, ref)
            item = self._items.get(key)
            if item is None:
                gone.add(ref)
                continue
            if item[2] < stale_before:
                self._items[key] = (item[0], item[1], now)
            self._items.move_to_end(key)
        return frozenset(gone)

    def corrupt(self, tenant: str, ref: str, text: str) -> None:
        """Test hook: replace stored bytes without updating the digest."""
        _, digest, used = self._items[(tenant, ref)]
        self._items[(tenant, ref)] = (text, digest, used)

    def get_state(self, tenant: str, session: str) -> bytes | None:
        return self._states.get((tenant, session))

    def put_state(self, tenant: str, session: str, state: bytes) -> None:
        self._states[(tenant, session)] = state

    def stats(self) -> dict[str, int]:
        tenants = {t for t, _ in self._items} | {t for t, _ in self._states}
        return {
            "artifacts": len(self._items),
            "bytes": self._bytes,
            "sessions": len(self._states),
            "tenants": len(tenants),
        }

    def gc(self, now: float | None = None) -> int:
        now = time.time() if now is None else now
        dropped = 0
        for key in list(self._items):
            text, _, used = self._items[key]
            if now - used > self.ttl or self._bytes > self.max_bytes:
                del self._items[key]
                self._bytes -= len(text.encode("utf-8"))
                dropped += 1
        return dropped

    def close(self) -> None:
        return None
