"""Which output items of a Responses round the client may be shown once its recall
calls are hidden.

OpenAI ties a reasoning item to the item that followed it in its response: a stored
reasoning item sent back without that item is refused ("Item 'rs_...' of type
'reasoning' was provided without its required following item"), and so is an item
produced after reasoning sent back without it ("... was provided without its required
'reasoning' item"). A client that keeps its own history (the Agents SDKs, the Vercel AI
SDK: no ``previous_response_id``) sends back what it was shown, and it is never shown a
recall call. So:

- the reasoning items right before a recall call (the run of them) are hidden with it:
  their following item is one the client cannot send;
- a round in which a shown item follows such hidden reasoning (before the next
  reasoning item: the model called recall, then one of the client's tools or said
  something) is *tangled*: no view of it is valid, so it is asked again, one call at a
  time (:func:`one_call_at_a_time`), and never shown.

Chat Completions has no reasoning items; Messages gets no recall tool when it thinks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxwarden.proxy.recall import RECALL_TOOL_NAME

__all__ = ["RoundView", "is_reasoning", "is_recall_call", "one_call_at_a_time", "round_view"]


@dataclass(frozen=True, slots=True)
class RoundView:
    """What of a round's ``output`` the client sees: the positions ``hidden`` (recall
    calls and the reasoning right before them) are left out; ``tangled``: a shown item
    follows hidden reasoning, so the round must not be shown at all."""

    hidden: frozenset[int]
    tangled: bool


def is_recall_call(item: Any) -> bool:
    """Whether an output item is a call of the recall tool."""
    return (
        isinstance(item, dict)
        and item.get("type") == "function_call"
        and item.get("name") == RECALL_TOOL_NAME
    )


def is_reasoning(item: Any) -> bool:
    """Whether an output item is a reasoning item."""
    return isinstance(item, dict) and item.get("type") == "reasoning"


def round_view(output: list[Any]) -> RoundView:
    """The view of a round whose output items are ``output`` (see module doc)."""
    hidden: set[int] = set()
    for index, item in enumerate(output):
        if not is_recall_call(item):
            continue
        hidden.add(index)
        before = index - 1
        while before >= 0 and is_reasoning(output[before]):
            hidden.add(before)
            before -= 1
    tangled = False
    after_hidden = False  # the latest reasoning item was hidden
    for index, item in enumerate(output):
        if is_reasoning(item):
            after_hidden = index in hidden
        elif index not in hidden and after_hidden:
            tangled = True
    return RoundView(frozenset(hidden), tangled)


def one_call_at_a_time(request: dict[str, Any]) -> dict[str, Any] | None:
    """``request`` asked again for a tangled round: with ``parallel_tool_calls`` false,
    the model makes one call (recall, whose reasoning is then hidden with it, or one of
    the client's) and a round cannot tangle again; ``None`` when it was false already
    (the caller then asks for no recall call at all)."""
    if request.get("parallel_tool_calls") is False:
        return None
    return {**request, "parallel_tool_calls": False}
