"""Thinking-block signatures of the fake upstream, checked as Anthropic checks them.

The contract (Messages API only):

* A :class:`~ctxwarden.proxy.fake_upstream.Reply` with ``thinking`` starts its content
  with ``{"type": "thinking", "thinking": text, "signature": sig}``, ``sig`` made by
  :func:`sign`: ``"fakesig-" + T + "." + P``, ``T`` a digest of the text and ``P`` one
  of the block's prefix in the request it answers: top-level ``system``, ``tools`` and
  every message of that request (the block opens a new assistant message, nothing
  before it there).
* The prefix is digested by value (:func:`canonical`): keys sorted, no whitespace,
  every ``cache_control`` key dropped at any depth, an absent ``system``/``tools``
  the same as ``null``. Formatting, key order and cache markers do not count; anything
  else does (content given as a string is not the same value as one text block).
* :func:`thinking_error` checks every ``thinking`` and ``redacted_thinking`` block of
  a request's ``messages`` whose signature (``data`` for a redacted block, whose text
  is taken as ``""``) starts with ``"fakesig-"``; others are never checked. A text that
  no longer matches its signature is refused for every model; a prefix (``system``,
  ``tools``, the messages before the block, the blocks before it in its message) that
  no longer matches is refused for a model that binds thinking (:func:`model_binds`),
  unless ``thinking.block_binding.prefix_mismatch_behavior`` is ``"drop_block"`` (the
  block is then ignored). The first failing block, in order, decides the message:
  ``messages.N.content.M: ...`` as Anthropic words it (a changed text in the latest
  assistant message "cannot be modified", elsewhere an "Invalid `signature`"; a changed
  prefix "is bound to a different conversation"), answered 400 invalid_request_error.
* :func:`beta_error`: a ``thinking.block_binding`` sent without
  ``thinking-binding-controls-2026-08-01`` among the ``anthropic-beta`` values is
  refused as Anthropic refuses it ("Extra inputs are not permitted").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from ctxwarden.proxy.block_binding import BETA as BINDING_BETA
from ctxwarden.tokens.registry import model_binds_thinking

__all__ = [
    "SIGNATURE_PREFIX",
    "canonical",
    "model_binds",
    "prefix_digest",
    "sign",
    "text_digest",
    "thinking_error",
]

SIGNATURE_PREFIX = "fakesig-"
"""How every signature the fake makes starts; no other signature is checked."""

_DIGEST_CHARS = 32


class _Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...
    def copy(self) -> _Hasher: ...
    def hexdigest(self) -> str: ...


def canonical(value: Any) -> bytes:
    """``value`` as canonical JSON: ``cache_control`` keys dropped at any depth, keys
    sorted, no whitespace, ASCII (lone surrogates and wide integers included)."""
    text = json.dumps(_strip(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return text.encode("ascii")


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def text_digest(text: str) -> str:
    """The digest of a thinking block's text."""
    data = text.encode("utf-8", "surrogatepass")
    return hashlib.sha256(b"text\0" + data).hexdigest()[:_DIGEST_CHARS]


def _head(payload: dict[str, Any]) -> _Hasher:
    """A hasher over ``system`` and ``tools``, each framed by a newline (canonical
    JSON has none)."""
    h = hashlib.sha256(b"prefix\0")
    h.update(canonical(payload.get("system")) + b"\n")
    h.update(canonical(payload.get("tools")) + b"\n")
    return h


def _open(h: _Hasher, role: Any) -> _Hasher:
    """A copy of ``h`` continued with the opening of a message of ``role``."""
    partial = h.copy()
    partial.update(b"\0open" + canonical(role) + b"\n")
    return partial


def prefix_digest(payload: dict[str, Any]) -> str:
    """The prefix digest of a thinking block answering ``payload``: its ``system``,
    ``tools`` and every message, then a new assistant message with nothing before."""
    h = _head(payload)
    messages = payload.get("messages")
    for message in messages if isinstance(messages, list) else ():
        h.update(canonical(message) + b"\n")
    return _open(h, "assistant").hexdigest()[:_DIGEST_CHARS]


def sign(payload: dict[str, Any], text: str) -> str:
    """The signature the fake gives a thinking block of ``text`` answering ``payload``."""
    return f"{SIGNATURE_PREFIX}{text_digest(text)}.{prefix_digest(payload)}"


model_binds = model_binds_thinking
"""Whether ``model``'s thinking blocks are bound to their prefix, as the registry says
(an unknown model binds)."""


def beta_error(payload: Any, headers: Mapping[str, str]) -> str | None:
    """Anthropic's refusal of ``thinking.block_binding`` sent without the beta value it
    needs in ``anthropic-beta`` (``headers``: the request's, any case), else ``None``."""
    setting = payload.get("thinking") if isinstance(payload, dict) else None
    if not isinstance(setting, dict) or "block_binding" not in setting:
        return None
    values = {
        v.strip() for k, value in headers.items() if k.lower() == "anthropic-beta"
        for v in value.split(",")
    }  # fmt: skip
    if BINDING_BETA in values:
        return None
    return "thinking.block_binding: Extra inputs are not permitted"


def thinking_error(payload: Any, binds: bool | None = None) -> str | None:
    """The message Anthropic refuses ``payload`` (a Messages request body) with over
    its thinking blocks (module doc), ``None`` when they pass. ``binds`` overrides
    :func:`model_binds` of the request's ``model``."""
    if not isinstance(payload, dict) or not isinstance(payload.get("messages"), list):
        return None
    messages: list[Any] = payload["messages"]
    if binds is None:
        binds = model_binds(payload.get("model"))
    setting = payload.get("thinking")
    binding = setting.get("block_binding") if isinstance(setting, dict) else None
    drop = isinstance(binding, dict) and binding.get("prefix_mismatch_behavior") == "drop_block"
    latest = max(
        (i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"),
        default=-1,
    )
    for n, m, block, digest in _checked_blocks(payload, messages):
        redacted = block.get("type") == "redacted_thinking"
        signature = block.get("data" if redacted else "signature")
        text = "" if redacted else block.get("thinking")
        made, _, signed_prefix = str(signature)[len(SIGNATURE_PREFIX) :].partition(".")
        where = f"messages.{n}.content.{m}"
        if not isinstance(text, str) or made != text_digest(text):
            if n == latest:
                return (
                    f"{where}: `thinking` or `redacted_thinking` blocks in the latest "
                    "assistant message cannot be modified. These blocks must remain as "
                    "they were in the original response."
                )
            return f"{where}: Invalid `signature` in `thinking` block."
        if binds and signed_prefix != digest and not drop:
            return (
                f"{where}: Invalid `signature` in `thinking` block. The block is bound to a "
                "different conversation. Remove the block, or set "
                '`thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
            )
    return None


def _checked_blocks(
    payload: dict[str, Any], messages: list[Any]
) -> Iterator[tuple[int, int, dict[str, Any], str]]:
    """The blocks :func:`thinking_error` checks: those signed by the fake."""
    head = _head(payload)
    for n, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            partial: _Hasher | None = None
            for m, block in enumerate(content):
                if _is_fake(block):
                    if partial is None:
                        partial = _open(head, message.get("role"))
                        for earlier in content[:m]:
                            partial.update(canonical(earlier) + b"\n")
                    yield n, m, block, partial.hexdigest()[:_DIGEST_CHARS]
                if partial is not None:
                    partial.update(canonical(block) + b"\n")
        head.update(canonical(message) + b"\n")


def _is_fake(block: Any) -> bool:
    if not isinstance(block, dict):
        return False
    kind = block.get("type")
    if kind == "thinking":
        signature = block.get("signature")
    elif kind == "redacted_thinking":
        signature = block.get("data")
    else:
        return False
    return isinstance(signature, str) and signature.startswith(SIGNATURE_PREFIX)
