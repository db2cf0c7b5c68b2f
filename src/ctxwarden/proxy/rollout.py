"""Rollout: which mode one request runs in, and the kill switch.

Order of precedence (first match wins):

1. kill switch on -> ``exact`` (reason ``kill_switch``);
2. header ``x-ctxwarden-mode: active|shadow|exact`` -> that mode (``header``; a value
   naming no mode counts as ``exact``);
3. the server mode; when it is ``active`` and ``canary_percent < 100`` the session
   key buckets the request: buckets below the percentage run ``active``
   (``canary_in``), the rest run ``shadow`` and are logged ``canary_out``.

The bucket is ``int(blake2b(session)[:8]) % 100``: deterministic per session, so a
whole session is either in or out and prompt caches are not churned.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

from ctxwarden.config import Mode

__all__ = ["Decision", "KillSwitch", "canary_bucket", "decide", "header_mode"]

_log = logging.getLogger("ctxwarden.proxy")
_MODES: tuple[Mode, ...] = ("active", "shadow", "exact")


class KillSwitch:
    """Process-wide "exact for everyone" flag, flipped by signal or admin endpoint."""

    def __init__(self, engaged: bool = False) -> None:
        self.engaged = engaged

    def set(self, engaged: bool, source: str) -> None:
        if engaged != self.engaged:
            _log.warning("kill switch %s by %s", "engaged" if engaged else "released", source)
        self.engaged = engaged

    def toggle(self, source: str) -> None:
        self.set(not self.engaged, source)


@dataclass(frozen=True, slots=True)
class Decision:
    """The mode a request runs in and why."""

    mode: Mode
    reason: str
    bucket: int | None = None


def canary_bucket(session: str) -> int:
    """The deterministic bucket 0..99 of a session key."""
    digest = hashlib.blake2b(session.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 100


def header_mode(value: str | None) -> Mode | None:
    """The ``x-ctxwarden-mode`` a client asked for (``None`` when it sent none). A value
    that names no mode means ``exact``: the client asked for something, and a typo must
    never condense a request its client meant to protect."""
    if value is None:
        return None
    lowered = value.strip().lower()
    for mode in _MODES:
        if lowered == mode:
            return mode
    return "exact"


def decide(
    *,
    kill_switch: KillSwitch,
    header: Mode | None,
    server_mode: Mode,
    canary_percent: float,
    session: str | None,
) -> Decision:
    """Apply the precedence of the module docstring.

    ``session`` may be ``None`` only when no canary split is needed; callers pass
    the derived key when :func:`needs_session` would be true.
    """
    if kill_switch.engaged:
        return Decision("exact", "kill_switch")
    if header is not None:
        return Decision(header, "header")
    if server_mode != "active" or canary_percent >= 100:
        return Decision(server_mode, "server")
    bucket = canary_bucket(session or "")
    if bucket < canary_percent:
        return Decision("active", "canary_in", bucket)
    return Decision("shadow", "canary_out", bucket)
