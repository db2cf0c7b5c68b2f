"""Rollout: which mode one request runs in, and the kill switch.

Order of precedence (first match wins):

1. kill switch on -> ``exact`` (reason ``kill_switch``);
2. header ``x-ctxwarden-mode: active|shadow|exact`` -> that mode (``header``; a value
   naming no mode counts as ``exact``);
3. the server mode; when it is ``active`` and ``canary_percent < 100`` the session
   key buckets the request: buckets below the percentage run ``active``
   (``canary_in``), the rest run ``shadow`` and are logged ``canary_out``.

The bucket is ``int(blake2b(session)[:8]) % 100``: deterministic per session, so a
whole session is either in or out and prompt caches are not churned. A fractional
percentage splits the boundary bucket by the next digits of the same hash (a whole
percentage puts exactly the buckets below it in).

Without an ``x-ctxwarden-session`` header the key to bucket is :func:`canary_key`, not
the engine's session key: that one covers the agent's first reply, so a session's
first turn would bucket apart from its later turns.

A Responses request that continues a stored response (``previous_response_id``)
carries no history to hash: its key is the one the request that got that response
was bucketed by, which the proxy keeps under the response id it answered with, in
memory by the time the answer carrying that id ends (before the client can continue
it) and in the tenant's store for other replicas (:func:`canary_name`; only while a
canary split is configured), so every turn of the session stays on one side. An id
the proxy does not know falls back to :func:`canary_key` of the request.

A Responses request in a stored ``conversation`` carries only its new items, which
differ every turn: its key is the conversation's id (:func:`conversation_canary_key`),
the same on every turn and on every replica.

The key needs only the head of a history (:func:`canary_head`), so the proxy derives
it off the engine thread and tells a request's side before condensing it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ctxwarden.adapters.openai_responses import is_model_item
from ctxwarden.config import Mode
from ctxwarden.errors import MalformedRequest
from ctxwarden.model.conversation import Conversation
from ctxwarden.model.parts import TextPart

__all__ = [
    "Decision",
    "KillSwitch",
    "canary_bucket",
    "canary_head",
    "canary_key",
    "canary_name",
    "conversation_canary_key",
    "decide",
    "head_canary_key",
    "header_mode",
]

_log = logging.getLogger("ctxwarden.proxy")
_MODES: tuple[Mode, ...] = ("active", "shadow", "exact")


class KillSwitch:
    """Process-wide "exact for everyone" flag, flipped by signal or admin endpoint.

    It lives in this process's memory: a restart releases it, unless the proxy starts
    with it engaged (``ProxySettings.kill_switch``, ``serve --kill-switch``)."""

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
    key: str | None = None
    """The :func:`canary_key` the request was bucketed by (``None`` when none was
    needed, or when the client named its session): kept under the response id the
    client gets, for the requests that continue it."""


def _canary_number(session: str) -> int:
    digest = hashlib.blake2b(session.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def canary_bucket(session: str) -> int:
    """The deterministic bucket 0..99 of a session key."""
    return _canary_number(session) % 100


def _canary_position(session: str) -> float:
    """The bucket plus a fraction in [0, 1) from the hash's next digits: below a whole
    percentage exactly when the bucket is, and spread evenly for a fractional one."""
    number = _canary_number(session)
    return number % 100 + (number // 100 % 10_000) / 10_000


def canary_key(conversation: Conversation) -> str:
    """The key a session without an ``x-ctxwarden-session`` header is bucketed by: the
    API, the system texts and the user texts before the first assistant message. Every
    turn of a session shows the same ones (clients append), its first turn included."""
    h = hashlib.blake2b(digest_size=10)
    h.update(conversation.api.encode())
    for part in conversation.system:
        if isinstance(part, TextPart):
            h.update(b"\x00sys\x00" + part.text.encode())
    for message in conversation.messages:
        if message.role == "assistant":
            break
        if message.role in ("user", "system", "developer"):
            tag = b"\x00user\x00" if message.role == "user" else b"\x00sys\x00"
            for text in message.text_parts():
                h.update(tag + text.text.encode())
    return "c-" + h.hexdigest()


def conversation_canary_key(request: Any, api: str) -> str | None:
    """The key of a Responses request in a stored ``conversation`` (an id, or an object
    with an ``id``): a hash of that id; ``None`` for any other request."""
    if api != "openai.responses" or not isinstance(request, dict):
        return None
    conversation = request.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    if not isinstance(conversation, str) or not conversation:
        return None
    return "v-" + hashlib.blake2b(conversation.encode(), digest_size=10).hexdigest()


def canary_head(request: dict[str, Any], api: str) -> dict[str, Any]:
    """``request`` with its message list cut after the first item that parses to an
    assistant message: all :func:`canary_key` reads of it, so that
    ``canary_key(parse(canary_head(r)))`` equals ``canary_key(parse(r))`` whenever
    both parse (:func:`head_canary_key` parses the whole when only the head is
    refused), at the cost of the head alone (the rest of a long history is not
    parsed). A request without a list is returned as it is."""
    key = "input" if api == "openai.responses" else "messages"
    items = request.get(key)
    if not isinstance(items, list):
        return request
    for i, item in enumerate(items):
        if (
            is_model_item(item)
            if api == "openai.responses"
            else isinstance(item, dict) and item.get("role") == "assistant"
        ):
            return {**request, key: items[: i + 1]}
    return request


def head_canary_key(parse: Callable[[Any, str], Conversation], request: Any, api: str) -> str:
    """``canary_key(parse(request, api))``, parsing only :func:`canary_head` of it when
    that is accepted; when the head alone is refused and the whole may not be (a
    Responses list whose ``item_reference`` lifts the pairing check of the whole), the
    whole is parsed. Raises what ``parse(request, api)`` raises."""
    head = canary_head(request, api) if isinstance(request, dict) else request
    try:
        return canary_key(parse(head, api))
    except MalformedRequest:
        if head is request:
            raise
        return canary_key(parse(request, api))


_CANARY_PREFIX = "\x00ctxwarden-canary:"
"""Session names of remembered canary keys start with NUL, which no session header can
hold."""


def canary_name(response_id: str) -> str:
    """The session-state name of the canary key remembered for ``response_id``."""
    return _CANARY_PREFIX + response_id


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
    if _canary_position(session or "") < canary_percent:
        return Decision("active", "canary_in", bucket)
    return Decision("shadow", "canary_out", bucket)
