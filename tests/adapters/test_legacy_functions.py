"""Legacy Chat function calling (``function_call`` / ``role: function``): a result
answers the call just before it, is condensed like a tool output, and one that follows
no call of its own is kept exactly as sent (the API accepts it; it is never refused)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.adapters.openai_chat import parse
from ctxwarden.model.parts import OpaquePart, ToolResultPart
from tests.adapters.test_fuzz_findings_s7 import _condense_checked, _lines

_ALLOWED = {
    ("messages", "#", "content"),
    ("messages", "#", "function_call", "arguments"),
}


def _call(k: int) -> dict[str, Any]:
    arguments = json.dumps({"cmd": f"cat src/mod_{k}.py", "note": "x" * 400})
    return {"role": "assistant", "content": None,
            "function_call": {"name": "run", "arguments": arguments}}  # fmt: skip


def _result(k: int) -> dict[str, Any]:
    return {"role": "function", "name": "run", "content": _lines(f"f{k}")}


def _wire(messages: list[dict[str, Any]]) -> dict[str, Any]:
    head = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    tail = [{"role": "assistant", "content": "done?"}, {"role": "user", "content": "go on"}]
    functions = [{"name": "run", "parameters": {"type": "object"}}]
    return {"model": "gpt-4o", "messages": head + messages + tail, "functions": functions}


def test_old_legacy_results_are_condensed_and_everything_else_stays() -> None:
    messages = [m for k in range(4) for m in (_call(k), _result(k))]
    edits = _condense_checked(_wire(messages), "openai.chat", _ALLOWED)
    assert ("messages", 3, "content") in edits  # the oldest result
    assert ("messages", 2, "function_call", "arguments") in edits  # the oldest call's
    assert all(path[1] < 8 for path in edits)  # the newest call and result stay


def test_a_function_message_without_its_call_is_kept_as_sent() -> None:
    stray = {"role": "function", "name": "run", "content": _lines("stray")}
    messages = [stray, _call(0), _result(0), {"role": "user", "content": "and?"}, stray]
    messages += [_call(1), _result(1), _call(2), _result(2)]
    conversation = parse(_wire(messages))
    kinds = [type(m.parts[0]) for m in conversation.messages if m.role == "function"]
    assert kinds == [OpaquePart, ToolResultPart, OpaquePart, ToolResultPart, ToolResultPart]
    edits = _condense_checked(_wire(messages), "openai.chat", _ALLOWED)
    assert ("messages", 4, "content") in edits
    assert ("messages", 2, "content") not in edits and ("messages", 6, "content") not in edits


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["pair", "stray", "user", "text"]), min_size=1, max_size=10))
def test_any_mix_of_legacy_items_keeps_its_shape(kinds: list[str]) -> None:
    """Whatever the order, only result texts and call arguments change, each recalls
    its original, two fresh engines agree and nothing is refused."""
    messages: list[dict[str, Any]] = []
    for k, kind in enumerate(kinds):
        if kind == "pair":
            messages += [_call(k), _result(k)]
        elif kind == "stray":
            messages.append(_result(k))
        elif kind == "user":
            messages.append({"role": "user", "content": f"note {k}"})
        else:
            messages.append({"role": "assistant", "content": _lines(f"t{k}", 20)})
    _condense_checked(_wire(messages), "openai.chat", _ALLOWED)
