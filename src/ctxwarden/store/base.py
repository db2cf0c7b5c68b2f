"""The artifact store seam: a small protocol every backend implements.

Contract:

- Content addressed. ``put`` returns the reference ``cw:<12 hex>``, the first 48 bits
  of the BLAKE2b digest of the UTF-8 text; the full digest is kept and ``get``
  re-derives it (:class:`ArtifactCorrupted` on mismatch).
- Tenant scoped. Every artifact and session state belongs to a tenant key; a tenant
  can neither read nor detect another tenant's artifacts (:class:`ArtifactMissing`).
- Bounded. Artifacts expire ``ttl`` after last use; ``gc`` drops expired ones and the
  least recently used past the byte cap.
- Live references stay. ``missing`` answers for many references in one round trip
  and counts the ones that resolve as used: their last use is refreshed once it is
  older than :func:`touch_interval` (at most 10 minutes, a quarter of the TTL), so a
  session that re-sends a reference keeps its original from expiring, and under the
  byte cap it counts as used that recently.
- Session state is opaque bytes under ``(tenant, session)``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection
from typing import Protocol, runtime_checkable

from ctxwarden.errors import ArtifactCorrupted

__all__ = [
    "REF_PATTERN",
    "TOUCH_INTERVAL",
    "Store",
    "chunked",
    "content_digest",
    "make_ref",
    "touch_interval",
    "verified_text",
]

REF_PATTERN = re.compile(r"cw:[0-9a-f]{12}")

TOUCH_INTERVAL = 600.0
"""Seconds: ``missing`` rewrites an artifact's last use only when it is older than this
(a busy session asks about the same references every turn; one write every ten minutes
each keeps them fresh for the TTL and the LRU cap without a write per request)."""


def touch_interval(ttl: float) -> float:
    """How stale a looked-up artifact's last use may get before ``missing`` rewrites it:
    :data:`TOUCH_INTERVAL`, or a quarter of a shorter TTL (so nothing in use expires)."""
    return min(TOUCH_INTERVAL, ttl / 4)


def chunked(items: Collection[str], size: int) -> list[list[str]]:
    """``items`` in lists of at most ``size`` (bounded statement parameters)."""
    ordered = list(items)
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def content_digest(text: str) -> str:
    """``blake2b:<hex>`` of the UTF-8 bytes of ``text`` (the canonical form)."""
    return "blake2b:" + hashlib.blake2b(text.encode("utf-8"), digest_size=32).hexdigest()


def make_ref(digest: str) -> str:
    """The short reference for a digest: ``cw:`` and its first 12 hex digits."""
    return "cw:" + digest.split(":", 1)[1][:12]


def verified_text(ref: str, digest: str, body: bytes | bytearray | memoryview) -> str:
    """The stored ``body`` as text, after re-deriving its digest (the canonical form is
    the contract); :class:`ArtifactCorrupted` when it is not UTF-8 or does not match."""
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError:
        raise ArtifactCorrupted(f"artifact {ref} is not UTF-8") from None
    if content_digest(text) != digest:
        raise ArtifactCorrupted(f"artifact {ref} does not match its digest")
    return text


@runtime_checkable
class Store(Protocol):
    """Where originals live (see module contract)."""

    def put(self, tenant: str, text: str) -> str:
        """Keep ``text``; return its reference (idempotent)."""
        ...

    def get(self, tenant: str, ref: str) -> str:
        """The text behind ``ref`` for ``tenant``; refreshes its last use."""
        ...

    def has(self, tenant: str, ref: str) -> bool:
        """True when ``ref`` resolves for ``tenant`` (no integrity check)."""
        ...

    def missing(self, tenant: str, refs: Collection[str]) -> frozenset[str]:
        """The ``refs`` that do not resolve for ``tenant`` (no integrity check), in one
        round trip; the others count as used (see module contract)."""
        ...

    def get_state(self, tenant: str, session: str) -> bytes | None:
        """Session state, or ``None``."""
        ...

    def put_state(self, tenant: str, session: str, state: bytes) -> None:
        """Replace session state."""
        ...

    def stats(self) -> dict[str, int]:
        """Counts: ``artifacts``, ``bytes``, ``sessions``, ``tenants``."""
        ...

    def gc(self, now: float | None = None) -> int:
        """Drop expired and over-cap artifacts; return how many were dropped."""
        ...

    def close(self) -> None: ...
