"""The last rescue of a Messages request whose thinking no longer fits its prefix:
Anthropic's ``drop_block``.

A model that binds thinking blocks to their prefix refuses a block sent after anything
other than what it was produced after ("... The block is bound to a different
conversation ..."). The proxy sends such a session's requests with the replacements its
blocks followed (:meth:`~ctxwarden.Engine.as_adopted`), or as the client sent them. Both
are refused when the session's state is lost (expired, evicted, a flushed Redis): the
blocks followed replacements nobody knows any more. Then, as Anthropic advises ("retry
once with the beta header and ``prefix_mismatch_behavior: "drop_block"``"), the request
goes once more as the client sent it with ``thinking.block_binding.prefix_mismatch_
behavior`` set to ``"drop_block"`` and the beta value the setting needs in
``anthropic-beta``: the API drops each failing block and every later one (the model
loses that reasoning) and answers. Logged at warning, never silent. A client that chose
the behaviour itself keeps its choice (its 400 is the answer), and a request without a
``thinking`` setting to put it in (a model thinking unasked) is not changed.
"""

from __future__ import annotations

from typing import Any

import orjson
from multidict import CIMultiDict

__all__ = ["BETA", "dropping_blocks", "is_prefix_mismatch", "with_beta"]

BETA = "thinking-binding-controls-2026-08-01"
"""The ``anthropic-beta`` value ``thinking.block_binding`` needs (without it: a 400)."""

_MISMATCH = "bound to a different conversation"


def is_prefix_mismatch(body: bytes | None) -> bool:
    """Whether ``body`` (a 400's, read whole) is Anthropic's refusal of a thinking
    block whose prefix changed."""
    if not body:
        return False
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    error = data.get("error") if isinstance(data, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return isinstance(message, str) and _MISMATCH in message


def dropping_blocks(request: dict[str, Any]) -> dict[str, Any] | None:
    """``request`` (a Messages body) asking the API to drop thinking blocks that fail
    the prefix check, or ``None``: its ``thinking`` is no object of type ``enabled`` or
    ``adaptive``, or it sets the behaviour itself."""
    thinking = request.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "adaptive"):
        return None
    binding = thinking.get("block_binding") or {}  # null: every default, as absent
    if not isinstance(binding, dict) or binding.get("prefix_mismatch_behavior") is not None:
        return None
    binding = {**binding, "prefix_mismatch_behavior": "drop_block"}
    return {**request, "thinking": {**thinking, "block_binding": binding}}


def with_beta(headers: CIMultiDict[str]) -> None:
    """Add :data:`BETA` to the ``anthropic-beta`` values of ``headers`` (in place; once)."""
    given = [v.strip() for value in headers.getall("anthropic-beta", []) for v in value.split(",")]
    values = [v for v in given if v]
    if BETA not in values:
        headers["anthropic-beta"] = ",".join([*values, BETA])
