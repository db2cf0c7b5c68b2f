"""Server-side recall: the ``ctxwarden_recall`` tool, its calls and their answers.

Contract:

- The tool is offered when the request the proxy sends contains references
  (``cw:`` + 12 hex digits) or offers tools of its own without forcing some tool call
  (an agent, from its first turn, so its tool list never changes; see
  ``handlers._offers_recall`` for each ``tool_choice``); never in exact mode, never
  when the client already has a tool of that name, and never to a Messages request
  that asks for thinking (``dialects.MessagesDialect.inject``). The last round the limit allows
  offers no recall call (``dialects.Dialect.last_round``). It is appended at the END of the
  tools list: the prompt prefix up to the client's own tools stays byte-identical, so
  provider prompt caches keep hitting.
- A call is answered from the store of the caller's tenant only; a reference of
  another tenant is indistinguishable from one that never existed.
- Answers are bounded (``max_recall_bytes``, line ranges capped by the store) and
  are never condensed again in the same turn: continuations go upstream as built.
- Errors become a short tool answer the model can read; they never fail the request.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from ctxwarden.errors import ArtifactCorrupted, ArtifactMissing, RequestError, StoreError
from ctxwarden.store.recall import MAX_RECALL_LINES, Recalled

__all__ = [
    "RECALL_TOOL_NAME",
    "REF_BYTES",
    "RecallAnswer",
    "RecallCall",
    "RoundResult",
    "answer_call",
    "parse_arguments",
    "tool_description",
    "tool_parameters",
]

RECALL_TOOL_NAME = "ctxwarden_recall"
REF_BYTES = re.compile(rb"cw:[0-9a-f]{12}")

tool_description = (
    "Retrieve the original text that ctxwarden elided from this conversation. Placeholders "
    "name a reference like cw:5f3a9c21e0b4; pass it as `ref`, and optionally `lines` as "
    "'A-B' (1-based, inclusive) to get only those lines."
)
tool_parameters: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ref": {"type": "string", "description": "The reference, cw: and 12 hex digits."},
        "lines": {"type": "string", "description": "Optional line range A-B (1-based)."},
    },
    "required": ["ref"],
}


@dataclass(frozen=True, slots=True)
class RecallCall:
    """One call of the recall tool: provider call id and raw JSON arguments."""

    call_id: str
    arguments: str


@dataclass(slots=True)
class RoundResult:
    """What one upstream answer asked for.

    ``assistant`` is the API-specific assistant output to replay in a continuation
    (chat: the assistant message; responses: output items; anthropic: content blocks).
    """

    calls: list[RecallCall] = field(default_factory=list)
    other_calls: int = 0
    assistant: Any = None
    tangled: bool = False
    """Responses: no view of the round without its recall calls is valid (an item
    follows reasoning hidden with one: :mod:`ctxwarden.proxy.reasoning_links`); it is
    asked again, never shown."""


@dataclass(frozen=True, slots=True)
class RecallAnswer:
    call_id: str
    text: str
    ok: bool
    error: str | None = None


def parse_arguments(arguments: str | dict[str, Any]) -> tuple[str, str | None]:
    """``(ref, lines)`` from a call's arguments; raises :class:`RequestError`."""
    if isinstance(arguments, str):
        try:
            data = orjson.loads(arguments or "{}")
        except orjson.JSONDecodeError:
            raise RequestError("arguments are not valid JSON") from None
    else:
        data = arguments
    if not isinstance(data, dict) or not isinstance(data.get("ref"), str):
        raise RequestError("arguments need a string `ref`")
    lines = data.get("lines")
    if lines is not None and not isinstance(lines, str | int):
        raise RequestError("`lines` must be a string like 10-40")
    return data["ref"][:64], None if lines is None else str(lines)[:32]


def answer_call(
    recall: Callable[..., Recalled], call: RecallCall, *, tenant: str, max_bytes: int
) -> RecallAnswer:
    """Answer one call with ``recall(ref, lines, tenant=...)`` (blocking; run off-loop):
    :meth:`~ctxwarden.engine.Engine.recalled`, which says where the line cap cut."""
    try:
        ref, lines = parse_arguments(call.arguments)
        found = recall(ref, lines, tenant=tenant)
    except ArtifactMissing:
        return RecallAnswer(call.call_id, "ctxwarden_recall: no such reference", False, "missing")
    except ArtifactCorrupted:
        return RecallAnswer(
            call.call_id, "ctxwarden_recall: the stored original is corrupted", False, "corrupted"
        )
    except RequestError as exc:
        return RecallAnswer(call.call_id, f"ctxwarden_recall: {exc}", False, "request")
    except StoreError:
        return RecallAnswer(
            call.call_id, "ctxwarden_recall: the store is unavailable", False, "store"
        )
    text = found.text
    encoded = text.encode("utf-8")
    if len(encoded) > max_bytes:
        cut = encoded[:max_bytes].decode("utf-8", "ignore")
        text = (
            f"{cut}\n[ctxwarden_recall: truncated; {found.lines} lines in all, "
            "ask for a line range]"
        )
    elif found.cut_at is not None and found.wanted is not None:
        text = (
            f"{text}\n[ctxwarden_recall: cut at line {found.cut_at:,} of {found.lines:,} "
            f"({MAX_RECALL_LINES:,} lines at most); ask for lines "
            f"{found.cut_at + 1}-{found.wanted}]"
        )
    return RecallAnswer(call.call_id, text, True)
