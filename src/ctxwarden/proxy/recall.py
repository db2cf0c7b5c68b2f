"""Server-side recall: the ``ctxwarden_recall`` tool, its calls and their answers.

Contract:

- The tool is offered when the request the proxy sends contains references
  (``cw:`` + 12 hex digits) or offers tools of its own, whatever its ``tool_choice``
  (an agent, from its first turn, so its tool list never changes; see
  ``handlers._offers_recall``); never in exact mode, never when the client already
  has a tool of that name, and never to a Messages request that asks for thinking or
  goes to a model that binds thinking or that the registry does not know
  (``dialects.MessagesDialect.inject``). The last round the limit allows
  offers no recall call (``dialects.Dialect.last_round``). It is appended at the END of the
  tools list: the prompt prefix up to the client's own tools stays byte-identical, so
  provider prompt caches keep hitting.
- A call is answered from the store of the caller's tenant only; a reference of
  another tenant is indistinguishable from one that never existed.
- Answers are bounded (``max_recall_bytes``, line ranges capped by the store) and
  are never condensed again in the same turn: continuations go upstream as built.
- A turn (every round of one client request) is bounded as a whole
  (:class:`TurnBudget`): at most ``max_recall_calls`` calls are answered, a call
  asking again for a ``(ref, lines)`` answered earlier in the turn gets a short note
  naming that call instead of the text (not a stripped call answered for the request
  that continues a stored Responses response: that one gets the text), and the
  recalled text of all the turn's
  answers together is at most :data:`TURN_ANSWERS` times ``max_recall_bytes``, the cap
  of one answer (an answer past the turn's cap is cut at it, saying so; one once it is
  spent says so): each continuation resends every earlier
  answer, and without these bounds repeated calls could grow it past the model's
  context, failing a request that fits uncondensed.
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
    "TURN_ANSWERS",
    "RecallAnswer",
    "RecallCall",
    "RoundResult",
    "TurnBudget",
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
    recall: Callable[..., Recalled], call: RecallCall, *, tenant: str, max_bytes: int,
    turn_cap: int | None = None,
) -> RecallAnswer:  # fmt: skip
    """Answer one call with ``recall(ref, lines, tenant=...)`` (blocking; run off-loop):
    :meth:`~ctxwarden.engine.Engine.recalled`, which says where the line cap cut.
    ``max_bytes`` bounds the text; ``turn_cap`` (the turn's whole budget, when that is
    what ``max_bytes`` is left of) makes a cut say the turn's limit was reached."""
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
        if turn_cap is not None:
            text = (
                f"{cut}\n[ctxwarden_recall: truncated at this turn's limit of {turn_cap:,} "
                f"bytes of recalled text; {found.lines} lines in all]"
            )
        else:
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


TURN_ANSWERS = 4
"""A turn may recall this many answers' worth of text (``max_recall_bytes`` each): an
answer cut at its cap asks for a line range, which must still fit."""


@dataclass(slots=True)
class TurnBudget:
    """What the recall answers of one turn (every round of one client request) may
    still give (see module contract). One per turn; not thread-safe (the proxy's event
    loop screens and spends, the store read in between runs off it)."""

    max_calls: int
    """Calls answered per turn; later ones get a short refusal."""
    max_bytes: int
    """Bytes of recalled text per turn, all answers together."""
    calls: int = 0
    used: int = 0
    seen: dict[tuple[str, str | None], str] = field(default_factory=dict)
    """``(ref, lines)`` answered in this turn: the call id that got the text."""

    def screen(self, call: RecallCall, *, dedupe: bool = True) -> RecallAnswer | None:
        """Count ``call``; the answer it gets without a store read (past the call
        limit, a repeat, the bytes spent), or ``None``: read it, within
        :meth:`left`, then :meth:`spend` its answer. ``dedupe`` false: a repeat is
        answered in full (a stripped call answered for the request that continues
        the response, :mod:`ctxwarden.proxy.owed`, gets its text as it would alone)."""
        self.calls += 1
        if self.calls > self.max_calls:
            text = f"ctxwarden_recall: at most {self.max_calls} calls per turn"
            return RecallAnswer(call.call_id, text, False, "limit")
        key = self._key(call) if dedupe else None
        earlier = None if key is None else self.seen.get(key)
        if earlier is not None:
            text = (
                f"ctxwarden_recall: already answered in this turn (call {earlier}); "
                "its text is above, not repeated"
            )
            return RecallAnswer(call.call_id, text, True)
        if self.left() <= 0:
            text = (
                f"ctxwarden_recall: this turn's limit of {self.max_bytes:,} bytes of "
                "recalled text is reached; answer with what you have"
            )
            return RecallAnswer(call.call_id, text, False, "limit")
        return None

    def left(self) -> int:
        """Bytes of recalled text this turn may still give."""
        return self.max_bytes - self.used

    def spend(self, call: RecallCall, answer: RecallAnswer) -> None:
        """Count ``answer`` (given to ``call`` after a store read) against the turn."""
        if not answer.ok:
            return  # an error may be worth asking again (a store back up)
        self.used += len(answer.text.encode("utf-8"))
        key = self._key(call)
        if key is not None:
            self.seen.setdefault(key, call.call_id)

    @staticmethod
    def _key(call: RecallCall) -> tuple[str, str | None] | None:
        try:
            ref, lines = parse_arguments(call.arguments)
        except RequestError:
            return None
        return ref, None if lines is None else lines.strip()
