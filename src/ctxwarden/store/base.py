"""The artifact store seam: a small protocol every backend implements.

Contract:

- Content addressed. ``put`` returns the reference ``cw:<12 hex>``, the first 48 bits
  of the BLAKE2b digest of the UTF-8 text; the full digest is kept and ``get``
  re-derives it (:class:`ArtifactCorrupted` on mismatch).
- Tenant scoped. Every artifact and session state belongs to a tenant key; a tenant
  can neither read nor detect another tenant's artifacts (:class:`ArtifactMissing`).
- Bounded. Artifacts expire ``ttl`` after last use; ``gc`` drops expired ones and the
  least recently used past the byte cap. A backend with a cap of its own says so in an
  integer ``max_bytes`` attribute (not part of the protocol: Redis leaves the cap to
  the server); the engine never asks it to keep an artifact of more UTF-8 bytes, which
  ``gc`` would drop as soon as it runs (:func:`over_cap`).
- Live references stay. ``missing`` answers for many references in one round trip
  and counts the ones that resolve as used: their last use is refreshed once it is
  older than :func:`touch_interval` (at most 10 minutes, a quarter of the TTL), so a
  session that re-sends a reference keeps its original from expiring, and under the
  byte cap it counts as used that recently.
- Expired is gone. An artifact unused for longer than ``ttl`` (and session state not
  written for that long) reads as missing on every backend even before ``gc`` drops
  it, and reading it does not revive it; only ``put`` stores it again.
- Self-healing. ``put`` of a text whose stored copy no longer matches its digest
  replaces the damaged copy.
- Session state is opaque bytes under ``(tenant, session)``.
- Any ``str`` is a valid tenant or session name, also one holding NUL or a lone
  surrogate (a header decoded with ``surrogateescape``); backends whose keys cannot hold
  those store them through :func:`storage_name`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection
from typing import Protocol, runtime_checkable
from urllib.parse import quote

from ctxwarden.errors import ArtifactCorrupted, StoreError

__all__ = [
    "REF_PATTERN",
    "TOUCH_INTERVAL",
    "Store",
    "chunked",
    "content_digest",
    "intact",
    "make_ref",
    "one_line",
    "over_cap",
    "state_bytes",
    "storage_name",
    "text_body",
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


def text_body(text: str) -> bytes:
    """The UTF-8 bytes ``put`` stores; :class:`StoreError` for a text that has none (a
    lone surrogate is not Unicode text and has no content address)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise StoreError(
            f"cannot store a text that is not valid Unicode (a lone surrogate at {exc.start})"
        ) from None


def make_ref(digest: str) -> str:
    """The short reference for a digest: ``cw:`` and its first 12 hex digits."""
    return "cw:" + digest.split(":", 1)[1][:12]


ESCAPED_NAME = "\x01"
"""First character of a name :func:`storage_name` escaped (never of one it kept)."""


def storage_name(name: str) -> str:
    """``name`` as a key a SQL text column can hold: ``name`` itself when it is valid
    Unicode text without NUL, else :data:`ESCAPED_NAME` and its percent-encoded UTF-8
    (``surrogatepass``). A name that starts with :data:`ESCAPED_NAME` is escaped too, so
    the mapping is one-to-one: two names never share a key."""
    if "\x00" not in name and not name.startswith(ESCAPED_NAME):
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            pass
        else:
            return name
    return ESCAPED_NAME + quote(name.encode("utf-8", "surrogatepass"), safe="")


def verified_text(ref: str, digest: object, body: object) -> str:
    """The stored ``body`` as text, after re-deriving its digest (the canonical form is
    the contract); :class:`ArtifactCorrupted` when it is not bytes, not UTF-8 or does not
    match (a damaged row may hold any type)."""
    if not isinstance(body, bytes | bytearray | memoryview):
        raise ArtifactCorrupted(f"artifact {ref} is stored as {type(body).__name__}, not bytes")
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError:
        raise ArtifactCorrupted(f"artifact {ref} is not UTF-8") from None
    if content_digest(text) != digest:
        raise ArtifactCorrupted(f"artifact {ref} does not match its digest")
    return text


def state_bytes(value: object) -> bytes | None:
    """Stored session state as bytes: a damaged row holding text gives its UTF-8 (which
    the session decoder then rejects as it rejects any bad state), any other type
    ``None`` (no state)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        try:
            return value.encode("utf-8", "surrogateescape")  # the bytes as stored
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass")
    return None


def over_cap(store: object, text: str) -> bool:
    """Whether ``text`` is larger than ``store``'s own byte cap (its ``max_bytes``, if
    it has one): ``gc`` drops such an artifact first, so a reference to it would soon
    resolve to nothing."""
    cap = getattr(store, "max_bytes", None)
    if not isinstance(cap, int) or isinstance(cap, bool) or len(text) * 4 <= cap:
        return False  # a character is at most 4 UTF-8 bytes: no need to encode
    return len(text.encode("utf-8", "surrogatepass")) > cap


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


def intact(ref: str, digest: object, body: object) -> bool:
    """Whether a stored ``body`` verifies against its ``digest`` (see
    :func:`verified_text`): a valid artifact of another text sharing the reference is
    kept by ``put``, a damaged one is replaced."""
    try:
        verified_text(ref, digest, body)
    except ArtifactCorrupted:
        return False
    return True


def one_line(message: str) -> str:
    """``message`` on one line: its lines stripped and joined with ``"; "`` (libpq puts
    a hint on a line of its own; an error is printed as one line)."""
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())
